package session

// Produce (key 0) on a source connection, once a mirror topic is sealed for its promotion or
// promoted (docs/DESIGN.md, "Producers and consumers at promotion"). Until then a source
// connection's Produce is not even decoded.
//
//   - A request naming a sealed topic is first held, up to sealHold, while the promotion
//     finishes (the mirror reaches the source's end, then the mark goes): a promotion takes a
//     second or two, and a producer refused at once came back only after its retry backoff,
//     a second or more after the promotion (seen in the demo). Decided again after the hold:
//     promoted, it is carried; unsealed (the promotion given up), it goes to the source.
//   - A topic still sealed after the hold is refused NOT_ENOUGH_REPLICAS, which producers
//     retry after their retry backoff (NOT_LEADER_OR_FOLLOWER would have them wait for a
//     metadata refresh, which clients space out by seconds): nothing more is written to the
//     source, so the mirror can reach the source's end and the promotion go on.
//   - A promoted topic's partitions are carried to the destination (Carrier.CarryProduce), in
//     source offsets, so its producers go on without a restart.
//   - Every other partition goes to the source as before, and the answers are put together in
//     the order the client expects.

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/moves"
)

// sourceProduce takes a Produce on a source connection over when it names a sealed or
// promoted topic. decided is false when the request goes to the source untouched.
func (s *Session) sourceProduce(r *request) (decided bool, err error) {
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(r.h.version)
	if err := req.UnsafeReadFrom(r.body); err != nil {
		return false, fmt.Errorf("%w: Produce v%d on a source connection: %v", ErrUndecodable, r.h.version, err)
	}
	var ids [][16]byte
	if req.Version >= 13 {
		for _, t := range req.Topics {
			ids = append(ids, t.TopicID)
		}
	}
	later := false
	decided, err = s.withSourceNames(r, ids, func(names map[[16]byte]string) (bool, error) {
		if later {
			// Read again, in place: the request was copied for the asynchronous step.
			req = kmsg.NewPtrProduceRequest()
			req.SetVersion(r.h.version)
			if err := req.UnsafeReadFrom(r.body); err != nil {
				return false, fmt.Errorf("%w: Produce v%d on a source connection: %v", ErrUndecodable, r.h.version, err)
			}
		}
		return s.sourceProduceWith(r, req, names)
	})
	later = true // a call from now on finishes an asynchronous step
	return decided, err
}

func (s *Session) sourceProduceWith(r *request, req *kmsg.ProduceRequest, names map[[16]byte]string) (bool, error) {
	switching := false
	var sealedTopics []string // to hold for their promotion
	for _, t := range req.Topics {
		name := t.Topic
		if req.Version >= 13 {
			name = names[t.TopicID]
		}
		_, sealed, promoted := s.cfg.Moves.Promotion(name)
		switching = switching || sealed || promoted
		if sealed && len(t.Partitions) > 0 {
			sealedTopics = append(sealedTopics, name)
		}
	}
	if !switching {
		return false, nil
	}
	if len(sealedTopics) > 0 && !r.sealHeld {
		s.holdSealed(r, req.Version, req.TimeoutMillis, sealedTopics, names)
		return true, nil
	}
	// The rest outlives the frame's buffer, and kmsg's records alias what they are read from:
	// a copy of its own.
	req = kmsg.NewPtrProduceRequest()
	req.SetVersion(r.h.version)
	if err := req.ReadFrom(append([]byte(nil), r.body...)); err != nil {
		return false, fmt.Errorf("%w: Produce v%d on a source connection: %v", ErrUndecodable, r.h.version, err)
	}
	var answered []refusal
	var parts []moves.ProducePart
	var carried []refusal // topic, id and partition of each part, in order
	for _, t := range req.Topics {
		name := t.Topic
		if req.Version >= 13 {
			name = names[t.TopicID]
		}
		_, sealed, promoted := s.cfg.Moves.Promotion(name)
		for _, p := range t.Partitions {
			at := refusal{topic: t.Topic, topicID: t.TopicID, partition: p.Partition}
			switch {
			case sealed:
				at.code = kerr.NotEnoughReplicas.Code
				at.msg = fmt.Sprintf("offsetgate: %s is being promoted: its writes move to the destination in a moment (retry); nothing was written", name)
				answered = append(answered, at)
			case promoted && !s.carries():
				at.code, at.msg = kerr.TopicAuthorizationFailed.Code, notCarried(name)
				answered = append(answered, at)
			case promoted:
				parts = append(parts, moves.ProducePart{Topic: name, Partition: p.Partition, Records: p.Records})
				carried = append(carried, at)
			}
		}
	}
	switch {
	case len(answered) == 0 && len(parts) == 0:
		return false, nil
	case len(parts) == 0:
		s.finishSourceProduce(r, req, answered)
		return true, nil
	}
	c, client := s.movesCarrier(), string(r.h.clientID)
	r.async = func(ctx context.Context) func(*Session, *request) error {
		for i, res := range c.CarryProduce(ctx, client, req.Version, req.Acks, req.TimeoutMillis, parts) {
			at := carried[i]
			at.code, at.msg, at.base = res.Code, res.Msg, res.BaseOffset
			at.carried, at.appendTime, at.logStart = true, res.LogAppendTime, res.LogStartOffset
			answered = append(answered, at)
		}
		return func(s *Session, r *request) error {
			s.finishSourceProduce(r, req, answered)
			return nil
		}
	}
	return true, nil
}

// sealHold bounds how long a Produce naming a sealed topic is held for its promotion to end
// (never more than half the request's own timeout); sealPoll is how often the marks are
// looked at meanwhile.
const (
	sealHold = 5 * time.Second
	sealPoll = 20 * time.Millisecond
)

// holdSealed waits, off the session's goroutine, until none of the sealed topics is sealed
// any more or the hold is over, then decides the request again (once: a topic still sealed
// is refused then).
func (s *Session) holdSealed(r *request, version int16, timeoutMillis int32, sealed []string, names map[[16]byte]string) {
	r.sealHeld = true
	hold := sealHold
	if half := time.Duration(timeoutMillis) * time.Millisecond / 2; half < hold {
		hold = max(half, 0)
	}
	mv := s.cfg.Moves
	r.async = func(ctx context.Context) func(*Session, *request) error {
		deadline := time.NewTimer(hold)
		defer deadline.Stop()
		tick := time.NewTicker(sealPoll)
		defer tick.Stop()
	wait:
		for {
			still := false
			for _, n := range sealed {
				if _, sl, _ := mv.Promotion(n); sl {
					still = true
				}
			}
			if !still {
				break
			}
			select {
			case <-ctx.Done():
				break wait
			case <-deadline.C:
				break wait
			case <-tick.C:
			}
		}
		return func(s *Session, r *request) error {
			// Read again, from the request's own copy made for the asynchronous step.
			req := kmsg.NewPtrProduceRequest()
			req.SetVersion(version)
			if err := req.UnsafeReadFrom(r.body); err != nil {
				return fmt.Errorf("%w: Produce v%d on a source connection: %v", ErrUndecodable, version, err)
			}
			decided, err := s.sourceProduceWith(r, req, names)
			if err != nil || decided {
				return err
			}
			return s.sourcePass(r)
		}
	}
}

// finishSourceProduce answers the partitions decided here and sends the rest to the source,
// the decided ones put into its answer.
func (s *Session) finishSourceProduce(r *request, req *kmsg.ProduceRequest, answered []refusal) {
	if len(answered) == 0 {
		r.onResp = sourceAnswer(kmsg.Produce)
		return
	}
	total := 0
	for _, t := range req.Topics {
		total += len(t.Partitions)
	}
	if total == len(answered) {
		if req.Acks == 0 {
			r.drop = true
			return
		}
		resp := kmsg.ProduceResponse{Version: r.h.version}
		spliceProduce(&resp, answered, r.h.version)
		r.answer = responseFrame(r.h.corr, flexibleRequest(int16(kmsg.Produce), r.h.version), resp.AppendTo(nil))
		return
	}
	rest := *req
	rest.Topics = nil
	for _, t := range req.Topics {
		var parts []kmsg.ProduceRequestTopicPartition
		for _, p := range t.Partitions {
			if !isRefused(answered, t.Topic, t.TopicID, p.Partition) {
				parts = append(parts, p)
			}
		}
		if len(parts) > 0 {
			t.Partitions = parts
			rest.Topics = append(rest.Topics, t)
		}
	}
	r.replace = rebuild(r.frame, r.h, rest.AppendTo(nil), s.cfg.Policy().Native())
	r.onResp = func(s *Session, version int16, body []byte) ([]byte, bool, error) {
		resp := kmsg.ProduceResponse{Version: version}
		if err := resp.ReadFrom(body); err != nil {
			return nil, false, err
		}
		s.raiseAnswer(&resp)
		spliceProduce(&resp, answered, version)
		return resp.AppendTo(nil), true, nil
	}
}
