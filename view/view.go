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
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"offsetgate/batch"
	"offsetgate/catalog"
	"offsetgate/ledger"
)

// Entry is one batch or filler of a mirror partition: source offsets [Src, Last] held at
// destination offsets [D, D+Count).
type Entry struct {
	D      int64
	Src    int64
	Last   int64
	Count  int32
	Filler bool

	// The source batch's header fields that differ on the destination (batches only): its
	// leader epoch, CRC, length, attributes, max timestamp, and the source producer's id,
	// epoch and base sequence (D holds offsetgate's own producer's).
	Epoch     int32
	CRC       uint32
	Len       int32
	Attrs     int16
	MaxTS     int64
	SrcPID    int64
	SrcPEpoch int16
	SrcSeq    int32

	// A control batch (a transaction marker): D holds fillers at its offsets, and Raw is the
	// source batch to serve in their place. Raw is also set for a gappy or empty batch
	// (compaction; D holds a dense copy) and for a batch the source's cleaner changed since.
	Control bool
	Raw     []byte
	Records int32 // the source batch's record count (0: not recorded)
	// Gone: the source's cleaner removed the whole batch since it was mirrored; nothing of it
	// is served.
	Gone bool
}

// end is the destination offset after the entry.
func (e *Entry) end() int64 { return e.D + int64(e.Count) }

type epochStart struct {
	epoch int32
	src   int64
}

// Partition is one mirror partition's index. Readers (sessions, on event loops) take a read
// lock for a few binary searches; the writer and refreshes append under the write lock.
type Partition struct {
	loadMu sync.Mutex // serializes loads and refreshes
	loaded atomic.Bool
	stale  atomic.Bool

	mu         sync.RWMutex
	entries    []Entry
	epochs     []epochStart // where each source leader epoch starts, in order
	ledgerNext int64        // next ledger offset to read
	// Transactions, in source offsets: the first offset of each source producer's open
	// transaction, and the aborted ones (for read_committed answers).
	open    map[int64]int64
	aborted []Aborted
}

// Aborted is an aborted source transaction: the producer, its first offset and its ABORT
// marker's offset.
type Aborted struct {
	ProducerID int64
	First      int64
	Marker     int64
}

// Stale marks the index as behind the destination: the next request for the partition
// refreshes it first.
func (p *Partition) Stale() { p.stale.Store(true) }

// NeedsRefresh reports whether the index was marked stale.
func (p *Partition) NeedsRefresh() bool { return p.stale.Load() }

// Loaded reports whether the index was read from the ledger.
func (p *Partition) Loaded() bool { return p != nil && p.loaded.Load() }

// add appends ledger entries the index does not hold yet (entries arrive in destination
// order; ones already known, from the writer of this process or an earlier read, are skipped).
// The index is a gapless prefix of the ledger's data entries, whose destination ranges follow
// each other: an entry that starts past the index's end (the writer of this process handed
// over entries after ones the index never saw: a ledger append whose answer was lost landed,
// and the writer retried it after reading it back) is not taken, and the index is marked stale
// so the next request reads the ledger's tail, in order, first. Taking it would leave the
// missed entries out for good: they would then look already known.
func (p *Partition) add(es []ledger.Entry) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, le := range es {
		if le.Kind == ledger.KindRewrite {
			p.rewriteLocked(le)
			continue
		}
		if !le.Data() {
			continue
		}
		if n := len(p.entries); n > 0 && le.D < p.entries[n-1].end() {
			continue
		} else if n > 0 && le.D > p.entries[n-1].end() {
			p.stale.Store(true)
			return
		}
		e := Entry{D: le.D, Src: le.Src, Last: le.Last, Count: le.Count, Filler: le.Kind == ledger.KindFiller}
		if !e.Filler {
			e.Epoch, e.CRC, e.Len, e.Attrs, e.MaxTS = le.Epoch, le.CRC, le.Len, le.Attrs, le.MaxTS
			e.SrcPID, e.SrcPEpoch, e.SrcSeq = le.SrcPID, le.SrcPEpoch, le.SrcSeq
			if n := len(p.epochs); n == 0 || e.Epoch > p.epochs[n-1].epoch {
				p.epochs = append(p.epochs, epochStart{e.Epoch, e.Src})
			}
		}
		e.Records, e.Raw = le.Records, le.Raw
		switch {
		case le.Kind == ledger.KindControl:
			e.Control = true
			first, ok := p.open[le.SrcPID]
			if !ok {
				first = le.Src // its data lies before the mirror's start: nothing here to hide
			}
			delete(p.open, le.SrcPID)
			if le.Marker == ledger.MarkerAbort {
				p.aborted = append(p.aborted, Aborted{ProducerID: le.SrcPID, First: first, Marker: le.Src})
			}
		case !e.Filler && e.Attrs&batch.AttrTransactional != 0:
			if p.open == nil {
				p.open = map[int64]int64{}
			}
			if _, ok := p.open[e.SrcPID]; !ok {
				p.open[e.SrcPID] = e.Src
			}
		}
		p.entries = append(p.entries, e)
	}
}

// rewriteLocked applies a compaction rewrite to the entry of its batch.
func (p *Partition) rewriteLocked(le ledger.Entry) {
	i := sort.Search(len(p.entries), func(i int) bool { return p.entries[i].Src >= le.Src })
	if i < len(p.entries) && p.entries[i].Src == le.Src && !p.entries[i].Filler {
		e := &p.entries[i]
		if le.Gone {
			e.Gone, e.Raw = true, nil
			return
		}
		e.Raw, e.CRC, e.Len, e.Attrs, e.MaxTS, e.Records = le.Raw, le.CRC, le.Len, le.Attrs, le.MaxTS, le.Records
	}
}

// Batches lists the mirrored batches and markers (not fillers, not gone) that start at source
// offsets in [from, to), as ledger entries.
func (p *Partition) Batches(from, to int64) []ledger.Entry {
	p.mu.RLock()
	defer p.mu.RUnlock()
	var out []ledger.Entry
	for i := sort.Search(len(p.entries), func(i int) bool { return p.entries[i].Src >= from }); i < len(p.entries) && p.entries[i].Src < to; i++ {
		if e := p.entries[i]; !e.Filler && !e.Gone {
			kind := ledger.KindBatch
			if e.Control {
				kind = ledger.KindControl
			}
			out = append(out, ledger.Entry{Kind: kind, Src: e.Src, Last: e.Last, D: e.D, Count: e.Count})
		}
	}
	return out
}

// BySrc returns the mirrored batch (not a filler) that starts at source offset src, as a ledger
// entry: what a writer compares a batch sent again with.
func (p *Partition) BySrc(src int64) (ledger.Entry, bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	i := sort.Search(len(p.entries), func(i int) bool { return p.entries[i].Src >= src })
	if i == len(p.entries) || p.entries[i].Src != src || p.entries[i].Filler || p.entries[i].Gone {
		return ledger.Entry{}, false
	}
	e := p.entries[i]
	kind := ledger.KindBatch
	if e.Control {
		kind = ledger.KindControl
	}
	return ledger.Entry{Kind: kind, Src: e.Src, Last: e.Last, D: e.D, Count: e.Count, Epoch: e.Epoch, CRC: e.CRC, Len: e.Len,
		Attrs: e.Attrs, MaxTS: e.MaxTS, SrcPID: e.SrcPID, SrcPEpoch: e.SrcPEpoch, SrcSeq: e.SrcSeq, Records: e.Records}, true
}

// LastStable is the first offset of the earliest source transaction still open, or -1 when
// none is: read_committed consumers read up to it (or, with none open, up to the high
// watermark), as on the source.
func (p *Partition) LastStable() int64 {
	p.mu.RLock()
	defer p.mu.RUnlock()
	lso := int64(-1)
	for _, first := range p.open {
		if lso < 0 || first < lso {
			lso = first
		}
	}
	return lso
}

// AbortedIn lists the aborted transactions a read_committed answer holding source offsets
// [from, to) must name, as the source's broker does: those that end at or after from and
// start before to.
func (p *Partition) AbortedIn(from, to int64) []Aborted {
	p.mu.RLock()
	defer p.mu.RUnlock()
	i := sort.Search(len(p.aborted), func(i int) bool { return p.aborted[i].Marker >= from })
	var out []Aborted
	for ; i < len(p.aborted); i++ {
		if a := p.aborted[i]; a.First < to {
			out = append(out, a)
		}
	}
	return out
}

// trimMin is the fewest entries a trim drops: trimming copies the entries kept, so it waits
// until it frees enough to be worth the copy.
const trimMin = 1024

// TrimBelow drops the entries that end at or below the destination offset logStart (D's log
// start: retention or DeleteRecords removed their records, so no client can read them), once
// there are at least trimMin of them, and reports how many it dropped. The last entry always
// stays (offsets past the mirrored end are mapped through it), and so do the epochs (a client
// may ask OffsetForLeaderEpoch for an old epoch). Without it a long-running mirror's index
// would grow with every batch ever mirrored.
func (p *Partition) TrimBelow(logStart int64) int {
	count := func() int {
		k := sort.Search(len(p.entries), func(i int) bool { return p.entries[i].end() > logStart })
		return min(k, len(p.entries)-1)
	}
	p.mu.RLock()
	k := count()
	p.mu.RUnlock()
	if k < trimMin {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	k = count()
	if k < trimMin {
		return 0
	}
	p.entries = append(make([]Entry, 0, len(p.entries)-k+trimMin), p.entries[k:]...)
	// Aborted transactions whose markers are gone from D cannot be read past any more.
	first := p.entries[0].Src
	j := sort.Search(len(p.aborted), func(i int) bool { return p.aborted[i].Marker >= first })
	p.aborted = append([]Aborted(nil), p.aborted[j:]...)
	return k
}

// Len is the number of entries indexed.
func (p *Partition) Len() int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return len(p.entries)
}

// At returns the entry whose destination base offset is d.
func (p *Partition) At(d int64) (Entry, bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	i := sort.Search(len(p.entries), func(i int) bool { return p.entries[i].D >= d })
	if i < len(p.entries) && p.entries[i].D == d {
		return p.entries[i], true
	}
	return Entry{}, false
}

// EpochBase is the highest source leader epoch mirrored (0 when none): the presented leader
// epoch of a partition is EpochBase + the destination's leader epoch, so it never goes below an
// epoch already served in a batch and rises with every leader change on the destination.
func (p *Partition) EpochBase() int32 {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if n := len(p.epochs); n > 0 && p.epochs[n-1].epoch > 0 {
		return p.epochs[n-1].epoch
	}
	return 0
}

// ToDest maps a source offset to the destination offset a read must start at. An offset in a
// filled hole moves past the fillers (a consumer never gets a response of fillers only); one
// in an unfilled hole between segments moves to the first offset after the hole; one beyond the
// mirrored end keeps its distance from it (the destination answers OFFSET_OUT_OF_RANGE, as the
// source would).
func (p *Partition) ToDest(src int64) int64 {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.toDest(src, true)
}

// CommitToDest maps a committed source offset to D's: like ToDest, but exact inside a filled
// hole, so the offset reads back (ToSource) as it was committed.
func (p *Partition) CommitToDest(src int64) int64 {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if src < 0 {
		return src
	}
	return p.toDest(src, false)
}

func (p *Partition) toDest(src int64, skipFiller bool) int64 {
	es := p.entries
	if len(es) == 0 {
		return src
	}
	i := sort.Search(len(es), func(i int) bool { return es[i].Last >= src })
	switch {
	case i == len(es):
		e := &es[len(es)-1]
		return e.end() + (src - (e.Last + 1))
	case src < es[i].Src && i == 0:
		return es[0].D - (es[0].Src - src)
	case src < es[i].Src:
		return es[i].D
	case es[i].Filler && skipFiller:
		for i+1 < len(es) && es[i+1].Filler {
			i++
		}
		return es[i].end()
	}
	return es[i].D + (src - es[i].Src)
}

// ToSource maps a destination offset (a high watermark, a log start, a committed offset) to
// the source's. Past the end it keeps its distance from the mirrored end.
func (p *Partition) ToSource(d int64) int64 {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if d < 0 {
		return d
	}
	return p.toSource(d, false)
}

// ToSourceRecord maps the destination offset of a record (a time lookup's answer) to the
// source's; a filler record maps to the first offset after its hole, where the record the
// filler stands in front of is.
func (p *Partition) ToSourceRecord(d int64) int64 {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if d < 0 {
		return d
	}
	return p.toSource(d, true)
}

func (p *Partition) toSource(d int64, skipFiller bool) int64 {
	es := p.entries
	if len(es) == 0 {
		return d
	}
	i := sort.Search(len(es), func(i int) bool { return es[i].end() > d })
	switch {
	case i == len(es):
		e := &es[len(es)-1]
		return e.Last + 1 + (d - e.end())
	case d < es[i].D:
		return es[i].Src - (es[i].D - d)
	case skipFiller && es[i].Filler:
		return es[i].Last + 1
	}
	return es[i].Src + (d - es[i].D)
}

// EpochAt is the source leader epoch of the last batch that starts at or before src (-1 when
// none): the epoch of the record at src, or of the last record before a hole.
func (p *Partition) EpochAt(src int64) int32 {
	p.mu.RLock()
	defer p.mu.RUnlock()
	i := sort.Search(len(p.epochs), func(i int) bool { return p.epochs[i].src > src })
	if i == 0 {
		return -1
	}
	return p.epochs[i-1].epoch
}

// EpochEnd answers OffsetForLeaderEpoch in source terms: the largest source epoch at or
// below epoch and the source offset where the next epoch starts, or the mirrored end for the
// latest epoch (and for the presented epochs above it). (-1, -1) when epoch is below every
// epoch mirrored.
func (p *Partition) EpochEnd(epoch int32) (int32, int64) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	i := sort.Search(len(p.epochs), func(i int) bool { return p.epochs[i].epoch > epoch })
	end := int64(0)
	if n := len(p.entries); n > 0 {
		end = p.entries[n-1].Last + 1
	}
	switch {
	case len(p.epochs) == 0:
		return epoch, end
	case i == 0:
		return -1, -1
	case i == len(p.epochs):
		return epoch, end
	}
	return p.epochs[i-1].epoch, p.epochs[i].src
}

// DestEnd is the destination offset after the last entry (-1 when nothing is mirrored).
func (p *Partition) DestEnd() int64 {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if n := len(p.entries); n > 0 {
		return p.entries[n-1].end()
	}
	return -1
}

// End is the mirrored end in source offsets (-1 when nothing is mirrored).
func (p *Partition) End() int64 {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if n := len(p.entries); n > 0 {
		return p.entries[n-1].Last + 1
	}
	return -1
}

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

	ctx context.Context // ends background loads
	wg  sync.WaitGroup
}

// New makes a view that reads ledgers with offsetgate's own client; background loads stop
// when ctx ends (Wait waits for them).
func New(ctx context.Context, l *ledger.Ledger, cl *kgo.Client, log *zap.Logger) *View {
	return &View{ledger: l, cl: cl, log: log, parts: map[key]*Partition{}, topics: map[catalog.TopicID]bool{},
		later: map[key]bool{}, ctx: ctx}
}

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

// loadParallel is how many topics LoadTopics loads at once: a destination with hundreds of
// mirror topics is loaded in seconds, not one ledger read after another.
const loadParallel = 16

// LoadTopics loads every partition of the topics not loaded yet, several topics at once. It
// returns one of the errors, after every topic was tried.
func (v *View) LoadTopics(ctx context.Context, ts []catalog.Topic) error {
	var (
		mu     sync.Mutex
		failed error
		wg     sync.WaitGroup
	)
	sem := make(chan struct{}, loadParallel)
	for _, t := range ts {
		if v.TopicLoaded(t.ID) {
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return ctx.Err()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := v.LoadTopic(ctx, t); err != nil {
				mu.Lock()
				failed = fmt.Errorf("%s: %w", t.Name, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
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
		p = &Partition{}
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
	es, next, err := v.ledger.ReadFrom(ctx, id, partition, p.ledgerNext)
	v.log.Debug("source view read", zap.String("topic", t.Name), zap.Int32("partition", partition),
		zap.Duration("ensure", ensureTook), zap.Duration("total", time.Since(start)), zap.Int("entries", len(es)))
	if err != nil {
		p.stale.Store(true)
		return nil, fmt.Errorf("source view of %s[%d]: %w", t.Name, partition, err)
	}
	p.add(es)
	p.mu.Lock()
	p.ledgerNext = next
	p.mu.Unlock()
	if !p.loaded.Swap(true) {
		v.log.Info("source view loaded", zap.String("topic", t.Name), zap.Int32("partition", partition),
			zap.Int("entries", p.Len()))
	}
	return p, nil
}

// LoadTopic loads every partition of a mirror topic.
func (v *View) LoadTopic(ctx context.Context, t catalog.Topic) error {
	count, err := v.partitions(ctx, t.Name)
	if err != nil {
		return err
	}
	if err := v.ledger.Ensure(ctx, catalog.IDString(t.ID), count); err != nil {
		return err
	}
	for i := int32(0); i < count; i++ {
		if _, err := v.load(ctx, t, i, true); err != nil {
			return err
		}
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

// Record hears the ledger entries the writer of this process appended, so the index follows
// without reading them back. Entries of a partition not loaded yet are left to its load.
func (v *View) Record(id catalog.TopicID, partition int32, es []ledger.Entry) {
	p := v.Get(id, partition)
	if p == nil {
		return
	}
	p.add(es)
}

func (v *View) partitions(ctx context.Context, topic string) (int32, error) {
	req := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, mt)
	resp, err := req.RequestWith(ctx, v.cl)
	if err != nil {
		return 0, fmt.Errorf("source view: metadata of %s: %w", topic, err)
	}
	if len(resp.Topics) != 1 {
		return 0, fmt.Errorf("source view: metadata of %s: %d topics answered", topic, len(resp.Topics))
	}
	if err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); err != nil {
		return 0, fmt.Errorf("source view: metadata of %s: %w", topic, err)
	}
	return int32(len(resp.Topics[0].Partitions)), nil
}

// NewPartition makes a loaded index from ledger entries, for tests of the read side.
func NewPartition(es []ledger.Entry) *Partition {
	p := &Partition{}
	p.add(es)
	p.loaded.Store(true)
	return p
}
