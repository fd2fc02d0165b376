package catalog

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
)

// A mirror topic's mark is keyed by its topic id, which the destination assigns at creation: so
// the topic exists on D a moment before its mark does. A topic in that moment, judged by an
// instance that looks it up then, would be taken for an ordinary topic and written by anyone.
// So the creating instance first stores an intent keyed by the topic's name, and every
// instance holds back its judgment of a topic of that name without a mark (its lookups wait)
// until the intent is withdrawn (the mark stored, or the creation failed) or runs out.

// IntentKeyPrefix starts the key of a mirror topic's creation intent in the marks topic: the
// key is the prefix, the topic's name, "/" (never in a topic name) and a token of the creation,
// so that two instances creating the same name (one of them fails) each withdraw only their
// own intent.
const IntentKeyPrefix = "creating:"

// IntentTTL is how long an intent holds its name back when its creator never withdraws it (it
// stopped mid-creation): longer than a creation's own time bound.
const IntentTTL = 60 * time.Second

// intent is a mirror topic's creation in progress.
type intent struct {
	By    string    `json:"by"`
	Until time.Time `json:"until"`
}

// IsMarkKey reports whether a marks topic record's key is a topic's mark (a topic id), not a
// group's move or a creation intent.
func IsMarkKey(key []byte) bool {
	_, err := parseID(string(key))
	return err == nil
}

func (c *Catalog) applyIntent(r *kgo.Record) {
	key := string(r.Key[len(IntentKeyPrefix):])
	slash := strings.LastIndexByte(key, '/')
	if slash < 0 {
		c.log.Warn("ignoring a creation intent with a bad key", zap.ByteString("key", r.Key))
		return
	}
	name := key[:slash]
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.Value == nil {
		delete(c.intents[name], key)
		if len(c.intents[name]) == 0 {
			delete(c.intents, name)
		}
		return
	}
	var in intent
	if err := json.Unmarshal(r.Value, &in); err != nil {
		// Fail closed, for as long as an intent lasts.
		c.log.Error("unreadable mirror topic creation intent: holding the name back", zap.String("topic", name), zap.Error(err))
		in = intent{Until: time.Now().Add(IntentTTL)}
	}
	if c.intents[name] == nil {
		c.intents[name] = map[string]intent{}
	}
	c.intents[name][key] = in
	c.forgetUnmarked(name)
}

// forgetUnmarked drops a confirmed name whose topic has no mark, so that it is looked up again
// before anything is judged by it: the name may now belong to a mirror topic being created (the
// one confirmed was deleted). The caller holds the write lock.
func (c *Catalog) forgetUnmarked(name string) {
	if id, ok := c.byName[name]; ok && c.marks[id] == nil {
		delete(c.byName, name)
		delete(c.byID, id)
	}
}

// creating returns a live intent holding a name back. The caller holds the lock.
func (c *Catalog) creating(name string, now time.Time) (intent, bool) {
	for _, in := range c.intents[name] {
		if now.Before(in.Until) {
			return in, true
		}
	}
	return intent{}, false
}

// StoreIntent records durably that a mirror topic of this name is about to be created by who,
// and applies it here at once. The intent returned is withdrawn with WithdrawIntent once the
// mark is stored or the creation failed.
func (c *Catalog) StoreIntent(ctx context.Context, name, who string) (string, error) {
	var token [8]byte
	if _, err := rand.Read(token[:]); err != nil {
		return "", err
	}
	b, err := json.Marshal(intent{By: who, Until: time.Now().Add(IntentTTL).UTC()})
	if err != nil {
		return "", err
	}
	key := IntentKeyPrefix + name + "/" + hex.EncodeToString(token[:])
	r := &kgo.Record{Topic: MarksTopic, Key: []byte(key), Value: b}
	if err := c.cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		return "", fmt.Errorf("catalog: storing the creation intent of %s: %w", name, err)
	}
	c.applyIntent(r)
	return key, nil
}

// WithdrawIntent removes a creation intent (StoreIntent's key) durably and here at once.
func (c *Catalog) WithdrawIntent(ctx context.Context, key string) error {
	r := &kgo.Record{Topic: MarksTopic, Key: []byte(key)}
	if err := c.cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		return fmt.Errorf("catalog: withdrawing the creation intent %s: %w", key, err)
	}
	c.applyIntent(r)
	return nil
}

// heldBack returns, of the names a lookup found on the destination, those that have no mark
// and a live intent, each with who creates it. The caller holds the lock.
func (c *Catalog) heldBack(found map[string]TopicID, now time.Time) map[string]string {
	var out map[string]string
	for name, id := range found {
		if c.marks[id] != nil {
			continue
		}
		if in, ok := c.creating(name, now); ok {
			if out == nil {
				out = map[string]string{}
			}
			out[name] = in.By
		}
	}
	return out
}

// errHeldBack says which names a lookup waited for.
func errHeldBack(held map[string]string, err error) error {
	var names []string
	for name, by := range held {
		names = append(names, fmt.Sprintf("%s (by %s)", name, by))
	}
	sort.Strings(names)
	return fmt.Errorf("catalog: %s being created as mirror topics, their marks not stored yet: %w", strings.Join(names, ", "), err)
}
