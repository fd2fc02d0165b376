package session

// OffsetCommit (key 8): source offsets in, destination offsets to D (see commits.go).

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/catalog"
)

var offsetCommitHandler = handler{request: offsetCommitRequest}

func offsetCommitRequest(s *Session, r *request) error {
	if !s.mirrorsOn() {
		return nil
	}
	req := kmsg.OffsetCommitRequest{Version: r.h.version}
	if err := req.ReadFrom(r.body); err != nil {
		return nil
	}
	var names []string
	for _, t := range req.Topics {
		if t.Topic != "" {
			names = append(names, t.Topic)
		}
	}
	if !s.known(r, names, offsetCommitRequest) {
		return nil
	}
	var topics []catalog.Topic
	for _, t := range req.Topics {
		if info := s.commitTopic(t.Topic, t.TopicID); info != nil {
			topics = append(topics, *info)
		}
	}
	if len(topics) == 0 {
		return nil
	}
	if !s.viewed(r, nil, topics, offsetCommitRequest) {
		return nil
	}
	for i := range req.Topics {
		t := &req.Topics[i]
		info := s.commitTopic(t.Topic, t.TopicID)
		if info == nil {
			continue
		}
		for j := range t.Partitions {
			p := &t.Partitions[j]
			pv := s.partView(*info, p.Partition)
			if pv == nil {
				return errViewUnavailable(info.Name, p.Partition)
			}
			p.Offset, p.LeaderEpoch = committedToDest(pv, p.Offset)
		}
	}
	r.replace = rebuild(r.frame, r.h, req.AppendTo(nil), s.cfg.Policy().Native())
	return nil
}
