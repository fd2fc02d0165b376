package view

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/batch"
	"offsetgate/ledger"
)

// marker is a source transaction marker batch: commit or abort, by producer pid at epoch, from
// coordinator epoch coord, at timestamp ts.
func marker(t *testing.T, base, pid int64, epoch int16, commit bool, coord int32, ts int64) []byte {
	t.Helper()
	typ := int16(0)
	if commit {
		typ = 1
	}
	r := kmsg.Record{TimestampDelta64: 3, Key: (&kmsg.ControlRecordKey{Type: kmsg.ControlRecordKeyType(typ)}).AppendTo(nil),
		Value: (&kmsg.EndTxnMarker{CoordinatorEpoch: coord}).AppendTo(nil)}
	r.Length = int32(len(r.AppendTo(nil)) - 1)
	b := kmsg.RecordBatch{FirstOffset: base, Magic: 2, Attributes: batch.AttrControl | batch.AttrTransactional,
		FirstTimestamp: ts - 3, MaxTimestamp: ts, ProducerID: pid, ProducerEpoch: epoch, FirstSequence: -1, NumRecords: 1, Records: r.AppendTo(nil)}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[8:], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[17:], batch.CRC(out))
	return out
}

// The producer states DescribeProducers shows are the source broker's, rebuilt from the
// mirrored entries: sequences, epochs bumped by transactions v2 markers, coordinator epochs
// and open transactions' first offsets in source terms; fillers, batches without a producer
// and producers idle past the expiry are not listed; offsetgate's own destination producers
// are known as writers.
func TestProducers(t *testing.T) {
	now := time.Now()
	recent := now.Add(-time.Minute).UnixMilli()
	data := func(src, last, d int64, pid int64, epoch int16, seq int32, ts int64, txn bool) ledger.Entry {
		attrs := int16(0)
		if txn {
			attrs = batch.AttrTransactional
		}
		return ledger.Entry{Kind: ledger.KindBatch, Src: src, Last: last, D: d, Count: int32(last - src + 1), Attrs: attrs,
			MaxTS: ts, SrcPID: pid, SrcPEpoch: epoch, SrcSeq: seq, PID: 7, PEpoch: 0, Seq: int32(d)}
	}
	ctl := func(src, d, pid int64, epoch int16, commit bool, coord int32, ts int64) ledger.Entry {
		kind := ledger.MarkerAbort
		if commit {
			kind = ledger.MarkerCommit
		}
		return ledger.Entry{Kind: ledger.KindControl, Src: src, Last: src, D: d, Count: 1, SrcPID: pid, SrcPEpoch: epoch,
			Attrs: batch.AttrControl | batch.AttrTransactional, Marker: kind, Raw: marker(t, src, pid, epoch, commit, coord, ts), PID: 8}
	}
	p := NewPartition([]ledger.Entry{
		{Kind: ledger.KindFiller, Src: 0, Last: 99, D: 0, Count: 100, PID: 7},
		data(100, 102, 100, 11, 0, 0, recent, false),                             // idempotent: sequences 0-2
		data(103, 104, 103, 11, 0, 3, recent+5, false),                           // then 3-4
		data(105, 105, 105, -1, -1, -1, recent, false),                           // no producer: not tracked
		data(106, 107, 106, 12, 4, 10, recent, true),                             // transaction, committed below
		ctl(108, 108, 12, 5, true, 9, recent+20),                                 // TV2 marker: epoch 5, no sequence yet
		data(109, 109, 109, 13, 2, 0, recent, true),                              // transaction left open
		data(110, 110, 110, 14, 0, 2147483647, recent, false),                    // the largest sequence
		data(111, 112, 111, 14, 0, 0, recent+1, false),                           // wraps to 0-1
		data(113, 113, 113, 15, 0, 0, now.Add(-25*time.Hour).UnixMilli(), false), // expired
		data(114, 114, 114, 16, 1, 0, now.Add(-25*time.Hour).UnixMilli(), true),  // idle but open: kept
	})
	got := p.Producers(now)
	want := []Producer{
		{ID: 11, Epoch: 0, LastSequence: 4, LastTimestamp: recent + 5, CoordinatorEpoch: -1, TxnStart: -1},
		{ID: 12, Epoch: 5, LastSequence: -1, LastTimestamp: recent + 20, CoordinatorEpoch: 9, TxnStart: -1},
		{ID: 13, Epoch: 2, LastSequence: 0, LastTimestamp: recent, CoordinatorEpoch: -1, TxnStart: 109},
		{ID: 14, Epoch: 0, LastSequence: 1, LastTimestamp: recent + 1, CoordinatorEpoch: -1, TxnStart: -1},
		{ID: 16, Epoch: 1, LastSequence: 0, LastTimestamp: now.Add(-25 * time.Hour).UnixMilli(), CoordinatorEpoch: -1, TxnStart: 114},
	}
	if len(got) != len(want) {
		t.Fatalf("producers %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("producer %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	for pid, writer := range map[int64]bool{7: true, 8: true, 11: false, 12: false} {
		if p.Writer(pid) != writer {
			t.Fatalf("Writer(%d) = %v, want %v", pid, !writer, writer)
		}
	}

	// A marker of the same epoch (transactions v1) keeps the producer's last sequence.
	q := NewPartition([]ledger.Entry{data(0, 1, 0, 21, 3, 7, recent, true), ctl(2, 2, 21, 3, false, 4, recent+9)})
	if got := q.Producers(now); len(got) != 1 || got[0] != (Producer{ID: 21, Epoch: 3, LastSequence: 8, LastTimestamp: recent + 9, CoordinatorEpoch: 4, TxnStart: -1}) {
		t.Fatalf("after a same-epoch abort: %+v", got)
	}
}

// Expired producers are dropped from memory as entries arrive, not kept for every producer a
// long history ever had.
func TestProducersPruned(t *testing.T) {
	old := time.Now().Add(-48 * time.Hour).UnixMilli()
	var es []ledger.Entry
	for i := int64(0); i < 5000; i++ {
		es = append(es, ledger.Entry{Kind: ledger.KindBatch, Src: i, Last: i, D: i, Count: 1, MaxTS: old, SrcPID: 1000 + i, SrcSeq: 0, PID: 7})
	}
	p := NewPartition(es)
	p.mu.RLock()
	held := len(p.producers)
	p.mu.RUnlock()
	if held >= minPrune+1 {
		t.Fatalf("%d expired producers held in memory, want fewer than %d", held, minPrune+1)
	}
	if got := p.Producers(time.Now()); len(got) != 0 {
		t.Fatalf("%d expired producers listed", len(got))
	}
}

// BenchmarkAdd is the cost of indexing an entry (a view load's per-entry work past decoding),
// producer states included: a million entries of 64 producers.
func BenchmarkAdd(b *testing.B) {
	es := make([]ledger.Entry, 1<<20)
	ts := time.Now().UnixMilli()
	for i := range es {
		es[i] = ledger.Entry{Kind: ledger.KindBatch, Src: int64(i), Last: int64(i), D: int64(i), Count: 1, MaxTS: ts,
			SrcPID: int64(i % 64), SrcSeq: int32(i / 64), PID: 7}
	}
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		p := &Partition{}
		for i := range es {
			p.addLocked(int64(i), es[i])
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(es)), "ns/entry")
}

// A producer's batch older than the batches SourceProducer looks at is still known to have
// been mirrored, from the producer's state: a retry of it after a promotion is refused rather
// than written twice. Another epoch of the producer is not the same producer.
func TestSourceProducerBeyondWindow(t *testing.T) {
	ts := time.Now().UnixMilli()
	es := []ledger.Entry{{Kind: ledger.KindBatch, Src: 0, Last: 2, D: 0, Count: 3, MaxTS: ts, SrcPID: 11, SrcPEpoch: 1, SrcSeq: 0, PID: 7}}
	for i := int64(3); i < 3+100; i++ {
		es = append(es, ledger.Entry{Kind: ledger.KindBatch, Src: i, Last: i, D: i, Count: 1, MaxTS: ts, SrcPID: 12, SrcSeq: int32(i - 3), PID: 7})
	}
	p := NewPartition(es)
	if m := p.SourceProducer(11, 1, 0, 1000); !m.Found || m.Src != 0 || !m.Seen || m.LastSeq != 2 {
		t.Fatalf("within the window: %+v", m)
	}
	if m := p.SourceProducer(11, 1, 0, 50); m.Found || !m.Seen || m.LastSeq != 2 {
		t.Fatalf("beyond the window: %+v, want seen with last sequence 2", m)
	}
	if m := p.SourceProducer(11, 2, 0, 50); m.Seen || m.Found {
		t.Fatalf("another epoch: %+v, want unknown", m)
	}
}
