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

var describeTopicPartitionsHandler = handler{request: describeTopicPartitionsRequest}

func describeTopicPartitionsRequest(s *Session, r *request) error {
	if !s.mirrorsOn() || r.viewed {
		return nil
	}
	req := kmsg.DescribeTopicPartitionsRequest{Version: r.h.version}
	if err := req.ReadFrom(r.body); err != nil {
		return r.undecodable(err)
	}
	var topics []catalog.Topic
	if len(req.Topics) == 0 {
		topics = s.cfg.Catalog.Mirrors()
	}
	var names []string
	for _, t := range req.Topics {
		names = append(names, t.Topic)
	}
	if !s.known(r, names, describeTopicPartitionsRequest) {
		return nil
	}
	for _, n := range names {
		if info := s.sourceTopic(n); info != nil {
			topics = append(topics, *info)
		}
	}
	if len(topics) == 0 {
		return nil
	}
	if !s.viewed(r, nil, topics, describeTopicPartitionsRequest) {
		return nil
	}
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
