// Package catalog is what offsetgate knows about the destination's topics: the id of each
// topic name, and which topics are mirror topics. Marks live in the destination itself, in
// offsetgate's own compacted topic __offsetgate_marks keyed by topic id, so they survive
// restarts and a second offsetgate instance with no local state reads the same marks. Every
// instance follows the topic, so a mark stored or removed by one is seen by all.
//
// Lookups are cheap and safe from event loops; everything that talks to the destination
// (Refresh, Store, the follower) blocks and must run off the loops.
package catalog

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"offsetgate/rules"
)

// MarksTopic holds the marks.
const MarksTopic = rules.OwnTopicPrefix + "marks"

// TopicID is a Kafka topic id.
type TopicID = [16]byte

// Topic is what is known of one topic.
type Topic struct {
	Name string
	ID   TopicID
	Mark *rules.Mark // nil: not a mirror topic
}

// Catalog caches topic ids and marks.
type Catalog struct {
	cl  *kgo.Client
	log *zap.Logger

	mu     sync.RWMutex
	byName map[string]TopicID // confirmed: learned after the marks were read up to date
	byID   map[TopicID]string
	marks  map[TopicID]*rules.Mark
	// moves are the consumer groups' live moves (moves.go), keyed by group.
	moves    map[string]*Move
	anyMoves atomic.Bool
	// intents are the mirror topics being created, by name (creating.go).
	intents map[string]map[string]intent // by name, then key
	live    atomic.Int64                 // marks, live or removed: read on every Fetch, so without the lock
	// switching counts the marks that change what source connections do with a topic's
	// writes (sealed or removed): read on every Produce of a source connection.
	switching atomic.Int64
	promoted  atomic.Int64 // marks removed: topics promoted
	// applied is the offset after the last marks record applied: Sync waits for it to reach
	// the marks topic's end.
	applied atomic.Int64

	ready chan struct{}
}

// Open connects to the destination with offsetgate's own client options, makes sure the
// marks topic exists, and reads every mark. Run must then be started to follow changes.
func Open(ctx context.Context, opts []kgo.Opt, log *zap.Logger) (*Catalog, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.ConsumeTopics(MarksTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(500 * time.Millisecond),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ClientID("offsetgate-catalog"),
	}, opts...)...)
	if err != nil {
		return nil, err
	}
	c := &Catalog{cl: cl, log: log, byName: map[string]TopicID{}, byID: map[TopicID]string{},
		marks: map[TopicID]*rules.Mark{}, moves: map[string]*Move{}, intents: map[string]map[string]intent{}, ready: make(chan struct{})}
	if err := c.ensureTopic(ctx); err != nil {
		cl.Close()
		return nil, err
	}
	return c, nil
}

func (c *Catalog) ensureTopic(ctx context.Context) error {
	adm := kadm.NewClient(c.cl)
	brokers, err := adm.ListBrokers(ctx)
	if err != nil {
		return fmt.Errorf("catalog: listing destination brokers: %w", err)
	}
	rf := int16(len(brokers))
	if rf > 3 {
		rf = 3
	}
	resp, err := adm.CreateTopic(ctx, 1, rf, map[string]*string{
		"cleanup.policy": kmsg.StringPtr("compact"),
		// Set on the topic, so broker defaults cannot change them: an unclean election would
		// lose marks.
		"unclean.leader.election.enable": kmsg.StringPtr("false"),
	}, MarksTopic)
	if errors.Is(err, kerr.TopicAlreadyExists) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("catalog: creating %s: %w", MarksTopic, err)
	}
	if resp.Err != nil && !errors.Is(resp.Err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("catalog: creating %s: %w (%s)", MarksTopic, resp.Err, resp.ErrMessage)
	}
	return nil
}

// Run follows the marks topic until ctx ends. Ready is closed once every mark that existed at
// start has been read.
func (c *Catalog) Run(ctx context.Context) {
	defer c.cl.Close()
	adm := kadm.NewClient(c.cl)
	var end int64 = -1
	for end < 0 {
		offs, err := adm.ListEndOffsets(ctx, MarksTopic)
		if err == nil {
			if o, ok := offs.Lookup(MarksTopic, 0); ok && o.Err == nil {
				end = o.Offset
				break
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
	if end == 0 {
		close(c.ready)
	}
	readyClosed := end == 0
	for {
		fs := c.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return
		}
		fs.EachError(func(t string, p int32, err error) {
			c.log.Warn("reading marks", zap.String("topic", t), zap.Error(err))
		})
		fs.EachRecord(func(r *kgo.Record) {
			c.apply(r)
			c.applied.Store(r.Offset + 1)
			if !readyClosed && r.Offset+1 >= end {
				readyClosed = true
				close(c.ready)
			}
		})
	}
}

// Ready is closed once the marks that existed at start are loaded.
func (c *Catalog) Ready() <-chan struct{} { return c.ready }

func (c *Catalog) apply(r *kgo.Record) {
	if strings.HasPrefix(string(r.Key), movePrefix) {
		c.applyMove(r)
		return
	}
	if strings.HasPrefix(string(r.Key), IntentKeyPrefix) {
		c.applyIntent(r)
		return
	}
	id, err := parseID(string(r.Key))
	if err != nil {
		c.log.Warn("ignoring a marks record with a bad key", zap.ByteString("key", r.Key))
		return
	}
	if r.Value == nil {
		c.mu.Lock()
		delete(c.marks, id)
		c.count()
		c.mu.Unlock()
		return
	}
	var m rules.Mark
	if err := json.Unmarshal(r.Value, &m); err != nil {
		// Fail closed: a mark that cannot be read still makes its topic a mirror topic, with no
		// source settings (the strictest rules), rather than an ordinary one anyone may write.
		c.log.Error("unreadable mark: treating the topic as a mirror topic with no source settings", zap.String("topic_id", string(r.Key)), zap.Error(err))
		m = rules.Mark{Version: -1, TopicID: string(r.Key)}
	}
	if m.Version > rules.MarkVersion {
		c.log.Error("a mark written by a newer offsetgate: treating the topic as a mirror topic, unchanged", zap.Int("version", m.Version))
	}
	c.mu.Lock()
	c.marks[id] = &m
	c.count()
	c.mu.Unlock()
}

// count recounts the marks, live or removed (a promoted topic keeps its source view); the
// caller holds the write lock.
func (c *Catalog) count() {
	c.live.Store(int64(len(c.marks)))
	n, removed := int64(0), int64(0)
	for _, m := range c.marks {
		if m.Removed || m.Sealed {
			n++
		}
		if m.Removed {
			removed++
		}
	}
	c.switching.Store(n)
	c.promoted.Store(removed)
}

// Promotions counts the topics promoted (it only grows). It takes no lock.
func (c *Catalog) Promotions() int64 { return c.promoted.Load() }

// HasSwitching reports, without a lock, whether any topic is sealed for its promotion or
// promoted: only then does a source connection read its Produce requests.
func (c *Catalog) HasSwitching() bool { return c.switching.Load() > 0 }

// Promotion says what a source connection does with writes to a topic: sealed (refused,
// retriable, while its promotion waits for the mirror) or promoted (carried to the
// destination). Both false: the source's topic.
func (c *Catalog) Promotion(name string) (t Topic, sealed, promoted bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	id, ok := c.byName[name]
	m := c.marks[id]
	if ok && m == nil {
		return Topic{Name: name}, false, false // the destination's topic of that name has no mark
	}
	if !ok {
		// A source-only instance may not have learned the name: the mark names its topic.
		// (The carrier checks the destination's id before it writes.)
		for mid, mm := range c.marks {
			if mm.Topic == name && (m == nil || !mm.Removed) {
				id, m = mid, mm
			}
		}
		if m == nil {
			return Topic{Name: name}, false, false
		}
	}
	t = Topic{Name: strings.Clone(name), ID: id, Mark: live(m)}
	return t, m.Sealed && !m.Removed, m.Removed
}

// HasMirrors reports whether any mirror topic exists or ever existed (promoted topics keep
// their source view). It takes no lock.
func (c *Catalog) HasMirrors() bool { return c.live.Load() > 0 }

func parseID(s string) (TopicID, error) {
	var id TopicID
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 16 {
		return id, fmt.Errorf("bad topic id %q", s)
	}
	copy(id[:], b)
	return id, nil
}

// IDString is a topic id as marks store it.
func IDString(id TopicID) string { return hex.EncodeToString(id[:]) }

// Observe notes a topic name and id seen in an answer that passed through (a client's
// Metadata). It confirms nothing new: a name whose id is not confirmed yet stays unknown to
// ByName, so the rules look it up with Refresh, which reads the marks up to date first. A
// client's answer could otherwise make a topic known before its mark was read (a mirror topic
// created through another instance a moment ago), and it would be judged as an ordinary
// topic. Safe from event loops.
func (c *Catalog) Observe(name string, id TopicID) {
	if name == "" || id == (TopicID{}) {
		return
	}
	c.mu.RLock()
	same := c.byName[name] == id
	c.mu.RUnlock()
	if same {
		return
	}
	// A name known under another id was deleted and recreated: forget the old id, so the
	// new one is looked up before anything is judged by that name.
	c.mu.Lock()
	if old, ok := c.byName[name]; ok && old != id {
		delete(c.byName, name)
		delete(c.byID, old)
	}
	c.mu.Unlock()
}

// learn confirms a topic name and id: the marks were read up to date after the destination
// showed the topic (Refresh), or this instance stored the topic's mark itself.
func (c *Catalog) learn(name string, id TopicID) {
	if name == "" || id == (TopicID{}) {
		return
	}
	// Names may alias a network buffer (kmsg's unsafe decoding): keep a copy.
	name = strings.Clone(name)
	c.mu.Lock()
	if old, ok := c.byName[name]; ok {
		delete(c.byID, old)
	}
	c.byName[name] = id
	c.byID[id] = name
	c.mu.Unlock()
}

// Sync returns once every mark stored before the call has been applied here. It blocks.
func (c *Catalog) Sync(ctx context.Context) error {
	offs, err := kadm.NewClient(c.cl).ListEndOffsets(ctx, MarksTopic)
	if err != nil {
		return fmt.Errorf("catalog: end of %s: %w", MarksTopic, err)
	}
	o, ok := offs.Lookup(MarksTopic, 0)
	if !ok || o.Err != nil {
		return fmt.Errorf("catalog: end of %s: %v", MarksTopic, o.Err)
	}
	wait := time.NewTimer(10 * time.Second)
	defer wait.Stop()
	for c.applied.Load() < o.Offset {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wait.C:
			return fmt.Errorf("catalog: the marks were not read up to offset %d within 10s (read up to %d)", o.Offset, c.applied.Load())
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// ByName looks a topic up by name; ok is false when its id is not known yet.
func (c *Catalog) ByName(name string) (Topic, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	id, ok := c.byName[name]
	if !ok {
		return Topic{Name: name}, false
	}
	// The catalog's own copy of the name: the caller's may point into a request's buffer.
	return Topic{Name: c.byID[id], ID: id, Mark: live(c.marks[id])}, true
}

// ByID looks a topic up by id; ok is false when its name is not known yet.
func (c *Catalog) ByID(id TopicID) (Topic, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	name, ok := c.byID[id]
	return Topic{Name: name, ID: id, Mark: live(c.marks[id])}, ok
}

func live(m *rules.Mark) *rules.Mark {
	if m == nil || m.Removed {
		return nil
	}
	return m
}

// Removed reports whether a topic was a mirror topic and was promoted (its mark removed).
func (c *Catalog) Removed(id TopicID) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	m := c.marks[id]
	return m != nil && m.Removed
}

// Marks lists the live marks.
func (c *Catalog) Marks() []rules.Mark {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []rules.Mark
	for _, m := range c.marks {
		if !m.Removed {
			out = append(out, *m)
		}
	}
	return out
}

// Mirrors lists the mirror topics whose names are known, and the promoted ones (with a nil
// Mark): both have a source view.
func (c *Catalog) Mirrors() []Topic {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []Topic
	for id, m := range c.marks {
		if name, ok := c.byID[id]; ok {
			out = append(out, Topic{Name: name, ID: id, Mark: live(m)})
		}
	}
	return out
}

// Refresh asks the destination for the ids of these topics (all topics when names is empty),
// reads the marks up to date, and only then confirms what the destination showed: a topic
// created as a mirror topic before the call is known with its mark. A topic without a mark
// whose name an instance is creating as a mirror topic (creating.go) is held back: confirmed
// only once its mark is read or the intent is withdrawn or runs out. Refresh waits for the
// names it was given (at most as long as ctx lasts); asked for all topics, it confirms the
// others and leaves those unconfirmed (an instance starting while a creator that stopped
// mid-creation left an intent must not wait for it). It blocks.
func (c *Catalog) Refresh(ctx context.Context, names []string) error {
	found, err := TopicIDs(ctx, c.Request, names)
	if err != nil {
		return err
	}
	var held map[string]string
	for {
		if err := c.Sync(ctx); err != nil {
			if len(held) > 0 && ctx.Err() != nil {
				// The wait ran out while the marks were read again: what was waited for is
				// the answer, not the read it interrupted.
				return errHeldBack(held, ctx.Err())
			}
			return err
		}
		c.mu.RLock()
		held = c.heldBack(found, time.Now())
		c.mu.RUnlock()
		if len(held) == 0 || len(names) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return errHeldBack(held, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	for name := range held {
		delete(found, name)
	}
	for name, id := range found {
		c.learn(name, id)
	}
	return nil
}

// TopicIDs asks the destination (through send) for the ids of these topics, all topics when
// names is empty; a topic the destination does not show is left out.
func TopicIDs(ctx context.Context, send func(context.Context, kmsg.Request) (kmsg.Response, error), names []string) (map[string]TopicID, error) {
	req := kmsg.NewPtrMetadataRequest()
	if len(names) == 0 {
		req.Topics = nil
	} else {
		for _, n := range names {
			t := kmsg.NewMetadataRequestTopic()
			t.Topic = kmsg.StringPtr(n)
			req.Topics = append(req.Topics, t)
		}
	}
	kr, err := send(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("catalog: metadata: %w", err)
	}
	ids := map[string]TopicID{}
	for _, t := range kr.(*kmsg.MetadataResponse).Topics {
		if t.Topic != nil && t.ErrorCode == 0 {
			ids[*t.Topic] = t.TopicID
		}
	}
	return ids, nil
}

// Store writes a mark (or its removal) durably and applies it here at once.
func (c *Catalog) Store(ctx context.Context, id TopicID, m rules.Mark) error {
	m.Version = rules.MarkVersion
	m.TopicID = IDString(id)
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	r := &kgo.Record{Topic: MarksTopic, Key: []byte(m.TopicID), Value: b}
	if err := c.cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		return fmt.Errorf("catalog: storing the mark of %s: %w", m.Topic, err)
	}
	c.mu.Lock()
	c.marks[id] = &m
	c.count()
	c.mu.Unlock()
	c.learn(m.Topic, id)
	return nil
}

// Request sends a request of offsetgate's own to the destination.
func (c *Catalog) Request(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	return c.cl.Request(ctx, req)
}
