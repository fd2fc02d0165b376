package session

// ListTransactions (key 66).
//
// Read only; the answer leaves out offsetgate's own transactional ids (22_init_producer_id.go),
// which are its internals (one per ledger partition) and never a client's transaction.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/rules"
)

var listTransactionsHandler = handler{response: rewriteListTransactions}

func rewriteListTransactions(s *Session, version int16, body []byte) ([]byte, bool, error) {
	if s.cfg.Catalog == nil {
		return nil, false, nil
	}
	resp := kmsg.ListTransactionsResponse{Version: version}
	if err := resp.ReadFrom(body); err != nil {
		return nil, false, err
	}
	keep := resp.TransactionStates[:0]
	for _, st := range resp.TransactionStates {
		if !rules.IsOwnTransactionalID(&st.TransactionalID) {
			keep = append(keep, st)
		}
	}
	if len(keep) == len(resp.TransactionStates) {
		return nil, false, nil
	}
	resp.TransactionStates = keep
	return resp.AppendTo(nil), true, nil
}
