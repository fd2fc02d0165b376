package catalog

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"offsetgate/internal/kfaketest"
	"offsetgate/rules"
)

func empty() *Catalog {
	return &Catalog{log: zap.NewNop(), byName: map[string]TopicID{}, byID: map[TopicID]string{},
		marks: map[TopicID]*rules.Mark{}, intents: map[string]map[string]intent{}, ready: make(chan struct{})}
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

// A creation intent holds its name back: a confirmed name without a mark is forgotten, and a
// lookup finding the name on the destination holds it back while the intent lives and the
// topic has no mark; a mark, a withdrawal or the intent running out lets it through. An
// unreadable intent holds the name back too.
func TestCreationIntent(t *testing.T) {
	c := empty()
	now := time.Now()
	intentRecord := func(name string, until time.Time) *kgo.Record {
		b, _ := json.Marshal(intent{By: "og-1", Until: until})
		return &kgo.Record{Key: []byte(IntentKeyPrefix + name + "/t1"), Value: b}
	}
	c.learn("orders", id1)
	c.apply(intentRecord("orders", now.Add(time.Minute)))
	if _, ok := c.ByName("orders"); ok {
		t.Fatal("a name confirmed without a mark was kept while a mirror topic of that name is being created")
	}
	if !creatingNow(c, "orders") || creatingNow(c, "other") {
		t.Fatal("Creating does not follow the intents")
	}
	found := map[string]TopicID{"orders": id1, "other": {7}}
	if held := c.heldBack(found, now); len(held) != 1 || held["orders"] != "og-1" {
		t.Fatalf("held back: %v", held)
	}
	if held := c.heldBack(found, now.Add(2*time.Minute)); len(held) != 0 {
		t.Fatalf("an intent that ran out still holds back: %v", held)
	}
	// The mark read: the topic is a mirror topic, nothing held back.
	mark, _ := json.Marshal(rules.Mark{Version: 1, Topic: "orders"})
	c.apply(&kgo.Record{Key: []byte(IDString(id1)), Value: mark})
	if held := c.heldBack(found, now); len(held) != 0 {
		t.Fatalf("a marked topic held back: %v", held)
	}
	// A marked name is not forgotten by a later intent of the same name.
	c.learn("orders", id1)
	c.apply(intentRecord("orders", now.Add(time.Minute)))
	if tp, ok := c.ByName("orders"); !ok || tp.Mark == nil {
		t.Fatal("an intent made a marked topic's name unknown")
	}
	// Withdrawn: a topic of that name without a mark is an ordinary one again. Two creators
	// of one name (one of them fails) each withdraw their own intent: the name stays held
	// while the other's lives.
	c.apply(&kgo.Record{Key: []byte(IntentKeyPrefix + "other/t1")})
	c.apply(intentRecord("other", now.Add(time.Minute)))
	b, _ := json.Marshal(intent{By: "og-2", Until: now.Add(time.Minute)})
	c.apply(&kgo.Record{Key: []byte(IntentKeyPrefix + "other/t2"), Value: b})
	c.apply(&kgo.Record{Key: []byte(IntentKeyPrefix + "other/t1")})
	if !creatingNow(c, "other") {
		t.Fatal("one creator's withdrawal let the name through while another's intent lives")
	}
	c.apply(&kgo.Record{Key: []byte(IntentKeyPrefix + "other/t2")})
	if creatingNow(c, "other") || len(c.heldBack(found, now)) != 0 {
		t.Fatal("a withdrawn intent still holds its name back")
	}
	c.apply(&kgo.Record{Key: []byte(IntentKeyPrefix + "no-token"), Value: b})
	if creatingNow(c, "no-token") {
		t.Fatal("an intent key without a token was read")
	}
	c.apply(&kgo.Record{Key: []byte(IntentKeyPrefix + "other/t3"), Value: []byte("{no")})
	if !creatingNow(c, "other") {
		t.Fatal("an unreadable intent let its name through")
	}
	// Readers of the marks topic tell marks from the rest.
	if !IsMarkKey([]byte(IDString(id1))) || IsMarkKey([]byte(IntentKeyPrefix+"orders")) || IsMarkKey([]byte(MoveKeyPrefix+"g")) {
		t.Fatal("IsMarkKey")
	}
}

// Refresh against a destination: a name held back by an intent is waited for when asked by
// name (an error once ctx ends, saying what it waited for) and left unconfirmed when all topics
// are asked (an instance starting must not wait); a second instance's withdrawal read from the
// marks topic lets it through.
func TestRefreshHoldsBackCreatingNames(t *testing.T) {
	kc, admin := kfaketest.Cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open := func() *Catalog {
		c, err := Open(ctx, []kgo.Opt{kgo.SeedBrokers(kc.ListenAddrs()...)}, zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		rctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); c.Run(rctx) }()
		t.Cleanup(func() { stop(); <-done })
		<-c.Ready()
		return c
	}
	creator, other := open(), open()
	key, err := creator.StoreIntent(ctx, "orders", "og-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kadm.NewClient(admin).CreateTopic(ctx, 1, 1, nil, "orders"); err != nil {
		t.Fatal(err)
	}
	// Long enough for the lookup's first reads on a loaded machine; the wait ends it either way.
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	err = other.Refresh(short, []string{"orders"})
	cancelShort()
	if err == nil || !strings.Contains(err.Error(), "orders (by og-1)") {
		t.Fatalf("a lookup of a name being created: %v", err)
	}
	if err := other.Refresh(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := other.ByName("orders"); ok {
		t.Fatal("a lookup of every topic confirmed a name being created")
	}
	errs := make(chan error, 1)
	go func() { errs <- other.Refresh(ctx, []string{"orders"}) }()
	time.Sleep(100 * time.Millisecond)
	if err := creator.WithdrawIntent(ctx, key); err != nil {
		t.Fatal(err)
	}
	if err := <-errs; err != nil {
		t.Fatalf("the lookup waiting for the withdrawal: %v", err)
	}
	if tp, ok := other.ByName("orders"); !ok || tp.Mark != nil {
		t.Fatalf("after the withdrawal: %+v %v", tp, ok)
	}
}

func creatingNow(c *Catalog, name string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	_, ok := c.creating(name, time.Now())
	return ok
}
