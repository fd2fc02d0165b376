package session

// AddOffsetsToTxn (key 25).
//
// Adds a group's __consumer_offsets partition to a transaction, so it passes, except for
// offsetgate's own transactional ids (22_init_producer_id.go says why), answered
// TRANSACTIONAL_ID_AUTHORIZATION_FAILED.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/rules"
)

var addOffsetsToTxnHandler = handler{decide: addOffsetsToTxnDecide}

func addOffsetsToTxnDecide(_ *Session, r *request) error {
	req := r.req.(*kmsg.AddOffsetsToTxnRequest)
	if !rules.IsOwnTransactionalID(&req.TransactionalID) {
		return nil
	}
	resp := kmsg.NewPtrAddOffsetsToTxnResponse()
	resp.ErrorCode = rules.ErrTxnIDAuthorization
	r.answerWith(resp)
	return nil
}
