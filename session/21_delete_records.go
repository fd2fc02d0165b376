package session

// DeleteRecords (key 21).
//
// Moving a mirror topic's log start would break its exactness, so only an approved mirroring
// client of the topic may (to follow the source's retention); everyone else gets
// POLICY_VIOLATION for those partitions, and nothing is deleted. offsetgate's own topics are
// never trimmed by clients. The offsets an approved client sends are source offsets; with the
// shift table of the produce-at-offset path they are translated to the destination's.

import (
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/rules"
)

var deleteRecordsHandler = handler{request: deleteRecordsRequest}

func deleteRecordsRequest(s *Session, r *request) error {
	if s.cfg.Catalog == nil {
		return nil
	}
	req := kmsg.DeleteRecordsRequest{Version: r.h.version}
	if err := req.ReadFrom(r.body); err != nil {
		return nil
	}
	var names []string
	for _, t := range req.Topics {
		names = append(names, t.Topic)
	}
	if !s.known(r, names, deleteRecordsRequest) {
		return nil
	}
	var refused []refusal
	keep := req.Topics[:0]
	for _, t := range req.Topics {
		code, msg := int16(0), ""
		switch {
		case rules.IsOwnTopic(t.Topic):
			code, msg = rules.ErrTopicAuthorization, "offsetgate: "+t.Topic+" is offsetgate's own topic"
		case s.mark(t.Topic) != nil:
			if _, ok := s.cfg.Policy().Approved(s.ident, t.Topic); !ok {
				code, msg = rules.ErrPolicyViolation, "offsetgate: "+t.Topic+" is a mirror topic; only its mirroring client may move its log start"
			}
		}
		if code == 0 {
			keep = append(keep, t)
			continue
		}
		for _, p := range t.Partitions {
			refused = append(refused, refusal{topic: strings.Clone(t.Topic), partition: p.Partition, code: code, msg: msg})
		}
	}
	if len(refused) == 0 {
		return nil
	}
	req.Topics = keep
	if len(keep) == 0 {
		resp := kmsg.DeleteRecordsResponse{Version: r.h.version}
		spliceDeleteRecords(&resp, refused)
		r.answer = responseFrame(r.h.corr, flexibleRequest(21, r.h.version), resp.AppendTo(nil))
		return nil
	}
	r.replace = rebuild(r.frame, r.h, req.AppendTo(nil), s.cfg.Policy().Native())
	r.onResp = func(_ *Session, v int16, body []byte) ([]byte, bool, error) {
		resp := kmsg.DeleteRecordsResponse{Version: v}
		if err := resp.ReadFrom(body); err != nil {
			return nil, false, err
		}
		spliceDeleteRecords(&resp, refused)
		return resp.AppendTo(nil), true, nil
	}
	return nil
}

func spliceDeleteRecords(resp *kmsg.DeleteRecordsResponse, rs []refusal) {
	for _, rf := range rs {
		var t *kmsg.DeleteRecordsResponseTopic
		for i := range resp.Topics {
			if resp.Topics[i].Topic == rf.topic {
				t = &resp.Topics[i]
			}
		}
		if t == nil {
			nt := kmsg.NewDeleteRecordsResponseTopic()
			nt.Topic = rf.topic
			resp.Topics = append(resp.Topics, nt)
			t = &resp.Topics[len(resp.Topics)-1]
		}
		p := kmsg.NewDeleteRecordsResponseTopicPartition()
		p.Partition, p.ErrorCode, p.LowWatermark = rf.partition, rf.code, -1
		t.Partitions = append(t.Partitions, p)
	}
}
