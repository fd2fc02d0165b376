package session

// EndTxn (key 26).
//
// Markers land only on partitions added to the transaction, which were judged, so it passes,
// except for offsetgate's own transactional ids (22_init_producer_id.go says why), answered
// TRANSACTIONAL_ID_AUTHORIZATION_FAILED.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/rules"
)

var endTxnHandler = handler{decide: endTxnDecide}

func endTxnDecide(_ *Session, r *request) error {
	req := r.req.(*kmsg.EndTxnRequest)
	if !rules.IsOwnTransactionalID(&req.TransactionalID) {
		return nil
	}
	resp := kmsg.NewPtrEndTxnResponse()
	resp.ErrorCode, resp.ProducerID, resp.ProducerEpoch = rules.ErrTxnIDAuthorization, -1, -1
	r.answerWith(resp)
	return nil
}
