package session

// InitProducerId (key 22).
//
// Producer ids only, so it passes, except for offsetgate's own transactional ids
// (rules.IsOwnTransactionalID): each ledger partition is appended by the producer of such an
// id, and the ledger's fencing of a stale instance is built on that producer's epoch, which
// only a takeover may bump. (A bump alone does not stop the holder's appends: a partition
// learns a new epoch from an append, and clients never append to offsetgate's topics.) Those
// are answered TRANSACTIONAL_ID_AUTHORIZATION_FAILED and never reach the destination.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/rules"
)

var initProducerIDHandler = handler{decide: initProducerIDDecide}

func initProducerIDDecide(_ *Session, r *request) error {
	req := r.req.(*kmsg.InitProducerIDRequest)
	if !rules.IsOwnTransactionalID(req.TransactionalID) {
		return nil
	}
	resp := kmsg.NewPtrInitProducerIDResponse()
	resp.ErrorCode, resp.ProducerID, resp.ProducerEpoch = rules.ErrTxnIDAuthorization, -1, -1
	r.answerWith(resp)
	return nil
}
