package session

// CreatePartitions (key 37).
//
// A mirror topic keeps the source's partition count: only an approved mirroring client of the
// topic adds partitions to it (when the source's count grew); anyone else gets
// POLICY_VIOLATION. offsetgate's own topics are not changed by clients.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/rules"
)

var createPartitionsHandler = handler{
	needs: func(_ *Session, r *request) needs {
		var n needs
		for _, t := range r.req.(*kmsg.CreatePartitionsRequest).Topics {
			n.names = append(n.names, t.Topic)
		}
		return n
	},
	decide: createPartitionsDecide,
	refuse: createPartitionsRefuse,
}

func createPartitionsDecide(s *Session, r *request) error {
	req := *r.req.(*kmsg.CreatePartitionsRequest)
	var refused []topicRefusal
	keep := req.Topics[:0]
	for _, t := range req.Topics {
		switch {
		case rules.IsOwnTopic(t.Topic):
			refused = append(refused, topicRefusal{t.Topic, rules.ErrTopicAuthorization, "offsetgate: " + t.Topic + " is offsetgate's own topic"})
		case s.mark(t.Topic) != nil && !s.approvedFor(t.Topic):
			refused = append(refused, topicRefusal{t.Topic, rules.ErrPolicyViolation, "offsetgate: " + t.Topic + " is a mirror topic; its partition count follows the source (only its mirroring client adds partitions)"})
		default:
			keep = append(keep, t)
		}
	}
	if len(refused) == 0 {
		return nil
	}
	req.Topics = keep
	splice := func(resp *kmsg.CreatePartitionsResponse) {
		for _, rf := range refused {
			t := kmsg.NewCreatePartitionsResponseTopic()
			msg := rf.msg
			t.Topic, t.ErrorCode, t.ErrorMessage = rf.topic, rf.code, &msg
			resp.Topics = append(resp.Topics, t)
		}
	}
	if len(keep) == 0 {
		var resp kmsg.CreatePartitionsResponse
		splice(&resp)
		r.answerWith(&resp)
		return nil
	}
	forwardSpliced(s, r, req.AppendTo(nil), splice)
	return nil
}

// approvedFor reports whether this connection's identity is an approved mirroring client of
// topic.
func (s *Session) approvedFor(topic string) bool {
	_, ok := s.cfg.Policy().Approved(s.ident, topic)
	return ok
}
