package session

import (
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Every key kmsg knows is classified (or excluded), and a class is backed by what offsetgate
// does: a judged key has a request handler, a translated one a request or response handler, a
// passed one no request handler. The keys that can write, delete or alter a topic are judged.
func TestEveryKeyClassified(t *testing.T) {
	for k := int16(0); k <= kmsg.MaxKey+10; k++ {
		name := kmsg.NameForKey(k)
		_, ex := excluded[kmsg.Key(k)]
		rule, cl := apiRules[kmsg.Key(k)]
		_, al := allowed[kmsg.Key(k)]
		if kmsg.RequestForKey(k) == nil {
			if cl {
				t.Errorf("key %d is classified but kmsg does not know it", k)
			}
			continue
		}
		switch {
		case ex && cl:
			t.Errorf("key %d (%s) is both excluded and classified", k, name)
		case !ex && !cl:
			t.Errorf("kmsg knows key %d (%s), which apis.go does not classify: decide whether it can write, delete or alter a topic", k, name)
		case cl && !al:
			t.Errorf("key %d (%s) is classified but has no versions in versions.go", k, name)
		}
		if !cl {
			continue
		}
		if rule.why == "" {
			t.Errorf("key %d (%s) is classified without a reason", k, name)
		}
		h := handlerFor(k)
		switch rule.class {
		case judged:
			if h == nil || h.decide == nil {
				t.Errorf("key %d (%s) is judged but has no request handler", k, name)
			}
		case translated:
			if h == nil || (h.decide == nil && h.response == nil) {
				t.Errorf("key %d (%s) is translated but has no handler", k, name)
			}
		case passed:
			if h != nil && h.decide != nil {
				t.Errorf("key %d (%s) is passed but has a request handler: classify it as judged or translated", k, name)
			}
		default:
			t.Errorf("key %d (%s): unknown class %d", k, name, rule.class)
		}
	}
	// The apis that can write, delete or alter a topic or offsetgate's own state.
	for _, k := range []int16{0, 19, 20, 21, 24, 33, 37, 43, 44, 78} {
		if apiRules[kmsg.Key(k)].class != judged {
			t.Errorf("key %d (%s) can change a topic and must be judged", k, kmsg.NameForKey(k))
		}
	}
	// Commits change where a group resumes: they are translated, never passed.
	for _, k := range []int16{8, 28} {
		if apiRules[kmsg.Key(k)].class != translated {
			t.Errorf("key %d (%s) must be translated", k, kmsg.NameForKey(k))
		}
	}
}

// namesTxnID reports whether a kmsg message type carries a transactional id anywhere.
func namesTxnID(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return false
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		switch f.Name {
		case "TransactionalID", "TransactionID", "TransactionalIDs":
			return true
		}
		if namesTxnID(f.Type) {
			return true
		}
	}
	return false
}

// offsetgate's own transactional ids fence its ledger appends when a client initializes them:
// every api whose request names a transactional id is judged (its handler refuses them), and
// every one whose answer lists them has a handler that can leave them out. A new api carrying
// transactional ids fails here until it is handled.
func TestTransactionalIDsHandled(t *testing.T) {
	seen := 0
	for k := int16(0); k <= kmsg.MaxKey; k++ {
		req := kmsg.RequestForKey(k)
		if req == nil {
			continue
		}
		if _, ex := excluded[kmsg.Key(k)]; ex {
			continue
		}
		h := handlerFor(k)
		if namesTxnID(reflect.TypeOf(req)) {
			seen++
			if h == nil || h.decide == nil {
				t.Errorf("key %d (%s) names transactional ids but has no request handler to refuse offsetgate's own", k, kmsg.NameForKey(k))
			}
		}
		if namesTxnID(reflect.TypeOf(req.ResponseKind())) && !namesTxnID(reflect.TypeOf(req)) {
			seen++
			if h == nil || h.response == nil {
				t.Errorf("key %d (%s) answers with transactional ids but has no response handler to leave offsetgate's own out", k, kmsg.NameForKey(k))
			}
		}
	}
	if seen < 7 {
		t.Fatalf("%d apis carry transactional ids; Produce, InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit, DescribeTransactions and ListTransactions do", seen)
	}
}
