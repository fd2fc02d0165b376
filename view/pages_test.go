package view

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"offsetgate/batch"
	"offsetgate/ledger"
)

// memLedger is a partition's ledger in memory: entry i at ledger offset i.
type memLedger struct {
	es    []ledger.Entry
	reads int
	fail  bool
}

func (m *memLedger) scan(_ context.Context, from, to int64, fn func(int64, ledger.Entry) error) error {
	m.reads++
	if m.fail {
		return errors.New("ledger unreachable")
	}
	for off := from; off < to && off < int64(len(m.es)); off++ {
		if err := fn(off, m.es[off]); err != nil {
			return err
		}
	}
	return nil
}

// pagedPartition indexes a ledger of n one-offset batches (with a segment, an owner entry and
// a filled hole in between, as a real ledger has) with a cache of budget bytes.
func pagedPartition(t *testing.T, n int, budget int64) (*Partition, *memLedger, *Partition) {
	t.Helper()
	m := &memLedger{es: []ledger.Entry{{Kind: ledger.KindSegment, Src: 50, Delta: 50}}}
	src, d := int64(50), int64(0)
	for i := 0; i < n; i++ {
		if i%100 == 7 {
			m.es = append(m.es, ledger.Entry{Kind: ledger.KindOwner, Src: -1, Owner: "a"})
		}
		kind := ledger.KindBatch
		if i%50 == 9 {
			kind = ledger.KindFiller
		}
		m.es = append(m.es, ledger.Entry{Kind: kind, Src: src, Last: src, D: d, Count: 1, Epoch: int32(1 + i/1000), CRC: uint32(i)})
		src++
		d++
	}
	c := newPager(budget, func(ctx context.Context, _ *Partition, pg pageRef) ([]Entry, error) {
		return readPage(ctx, m.scan, pg)
	})
	p := &Partition{pages: c}
	for off, e := range m.es {
		if !p.addAt(int64(off), e) {
			t.Fatalf("entry at ledger offset %d not taken", off)
		}
	}
	p.loaded.Store(true)
	return p, m, NewPartition(m.es)
}

// A partition indexed with a small budget keeps few pages in memory, answers every offset
// translation as a partition kept whole does, says which pages are cold, and reads them back
// exactly from the ledger.
func TestPagesEvictedAndReadBack(t *testing.T) {
	const n = 40 * pageSize
	budget := 6 * pageSize * entrySize
	p, m, whole := pagedPartition(t, n, budget)
	st := p.pages.stats()
	if st.Bytes > budget || st.Evictions == 0 {
		t.Fatalf("cache after load: %+v: want evictions and at most %d bytes", st, budget)
	}
	if got := len(p.spans); got > 2*n/50+4 {
		t.Fatalf("%d spans for %d entries with a hole every 50: spans do not merge", got, n)
	}
	cold := 0
	for d := int64(0); d < n; d++ {
		if p.Cold(d) {
			cold++
			if _, ok := p.At(d); ok {
				t.Fatalf("At(%d) answered from a cold page", d)
			}
		}
	}
	if cold < n/2 {
		t.Fatalf("%d of %d offsets in cold pages: the budget is not kept", cold, n)
	}
	// Every translation, whatever is in memory.
	for src := int64(0); src < n+100; src += 7 {
		if a, b := p.ToDest(src), whole.ToDest(src); a != b {
			t.Fatalf("ToDest(%d) = %d, whole %d", src, a, b)
		}
		if a, b := p.CommitToDest(src), whole.CommitToDest(src); a != b {
			t.Fatalf("CommitToDest(%d) = %d, whole %d", src, a, b)
		}
		if a, b := p.EpochAt(src), whole.EpochAt(src); a != b {
			t.Fatalf("EpochAt(%d) = %d, whole %d", src, a, b)
		}
	}
	for d := int64(0); d < n+100; d += 5 {
		if a, b := p.ToSource(d), whole.ToSource(d); a != b {
			t.Fatalf("ToSource(%d) = %d, whole %d", d, a, b)
		}
		if a, b := p.ToSourceRecord(d), whole.ToSourceRecord(d); a != b {
			t.Fatalf("ToSourceRecord(%d) = %d, whole %d", d, a, b)
		}
	}
	// A reader walking from the start: each cold page is read back and matches.
	ctx := context.Background()
	for d := int64(0); d < n; d++ {
		if p.Cold(d) {
			if err := p.LoadAt(ctx, d); err != nil {
				t.Fatal(err)
			}
		}
		a, ok := p.At(d)
		b, okw := whole.At(d)
		if ok != okw || fmt.Sprint(a) != fmt.Sprint(b) {
			t.Fatalf("At(%d) = %+v %v after reading back, whole %+v %v", d, a, ok, b, okw)
		}
	}
	if st := p.pages.stats(); st.Loads == 0 || st.Bytes > budget {
		t.Fatalf("cache after the walk: %+v", st)
	}
	// The writer's lookups read pages back by themselves.
	for _, src := range []int64{50, 60, 50 + n/2, 50 + n - 1} {
		a, ok, err := p.BySrc(ctx, src)
		if err != nil {
			t.Fatal(err)
		}
		b, okw, _ := whole.BySrc(ctx, src)
		if ok != okw || fmt.Sprint(a) != fmt.Sprint(b) {
			t.Fatalf("BySrc(%d) = %+v %v, whole %+v %v", src, a, ok, b, okw)
		}
	}
	got, err := p.Batches(ctx, 50, 50+n)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := whole.Batches(ctx, 50, 50+n)
	if len(got) != len(want) || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Batches: %d entries, whole %d", len(got), len(want))
	}
	// A ledger that cannot be read: the page stays cold, the lookups say so.
	var d int64 = -1
	for x := int64(0); x < n; x++ {
		if p.Cold(x) {
			d = x
			break
		}
	}
	if d < 0 {
		t.Fatal("no cold page left")
	}
	m.fail = true
	if err := p.LoadAt(ctx, d); err == nil || !p.Cold(d) {
		t.Fatalf("LoadAt(%d) with the ledger unreachable: %v, cold %v", d, err, p.Cold(d))
	}
	if _, _, err := p.BySrc(ctx, whole.ToSource(d)); err == nil {
		t.Fatal("BySrc of a cold page with the ledger unreachable: no error")
	}
}

// A compaction rewrite of a batch whose page is out of memory is applied when the page is read
// back; a page the ledger no longer holds as indexed is refused, not served.
func TestPageRewritesAndMismatch(t *testing.T) {
	const n = 20 * pageSize
	p, m, _ := pagedPartition(t, n, 4*pageSize*entrySize)
	if !p.Cold(0) {
		t.Fatal("the first page is not cold")
	}
	rw := ledger.Entry{Kind: ledger.KindRewrite, Src: 51, Raw: []byte{1, 2, 3}, CRC: 77, Records: 1}
	m.es = append(m.es, rw)
	p.addAt(int64(len(m.es)-1), rw)
	ctx := context.Background()
	if err := p.LoadAt(ctx, 0); err != nil {
		t.Fatal(err)
	}
	e, ok := p.At(1)
	if !ok || e.CRC != 77 || string(e.Raw) != "\x01\x02\x03" {
		t.Fatalf("At(1) after reading back = %+v, %v: the rewrite is not applied", e, ok)
	}
	// Another page, whose ledger entries changed under it: refused.
	var d int64 = -1
	for x := int64(pageSize); x < n; x++ {
		if p.Cold(x) {
			d = x
			break
		}
	}
	if d < 0 {
		t.Fatal("no cold page left")
	}
	for i := range m.es {
		if m.es[i].Data() && m.es[i].D == d {
			m.es[i].D++
		}
	}
	if err := p.LoadAt(ctx, d); err == nil || !p.Cold(d) {
		t.Fatalf("a page read back from a changed ledger: %v, cold %v", err, p.Cold(d))
	}
}

// The ledger a view needs, for a destination log start: from the page holding it, and back to
// where a transaction reaching into what is kept began (an open one, or an aborted one whose
// marker is kept: read_committed readers need their first offsets).
func TestLedgerNeeded(t *testing.T) {
	build := func(txns bool) *Partition {
		p := &Partition{}
		for i := int64(0); i < 4*pageSize; i++ {
			e := ledger.Entry{Kind: ledger.KindBatch, Src: i, Last: i, D: i, Count: 1}
			switch {
			case txns && i == 100:
				e.Attrs, e.SrcPID = batch.AttrTransactional, 7
			case txns && i == 600:
				e.Attrs, e.SrcPID = batch.AttrTransactional, 8
			case txns && i == 900:
				e.Kind, e.Marker, e.SrcPID = ledger.KindControl, ledger.MarkerAbort, 7
			}
			p.addAt(1000+2*i, e) // an owner entry between every two
		}
		return p
	}
	p := build(false)
	if got, want := p.LedgerNeeded(800), int64(1000+2*3*pageSize); got != want {
		t.Fatalf("LedgerNeeded(800) = %d, want %d (the page holding 800)", got, want)
	}
	if got, want := p.LedgerNeeded(0), int64(1000); got != want {
		t.Fatalf("LedgerNeeded(0) = %d, want %d", got, want)
	}
	if got, want := p.LedgerNeeded(1<<40), int64(1000+2*3*pageSize); got != want {
		t.Fatalf("LedgerNeeded past the end = %d, want %d (the last page stays)", got, want)
	}
	p = build(true)
	if got, want := p.LedgerNeeded(800), int64(1000); got != want {
		t.Fatalf("with transactions LedgerNeeded(800) = %d, want %d (the aborted one began in the first page)", got, want)
	}
	if NewPartition([]ledger.Entry{{Kind: ledger.KindBatch, Src: 0, Last: 0, D: 0, Count: 1}}).LedgerNeeded(0) != -1 {
		t.Fatal("ledger offsets not known: LedgerNeeded must say so")
	}
}

// A reader walking forward through pages out of memory reads several of them back per ledger
// read, and every entry still matches.
func TestReadAhead(t *testing.T) {
	const n = 100 * pageSize
	p, m, whole := pagedPartition(t, n, 40*pageSize*entrySize)
	if got := p.pages.ahead(); got != readAhead {
		t.Fatalf("read ahead %d pages with a 40-page budget, want %d", got, readAhead)
	}
	ctx := context.Background()
	cold, reads := 0, m.reads
	for d := int64(0); d < n; d++ {
		if p.Cold(d) {
			cold++
			if err := p.LoadAt(ctx, d); err != nil {
				t.Fatal(err)
			}
		}
		a, ok := p.At(d)
		b, _ := whole.At(d)
		if !ok || fmt.Sprint(a) != fmt.Sprint(b) {
			t.Fatalf("At(%d) = %+v %v, whole %+v", d, a, ok, b)
		}
	}
	if reads = m.reads - reads; cold == 0 || reads > cold || p.pages.stats().Loads < int64(3*reads) {
		t.Fatalf("%d ledger reads for %d cold pages met, %d pages read back: no read ahead", reads, cold, p.pages.stats().Loads)
	}
}
