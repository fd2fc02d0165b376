package session

// ShareFetch (key 78).
//
// Share groups read a topic outside the fetch path that gives mirror topics their source
// view, so share-group reads of a mirror topic (or one promoted from it) are refused
// (POLICY_VIOLATION per partition, with a message); other topics in the same request go
// through. Topics are named by id: an id offsetgate does not know is looked up first, and one
// still unknown is refused (UNKNOWN_TOPIC_ID) rather than forwarded unjudged. Responses carry
// NodeEndpoints (the leaders of partitions that moved); they are rewritten to proxy addresses.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/rules"
)

var shareFetchHandler = handler{
	needs: func(_ *Session, r *request) needs {
		var n needs
		for _, t := range r.req.(*kmsg.ShareFetchRequest).Topics {
			n.ids = append(n.ids, t.TopicID)
		}
		return n
	},
	decide:   shareFetchDecide,
	response: rewriteShareFetch,
}

func shareFetchDecide(s *Session, r *request) error {
	req := *r.req.(*kmsg.ShareFetchRequest)
	var refused []refusal
	keep := req.Topics[:0]
	for _, t := range req.Topics {
		info, _ := s.cfg.Catalog.ByID(t.TopicID)
		var code int16
		var msg string
		switch {
		case !s.idKnown(t.TopicID):
			code, msg = rules.ErrUnknownTopicID, "offsetgate: the destination does not show this topic id"
		case rules.IsOwnTopic(info.Name):
			code, msg = rules.ErrTopicAuthorization, "offsetgate: "+info.Name+" is offsetgate's own topic; share groups cannot read it"
		case info.Mark != nil || s.cfg.Catalog.Removed(t.TopicID):
			code, msg = rules.ErrPolicyViolation, "offsetgate: "+info.Name+" is a mirror topic (or was promoted from one); share groups cannot read it (use a consumer group)"
		default:
			keep = append(keep, t)
			continue
		}
		for _, p := range t.Partitions {
			refused = append(refused, refusal{topicID: t.TopicID, partition: p.Partition, code: code, msg: msg})
		}
	}
	if len(refused) == 0 {
		return nil
	}
	req.Topics = keep
	if len(keep) == 0 {
		resp := kmsg.ShareFetchResponse{Version: r.h.version}
		spliceShareFetch(&resp, refused)
		r.answer = responseFrame(r.h.corr, flexibleRequest(int16(kmsg.ShareFetch), r.h.version), resp.AppendTo(nil))
		return nil
	}
	r.replace = rebuild(r.frame, r.h, req.AppendTo(nil), s.cfg.Policy().Native())
	r.onResp = func(s *Session, v int16, body []byte) ([]byte, bool, error) {
		nb, changed, err := rewriteShareFetch(s, v, body)
		if err != nil {
			return nil, false, err
		}
		if changed {
			body = nb
		}
		resp := kmsg.ShareFetchResponse{Version: v}
		if err := resp.ReadFrom(body); err != nil {
			return nil, false, err
		}
		spliceShareFetch(&resp, refused)
		return resp.AppendTo(nil), true, nil
	}
	return nil
}

func spliceShareFetch(resp *kmsg.ShareFetchResponse, rs []refusal) {
	for _, rf := range rs {
		var t *kmsg.ShareFetchResponseTopic
		for i := range resp.Topics {
			if resp.Topics[i].TopicID == rf.topicID {
				t = &resp.Topics[i]
			}
		}
		if t == nil {
			nt := kmsg.NewShareFetchResponseTopic()
			nt.TopicID = rf.topicID
			resp.Topics = append(resp.Topics, nt)
			t = &resp.Topics[len(resp.Topics)-1]
		}
		p := kmsg.NewShareFetchResponseTopicPartition()
		msg := rf.msg
		p.Partition, p.ErrorCode, p.ErrorMessage = rf.partition, rf.code, &msg
		p.CurrentLeader.LeaderID, p.CurrentLeader.LeaderEpoch = -1, -1
		t.Partitions = append(t.Partitions, p)
	}
}

func rewriteShareFetch(s *Session, version int16, body []byte) ([]byte, bool, error) {
	resp := kmsg.ShareFetchResponse{Version: version}
	if err := resp.UnsafeReadFrom(body); err != nil {
		return nil, false, err
	}
	if len(resp.NodeEndpoints) == 0 {
		return nil, false, nil
	}
	for i := range resp.NodeEndpoints {
		e := &resp.NodeEndpoints[i]
		s.endpoint(e.NodeID, &e.Host, &e.Port)
	}
	return resp.AppendTo(nil), true, nil
}
