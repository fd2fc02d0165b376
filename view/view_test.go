package view

import (
	"fmt"
	"testing"

	"offsetgate/catalog"
	"offsetgate/ledger"
)

// A partition mirrored from source offset 100 (Δ=100): batches [100,109] epoch 3 and
// [110,119] epoch 5, a filled hole [120,129], a batch [130,139] epoch 5, then a large hole and
// a new segment: batch [10000,10009] epoch 7 at D 40.
func sample() *Partition {
	p := &Partition{}
	p.add([]ledger.Entry{
		{Kind: ledger.KindSegment, Src: 100, Delta: 100},
		{Kind: ledger.KindBatch, Src: 100, Last: 109, D: 0, Count: 10, Epoch: 3},
		{Kind: ledger.KindBatch, Src: 110, Last: 119, D: 10, Count: 10, Epoch: 5},
		{Kind: ledger.KindFiller, Src: 120, Last: 129, D: 20, Count: 10},
		{Kind: ledger.KindBatch, Src: 130, Last: 139, D: 30, Count: 10, Epoch: 5},
		{Kind: ledger.KindSegment, Src: 10000, Delta: 9960},
		{Kind: ledger.KindBatch, Src: 10000, Last: 10009, D: 40, Count: 10, Epoch: 7},
	})
	p.loaded.Store(true)
	return p
}

func TestTranslation(t *testing.T) {
	p := sample()
	for _, c := range []struct{ src, d int64 }{
		{100, 0}, {105, 5}, {119, 19},
		{120, 30}, {125, 30}, // in the filled hole: past the fillers
		{130, 30}, {139, 39},
		{140, 40}, {5000, 40}, // in the unfilled hole: the first offset after it
		{10000, 40}, {10009, 49}, {10010, 50}, {10015, 55}, // past the end: keeps its distance
		{99, -1}, // below the first entry
	} {
		if got := p.ToDest(c.src); got != c.d {
			t.Errorf("ToDest(%d) = %d, want %d", c.src, got, c.d)
		}
	}
	if got := p.CommitToDest(125); got != 25 {
		t.Errorf("CommitToDest(125) = %d, want 25 (exact inside a filled hole)", got)
	}
	for _, c := range []struct{ d, src int64 }{
		{0, 100}, {19, 119}, {25, 125}, {30, 130}, {40, 10000}, {50, 10010}, {52, 10012},
	} {
		if got := p.ToSource(c.d); got != c.src {
			t.Errorf("ToSource(%d) = %d, want %d", c.d, got, c.src)
		}
	}
	if got := p.ToSourceRecord(25); got != 130 {
		t.Errorf("ToSourceRecord(25) = %d, want 130 (a filler record stands in front of 130)", got)
	}
	// Commit round trip is exact wherever a consumer can stand.
	for _, src := range []int64{100, 110, 125, 130, 140, 10005, 10010} {
		back := p.ToSource(p.CommitToDest(src))
		want := src
		if src == 140 {
			want = 10000 // an unfilled hole reads back as the first offset after it
		}
		if back != want {
			t.Errorf("commit %d reads back as %d, want %d", src, back, want)
		}
	}
}

func TestEpochs(t *testing.T) {
	p := sample()
	if got := p.EpochBase(); got != 7 {
		t.Fatalf("EpochBase = %d, want 7", got)
	}
	for _, c := range []struct {
		src   int64
		epoch int32
	}{{100, 3}, {109, 3}, {110, 5}, {125, 5}, {139, 5}, {5000, 5}, {10000, 7}, {99, -1}} {
		if got := p.EpochAt(c.src); got != c.epoch {
			t.Errorf("EpochAt(%d) = %d, want %d", c.src, got, c.epoch)
		}
	}
	for _, c := range []struct {
		asked, epoch int32
		end          int64
	}{
		{3, 3, 110}, {4, 3, 110}, {5, 5, 10000}, {6, 5, 10000}, {7, 7, 10010},
		{9, 9, 10010}, // a presented epoch above the source's: the mirrored end
		{2, -1, -1},   // below every epoch
	} {
		e, end := p.EpochEnd(c.asked)
		if e != c.epoch || end != c.end {
			t.Errorf("EpochEnd(%d) = (%d, %d), want (%d, %d)", c.asked, e, end, c.epoch, c.end)
		}
	}
}

func TestAtAndDedup(t *testing.T) {
	p := sample()
	if e, ok := p.At(30); !ok || e.Src != 130 || e.Filler {
		t.Fatalf("At(30) = %+v, %v", e, ok)
	}
	if e, ok := p.At(20); !ok || !e.Filler {
		t.Fatalf("At(20) = %+v, %v: want the filler", e, ok)
	}
	if _, ok := p.At(31); ok {
		t.Fatal("At(31): no batch starts there")
	}
	n := p.Len()
	// The writer's entries and a later ledger read overlap: nothing is held twice.
	p.add([]ledger.Entry{{Kind: ledger.KindBatch, Src: 130, Last: 139, D: 30, Count: 10, Epoch: 5},
		{Kind: ledger.KindBatch, Src: 10010, Last: 10019, D: 50, Count: 10, Epoch: 7}})
	if p.Len() != n+1 {
		t.Fatalf("Len = %d after an overlapping add, want %d", p.Len(), n+1)
	}
}

// Entries handed over past the index's end (a gap: the index never saw the entries between)
// are not taken; the index asks for a read of the ledger's tail, which fills the gap in order.
// Found by the fault campaign: a ledger append whose answer was lost landed, the writer retried
// its data after reading the ledger back, and the next write's entries reached the index first.
func TestAddLeavesNoGap(t *testing.T) {
	es := []ledger.Entry{
		{Kind: ledger.KindSegment, Src: 0},
		{Kind: ledger.KindBatch, Src: 0, Last: 9, D: 0, Count: 10, Epoch: 1},
		{Kind: ledger.KindControl, Src: 10, Last: 10, D: 10, Count: 1, Epoch: 1, Marker: ledger.MarkerCommit, Raw: []byte{1}},
		{Kind: ledger.KindBatch, Src: 11, Last: 12, D: 11, Count: 2, Epoch: 1},
	}
	p := NewPartition(es[:2])
	p.add(es[3:]) // the marker at D 10 was never handed over
	if p.Len() != 1 || !p.NeedsRefresh() {
		t.Fatalf("after a gap: %d entries, refresh asked %v; want the entry left out and a refresh", p.Len(), p.NeedsRefresh())
	}
	p.stale.Store(false) // what the refresh does before reading the ledger's tail
	p.add(es)            // the ledger's tail, in order
	if p.Len() != 3 || p.NeedsRefresh() {
		t.Fatalf("after the ledger's tail: %d entries, refresh asked %v", p.Len(), p.NeedsRefresh())
	}
	if e, ok := p.At(10); !ok || !e.Control || e.Src != 10 {
		t.Fatalf("At(10) = %+v, %v: want the marker", e, ok)
	}
	if got := p.ToSource(11); got != 11 {
		t.Fatalf("ToSource(11) = %d, want 11", got)
	}
}

// An index read while the partition was empty, which another offsetgate instance then wrote,
// and which this process's writer took over after that instance stopped: the writer's entries
// are not taken (an empty index cannot tell they do not follow what it read), and the read of
// the ledger that the index asks for builds it from the start. Taking them started the index
// at the takeover, and every read through this process below it found nothing, for good.
func TestHandOverToEmptyIndex(t *testing.T) {
	es := []ledger.Entry{
		{Kind: ledger.KindOwner, Src: -1, Owner: "a"},
		{Kind: ledger.KindSegment, Src: 0},
		{Kind: ledger.KindBatch, Src: 0, Last: 9, D: 0, Count: 10, Epoch: 1}, // instance a's
		{Kind: ledger.KindOwner, Src: -1, Owner: "b"},                        // the takeover
		{Kind: ledger.KindBatch, Src: 10, Last: 19, D: 10, Count: 10, Epoch: 1},
	}
	id := catalog.TopicID{1}
	v := &View{parts: map[key]*Partition{}}
	p := v.part(id, 0)
	p.loaded.Store(true) // read while the ledger was empty
	v.Record(id, 0, 4, es[4:])
	if p.Len() != 0 || !p.NeedsRefresh() {
		t.Fatalf("the writer's entries handed to an empty index: %d entries, refresh asked %v; want none taken and a refresh", p.Len(), p.NeedsRefresh())
	}
	p.stale.Store(false) // what the refresh does: read the ledger, in order
	for i, e := range es {
		p.addAt(int64(i), e)
	}
	p.ledgerNext = int64(len(es))
	if p.Len() != 2 || p.NeedsRefresh() {
		t.Fatalf("after the ledger: %d entries, refresh asked %v", p.Len(), p.NeedsRefresh())
	}
	if e, ok := p.At(0); !ok || e.Src != 0 {
		t.Fatalf("At(0) = %+v, %v: want instance a's batch", e, ok)
	}
	// From then on the writer's entries follow the index.
	v.Record(id, 0, 5, []ledger.Entry{{Kind: ledger.KindBatch, Src: 20, Last: 29, D: 20, Count: 10, Epoch: 1}})
	if p.Len() != 3 || p.NeedsRefresh() {
		t.Fatalf("the writer's next entry: %d entries, refresh asked %v", p.Len(), p.NeedsRefresh())
	}
	// Another instance appended a compaction rewrite at 6 the index never saw; this process's
	// writer appends at 7: not taken (the rewrite would never be applied), a refresh instead.
	v.Record(id, 0, 7, []ledger.Entry{{Kind: ledger.KindBatch, Src: 30, Last: 39, D: 30, Count: 10, Epoch: 1}})
	if p.Len() != 3 || !p.NeedsRefresh() {
		t.Fatalf("entries handed over past a gap in ledger offsets: %d entries, refresh asked %v", p.Len(), p.NeedsRefresh())
	}
}

// Entries below D's log start are dropped in whole pages; what a client can still read maps as
// before, epochs are kept, and the last page always stays.
func TestTrimBelow(t *testing.T) {
	const n = 12 * pageSize
	es := []ledger.Entry{{Kind: ledger.KindSegment, Src: 1000, Delta: 1000}}
	for i := int64(0); i < n; i++ {
		epoch := int32(1)
		if i >= n/2 {
			epoch = 2
		}
		// Batches of 10 records; every 7th is a filled hole.
		kind := ledger.KindBatch
		if i%7 == 3 {
			kind = ledger.KindFiller
		}
		es = append(es, ledger.Entry{Kind: kind, Src: 1000 + 10*i, Last: 1009 + 10*i, D: 10 * i, Count: 10, Epoch: epoch})
	}
	full, p := NewPartition(es), NewPartition(es)

	if got := p.TrimBelow(10 * (pageSize - 1)); got != 0 {
		t.Fatalf("dropped %d entries below %d: no whole page lies below", got, 10*(pageSize-1))
	}
	logStart := int64(10*3*pageSize + 5) // inside the first entry of the fourth page
	if got := p.TrimBelow(logStart); got != 3*pageSize {
		t.Fatalf("dropped %d entries, want %d", got, 3*pageSize)
	}
	if p.Len() != n-3*pageSize {
		t.Fatalf("%d entries left, want %d", p.Len(), n-3*pageSize)
	}
	for d := logStart; d < 10*n+20; d += 3 {
		if a, b := p.ToSource(d), full.ToSource(d); a != b {
			t.Fatalf("ToSource(%d) = %d after the trim, %d before", d, a, b)
		}
		src := full.ToSource(d)
		if a, b := p.ToDest(src), full.ToDest(src); a != b {
			t.Fatalf("ToDest(%d) = %d after the trim, %d before", src, a, b)
		}
		if a, b := p.CommitToDest(src), full.CommitToDest(src); a != b {
			t.Fatalf("CommitToDest(%d) = %d after the trim, %d before", src, a, b)
		}
	}
	for _, epoch := range []int32{0, 1, 2, 3} {
		e1, o1 := p.EpochEnd(epoch)
		e2, o2 := full.EpochEnd(epoch)
		if e1 != e2 || o1 != o2 {
			t.Fatalf("EpochEnd(%d) = %d,%d after the trim, %d,%d before", epoch, e1, o1, e2, o2)
		}
	}
	// Everything below: the last page stays.
	p.TrimBelow(10*n + 100)
	if p.Len() != pageSize || p.DestEnd() != full.DestEnd() || p.End() != full.End() {
		t.Fatalf("after trimming past the end: %d entries, ends %d/%d (want %d, %d/%d)", p.Len(), p.DestEnd(), p.End(), pageSize, full.DestEnd(), full.End())
	}
}

// Transactions: the last stable offset stops at the earliest open transaction, and aborted
// ones are listed for the ranges they overlap, as the source's broker lists them.
func TestTransactions(t *testing.T) {
	const txn = 0x10
	p := NewPartition([]ledger.Entry{
		{Kind: ledger.KindSegment, Src: 10, Delta: 10},
		{Kind: ledger.KindBatch, Src: 10, Last: 11, D: 0, Count: 2, Attrs: txn, SrcPID: 5},
		{Kind: ledger.KindBatch, Src: 12, Last: 12, D: 2, Count: 1, SrcPID: 9},
		{Kind: ledger.KindBatch, Src: 13, Last: 13, D: 3, Count: 1, Attrs: txn, SrcPID: 6},
	})
	if got := p.LastStable(); got != 10 {
		t.Fatalf("LastStable with two open transactions = %d, want 10", got)
	}
	p.add([]ledger.Entry{
		{Kind: ledger.KindControl, Src: 14, Last: 14, D: 4, Count: 1, SrcPID: 5, Marker: ledger.MarkerAbort, Raw: []byte{1}},
		{Kind: ledger.KindControl, Src: 15, Last: 15, D: 5, Count: 1, SrcPID: 6, Marker: ledger.MarkerCommit, Raw: []byte{2}},
	})
	if got := p.LastStable(); got != -1 {
		t.Fatalf("LastStable with none open = %d, want -1 (the high watermark)", got)
	}
	p.add([]ledger.Entry{{Kind: ledger.KindBatch, Src: 16, Last: 17, D: 6, Count: 2, Attrs: txn, SrcPID: 5}})
	if got := p.LastStable(); got != 16 {
		t.Fatalf("LastStable with a new open transaction = %d, want 16", got)
	}
	for _, c := range []struct {
		from, to int64
		want     string
	}{{0, 20, "[{5 10 14}]"}, {11, 12, "[{5 10 14}]"}, {14, 20, "[{5 10 14}]"}, {15, 20, "[]"}, {0, 10, "[]"}} {
		if got := fmt.Sprint(p.AbortedIn(c.from, c.to)); got != c.want {
			t.Errorf("AbortedIn(%d, %d) = %s, want %s", c.from, c.to, got, c.want)
		}
	}
	if e, ok := p.At(4); !ok || !e.Control || len(e.Raw) == 0 {
		t.Fatalf("the abort marker's entry: %+v", e)
	}
}
