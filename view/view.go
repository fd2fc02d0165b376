// Package view is the source view of mirror partitions: what consumers that move from the
// source to the destination through offsetgate must keep seeing. It indexes a partition's ledger
// entries (batches and fillers) by destination offset and answers the read side's questions:
// source offset ↔ destination offset, the source header fields of the batch at a destination
// offset, the epochs to present, and where a source leader epoch ends.
//
// An index is built the first time a session meets the partition (off the event loops), kept
// current by the writer of the same process, and refreshed from the ledger's tail when a
// destination answer shows a batch it does not know yet.
package view

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"offsetgate/catalog"
	"offsetgate/ledger"
	"offsetgate/rawread"
)

type key struct {
	id        catalog.TopicID
	partition int32
}

// View holds the indexes of the mirror partitions this process has met.
type View struct {
	ledger *ledger.Ledger
	cl     *kgo.Client
	log    *zap.Logger

	mu     sync.Mutex
	parts  map[key]*Partition
	topics map[catalog.TopicID]bool // topics loaded whole
	later  map[key]bool             // partitions being loaded in the background (LoadLater)

	pages *pager // full pages of every partition's index, within the memory budget

	ctx context.Context // ends background loads
	wg  sync.WaitGroup
}

// DefaultMemory is the default budget of a view's cached index pages: about 1.7 million
// entries of batches without kept bytes (compacted or control batches keep theirs).
const DefaultMemory = 256 << 20

// New makes a view that reads ledgers with offsetgate's own client; background loads stop
// when ctx ends (Wait waits for them). memory bounds the bytes of index pages kept in memory
// besides the page each partition is filling (0: DefaultMemory; negative: unbounded); pages
// beyond it are read back from the ledger when a reader needs them.
func New(ctx context.Context, l *ledger.Ledger, cl *kgo.Client, log *zap.Logger, memory int64) *View {
	if memory == 0 {
		memory = DefaultMemory
	}
	v := &View{ledger: l, cl: cl, log: log, parts: map[key]*Partition{}, topics: map[catalog.TopicID]bool{},
		later: map[key]bool{}, ctx: ctx}
	v.pages = newPager(memory, func(ctx context.Context, p *Partition, pg pageRef) ([]Entry, error) {
		return readPage(ctx, func(ctx context.Context, from, to int64, fn func(int64, ledger.Entry) error) error {
			_, err := v.ledger.ScanWith(ctx, &p.leader, p.id, p.partition, from, to, fn)
			return err
		}, pg)
	})
	return v
}

// Stats reports what the index page cache holds.
func (v *View) Stats() Stats { return v.pages.stats() }

// Prefetch loads mirror topics' views in the background, one topic after the other, so that
// the first requests for them do not wait; requests that need a view before then load it
// themselves (a topic being loaded by both is read once: loads of a partition are serialized).
// One loader at a time keeps a destination with many mirror topics from being flooded at start.
func (v *View) Prefetch(ts []catalog.Topic) {
	v.wg.Add(1)
	go func() {
		defer v.wg.Done()
		start := time.Now()
		err := v.LoadTopics(v.ctx, ts)
		switch {
		case v.ctx.Err() != nil:
		case err != nil:
			v.log.Warn("source view: background load failed", zap.Error(err))
		default:
			v.log.Info("source views loaded", zap.Int("topics", len(ts)), zap.Duration("took", time.Since(start)))
		}
	}()
}

// loadParallel bounds the work of LoadTopics: how many topics are looked up at once, and,
// apart, how many partitions' ledgers are read at once. A destination with hundreds of mirror
// topics, or a topic of a thousand partitions, is loaded in seconds, not one ledger read after
// another (each is a few round trips to the destination).
const loadParallel = 16

// LoadTopics loads every partition of the topics not loaded yet, several at once. It returns
// one of the errors, after every topic was tried.
func (v *View) LoadTopics(ctx context.Context, ts []catalog.Topic) error {
	var (
		mu            sync.Mutex
		failed        error
		topics, reads errgroup.Group
	)
	// Two groups: a topic's task waits for slots of reads, which never wait for topics.
	topics.SetLimit(loadParallel)
	reads.SetLimit(loadParallel)
	for _, t := range ts {
		if v.TopicLoaded(t.ID) {
			continue
		}
		if ctx.Err() != nil {
			break
		}
		topics.Go(func() error {
			if err := v.loadTopic(ctx, t, &reads); err != nil {
				mu.Lock()
				failed = fmt.Errorf("%s: %w", t.Name, err)
				mu.Unlock()
			}
			return nil
		})
	}
	_ = topics.Wait()
	if failed == nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return failed
}

// LoadLater loads a partition in the background, once at a time: a partition added to a
// mirror topic after its view was loaded whole (the source grew), met in an answer that cannot
// wait for it. The client is told to retry, and finds it loaded.
func (v *View) LoadLater(t catalog.Topic, partition int32) {
	k := key{t.ID, partition}
	v.mu.Lock()
	if v.later[k] || v.ctx.Err() != nil {
		v.mu.Unlock()
		return
	}
	v.later[k] = true
	v.wg.Add(1)
	v.mu.Unlock()
	go func() {
		defer v.wg.Done()
		defer func() {
			v.mu.Lock()
			delete(v.later, k)
			v.mu.Unlock()
		}()
		if _, err := v.Load(v.ctx, t, partition); err != nil && v.ctx.Err() == nil {
			v.log.Warn("source view: loading a partition added to the topic", zap.String("topic", t.Name),
				zap.Int32("partition", partition), zap.Error(err))
		}
	}()
}

// Wait waits for the background loads (after their context ended).
func (v *View) Wait() { v.wg.Wait() }

func (v *View) part(id catalog.TopicID, partition int32) *Partition {
	v.mu.Lock()
	defer v.mu.Unlock()
	k := key{id, partition}
	p := v.parts[k]
	if p == nil {
		p = &Partition{pages: v.pages, id: catalog.IDString(id), partition: partition}
		v.parts[k] = p
	}
	return p
}

// Get returns a partition's index when it is loaded, else nil. It never blocks on I/O.
func (v *View) Get(id catalog.TopicID, partition int32) *Partition {
	v.mu.Lock()
	p := v.parts[key{id, partition}]
	v.mu.Unlock()
	if p == nil || !p.loaded.Load() {
		return nil
	}
	return p
}

// Load reads a partition's ledger the first time, and its tail when the index was marked
// stale. It blocks: callers run it off the event loops.
func (v *View) Load(ctx context.Context, t catalog.Topic, partition int32) (*Partition, error) {
	return v.load(ctx, t, partition, false)
}

// load is Load; ensured says the caller already read the partition count and made sure the
// ledger topic exists (LoadTopic, once for all partitions).
func (v *View) load(ctx context.Context, t catalog.Topic, partition int32, ensured bool) (*Partition, error) {
	p := v.part(t.ID, partition)
	p.loadMu.Lock()
	defer p.loadMu.Unlock()
	if p.loaded.Load() && !p.stale.Load() {
		return p, nil
	}
	p.stale.Store(false)
	id := catalog.IDString(t.ID)
	start := time.Now()
	if !p.loaded.Load() && !ensured {
		count, err := v.partitions(ctx, t.Name)
		if err != nil {
			return nil, err
		}
		if err := v.ledger.Ensure(ctx, id, count); err != nil {
			return nil, err
		}
	}
	ensureTook := time.Since(start)
	p.mu.RLock()
	from := p.ledgerNext
	p.mu.RUnlock()
	n := 0
	next, err := v.ledger.Scan(ctx, id, partition, from, -1, func(off int64, e ledger.Entry) error {
		n++
		if !p.addAt(off, e) {
			return errGap
		}
		return nil
	})
	v.log.Debug("source view read", zap.String("topic", t.Name), zap.Int32("partition", partition),
		zap.Duration("ensure", ensureTook), zap.Duration("total", time.Since(start)), zap.Int("entries", n))
	if errors.Is(err, errGap) {
		// Only the writer of this process adds entries besides this read, and it hands them
		// over in ledger order after they landed: the read is behind what it added, never
		// ahead, unless the ledger was trimmed past where the index read to (the entries
		// dropped describe what D's retention removed).
		next, err = v.rebuild(ctx, p, t, partition, from)
		if err != nil {
			p.stale.Store(true)
			return nil, err
		}
		p.stale.Store(false)
	}
	if err != nil {
		p.stale.Store(true)
		return nil, fmt.Errorf("source view of %s[%d]: %w", t.Name, partition, err)
	}
	p.mu.Lock()
	// Never back: the writer may have handed over entries past what this read saw.
	p.ledgerNext = max(p.ledgerNext, next)
	p.mu.Unlock()
	if !p.loaded.Swap(true) {
		v.log.Info("source view loaded", zap.String("topic", t.Name), zap.Int32("partition", partition),
			zap.Int("entries", p.Len()))
	}
	return p, nil
}

// rebuild builds a partition's index again from its ledger's start, when the ledger was trimmed
// past the offset the index had read to (from): the index is built aside and swapped in, so
// readers never see it half built. It returns the ledger offset to read on from.
func (v *View) rebuild(ctx context.Context, p *Partition, t catalog.Topic, partition int32, from int64) (int64, error) {
	id := catalog.IDString(t.ID)
	start, err := rawread.ListOffset(ctx, v.cl, ledger.Topic(id), partition, rawread.Earliest)
	if err != nil {
		return 0, fmt.Errorf("source view of %s[%d]: %w", t.Name, partition, err)
	}
	if start <= from {
		return 0, fmt.Errorf("source view of %s[%d]: the ledger holds an entry past the index's end", t.Name, partition)
	}
	v.log.Info("source view: the ledger was trimmed past what the index read; building it again", zap.String("topic", t.Name),
		zap.Int32("partition", partition), zap.Int64("read_to", from), zap.Int64("ledger_start", start))
	// Built without the page cache (nothing of it is evicted until it is swapped in).
	aside := &Partition{id: p.id, partition: p.partition}
	next, err := v.ledger.Scan(ctx, id, partition, start, -1, func(off int64, e ledger.Entry) error {
		if !aside.addAt(off, e) {
			return errGap
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("source view of %s[%d]: building it again: %w", t.Name, partition, err)
	}
	p.mu.Lock()
	old := p.book
	p.spans, p.book, p.count, p.epochs, p.open, p.aborted = aside.spans, aside.book, aside.count, aside.epochs, aside.open, aside.aborted
	p.mu.Unlock()
	v.pages.forget(old)
	for i, pg := range aside.book {
		if i < len(aside.book)-1 || pg.n == pageSize {
			v.pages.admit(p, pg)
		}
	}
	return next, nil
}

// LoadTopic loads every partition of a mirror topic, several at once.
func (v *View) LoadTopic(ctx context.Context, t catalog.Topic) error {
	var reads errgroup.Group
	reads.SetLimit(loadParallel)
	return v.loadTopic(ctx, t, &reads)
}

// loadTopic is LoadTopic with its partitions' reads run by reads, which the topics loaded
// together share. It returns one of the errors, after every partition was tried.
func (v *View) loadTopic(ctx context.Context, t catalog.Topic, reads *errgroup.Group) error {
	count, err := v.partitions(ctx, t.Name)
	if err != nil {
		return err
	}
	if err := v.ledger.Ensure(ctx, catalog.IDString(t.ID), count); err != nil {
		return err
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed error
	)
	for i := int32(0); i < count && ctx.Err() == nil; i++ {
		wg.Add(1)
		reads.Go(func() error {
			defer wg.Done()
			if _, err := v.load(ctx, t, i, true); err != nil {
				mu.Lock()
				failed = err
				mu.Unlock()
			}
			return nil
		})
	}
	wg.Wait()
	if failed == nil {
		failed = ctx.Err() // stopped before every partition was read
	}
	if failed != nil {
		return failed
	}
	v.mu.Lock()
	v.topics[t.ID] = true
	v.mu.Unlock()
	return nil
}

// TopicLoaded reports whether every partition of a topic was loaded (by LoadTopic).
func (v *View) TopicLoaded(id catalog.TopicID) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.topics[id]
}

// Record hears the ledger entries the writer of this process appended (at ledger offsets from
// first on), so the index follows without reading them back. Entries of a partition not loaded
// yet are left to its load.
func (v *View) Record(id catalog.TopicID, partition int32, first int64, es []ledger.Entry) {
	p := v.Get(id, partition)
	if p == nil {
		return
	}
	p.handOver(first, es)
}

// errGap stops a ledger read whose entry starts past the index's end.
var errGap = errors.New("ledger entry past the index's end")

func (v *View) partitions(ctx context.Context, topic string) (int32, error) {
	// Shared with the lookups of concurrent loads and takeovers: a topic's partitions are
	// loaded many at a time, and every answer holds all of them.
	lp, err := v.ledger.Meta().Lookup(ctx, topic, 0)
	if err != nil {
		return 0, fmt.Errorf("source view: %w", err)
	}
	return lp.Partitions, nil
}
