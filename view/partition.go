package view

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"offsetgate/batch"
	"offsetgate/ledger"
	"offsetgate/rawread"
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

// entryOf is the index entry of a data ledger entry.
func entryOf(le ledger.Entry) Entry {
	e := Entry{D: le.D, Src: le.Src, Last: le.Last, Count: le.Count, Filler: le.Kind == ledger.KindFiller,
		Control: le.Kind == ledger.KindControl, Records: le.Records, Raw: le.Raw}
	if !e.Filler {
		e.Epoch, e.CRC, e.Len, e.Attrs, e.MaxTS = le.Epoch, le.CRC, le.Len, le.Attrs, le.MaxTS
		e.SrcPID, e.SrcPEpoch, e.SrcSeq = le.SrcPID, le.SrcPEpoch, le.SrcSeq
	}
	return e
}

// rewrite applies a compaction rewrite to the entry of its batch.
func (e *Entry) rewrite(le ledger.Entry) {
	if le.Gone {
		e.Gone, e.Raw = true, nil
		return
	}
	e.Raw, e.CRC, e.Len, e.Attrs, e.MaxTS, e.Records = le.Raw, le.CRC, le.Len, le.Attrs, le.MaxTS, le.Records
}

// span is a run of consecutive entries that map destination offsets to source offsets with one
// shift: destination offsets [d, d+n) hold source offsets [src, last]. Entries that follow each
// other in both offset spaces, one destination offset per source offset, and are all fillers
// or all not, are one span, so a mirror without holes is a handful of spans however long it
// is. An entry whose source range is not its destination range (a compacted batch held as a
// dense copy) is a span of its own. Every offset translation is answered from spans alone,
// without the entries, whose pages may be out of memory.
type span struct {
	d, src, last int64
	n            int64
	filler       bool
}

func (s *span) end() int64    { return s.d + s.n }
func (s *span) regular() bool { return s.last-s.src+1 == s.n }
func spanOf(e *Entry) span {
	return span{d: e.D, src: e.Src, last: e.Last, n: int64(e.Count), filler: e.Filler}
}
func (s *span) follows(e *Entry) bool {
	return s.regular() && e.Last-e.Src+1 == int64(e.Count) && s.filler == e.Filler && e.D == s.end() && e.Src == s.last+1
}

type epochStart struct {
	epoch int32
	src   int64
}

// Partition is one mirror partition's index. Readers (sessions, on event loops) take a read
// lock for a few binary searches; the writer and refreshes append under the write lock.
//
// The offset mapping (spans), the epochs and the transactions are always in memory. The
// entries themselves (the source header fields each batch is served with) are kept in pages of
// pageSize entries: the page being filled stays, full pages are kept in the view's cache within
// its memory budget and read back from the ledger by ledger offset when needed again. A lookup
// never waits for a page (At says the page is cold, Resident and LoadAt let a caller off the
// event loop load it first), except BySrc and Batches, which run off the event loops.
type Partition struct {
	loadMu sync.Mutex // serializes loads, refreshes and page reads
	loaded atomic.Bool
	stale  atomic.Bool

	// pages reads pages back and keeps them within a memory budget; nil: nothing is evicted.
	pages     *pager
	id        string // the mirror topic's id, and the partition: where its ledger is
	partition int32
	leader    rawread.Partition // where the ledger partition was read last (guarded by loadMu)

	mu         sync.RWMutex
	spans      []span
	book       []*page      // in destination (and source) order; the last is being filled
	count      int          // entries indexed
	epochs     []epochStart // where each source leader epoch starts, in order
	ledgerNext int64        // next ledger offset to read
	// Transactions, in source offsets: the first offset of each source producer's open
	// transaction, and the aborted ones (for read_committed answers).
	open    map[int64]int64
	aborted []Aborted
	// The source producers' states (producers.go), and the destination producer ids offsetgate
	// wrote the partition with.
	producers  map[int64]*producerState
	pruneAt    int
	writers    map[int64]struct{}
	lastWriter int64
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

// add appends ledger entries whose ledger offsets are not known (tests, NewPartition): their
// pages are never evicted.
func (p *Partition) add(es []ledger.Entry) {
	for _, le := range es {
		if !p.addAt(-1, le) {
			return
		}
	}
}

// addAt appends one ledger entry read or written at ledger offset off (-1: not known), unless
// the index holds it already (entries arrive in destination order; ones already known, from the
// writer of this process or an earlier read, are skipped). It reports false when the entry
// starts past the index's end: the index is a gapless prefix of the ledger's data entries,
// whose destination ranges follow each other, so such an entry (the writer of this process
// handed over entries after ones the index never saw: a ledger append whose answer was lost
// landed, and the writer retried it after reading it back) is not taken, and the index is
// marked stale so the next request reads the ledger's tail, in order, first. Taking it would
// leave the missed entries out for good: they would then look already known.
func (p *Partition) addAt(off int64, le ledger.Entry) bool {
	p.mu.Lock()
	ok, sealed := p.addLocked(off, le)
	p.mu.Unlock()
	if sealed != nil {
		p.pages.admit(p, sealed)
	}
	return ok
}

// handOver takes the entries the writer of this process appended, at ledger offsets from
// first on, when they follow what the index took (read from the ledger or handed over) without
// a gap in ledger offsets. Anything between was never seen by the index: another instance's
// entries (it wrote the partition since the index was read, and this process took the
// partition over since), or entries of this process it was not handed (a takeover's claim).
// Taking the writer's entries past them would start or continue the index past what they
// describe, and every later read of the ledger would skip those entries as known, for good
// (data entries), or never apply them (compaction rewrites). They are left to a read of the
// ledger, in order, which the index is marked stale for.
func (p *Partition) handOver(first int64, es []ledger.Entry) {
	p.mu.RLock()
	next := p.ledgerNext
	p.mu.RUnlock()
	if first != next {
		p.stale.Store(true)
		return
	}
	for i, e := range es {
		if !p.addAt(first+int64(i), e) {
			return
		}
	}
	p.mu.Lock()
	p.ledgerNext = max(p.ledgerNext, first+int64(len(es)))
	p.mu.Unlock()
}

// addLocked is addAt under the write lock; sealed is a page it filled, for the cache.
func (p *Partition) addLocked(off int64, le ledger.Entry) (ok bool, sealed *page) {
	if le.Kind == ledger.KindRewrite {
		p.rewriteLocked(off, le)
		return true, nil
	}
	if !le.Data() {
		return true, nil
	}
	if n := len(p.spans); n > 0 && le.D < p.spans[n-1].end() {
		return true, nil
	} else if n > 0 && le.D > p.spans[n-1].end() {
		p.stale.Store(true)
		return false, nil
	}
	e := entryOf(le)
	if !e.Filler {
		if n := len(p.epochs); n == 0 || e.Epoch > p.epochs[n-1].epoch {
			p.epochs = append(p.epochs, epochStart{e.Epoch, e.Src})
		}
	}
	switch {
	case e.Control:
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
	p.noteProducerLocked(&e, &le)
	if n := len(p.spans); n > 0 && p.spans[n-1].follows(&e) {
		s := &p.spans[n-1]
		s.n += int64(e.Count)
		s.last = e.Last
	} else {
		p.spans = append(p.spans, spanOf(&e))
	}
	pg := p.tail()
	if pg == nil || pg.n == pageSize {
		pg = &page{d: e.D, src: e.Src, from: off, to: off}
		p.book = append(p.book, pg)
	}
	pg.entries = append(pg.entries, e)
	pg.n++
	pg.end = e.end()
	if off < 0 || pg.from < 0 {
		pg.from = -1 // not readable back: kept
	} else {
		pg.to = off + 1
	}
	p.count++
	if pg.n == pageSize {
		sealed = pg
	}
	return true, sealed
}

func (p *Partition) tail() *page {
	if n := len(p.book); n > 0 {
		return p.book[n-1]
	}
	return nil
}

// rewriteLocked applies a compaction rewrite to the entry of its batch, and notes it with the
// page, which applies it again when it is read back.
func (p *Partition) rewriteLocked(off int64, le ledger.Entry) {
	pg := p.pageBySrc(le.Src)
	if pg == nil {
		return
	}
	if off >= 0 {
		pg.rewrites = append(pg.rewrites, off)
	} else if pg.from >= 0 {
		pg.from = -1 // a rewrite it could not read back: the page is kept
	}
	if pg.entries != nil {
		if e := pg.bySrc(le.Src); e != nil && !e.Filler {
			e.rewrite(le)
		}
	}
}

// pageBySrc is the page whose entries' source offsets cover src (nil: none).
func (p *Partition) pageBySrc(src int64) *page {
	i := sort.Search(len(p.book), func(i int) bool { return p.book[i].src > src })
	if i == 0 {
		return nil
	}
	return p.book[i-1]
}

// pageAt is the page whose destination range holds d (nil: none).
func (p *Partition) pageAt(d int64) *page {
	i := sort.Search(len(p.book), func(i int) bool { return p.book[i].end > d })
	if i == len(p.book) || d < p.book[i].d {
		return nil
	}
	return p.book[i]
}

// Batches lists the mirrored batches and markers (not fillers, not gone) that start at source
// offsets in [from, to), as ledger entries, reading pages back from the ledger as needed. It
// runs off the event loops.
func (p *Partition) Batches(ctx context.Context, from, to int64) ([]ledger.Entry, error) {
	var out []ledger.Entry
	for next := from; next < to; {
		p.mu.RLock()
		i := sort.Search(len(p.book), func(i int) bool { return p.book[i].src > next })
		if i > 0 {
			i--
		}
		if i >= len(p.book) || p.book[i].src >= to {
			p.mu.RUnlock()
			return out, nil
		}
		pg := p.book[i]
		if pg.entries == nil {
			p.mu.RUnlock()
			if err := p.readBack(ctx, pg); err != nil {
				return nil, err
			}
			continue
		}
		p.pages.touch(pg)
		for j := range pg.entries {
			e := &pg.entries[j]
			if e.Src >= next && e.Src < to && !e.Filler && !e.Gone {
				out = append(out, e.ledgerEntry(false))
			}
		}
		last := i == len(p.book)-1
		if !last {
			next = p.book[i+1].src
		}
		p.mu.RUnlock()
		if last {
			break
		}
	}
	return out, nil
}

// ledgerEntry gives an entry back as a ledger entry (with the header fields: full).
func (e *Entry) ledgerEntry(full bool) ledger.Entry {
	kind := ledger.KindBatch
	if e.Control {
		kind = ledger.KindControl
	}
	le := ledger.Entry{Kind: kind, Src: e.Src, Last: e.Last, D: e.D, Count: e.Count}
	if full {
		le.Epoch, le.CRC, le.Len, le.Attrs, le.MaxTS = e.Epoch, e.CRC, e.Len, e.Attrs, e.MaxTS
		le.SrcPID, le.SrcPEpoch, le.SrcSeq, le.Records = e.SrcPID, e.SrcPEpoch, e.SrcSeq, e.Records
	}
	return le
}

// BySrc returns the mirrored batch (not a filler) that starts at source offset src, as a ledger
// entry: what a writer compares a batch sent again with. It reads the entry's page back from
// the ledger when needed (off the event loops); false when there is no such batch, or the page
// could not be read (the error).
func (p *Partition) BySrc(ctx context.Context, src int64) (ledger.Entry, bool, error) {
	for attempt := 0; attempt < 3; attempt++ {
		p.mu.RLock()
		pg := p.pageBySrc(src)
		if pg == nil {
			p.mu.RUnlock()
			return ledger.Entry{}, false, nil
		}
		if pg.entries == nil {
			p.mu.RUnlock()
			if err := p.readBack(ctx, pg); err != nil {
				return ledger.Entry{}, false, err
			}
			continue
		}
		p.pages.touch(pg)
		e := pg.bySrc(src)
		var le ledger.Entry
		ok := e != nil && !e.Filler && !e.Gone
		if ok {
			le = e.ledgerEntry(true)
		}
		p.mu.RUnlock()
		return le, ok, nil
	}
	return ledger.Entry{}, false, fmt.Errorf("source view: the page holding source offset %d was evicted again while it was read", src)
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

// TrimBelow drops what ends at or below the destination offset logStart (D's log start:
// retention or DeleteRecords removed their records, so no client can read them): whole pages
// of entries, and spans. The last page and span always stay (offsets past the mirrored end are
// mapped through it), and so do the epochs (a client may ask OffsetForLeaderEpoch for an old
// epoch). It reports how many entries it dropped. Without it a long-running mirror's index
// would grow with every batch ever mirrored.
func (p *Partition) TrimBelow(logStart int64) int {
	pagesBelow := func() int {
		k := sort.Search(len(p.book), func(i int) bool { return p.book[i].end > logStart })
		return min(k, len(p.book)-1)
	}
	spansBelow := func() int {
		k := sort.Search(len(p.spans), func(i int) bool { return p.spans[i].end() > logStart })
		return min(k, len(p.spans)-1)
	}
	p.mu.RLock()
	k, ks := pagesBelow(), spansBelow()
	p.mu.RUnlock()
	if k <= 0 && ks <= 0 {
		return 0
	}
	p.mu.Lock()
	k, ks = pagesBelow(), spansBelow()
	dropped := 0
	var gone []*page
	if k > 0 {
		gone = append(gone, p.book[:k]...)
		for _, pg := range gone {
			dropped += pg.n
		}
		p.book = append([]*page(nil), p.book[k:]...)
		p.count -= dropped
		// Aborted transactions whose markers are gone from D cannot be read past any more.
		first := p.book[0].src
		j := sort.Search(len(p.aborted), func(i int) bool { return p.aborted[i].Marker >= first })
		p.aborted = append([]Aborted(nil), p.aborted[j:]...)
	}
	if ks > 0 {
		p.spans = append([]span(nil), p.spans[ks:]...)
	}
	p.mu.Unlock()
	p.pages.forget(gone)
	return dropped
}

// LedgerNeeded is the lowest ledger offset the index needs, for a destination whose log start
// is logStart, to be built again from the ledger: where the first page of entries that end
// past logStart starts (the last page at least), or earlier where a transaction that reaches
// into those entries began (its first batch tells read_committed readers what to skip or
// wait for). -1 when it cannot tell (a page whose ledger offsets are not known): then nothing
// may be dropped from the ledger.
func (p *Partition) LedgerNeeded(logStart int64) int64 {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if len(p.book) == 0 {
		return -1
	}
	i := sort.Search(len(p.book), func(i int) bool { return p.book[i].end > logStart })
	i = min(i, len(p.book)-1)
	need := p.book[i].from
	from := func(src int64) int64 {
		if pg := p.pageBySrc(src); pg != nil {
			return pg.from
		}
		return p.book[0].from // before every page: as far back as the index knows
	}
	for _, first := range p.open {
		need = min(need, from(first))
	}
	for _, a := range p.aborted {
		if a.Marker >= p.book[i].src {
			need = min(need, from(a.First))
		}
	}
	if need < 0 {
		return -1
	}
	return need
}

// Len is the number of entries indexed.
func (p *Partition) Len() int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.count
}

// At returns the entry whose destination base offset is d, when its page is in memory (Cold
// says whether a miss was for want of the page). It never waits.
func (p *Partition) At(d int64) (Entry, bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	pg := p.pageAt(d)
	if pg == nil || pg.entries == nil {
		return Entry{}, false
	}
	p.pages.touch(pg)
	es := pg.entries
	i := sort.Search(len(es), func(i int) bool { return es[i].D >= d })
	if i < len(es) && es[i].D == d {
		return es[i], true
	}
	return Entry{}, false
}

// Cold reports whether destination offset d lies in a page of the index that is out of memory:
// LoadAt reads it back.
func (p *Partition) Cold(d int64) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	pg := p.pageAt(d)
	return pg != nil && pg.entries == nil
}

// Resident reports whether the page holding destination offset d is in memory (or d lies
// outside every page: nothing to read).
func (p *Partition) Resident(d int64) bool { return !p.Cold(d) }

// LoadAt reads back the page holding destination offset d and the one after it (a reader moves
// forward), where they are out of memory. It blocks: callers run it off the event loops.
func (p *Partition) LoadAt(ctx context.Context, d int64) error {
	p.mu.RLock()
	i := sort.Search(len(p.book), func(i int) bool { return p.book[i].end > d })
	var want []*page
	ahead := p.pages.ahead()
	for ; i < len(p.book) && len(want) < ahead; i++ {
		pg := p.book[i]
		if pg.entries != nil {
			if len(want) > 0 {
				break // read the cold run found so far
			}
			if d < pg.d || len(want) == 0 && i > 0 && pg.d > d {
				break
			}
			continue // the page holding d is in memory: look at the next one
		}
		want = append(want, pg)
	}
	p.mu.RUnlock()
	if len(want) == 0 {
		return nil
	}
	return p.readBack(ctx, want...)
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

// ToDestSkipping is ToDest, and reports whether the offset lay in a filled hole and was moved
// past its fillers: the destination may not hold those fillers yet (the ledger takes them
// before D does), and then answers a fetch at the offset past them OFFSET_OUT_OF_RANGE.
func (p *Partition) ToDestSkipping(src int64) (int64, bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	d := p.toDest(src, true)
	return d, d != p.toDest(src, false)
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
	ss := p.spans
	if len(ss) == 0 {
		return src
	}
	i := sort.Search(len(ss), func(i int) bool { return ss[i].last >= src })
	switch {
	case i == len(ss):
		s := &ss[len(ss)-1]
		return s.end() + (src - (s.last + 1))
	case src < ss[i].src && i == 0:
		return ss[0].d - (ss[0].src - src)
	case src < ss[i].src:
		return ss[i].d
	case ss[i].filler && skipFiller:
		for i+1 < len(ss) && ss[i+1].filler {
			i++
		}
		return ss[i].end()
	}
	return ss[i].d + (src - ss[i].src)
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
	ss := p.spans
	if len(ss) == 0 {
		return d
	}
	i := sort.Search(len(ss), func(i int) bool { return ss[i].end() > d })
	switch {
	case i == len(ss):
		s := &ss[len(ss)-1]
		return s.last + 1 + (d - s.end())
	case d < ss[i].d:
		return ss[i].src - (ss[i].d - d)
	case skipFiller && ss[i].filler:
		return ss[i].last + 1
	}
	return ss[i].src + (d - ss[i].d)
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
	if n := len(p.spans); n > 0 {
		end = p.spans[n-1].last + 1
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
	if n := len(p.spans); n > 0 {
		return p.spans[n-1].end()
	}
	return -1
}

// End is the mirrored end in source offsets (-1 when nothing is mirrored).
func (p *Partition) End() int64 {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if n := len(p.spans); n > 0 {
		return p.spans[n-1].last + 1
	}
	return -1
}

// NewPartition makes a loaded index from ledger entries, for tests of the read side.
func NewPartition(es []ledger.Entry) *Partition {
	p := &Partition{}
	p.add(es)
	p.loaded.Store(true)
	return p
}

// readBack reads an evicted page back from the ledger. Loads of a partition are serialized,
// so a page wanted by several readers is read once.
func (p *Partition) readBack(ctx context.Context, pgs ...*page) error {
	p.loadMu.Lock()
	defer p.loadMu.Unlock()
	// The pages still out of memory, consecutive in the ledger: one read covers them.
	p.mu.RLock()
	var run []*page
	var ref pageRef
	for _, pg := range pgs {
		if pg.entries != nil {
			if len(run) > 0 {
				break
			}
			continue
		}
		r := pg.ref()
		if len(run) == 0 {
			ref = r
		} else if r.from < 0 || r.d != ref.end {
			break
		} else {
			ref.end, ref.to, ref.n = r.end, r.to, ref.n+r.n
			ref.rewrites = append(append([]int64(nil), ref.rewrites...), r.rewrites...)
		}
		run = append(run, pg)
	}
	p.mu.RUnlock()
	if len(run) == 0 {
		return nil
	}
	if p.pages == nil || ref.from < 0 {
		return fmt.Errorf("source view: a page of the index at destination offset %d is out of memory and cannot be read back", ref.d)
	}
	es, err := p.pages.read(ctx, p, ref)
	if err != nil {
		return err
	}
	p.pages.loads.Add(int64(len(run)))
	var kept []*page
	p.mu.Lock()
	for _, pg := range run {
		part := es[:pg.n:pg.n]
		es = es[pg.n:]
		if pg.entries == nil && p.pageAt(pg.d) == pg {
			pg.entries = part
			kept = append(kept, pg)
		}
	}
	p.mu.Unlock()
	// The first page is the one wanted now: admitted last, it is the last to go.
	for i := len(kept) - 1; i >= 0; i-- {
		p.pages.admit(p, kept[i])
	}
	return nil
}

// ProducerMatch is what the mirrored batches say of a source producer's batch.
type ProducerMatch struct {
	// Seen: the producer (id and epoch) has a mirrored batch, among the batches looked at or
	// in its producer state (producers.go); LastSeq is the last sequence of its newest one.
	Seen    bool
	LastSeq int32
	// Found: the batch with this base sequence is mirrored; Src is its source base offset.
	Found bool
	Src   int64
}

// SourceProducer looks for a source producer's batch (id, epoch, base sequence) among the
// newest n batches of the index whose pages are in memory: a write that reaches the source
// and is then retried elsewhere (a producer switched to the destination at a promotion) must
// be answered as the duplicate it is. A producer none of those batches holds is still Seen,
// with its last sequence, when its producer state has its epoch: a retry of an older batch is
// then known to repeat sequences the source has, though not where. It never waits.
func (p *Partition) SourceProducer(pid int64, epoch int16, seq int32, n int) ProducerMatch {
	p.mu.RLock()
	defer p.mu.RUnlock()
	var m ProducerMatch
	for i := len(p.book) - 1; i >= 0 && n > 0; i-- {
		es := p.book[i].entries
		if es == nil {
			break
		}
		for j := len(es) - 1; j >= 0 && n > 0; j-- {
			e := &es[j]
			if e.Filler || e.Control {
				continue
			}
			n--
			if e.SrcPID != pid || e.SrcPEpoch != epoch {
				continue
			}
			if !m.Seen {
				m.Seen, m.LastSeq = true, e.SrcSeq+int32(e.Last-e.Src)
			}
			if e.SrcSeq == seq {
				m.Found, m.Src = true, e.Src
				return m
			}
		}
	}
	if st := p.producers[pid]; !m.Seen && st != nil && st.epoch == epoch && st.lastSeq >= 0 {
		m.Seen, m.LastSeq = true, st.lastSeq
	}
	return m
}
