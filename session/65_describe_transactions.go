package session

// DescribeTransactions (key 65).
//
// Read only, but offsetgate's own transactional ids (22_init_producer_id.go) are its internals:
// they are answered TRANSACTIONAL_ID_AUTHORIZATION_FAILED by offsetgate, and the rest of the
// request goes to the destination.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/rules"
)

var describeTransactionsHandler = handler{decide: describeTransactionsDecide}

func describeTransactionsDecide(s *Session, r *request) error {
	req := *r.req.(*kmsg.DescribeTransactionsRequest)
	var own, keep []string
	for _, id := range req.TransactionalIDs {
		if rules.IsOwnTransactionalID(&id) {
			own = append(own, id)
		} else {
			keep = append(keep, id)
		}
	}
	if len(own) == 0 {
		return nil
	}
	splice := func(resp *kmsg.DescribeTransactionsResponse) {
		for _, id := range own {
			st := kmsg.NewDescribeTransactionsResponseTransactionState()
			st.TransactionalID, st.ErrorCode = id, rules.ErrTxnIDAuthorization
			st.ProducerID, st.ProducerEpoch = -1, -1
			resp.TransactionStates = append(resp.TransactionStates, st)
		}
	}
	if len(keep) == 0 {
		resp := kmsg.NewPtrDescribeTransactionsResponse()
		splice(resp)
		r.answerWith(resp)
		return nil
	}
	req.TransactionalIDs = keep
	forwardSpliced(s, r, req.AppendTo(nil), splice)
	return nil
}
