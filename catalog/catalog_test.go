package catalog

import (
	"encoding/json"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"offsetgate/rules"
)

func empty() *Catalog {
	return &Catalog{log: zap.NewNop(), byName: map[string]TopicID{}, byID: map[TopicID]string{},
		marks: map[TopicID]*rules.Mark{}, ready: make(chan struct{})}
}

var id1 = TopicID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}

// A mark that cannot be read still makes its topic a mirror topic (fail closed); a tombstone
// removes it; a name seen in passing confirms nothing, learning it does.
func TestMarksFailClosed(t *testing.T) {
	c := empty()
	c.apply(&kgo.Record{Key: []byte(IDString(id1)), Value: []byte("{not json")})
	if tp, _ := c.ByID(id1); tp.Mark == nil {
		t.Fatal("an unreadable mark left its topic unmarked")
	}
	c.apply(&kgo.Record{Key: []byte(IDString(id1)), Value: nil})
	if tp, _ := c.ByID(id1); tp.Mark != nil {
		t.Fatal("a tombstone did not remove the mark")
	}
	c.Observe("orders", id1)
	if _, ok := c.ByName("orders"); ok {
		t.Fatal("a name seen in an answer passing through was taken as confirmed")
	}
	c.learn("orders", id1)
	if tp, ok := c.ByName("orders"); !ok || tp.ID != id1 {
		t.Fatalf("learned name: %+v %v", tp, ok)
	}
	// The same name under a new id (deleted and recreated) is forgotten until looked up.
	c.Observe("orders", TopicID{9})
	if _, ok := c.ByName("orders"); ok {
		t.Fatal("a name seen under a new id kept its old id")
	}
}

// Whatever a marks record holds, applying it never panics, and a record with a valid key and a
// value is a mirror topic afterwards.
func FuzzMarkRecord(f *testing.F) {
	good, _ := json.Marshal(rules.Mark{Version: 1, Topic: "orders", Source: map[string]string{"retention.ms": "1"}})
	f.Add([]byte(IDString(id1)), good)
	f.Add([]byte(IDString(id1)), []byte(`{"version":99,"removed":true}`))
	f.Add([]byte("zz"), []byte(`{}`))
	f.Add([]byte(IDString(id1)), []byte(nil))
	f.Fuzz(func(t *testing.T, key, value []byte) {
		c := empty()
		c.apply(&kgo.Record{Key: key, Value: value})
		id, err := parseID(string(key))
		if err != nil || value == nil {
			return
		}
		var m rules.Mark
		removed := json.Unmarshal(value, &m) == nil && m.Removed
		tp, _ := c.ByID(id)
		if tp.Mark == nil && !removed {
			t.Fatalf("record %q left topic %x unmarked", value, id)
		}
	})
}

// What source connections do with a topic's writes follows its mark: sealed, then promoted;
// a destination topic of the same name without a mark (the promoted one deleted and another
// made) is the source's again; an instance that never learned the name goes by the mark.
func TestPromotion(t *testing.T) {
	c := empty()
	id := TopicID{7}
	put := func(m rules.Mark) {
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		c.apply(&kgo.Record{Key: []byte(IDString(id)), Value: b})
	}
	check := func(what string, wantSealed, wantPromoted bool, wantSwitching int64) {
		t.Helper()
		_, sealed, promoted := c.Promotion("orders")
		if sealed != wantSealed || promoted != wantPromoted || c.switching.Load() != wantSwitching {
			t.Fatalf("%s: sealed %v promoted %v switching %d", what, sealed, promoted, c.switching.Load())
		}
	}
	put(rules.Mark{Version: 1, TopicID: IDString(id), Topic: "orders"})
	check("a mirror topic", false, false, 0)
	put(rules.Mark{Version: 1, TopicID: IDString(id), Topic: "orders", Sealed: true})
	check("sealed, name not learned", true, false, 1)
	if !c.HasSwitching() || c.Promotions() != 0 {
		t.Fatal("a seal is switching and no promotion")
	}
	put(rules.Mark{Version: 1, TopicID: IDString(id), Topic: "orders", Removed: true})
	check("promoted", false, true, 1)
	if c.Promotions() != 1 {
		t.Fatalf("promotions %d, want 1", c.Promotions())
	}
	c.learn("orders", TopicID{8}) // another destination topic of that name, no mark
	check("recreated as an ordinary topic", false, false, 1)
}
