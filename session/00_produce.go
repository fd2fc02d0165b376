package session

// Produce (key 0).
//
// Requests: acks is read on every version (acks=0 has no response, so no slot waits for one:
// the body starts with the transactional id, v3+, a compact nullable string from v9, then
// acks). When the mirror rules are on, the topics are read too: offsetgate's own topics are
// never written by clients; a mirror topic is written only by an approved mirroring client
// with the magic header (sent, or attached for it by configuration); refused partitions get
// their error and message while the rest of the request goes through. Topics are named (v3-12)
// or identified (v13); an unknown name or id is looked up on the destination first.
//
// Responses from v10 (KIP-951) may carry endpoints of moved leaders: rewritten to proxy
// addresses. Refused partitions are spliced into the broker's response. The offsets of
// partitions of promoted topics are given in source terms (their consumers' view).

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/catalog"
	"offsetgate/rules"
)

var produceHandler = handler{
	unsafe: true, // record sets stay in the frame
	needs:  produceNeeds,
	decide: produceDecide,
	refuse: produceRefuse,
	noResponse: func(h reqHeader, body []byte) bool {
		acks, err := produceAcks(h.version, body)
		return err == nil && acks == 0
	},
	response:     rewriteProduce,
	responseFrom: 10,
}

var errShortProduce = errors.New("produce request too short to hold acks")

// produceAcks reads acks from a Produce request body.
func produceAcks(version int16, body []byte) (int16, error) {
	off := 0
	switch {
	case version >= 9:
		n, w := binary.Uvarint(body)
		if w <= 0 {
			return 0, errShortProduce
		}
		off = w
		if n > 0 { // n-1 bytes follow; 0 is null
			if n-1 > uint64(len(body)) {
				return 0, errShortProduce
			}
			off += int(n - 1)
		}
	case version >= 3:
		if len(body) < 2 {
			return 0, errShortProduce
		}
		n := int(int16(binary.BigEndian.Uint16(body)))
		off = 2
		if n > 0 {
			off += n
		}
	}
	if off < 0 || len(body) < off+2 {
		return 0, errShortProduce
	}
	return int16(binary.BigEndian.Uint16(body[off:])), nil
}

// refusal is one partition offsetgate answers itself (a refusal, or the result of a
// produce-at-offset write when code is 0).
type refusal struct {
	topic     string
	topicID   catalog.TopicID
	partition int32
	code      int16
	msg       string
	base      int64
	// carried: written to the destination for a source connection (00_produce_source.go);
	// its log append time and log start are the destination's answer's.
	carried              bool
	appendTime, logStart int64
}

// atOffsetPart is one admitted produce-at-offset partition.
type atOffsetPart struct {
	topic     string
	topicID   catalog.TopicID
	info      catalog.Topic
	partition int32
	records   []byte
}

// produceNeeds: every topic written confirmed (its mark read up to date; ids need every topic
// read), and the views of promoted topics' partitions, whose producers are told their offsets
// in source terms.
func produceNeeds(_ *Session, r *request) needs {
	req := r.req.(*kmsg.ProduceRequest)
	var n needs
	for _, t := range req.Topics {
		if r.h.version >= 13 {
			n.ids = append(n.ids, t.TopicID)
		} else {
			n.names = append(n.names, t.Topic)
		}
	}
	n.views = func(s *Session) ([]mirrorPart, []catalog.Topic) {
		var parts []mirrorPart
		for _, t := range req.Topics {
			info := s.topicOf(t.Topic, t.TopicID)
			if info == nil || info.Mark != nil {
				continue
			}
			for _, p := range t.Partitions {
				parts = append(parts, mirrorPart{t: *info, partition: p.Partition})
			}
		}
		return parts, nil
	}
	return n
}

func produceDecide(s *Session, r *request) error {
	req := *r.req.(*kmsg.ProduceRequest)
	byID := r.h.version >= 13
	policy := s.cfg.Policy()
	atOffset := r.magic.Valid
	ownTxn := rules.IsOwnTransactionalID(req.TransactionID)
	var refused []refusal
	var writes []atOffsetPart
	promoted := false
	for _, t := range req.Topics {
		var info catalog.Topic
		var found bool
		if byID {
			info, _ = s.cfg.Catalog.ByID(t.TopicID)
			found = s.idKnown(t.TopicID)
		} else {
			info, found = s.cfg.Catalog.ByName(t.Topic)
		}
		name := t.Topic
		if byID {
			name = info.Name
		}
		refuse := func(code int16, msg string) {
			for _, p := range t.Partitions {
				refused = append(refused, refusal{topic: strings.Clone(t.Topic), topicID: t.TopicID, partition: p.Partition, code: code, msg: msg})
			}
		}
		switch {
		case ownTxn:
			refuse(rules.ErrTxnIDAuthorization, rules.OwnTransactionalIDMessage(*req.TransactionID))
		case !found && byID:
			refuse(rules.ErrUnknownTopicID, "offsetgate: the destination does not show this topic id; nothing was written")
		case !found:
			refuse(rules.ErrUnknownTopic, fmt.Sprintf("offsetgate: the destination does not show topic %s; nothing was written", name))
		case rules.IsOwnTopic(name):
			refuse(rules.ErrTopicAuthorization, fmt.Sprintf("offsetgate: %s is offsetgate's own topic; clients may not write to it", name))
		case info.Mark != nil:
			ap, ok := policy.Approved(s.ident, name)
			switch {
			case !ok:
				refuse(rules.ErrTopicAuthorization, fmt.Sprintf("offsetgate: %s is a mirror topic; only approved mirroring clients may write to it (this connection is %s)", name, s.ident))
			case !atOffset && !ap.AttachHeader:
				refuse(rules.ErrPolicyViolation, fmt.Sprintf("offsetgate: %s is a mirror topic; writes must be produce-at-offset (the magic request header, docs/PROTOCOL.md)", name))
			case s.cfg.Mirror != nil:
				// The produce-at-offset path takes these partitions over.
				for _, p := range t.Partitions {
					writes = append(writes, atOffsetPart{topic: strings.Clone(t.Topic), topicID: t.TopicID, info: info,
						partition: p.Partition, records: append([]byte(nil), p.Records...)})
				}
			}
		case s.cfg.Catalog.Removed(info.ID) && (atOffset || isMirroring(policy, s.ident, name)):
			// A mirror still running after the promotion (or a produce-at-offset request) would
			// write source batches as ordinary records, after the promoted topic's own, under
			// the source's producer ids: never written.
			refuse(rules.ErrPolicyViolation, fmt.Sprintf("offsetgate: %s was promoted: it takes ordinary writes, not a mirror's (stop the mirror of it); nothing was written", name))
		case s.cfg.Catalog.Removed(info.ID):
			// A topic promoted from a mirror keeps its source view: consumers read source
			// offsets, so its producers are told their records' offsets in the same terms.
			promoted = true
		}
	}
	if len(writes) > 0 {
		from := int64(-1)
		if atOffset {
			from = r.magic.From
		}
		if from >= 0 && len(writes) > 1 {
			// The from offset is one partition's: with several, it would be taken for each.
			for _, w := range writes {
				refused = append(refused, refusal{topic: w.topic, topicID: w.topicID, partition: w.partition, code: rules.ErrInvalidRequest,
					msg: "offsetgate: a from offset in the magic header is for a request of one partition; this one has several (docs/PROTOCOL.md); nothing was written"})
			}
			finishRefused(s, r, req, refused)
			return nil
		}
		mirrorWrites(s, r, req, refused, writes, from)
		return nil
	}
	if len(refused) == 0 {
		if r.magic.Present && !policy.Native() {
			r.replace = stripMagic(r.frame, r.h)
			r.magic.stripped = true
		}
		if promoted {
			r.onResp = rewritePromotedProduce
		}
		return nil
	}
	finishRefused(s, r, req, refused)
	return nil
}

// isMirroring reports whether the identity is an approved mirroring client of the topic.
func isMirroring(policy *rules.Policy, id rules.Identity, topic string) bool {
	_, ok := policy.Approved(id, topic)
	return ok
}

// produceRefuse answers every partition of a Produce itself (a wait for the destination that
// failed); nothing is written.
func produceRefuse(s *Session, r *request, code int16, msg string) {
	req := *r.req.(*kmsg.ProduceRequest)
	var refused []refusal
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			refused = append(refused, refusal{topic: strings.Clone(t.Topic), topicID: t.TopicID, partition: p.Partition, code: code, msg: msg})
		}
	}
	finishRefused(s, r, req, refused)
}

// finishRefused answers the refused (and mirrored) partitions itself and forwards the rest.
func finishRefused(s *Session, r *request, req kmsg.ProduceRequest, refused []refusal) {
	policy := s.cfg.Policy()
	r.magic.stripped = true
	acks, _ := produceAcks(r.h.version, r.body)
	total := 0
	for _, t := range req.Topics {
		total += len(t.Partitions)
	}
	if total == len(refused) {
		if acks == 0 {
			r.drop = true
			return
		}
		resp := kmsg.ProduceResponse{Version: r.h.version}
		spliceProduce(&resp, refused, r.h.version)
		r.answer = responseFrame(r.h.corr, flexibleRequest(int16(kmsg.Produce), r.h.version), resp.AppendTo(nil))
		return
	}
	// Forward the rest; put the refusals into the broker's answer.
	keep := req.Topics[:0]
	for _, t := range req.Topics {
		parts := t.Partitions[:0]
		for _, p := range t.Partitions {
			if !isRefused(refused, t.Topic, t.TopicID, p.Partition) {
				parts = append(parts, p)
			}
		}
		if len(parts) > 0 {
			t.Partitions = parts
			keep = append(keep, t)
		}
	}
	req.Topics = keep
	r.replace = rebuild(r.frame, r.h, req.AppendTo(nil), policy.Native())
	r.onResp = func(s *Session, version int16, body []byte) ([]byte, bool, error) {
		return rewriteProduceWith(s, version, body, func(resp *kmsg.ProduceResponse) { spliceProduce(resp, refused, version) })
	}
}

// rewritePromotedProduce is rewriteProduce for a request that wrote to a promoted topic.
func rewritePromotedProduce(s *Session, version int16, body []byte) ([]byte, bool, error) {
	return rewriteProduceWith(s, version, body, nil)
}

// rewriteProduceWith decodes a Produce answer, rewrites its endpoints, applies more (when
// set), gives promoted topics' offsets in source terms, and encodes the answer again.
func rewriteProduceWith(s *Session, version int16, body []byte, more func(*kmsg.ProduceResponse)) ([]byte, bool, error) {
	resp := kmsg.ProduceResponse{Version: version}
	if err := resp.ReadFrom(body); err != nil {
		return nil, false, err
	}
	for i := range resp.Brokers {
		e := &resp.Brokers[i]
		s.endpoint(e.NodeID, &e.Host, &e.Port)
	}
	if more != nil {
		more(&resp)
	}
	promotedOffsets(s, &resp)
	return resp.AppendTo(nil), true, nil
}

// promotedOffsets turns the destination offsets of a Produce answer for promoted topics into
// the source's, as their consumers see them.
func promotedOffsets(s *Session, resp *kmsg.ProduceResponse) {
	for i := range resp.Topics {
		t := &resp.Topics[i]
		var info *catalog.Topic
		if resp.Version >= 13 {
			info = s.sourceTopicByID(t.TopicID)
		} else {
			info = s.sourceTopic(t.Topic)
		}
		if info == nil || info.Mark != nil {
			continue
		}
		for j := range t.Partitions {
			p := &t.Partitions[j]
			if p.ErrorCode != 0 {
				continue
			}
			pv := s.partView(*info, p.Partition)
			if pv == nil {
				// Written, but its source offset is not known here: say so rather than give
				// the destination's offset as the source's.
				p.BaseOffset, p.LogStartOffset = -1, -1
				continue
			}
			p.BaseOffset = pv.ToSource(p.BaseOffset)
			p.LogStartOffset = pv.ToSource(p.LogStartOffset)
		}
	}
}

// mirrorWrites runs the produce-at-offset writes off the session's goroutine (partitions in
// parallel), then answers them with the refusals and forwards whatever else the request held.
// A partition already being written by an earlier request of the connection (pipelined,
// overlap.go) is written after that one holds its place in the writer, in request order.
func mirrorWrites(s *Session, r *request, req kmsg.ProduceRequest, refused []refusal, writes []atOffsetPart, from int64) {
	// The request was decoded without copying; keep what the asynchronous step needs.
	req = cloneProduce(req)
	m := s.cfg.Mirror
	r.writes = writeKeys(writes)
	prev := make([]chan struct{}, len(writes))
	mine := make([]chan struct{}, len(writes))
	if s.turns == nil {
		s.turns = make(map[writeKey]chan struct{})
	}
	for i, k := range r.writes {
		prev[i] = s.turns[k]
		mine[i] = make(chan struct{})
		s.turns[k] = mine[i]
	}
	r.async = func(ctx context.Context) func(*Session, *request) error {
		results := make([]refusal, len(writes))
		var wg sync.WaitGroup
		for i, w := range writes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var once sync.Once
				queued := func() { once.Do(func() { close(mine[i]) }) }
				defer queued()
				follows := prev[i] != nil
				if follows {
					// Never skipped, even when ctx ended: a write that overtook the one before
					// it could take that one's batches for a hole. Past its time, the write
					// fails at once (and the partition then expects a resend).
					<-prev[i]
				}
				code, msg, base := m.Write(ctx, w.info, w.partition, w.records, from, follows, queued)
				results[i] = refusal{topic: w.topic, topicID: w.topicID, partition: w.partition, code: code, msg: msg, base: base}
			}()
		}
		wg.Wait()
		return func(s *Session, r *request) error {
			finishRefused(s, r, req, append(refused, results...))
			return nil
		}
	}
}

// cloneProduce deep-copies what finishRefused reads of a request decoded in place.
func cloneProduce(req kmsg.ProduceRequest) kmsg.ProduceRequest {
	out := req
	out.Topics = make([]kmsg.ProduceRequestTopic, len(req.Topics))
	for i, t := range req.Topics {
		t.Topic = strings.Clone(t.Topic)
		parts := make([]kmsg.ProduceRequestTopicPartition, len(t.Partitions))
		for j, p := range t.Partitions {
			p.Records = append([]byte(nil), p.Records...)
			parts[j] = p
		}
		t.Partitions = parts
		out.Topics[i] = t
	}
	if req.TransactionID != nil {
		id := strings.Clone(*req.TransactionID)
		out.TransactionID = &id
	}
	return out
}

func isRefused(rs []refusal, topic string, id catalog.TopicID, p int32) bool {
	for _, r := range rs {
		if r.topic == topic && r.topicID == id && r.partition == p {
			return true
		}
	}
	return false
}

// spliceProduce adds refused partitions to a Produce response.
func spliceProduce(resp *kmsg.ProduceResponse, refused []refusal, version int16) {
	for _, rf := range refused {
		var t *kmsg.ProduceResponseTopic
		for i := range resp.Topics {
			if resp.Topics[i].Topic == rf.topic && resp.Topics[i].TopicID == rf.topicID {
				t = &resp.Topics[i]
			}
		}
		if t == nil {
			nt := kmsg.NewProduceResponseTopic()
			nt.Topic, nt.TopicID = rf.topic, rf.topicID
			resp.Topics = append(resp.Topics, nt)
			t = &resp.Topics[len(resp.Topics)-1]
		}
		p := kmsg.NewProduceResponseTopicPartition()
		p.Partition, p.ErrorCode = rf.partition, rf.code
		p.BaseOffset, p.LogAppendTime, p.LogStartOffset = -1, -1, -1
		if rf.code == 0 {
			p.BaseOffset = rf.base
		}
		if rf.carried {
			p.LogAppendTime, p.LogStartOffset = rf.appendTime, rf.logStart
		}
		if version >= 8 && rf.msg != "" {
			msg := rf.msg
			p.ErrorMessage = &msg
		}
		t.Partitions = append(t.Partitions, p)
	}
}

// rebuild makes a request frame from the original's header (without the magic tag unless the
// destination is native) and a new body.
func rebuild(frame []byte, h reqHeader, body []byte, native bool) []byte {
	p := frame[4:]
	var out []byte
	if h.magic.Present && !native {
		out = stripMagic(append([]byte{0, 0, 0, 0}, p[:h.bodyOff]...), h)
	} else {
		out = append([]byte{0, 0, 0, 0}, p[:h.bodyOff]...)
	}
	out = append(out, body...)
	binary.BigEndian.PutUint32(out, uint32(len(out)-4))
	return out
}

func rewriteProduce(s *Session, version int16, body []byte) ([]byte, bool, error) {
	resp := kmsg.ProduceResponse{Version: version}
	if err := resp.UnsafeReadFrom(body); err != nil {
		return nil, false, err
	}
	if len(resp.Brokers) == 0 {
		return nil, false, nil
	}
	for i := range resp.Brokers {
		e := &resp.Brokers[i]
		s.endpoint(e.NodeID, &e.Host, &e.Port)
	}
	return resp.AppendTo(nil), true, nil
}
