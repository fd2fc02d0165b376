package session

import (
	"encoding/binary"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/batch"
	"offsetgate/catalog"
	"offsetgate/ledger"
	"offsetgate/view"
)

// srcBatch builds a source batch: base offset, n records, leader epoch, producer fields.
func srcBatch(base int64, n int, epoch int32) []byte {
	var recs []byte
	for i := 0; i < n; i++ {
		r := kmsg.Record{OffsetDelta: int32(i), Key: []byte{'k', byte(i)}, Value: []byte("value")}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		recs = r.AppendTo(recs)
	}
	b := kmsg.RecordBatch{FirstOffset: base, PartitionLeaderEpoch: epoch, Magic: 2, LastOffsetDelta: int32(n - 1),
		FirstTimestamp: 1000, MaxTimestamp: 1000, ProducerID: 42, ProducerEpoch: 3, FirstSequence: 9, NumRecords: int32(n), Records: recs}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[8:], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[17:], batch.CRC(out))
	return out
}

// onD is what D holds for a source batch written through offsetgate at D offset d.
func onD(src []byte, d int64, epoch int32) []byte {
	b := batch.ForDestination(src, batch.Producer{ID: 7, Epoch: 0, Sequence: 100})
	binary.BigEndian.PutUint64(b[0:], uint64(d))
	binary.BigEndian.PutUint32(b[12:], uint32(epoch))
	return b
}

func entry(src []byte, d int64) ledger.Entry {
	h, _ := batch.ReadHeader(src)
	return ledger.Entry{Kind: ledger.KindBatch, Src: h.BaseOffset, Last: h.LastOffset(), D: d, Count: h.LastOffsetDelta + 1,
		Epoch: h.LeaderEpoch, CRC: h.CRC, Len: h.Length, Attrs: h.Attributes, MaxTS: h.MaxTimestamp,
		SrcPID: h.ProducerID, SrcPEpoch: h.ProducerEpoch, SrcSeq: h.BaseSequence}
}

// D's answer holds batch A, a filler, batch B and the start of a batch C: the client gets A and B
// exactly as the source had them (same bytes, same CRC), no filler, no partial batch; a batch the
// index does not know ends the records and marks the index stale.
func TestRestorePartition(t *testing.T) {
	a, b, c := srcBatch(100, 3, 5), srcBatch(110, 2, 6), srcBatch(112, 4, 6)
	filler := batch.Filler(7, 1000, batch.Producer{ID: 7, Sequence: 103}, false)
	binary.BigEndian.PutUint64(filler[0:], 3)
	pv := view.NewPartition([]ledger.Entry{
		entry(a, 0),
		{Kind: ledger.KindFiller, Src: 103, Last: 109, D: 3, Count: 7},
		entry(b, 10),
		entry(c, 12),
	})
	var recs []byte
	recs = append(recs, onD(a, 0, 2)...)
	recs = append(recs, filler...)
	recs = append(recs, onD(b, 10, 2)...)
	partial := onD(c, 12, 2)
	recs = append(recs, partial[:len(partial)-5]...)
	p := kmsg.FetchResponseTopicPartition{HighWatermark: 16, LastStableOffset: 16, LogStartOffset: 0, RecordBatches: recs}
	if !restorePartition(pv, &p, false, false) {
		t.Fatal("restore reported an unknown batch")
	}
	want := append(append([]byte(nil), a...), b...)
	if string(p.RecordBatches) != string(want) {
		t.Fatalf("restored records differ from the source's:\n got %x\nwant %x", p.RecordBatches, want)
	}
	if p.HighWatermark != 116 || p.LastStableOffset != 116 || p.LogStartOffset != 100 {
		t.Fatalf("bounds %d/%d/%d, want 116/116/100", p.HighWatermark, p.LastStableOffset, p.LogStartOffset)
	}

	// A batch the index has not seen: served up to it, the index marked stale.
	unknown := srcBatch(116, 1, 6)
	p = kmsg.FetchResponseTopicPartition{HighWatermark: 17, RecordBatches: append(onD(c, 12, 2), onD(unknown, 16, 2)...)}
	if restorePartition(pv, &p, false, false) {
		t.Fatal("an unknown batch was not reported")
	}
	if string(p.RecordBatches) != string(c) || !pv.NeedsRefresh() {
		t.Fatalf("unknown batch: records %x, stale %v", p.RecordBatches, pv.NeedsRefresh())
	}
	// Fillers only: nothing.
	p = kmsg.FetchResponseTopicPartition{HighWatermark: 16, RecordBatches: filler}
	restorePartition(pv, &p, false, false)
	if len(p.RecordBatches) != 0 {
		t.Fatalf("a fillers-only answer gave %d bytes", len(p.RecordBatches))
	}
}

// After promotion, batches written by ordinary producers beyond the ledger are served shifted
// like the last mirrored batch, with epochs in the presented space; before the ledger's end an
// unknown batch still ends the records.
func TestRestorePromoted(t *testing.T) {
	a := srcBatch(100, 3, 5)
	pv := view.NewPartition([]ledger.Entry{entry(a, 0)})
	after := srcBatch(0, 2, 1) // as an ordinary producer's batch lands on D: D offset 3, D epoch 1
	binary.BigEndian.PutUint64(after[0:], 3)
	p := kmsg.FetchResponseTopicPartition{HighWatermark: 5, RecordBatches: append(onD(a, 0, 1), after...)}
	if !restorePartition(pv, &p, true, false) {
		t.Fatal("a batch after the ledger's end was taken for an unknown one")
	}
	bs, hs, err := batch.Split(p.RecordBatches)
	if err != nil || len(bs) != 2 {
		t.Fatalf("%d batches, %v", len(bs), err)
	}
	if hs[1].BaseOffset != 103 || hs[1].LeaderEpoch != 6 || !batch.Valid(bs[1]) {
		t.Fatalf("batch after promotion: base %d epoch %d valid %v; want 103, 6 (5 + 1), valid", hs[1].BaseOffset, hs[1].LeaderEpoch, batch.Valid(bs[1]))
	}
	if p.HighWatermark != 105 {
		t.Fatalf("high watermark %d, want 105", p.HighWatermark)
	}
}

// txnBatch is srcBatch marked transactional for producer pid.
func txnBatch(base int64, n int, pid int64) []byte {
	b := srcBatch(base, n, 5)
	binary.BigEndian.PutUint16(b[21:], batch.AttrTransactional)
	binary.BigEndian.PutUint64(b[43:], uint64(pid))
	binary.BigEndian.PutUint32(b[17:], batch.CRC(b))
	return b
}

func abortMarker(base int64, pid int64) []byte {
	r := kmsg.Record{Key: (&kmsg.ControlRecordKey{Type: 0}).AppendTo(nil), Value: (&kmsg.EndTxnMarker{CoordinatorEpoch: 1}).AppendTo(nil)}
	r.Length = int32(len(r.AppendTo(nil)) - 1)
	b := kmsg.RecordBatch{FirstOffset: base, PartitionLeaderEpoch: 5, Magic: 2, Attributes: batch.AttrControl | batch.AttrTransactional,
		FirstTimestamp: 1000, MaxTimestamp: 1000, ProducerID: pid, ProducerEpoch: 3, FirstSequence: -1, NumRecords: 1, Records: r.AppendTo(nil)}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[8:], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[17:], batch.CRC(out))
	return out
}

// A transaction comes back as the source had it: its batches with their transactional bit,
// the ABORT marker byte for byte where D holds a filler; read_uncommitted sees everything,
// read_committed stops at the open transaction and names the aborted one.
func TestRestoreTransactions(t *testing.T) {
	aborted, marker, plain, open := txnBatch(100, 3, 42), abortMarker(103, 42), srcBatch(104, 2, 5), txnBatch(106, 1, 50)
	ctl := ledger.Entry{Kind: ledger.KindControl, Src: 103, Last: 103, D: 3, Count: 1, SrcPID: 42, Marker: ledger.MarkerAbort, Raw: marker}
	filler := batch.Filler(1, 1000, batch.Producer{ID: 7, Sequence: 103}, false)
	binary.BigEndian.PutUint64(filler[0:], 3)
	var d []byte
	d = append(d, onD(aborted, 0, 2)...)
	d = append(d, filler...)
	d = append(d, onD(plain, 4, 2)...)
	d = append(d, onD(open, 6, 2)...)
	for _, committed := range []bool{false, true} {
		pv := view.NewPartition([]ledger.Entry{entry(aborted, 0), ctl, entry(plain, 4), entry(open, 6)})
		p := kmsg.FetchResponseTopicPartition{HighWatermark: 7, LastStableOffset: 7, RecordBatches: append([]byte(nil), d...)}
		if !restorePartition(pv, &p, false, committed) {
			t.Fatal("a known answer marked the index stale")
		}
		want := append(append(append([]byte(nil), aborted...), marker...), plain...)
		if !committed {
			want = append(want, open...)
		}
		if string(p.RecordBatches) != string(want) {
			t.Fatalf("committed=%v: served %d bytes, not the source's %d", committed, len(p.RecordBatches), len(want))
		}
		if p.LastStableOffset != 106 || p.HighWatermark != 107 {
			t.Fatalf("committed=%v: high watermark %d, last stable %d; want 107, 106", committed, p.HighWatermark, p.LastStableOffset)
		}
		switch {
		case committed && (len(p.AbortedTransactions) != 1 || p.AbortedTransactions[0].ProducerID != 42 || p.AbortedTransactions[0].FirstOffset != 100):
			t.Fatalf("aborted transactions %+v, want producer 42 from 100", p.AbortedTransactions)
		case !committed && len(p.AbortedTransactions) != 0:
			t.Fatalf("read_uncommitted answer names aborted transactions: %+v", p.AbortedTransactions)
		}
	}

	// The open transaction's marker was mirrored through another instance: D holds more than
	// this index knows, though the read_committed answer stops at the open transaction before
	// reaching it. The index is marked stale all the same, so it is read again before the next
	// fetch; else its last stable offset would hold the consumer there for good (the
	// two-instance fault campaign's read_committed consumer waited 80 s for another refresh).
	for _, committed := range []bool{false, true} {
		pv := view.NewPartition([]ledger.Entry{entry(aborted, 0), ctl, entry(plain, 4), entry(open, 6)})
		p := kmsg.FetchResponseTopicPartition{HighWatermark: 8, LastStableOffset: 8, RecordBatches: append([]byte(nil), d...)}
		fresh := restorePartition(pv, &p, false, committed)
		if committed && (fresh || !pv.NeedsRefresh()) {
			t.Fatalf("read_committed, D beyond the index: fresh %v, stale %v; want the index read again", fresh, pv.NeedsRefresh())
		}
		if !committed && (!fresh || pv.NeedsRefresh()) {
			// The batches reach the index's end: the next fetch shows the rest as unseen.
			t.Fatalf("read_uncommitted, D beyond the index: fresh %v, stale %v; want neither", fresh, pv.NeedsRefresh())
		}
		if committed && p.LastStableOffset != 106 {
			t.Fatalf("last stable %d, want 106 (the index's until it is read again)", p.LastStableOffset)
		}
	}
}

// A consumer caught up with the mirror at a filled hole: its fetch goes to D past the fillers,
// which the ledger holds before D does, and D answers OFFSET_OUT_OF_RANGE. The client is
// answered as the source answers a fetch at its end (nothing, no error, its own offset as the
// high watermark), not told to reset; a fetch not moved past fillers gets D's error as it is.
func TestFetchPastUnlandedFillers(t *testing.T) {
	a, b := srcBatch(100, 3, 5), srcBatch(110, 2, 5)
	entries := []ledger.Entry{entry(a, 0), {Kind: ledger.KindFiller, Src: 103, Last: 109, D: 3, Count: 7}, entry(b, 10)}
	for _, version := range []int16{11, 13} {
		for _, at := range []int64{103, 100} {
			fc := &fakeConn{}
			s := New(Config{Catalog: mirrorCatalog{true}, View: fixedView{view.NewPartition(entries)}}, fc)
			req := kmsg.NewPtrFetchRequest()
			req.SetVersion(version)
			req.ReplicaID, req.SessionEpoch = -1, -1
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic, rt.TopicID = "orders", catalog.TopicID{1}
			rp := kmsg.NewFetchRequestTopicPartition()
			rp.FetchOffset = at
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
			if _, err := s.HandleClient(reqFrame(req, 3)); err != nil {
				t.Fatal(err)
			}
			var sent kmsg.FetchRequest
			readForwarded(t, frames(t, fc.upstream.Bytes())[0], &sent)
			wantD := int64(0)
			if at == 103 {
				wantD = 10 // past the fillers
			}
			if got := sent.Topics[0].Partitions[0].FetchOffset; got != wantD {
				t.Fatalf("v%d: source offset %d fetched from D at %d, want %d", version, at, got, wantD)
			}
			resp := kmsg.NewPtrFetchResponse()
			resp.SetVersion(version)
			ft := kmsg.NewFetchResponseTopic()
			ft.Topic, ft.TopicID = "orders", catalog.TopicID{1}
			pp := kmsg.NewFetchResponseTopicPartition()
			pp.ErrorCode, pp.HighWatermark, pp.LastStableOffset, pp.LogStartOffset = kerr.OffsetOutOfRange.Code, -1, -1, -1
			ft.Partitions = append(ft.Partitions, pp)
			resp.Topics = append(resp.Topics, ft)
			if _, err := s.HandleUpstream(respFrame(3, resp.IsFlexible(), resp)); err != nil {
				t.Fatal(err)
			}
			var got kmsg.FetchResponse
			readAnswer(t, frames(t, fc.client.Bytes())[0], &got, version)
			p := got.Topics[0].Partitions[0]
			switch at {
			case 103:
				if p.ErrorCode != 0 || len(p.RecordBatches) != 0 || p.HighWatermark != 103 || p.LastStableOffset != 103 {
					t.Fatalf("v%d: fetch in the hole answered error %d, %d bytes, high watermark %d, last stable %d; want nothing at 103",
						version, p.ErrorCode, len(p.RecordBatches), p.HighWatermark, p.LastStableOffset)
				}
			default:
				if p.ErrorCode != kerr.OffsetOutOfRange.Code {
					t.Fatalf("v%d: fetch at %d answered error %d, want D's OFFSET_OUT_OF_RANGE", version, at, p.ErrorCode)
				}
			}
		}
	}
}
