package session

// OffsetCommit (key 8): source offsets in, destination offsets to D (see commits.go).

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/catalog"
	"offsetgate/view"
)

var offsetCommitHandler = handler{
	needs:  func(_ *Session, r *request) needs { return namedNeeds(offsetCommitTopics(r)) },
	decide: offsetCommitDecide,
}

func offsetCommitTopics(r *request) []namedTopic {
	req := r.req.(*kmsg.OffsetCommitRequest)
	topics := make([]namedTopic, len(req.Topics))
	for i, t := range req.Topics {
		topics[i].name, topics[i].id = t.Topic, t.TopicID
		for _, p := range t.Partitions {
			topics[i].parts = append(topics[i].parts, p.Partition)
		}
	}
	return topics
}

func offsetCommitDecide(s *Session, r *request) error {
	req := r.req.(*kmsg.OffsetCommitRequest)
	changed := false
	err := s.eachView(r, offsetCommitTopics(r), func(ti, pi int, _ *catalog.Topic, pv *view.Partition) {
		p := &req.Topics[ti].Partitions[pi]
		p.Offset, p.LeaderEpoch = committedToDest(pv, p.Offset)
		changed = true
	})
	if err != nil || !changed {
		return err
	}
	r.replace = rebuild(r.frame, r.h, req.AppendTo(nil), s.cfg.Policy().Native())
	return nil
}
