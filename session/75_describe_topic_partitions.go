package session

// DescribeTopicPartitions (key 75).
//
// Admin clients' metadata: a mirror topic's partitions get the presented leader epoch, as in
// Metadata, so no client sees two epoch spaces. The views of the mirror topics named are loaded
// first (a request naming no topic concerns every topic: every mirror topic's view).

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/catalog"
)

var describeTopicPartitionsHandler = handler{
	active: func(s *Session) bool { return s.mirrorsOn() },
	needs: func(_ *Session, r *request) needs {
		req := r.req.(*kmsg.DescribeTopicPartitionsRequest)
		var n needs
		for _, t := range req.Topics {
			n.names = append(n.names, t.Topic)
		}
		n.views = func(s *Session) ([]mirrorPart, []catalog.Topic) {
			if len(req.Topics) == 0 {
				return nil, s.cfg.Catalog.Mirrors()
			}
			var topics []catalog.Topic
			for _, t := range req.Topics {
				if info := s.sourceTopic(t.Topic); info != nil {
					topics = append(topics, *info)
				}
			}
			return nil, topics
		}
		return n
	},
	decide: describeTopicPartitionsDecide,
}

func describeTopicPartitionsDecide(s *Session, r *request) error {
	r.onResp = func(s *Session, v int16, body []byte) ([]byte, bool, error) {
		resp := kmsg.DescribeTopicPartitionsResponse{Version: v}
		if err := resp.ReadFrom(body); err != nil {
			return nil, false, err
		}
		for i := range resp.Topics {
			t := &resp.Topics[i]
			if t.Topic == nil || t.ErrorCode != 0 {
				continue
			}
			info := s.sourceTopic(*t.Topic)
			if info == nil {
				continue
			}
			for j := range t.Partitions {
				p := &t.Partitions[j]
				switch pv := s.partView(*info, p.Partition); {
				case pv == nil:
					p.LeaderEpoch = -1 // unknown, never a destination epoch in the presented space
				case p.LeaderEpoch >= 0:
					p.LeaderEpoch += pv.EpochBase()
				}
			}
		}
		return resp.AppendTo(nil), true, nil
	}
	return nil
}
