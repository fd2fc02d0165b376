package session

// ElectLeaders (key 43).
//
// An unclean election (ElectionType 1, v1+) makes a replica that is not in sync the leader:
// the records it lacks are lost and later ones take their offsets. On a mirror topic that
// breaks the offsets offsetgate promised and the ledger that records them; on offsetgate's own
// topics it loses marks or ledger entries. So unclean elections of their partitions are
// refused (POLICY_VIOLATION), and an unclean election of every partition (null topics) is
// refused whole. Preferred-replica elections (type 0, and every v0 request) move leadership
// between in-sync replicas, lose nothing, and pass.

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/rules"
)

var electLeadersHandler = handler{
	needs: func(_ *Session, r *request) needs {
		req := r.req.(*kmsg.ElectLeadersRequest)
		var n needs
		if r.h.version >= 1 && req.ElectionType != 0 {
			for _, t := range req.Topics {
				n.names = append(n.names, t.Topic)
			}
		}
		return n
	},
	decide: electLeadersDecide,
}

func electLeadersDecide(s *Session, r *request) error {
	req := *r.req.(*kmsg.ElectLeadersRequest)
	if r.h.version < 1 || req.ElectionType == 0 {
		return nil
	}
	resp := kmsg.NewPtrElectLeadersResponse()
	if req.Topics == nil {
		resp.ErrorCode = rules.ErrPolicyViolation
		r.answerWith(resp)
		return nil
	}
	type refused struct {
		topic string
		parts []int32
		msg   string
	}
	var out []refused
	keep := req.Topics[:0]
	for _, t := range req.Topics {
		switch {
		case rules.IsOwnTopic(t.Topic):
			out = append(out, refused{t.Topic, t.Partitions, fmt.Sprintf("offsetgate: an unclean election would lose records of offsetgate's own topic %s", t.Topic)})
		case s.mark(t.Topic) != nil:
			out = append(out, refused{t.Topic, t.Partitions, fmt.Sprintf("offsetgate: an unclean election would lose records of mirror topic %s and break its offsets", t.Topic)})
		default:
			keep = append(keep, t)
		}
	}
	if len(out) == 0 {
		return nil
	}
	splice := func(resp *kmsg.ElectLeadersResponse) {
		for _, rf := range out {
			rt := kmsg.NewElectLeadersResponseTopic()
			rt.Topic = rf.topic
			for _, p := range rf.parts {
				rp := kmsg.NewElectLeadersResponseTopicPartition()
				msg := rf.msg
				rp.Partition, rp.ErrorCode, rp.ErrorMessage = p, rules.ErrPolicyViolation, &msg
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
	}
	if len(keep) == 0 {
		splice(resp)
		r.answerWith(resp)
		return nil
	}
	req.Topics = keep
	forwardSpliced(s, r, req.AppendTo(nil), splice)
	return nil
}
