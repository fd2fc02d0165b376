package session

// TxnOffsetCommit (key 28): source offsets in, destination offsets to D (see commits.go). The
// KIP-447 generation, member and group instance fields pass unchanged.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/catalog"
	"offsetgate/rules"
	"offsetgate/view"
)

var txnOffsetCommitHandler = handler{
	needs:  func(_ *Session, r *request) needs { return namedNeeds(txnOffsetCommitTopics(r)) },
	decide: txnOffsetCommitDecide,
}

func txnOffsetCommitTopics(r *request) []namedTopic {
	req := r.req.(*kmsg.TxnOffsetCommitRequest)
	topics := make([]namedTopic, len(req.Topics))
	for i, t := range req.Topics {
		topics[i].name = t.Topic
		for _, p := range t.Partitions {
			topics[i].parts = append(topics[i].parts, p.Partition)
		}
	}
	return topics
}

func txnOffsetCommitDecide(s *Session, r *request) error {
	req := r.req.(*kmsg.TxnOffsetCommitRequest)
	if rules.IsOwnTransactionalID(&req.TransactionalID) {
		// 22_init_producer_id.go says why.
		txnOffsetCommitRefuse(s, r, rules.ErrTxnIDAuthorization, rules.OwnTransactionalIDMessage(req.TransactionalID))
		return nil
	}
	changed := false
	err := s.eachView(r, txnOffsetCommitTopics(r), func(ti, pi int, _ *catalog.Topic, pv *view.Partition) {
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
