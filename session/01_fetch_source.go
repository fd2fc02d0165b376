package session

// Fetch (key 1) on a source connection once a topic is promoted (promoted.go).
//
// A promoted topic's partitions are fetched from the destination's leaders, at destination
// offsets, and answered as a destination listener answers them (batches restored to the
// source's, offsets and epochs in source terms); the rest of the request goes to the source.
// Fetch sessions (KIP-227) cannot span both: a request that carries partitions is sent to the
// source without a session and answered with none (session id 0, which clients take as "no
// session": they go on with full requests), and an incremental request that could rely on a
// session holding a promoted topic's partitions (it names one, or a topic was promoted since
// the client's last full request) is answered FETCH_SESSION_ID_NOT_FOUND, on which clients
// send a full request.
//
// The destination part goes first: when the source part has partitions too, the destination is
// asked not to wait, and the source part is told not to wait either when the destination had
// records; otherwise the client's wait applies to the source part. Each part of a fetch split
// between brokers waits at most maxSplitWait.

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// maxSplitWait bounds, in milliseconds, the wait of each part of a fetch split between
// brokers: the client gets its answer when every part has answered, so one broker with
// nothing new must not hold back another's records for the client's whole wait (franz-go's
// is 5 s). Split fetches cost an idle client a request per broker every maxSplitWait.
const maxSplitWait = 100

func fetchReqTopics(req *kmsg.FetchRequest) ([]reqTopic, [][16]byte) {
	topics := make([]reqTopic, len(req.Topics))
	var ids [][16]byte
	for i, t := range req.Topics {
		topics[i] = reqTopic{name: t.Topic, id: t.TopicID}
		if req.Version >= 13 {
			ids = append(ids, t.TopicID)
		}
		for _, p := range t.Partitions {
			topics[i].parts = append(topics[i].parts, p.Partition)
		}
	}
	return topics, ids
}

// sourceFetch takes a Fetch on a source connection over when promoted topics are involved.
func (s *Session) sourceFetch(r *request) (bool, error) {
	req := kmsg.NewPtrFetchRequest()
	req.SetVersion(r.h.version)
	if err := req.UnsafeReadFrom(r.body); err != nil {
		return false, fmt.Errorf("%w: Fetch v%d on a source connection: %v", ErrUndecodable, r.h.version, err)
	}
	_, ids := fetchReqTopics(req)
	later := false
	decided, err := s.withSourceNames(r, ids, func(names map[[16]byte]string) (bool, error) {
		if later {
			// Read again, in place: the request was copied for the asynchronous step.
			req = kmsg.NewPtrFetchRequest()
			req.SetVersion(r.h.version)
			if err := req.UnsafeReadFrom(r.body); err != nil {
				return false, fmt.Errorf("%w: Fetch v%d on a source connection: %v", ErrUndecodable, r.h.version, err)
			}
		}
		return s.sourceFetchWith(r, req, names)
	})
	later = true // a call from now on finishes an asynchronous step
	return decided, err
}

func (s *Session) sourceFetchWith(r *request, req *kmsg.FetchRequest, names map[[16]byte]string) (bool, error) {
	topics, _ := fetchReqTopics(req)
	parts := s.promotedParts(topics, req.Version >= 13, names)
	gen := s.cfg.Moves.Promotions()
	incremental := req.Version >= 7 && req.SessionEpoch > 0
	if incremental && (gen != s.fetchGen || len(parts) > 0) {
		resp := kmsg.NewPtrFetchResponse()
		resp.Version = req.Version
		resp.ErrorCode = kerr.FetchSessionIDNotFound.Code
		r.answer = responseFrame(r.h.corr, flexibleRequest(int16(kmsg.Fetch), r.h.version), resp.AppendTo(nil))
		return true, nil
	}
	if !incremental {
		s.fetchGen = gen
	}
	if len(parts) == 0 {
		return s.sealedFetch(r, req, topics, names)
	}
	// The asynchronous step outlives the frame's buffer: a copy of its own.
	req = kmsg.NewPtrFetchRequest()
	req.SetVersion(r.h.version)
	if err := req.ReadFrom(append([]byte(nil), r.body...)); err != nil {
		return false, fmt.Errorf("%w: Fetch v%d on a source connection: %v", ErrUndecodable, r.h.version, err)
	}
	s.carryFetch(r, req, topics, parts)
	return true, nil
}

// sealedFetch bounds the wait of a fetch that names a sealed topic: the source's answer comes
// back soon after the promotion, and the next fetch of the topic is carried to the
// destination, instead of the source holding the client for its whole wait while the records
// now go to the destination.
func (s *Session) sealedFetch(r *request, req *kmsg.FetchRequest, topics []reqTopic, names map[[16]byte]string) (bool, error) {
	if req.MaxWaitMillis <= maxSplitWait || req.ReplicaID >= 0 {
		return false, nil
	}
	sealed := false
	for _, t := range topics {
		name := t.name
		if req.Version >= 13 {
			name = names[t.id]
		}
		if _, sl, _ := s.cfg.Moves.Promotion(name); sl && len(t.parts) > 0 {
			sealed = true
		}
	}
	if !sealed {
		return false, nil
	}
	req.MaxWaitMillis = maxSplitWait
	r.replace = rebuild(r.frame, r.h, req.AppendTo(nil), s.cfg.Policy().Native())
	r.onResp = sourceAnswer(kmsg.Fetch)
	return true, nil
}

// carryFetch fetches the promoted parts from the destination, then sends the rest to the
// source (or answers alone).
func (s *Session) carryFetch(r *request, req *kmsg.FetchRequest, topics []reqTopic, parts []promotedPart) {
	c, client := s.movesCarrier(), string(r.h.clientID)
	rest := restCount(topics, parts)
	committed := req.IsolationLevel == 1
	wait := s.cfg.WaitTimeout
	if wait <= 0 {
		wait = DefaultWaitTimeout
	}
	r.asyncWait = wait + time.Duration(max(req.MaxWaitMillis, 0))*time.Millisecond
	r.async = func(ctx context.Context) func(*Session, *request) error {
		locate(ctx, c, parts)
		for _, p := range parts {
			if p.err == nil {
				// An evicted index page where the fetch starts is read back first.
				if d := p.pv.ToDest(req.Topics[p.ti].Partitions[p.pi].FetchOffset); p.pv.Cold(d) {
					_ = p.pv.LoadAt(ctx, d)
				}
			}
		}
		leaders := map[string]bool{}
		for _, p := range parts {
			if p.err == nil {
				leaders[p.addr] = true
			}
		}
		skipped := make([]bool, len(parts)) // moved past a filled hole's fillers (fillerSkip)
		answers := sendByLeader(ctx, c, client, parts, func(idx []int) kmsg.Request {
			d := kmsg.NewPtrFetchRequest()
			d.Version = min(max(req.Version, 4), 12) // topics by name
			d.ReplicaID, d.SessionID, d.SessionEpoch = -1, 0, -1
			d.MaxBytes, d.IsolationLevel = req.MaxBytes, req.IsolationLevel
			if rest == 0 {
				d.MaxWaitMillis, d.MinBytes = req.MaxWaitMillis, req.MinBytes
				if len(leaders) > 1 {
					d.MaxWaitMillis = min(d.MaxWaitMillis, maxSplitWait)
				}
			}
			for _, i := range idx {
				p := parts[i]
				asked := req.Topics[p.ti].Partitions[p.pi]
				dp := kmsg.NewFetchRequestTopicPartition()
				dp.Partition, dp.PartitionMaxBytes = p.partition, asked.PartitionMaxBytes
				dp.FetchOffset, skipped[i] = p.pv.ToDestSkipping(asked.FetchOffset)
				// The client's epochs are the source's: D checks none of them.
				dp.CurrentLeaderEpoch, dp.LastFetchedEpoch, dp.LogStartOffset = -1, -1, -1
				var dt *kmsg.FetchRequestTopic
				for j := range d.Topics {
					if d.Topics[j].Topic == p.name {
						dt = &d.Topics[j]
					}
				}
				if dt == nil {
					nt := kmsg.NewFetchRequestTopic()
					nt.Topic = p.name
					d.Topics = append(d.Topics, nt)
					dt = &d.Topics[len(d.Topics)-1]
				}
				dt.Partitions = append(dt.Partitions, dp)
			}
			return d
		})
		out := make([]kmsg.FetchResponseTopicPartition, len(parts))
		records := false
		for i, p := range parts {
			a := answers[p.addr]
			got, found := kmsg.FetchResponseTopicPartition{}, false
			if p.err == nil && a.err == nil {
				got, found = fetchPartition(a.resp.(*kmsg.FetchResponse), p.name, p.partition)
			}
			ans := kmsg.NewFetchResponseTopicPartition()
			ans.Partition = p.partition
			switch {
			case !found:
				ans.ErrorCode = partErr(c, p, a)
			case got.ErrorCode == kerr.OffsetOutOfRange.Code && skipped[i]:
				fillerSkip(&ans, req.Topics[p.ti].Partitions[p.pi].FetchOffset)
			case got.ErrorCode != 0:
				if leadership(got.ErrorCode) {
					c.ForgetLeader(p.name, p.partition)
				}
				ans.ErrorCode = got.ErrorCode
			default:
				ans.HighWatermark, ans.LastStableOffset, ans.LogStartOffset = got.HighWatermark, got.LastStableOffset, got.LogStartOffset
				ans.AbortedTransactions, ans.RecordBatches = got.AbortedTransactions, got.RecordBatches
				p.pv.TrimBelow(ans.LogStartOffset)
				if fresh, _ := restore(p.pv, &ans, true, committed); !fresh {
					p.pv.Stale()
				}
				records = records || len(ans.RecordBatches) > 0
			}
			out[i] = ans
		}
		return func(s *Session, r *request) error {
			add := func(resp *kmsg.FetchResponse) {
				for i, p := range parts {
					t := req.Topics[p.ti]
					var rt *kmsg.FetchResponseTopic
					for j := range resp.Topics {
						if resp.Topics[j].Topic == t.Topic && resp.Topics[j].TopicID == t.TopicID {
							rt = &resp.Topics[j]
						}
					}
					if rt == nil {
						nt := kmsg.NewFetchResponseTopic()
						nt.Topic, nt.TopicID = t.Topic, t.TopicID
						resp.Topics = append(resp.Topics, nt)
						rt = &resp.Topics[len(resp.Topics)-1]
					}
					rt.Partitions = append(rt.Partitions, out[i])
				}
			}
			if rest == 0 {
				resp := kmsg.NewPtrFetchResponse()
				resp.Version = req.Version
				add(resp)
				r.answer = responseFrame(r.h.corr, flexibleRequest(int16(kmsg.Fetch), r.h.version), resp.AppendTo(nil))
				return nil
			}
			src := *req
			src.SessionID, src.SessionEpoch, src.ForgottenTopics = 0, -1, nil
			switch {
			case records:
				src.MaxWaitMillis = 0
			case src.MaxWaitMillis > maxSplitWait:
				src.MaxWaitMillis = maxSplitWait
			}
			src.Topics = sourceTopics(req.Topics, func(t *kmsg.FetchRequestTopic) *[]kmsg.FetchRequestTopicPartition { return &t.Partitions }, parts)
			r.replace = rebuild(r.frame, r.h, src.AppendTo(nil), s.cfg.Policy().Native())
			r.onResp = func(s *Session, version int16, body []byte) ([]byte, bool, error) {
				resp := kmsg.FetchResponse{Version: version}
				if err := resp.ReadFrom(body); err != nil {
					return nil, false, err
				}
				s.raiseAnswer(&resp)
				resp.SessionID = 0
				add(&resp)
				return resp.AppendTo(nil), true, nil
			}
			return nil
		}
	}
}

func fetchPartition(resp *kmsg.FetchResponse, topic string, partition int32) (kmsg.FetchResponseTopicPartition, bool) {
	for _, t := range resp.Topics {
		if t.Topic != topic {
			continue
		}
		for _, p := range t.Partitions {
			if p.Partition == partition {
				return p, true
			}
		}
	}
	return kmsg.FetchResponseTopicPartition{}, false
}
