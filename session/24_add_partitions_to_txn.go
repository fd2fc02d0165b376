package session

// AddPartitionsToTxn (key 24).
//
// A transaction's markers land on every partition added to it, so adding a partition is a
// write: EndTxn (which names no partition) then puts a COMMIT or ABORT marker there. Mirror
// topics are written only by offsetgate's produce-at-offset path and offsetgate's own topics
// by offsetgate, so partitions of either are refused (TOPIC_AUTHORIZATION_FAILED) for every
// client, approved mirroring clients included. As the coordinator does when one partition
// fails, the other partitions of the request are answered OPERATION_NOT_ATTEMPTED and nothing
// is added. (Transactions v2, KIP-890, add partitions with the Produce request itself, which
// is judged in 00_produce.go.) v0-3 carry one transaction; v4+ (broker to coordinator) carry
// several, and are judged the same way.

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/rules"
)

var addPartitionsToTxnHandler = handler{
	needs: func(_ *Session, r *request) needs {
		req := r.req.(*kmsg.AddPartitionsToTxnRequest)
		var n needs
		for _, t := range req.Topics {
			n.names = append(n.names, t.Topic)
		}
		for _, tx := range req.Transactions {
			for _, t := range tx.Topics {
				n.names = append(n.names, t.Topic)
			}
		}
		return n
	},
	decide: addPartitionsToTxnDecide,
	refuse: addPartitionsToTxnRefuse,
}

func addPartitionsToTxnDecide(s *Session, r *request) error {
	req := *r.req.(*kmsg.AddPartitionsToTxnRequest)
	ids := []string{req.TransactionalID}
	for _, tx := range req.Transactions {
		ids = append(ids, tx.TransactionalID)
	}
	for _, id := range ids {
		if rules.IsOwnTransactionalID(&id) {
			// 22_init_producer_id.go says why.
			addPartitionsToTxnRefuse(s, r, rules.ErrTxnIDAuthorization, rules.OwnTransactionalIDMessage(id))
			return nil
		}
	}
	var names []string
	for _, t := range req.Topics {
		names = append(names, t.Topic)
	}
	for _, tx := range req.Transactions {
		for _, t := range tx.Topics {
			names = append(names, t.Topic)
		}
	}
	refuse := map[string]string{}
	for _, n := range names {
		switch {
		case rules.IsOwnTopic(n):
			refuse[n] = fmt.Sprintf("offsetgate: %s is offsetgate's own topic; no transaction may write to it", n)
		case s.mark(n) != nil:
			refuse[n] = fmt.Sprintf("offsetgate: %s is a mirror topic; transactions may not write to it (only offsetgate's produce-at-offset path does)", n)
		}
	}
	if len(refuse) == 0 {
		return nil
	}
	code := func(topic string) int16 {
		if _, bad := refuse[topic]; bad {
			return rules.ErrTopicAuthorization
		}
		return rules.ErrNotAttempted
	}
	resp := kmsg.NewPtrAddPartitionsToTxnResponse()
	for _, t := range req.Topics {
		rt := kmsg.NewAddPartitionsToTxnResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p, code(t.Topic)
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	for _, tx := range req.Transactions {
		rtx := kmsg.NewAddPartitionsToTxnResponseTransaction()
		rtx.TransactionalID = tx.TransactionalID
		for _, t := range tx.Topics {
			rt := kmsg.NewAddPartitionsToTxnResponseTransactionTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewAddPartitionsToTxnResponseTransactionTopicPartition()
				rp.Partition, rp.ErrorCode = p, code(t.Topic)
				rt.Partitions = append(rt.Partitions, rp)
			}
			rtx.Topics = append(rtx.Topics, rt)
		}
		resp.Transactions = append(resp.Transactions, rtx)
	}
	r.answerWith(resp)
	return nil
}
