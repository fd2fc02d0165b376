package atoffset

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/batch"
	"offsetgate/ledger"
)

// src is a source batch of n records at base with a leader epoch and attributes.
func src(base int64, n int, epoch int32, attrs int16) []byte {
	var recs []byte
	for i := 0; i < n; i++ {
		r := kmsg.Record{OffsetDelta: int32(i), Key: []byte(fmt.Sprintf("k%d", base+int64(i))), Value: []byte("v")}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		recs = r.AppendTo(recs)
	}
	b := kmsg.RecordBatch{FirstOffset: base, PartitionLeaderEpoch: epoch, Magic: 2, Attributes: attrs, LastOffsetDelta: int32(n - 1),
		FirstTimestamp: 1000, MaxTimestamp: 1000, ProducerID: 7, ProducerEpoch: 1, FirstSequence: int32(base), NumRecords: int32(n), Records: recs}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[8:], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[17:], batch.CRC(out))
	return out
}

// marker is a transaction's COMMIT or ABORT control batch at base, as a coordinator writes it.
func marker(base int64, commit bool) []byte {
	typ := kmsg.ControlRecordKeyType(0)
	if commit {
		typ = 1
	}
	r := kmsg.Record{Key: (&kmsg.ControlRecordKey{Type: typ}).AppendTo(nil), Value: (&kmsg.EndTxnMarker{CoordinatorEpoch: 2}).AppendTo(nil)}
	r.Length = int32(len(r.AppendTo(nil)) - 1)
	b := kmsg.RecordBatch{FirstOffset: base, PartitionLeaderEpoch: 1, Magic: 2, Attributes: batch.AttrControl | batch.AttrTransactional,
		FirstTimestamp: 1000, MaxTimestamp: 1000, ProducerID: 7, ProducerEpoch: 1, FirstSequence: -1, NumRecords: 1, Records: r.AppendTo(nil)}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[8:], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[17:], batch.CRC(out))
	return out
}

func split(t *testing.T, bs ...[]byte) ([][]byte, []batch.Header) {
	t.Helper()
	var all []byte
	for _, b := range bs {
		all = append(all, b...)
	}
	sets, hs, err := batch.Split(all)
	if err != nil {
		t.Fatal(err)
	}
	return sets, hs
}

// fresh is a partition nothing was mirrored to, into a destination that holds dEnd offsets.
func fresh(dEnd int64) State {
	return State{Next: -1, Epoch: -1, DNext: dEnd, PID: 40, PEpoch: 2}
}

// mirrored plans and applies batches, confirming their writes as D would.
func mirrored(t *testing.T, s State, bs ...[]byte) State {
	t.Helper()
	sets, hs := split(t, bs...)
	p := s.Plan(sets, hs, Options{MaxFill: 100})
	if p.Refusal.Code != 0 {
		t.Fatalf("setting up: %s", p.Refusal.Msg)
	}
	s.Apply(p)
	for _, w := range p.Writes {
		s.confirm(w.Entry.Src)
	}
	return s
}

func kinds(es []ledger.Entry) string {
	var out []string
	for _, e := range es {
		switch e.Kind {
		case ledger.KindSegment:
			out = append(out, fmt.Sprintf("segment(%d,Δ%d)", e.Src, e.Delta))
		default:
			out = append(out, fmt.Sprintf("%s(%d-%d@%d,seq%d)", e.Kind, e.Src, e.Last, e.D, e.Seq))
		}
	}
	return strings.Join(out, " ")
}

// The planner's rules, one case each. A case gives the state before, the request's batches,
// and either the refusal code or the ledger entries and writes it must plan.
func TestPlan(t *testing.T) {
	base := mirrored(t, fresh(0), src(0, 5, 1, 0), src(5, 5, 1, 0)) // [0,10) mirrored, epoch 1
	crashed := base
	crashed.Pending = []ledger.Entry{*crashed.find(5)} // D never confirmed [5,10)
	resync := base
	resync.Resync = true
	for name, c := range map[string]struct {
		st      State
		batches [][]byte
		code    int16
		entries string
		writes  int
		retries int
	}{
		"first batch starts the first segment at D's end": {st: fresh(0), batches: [][]byte{src(100, 3, 0, 0)},
			entries: "segment(100,Δ100) batch(100-102@0,seq0)", writes: 1},
		"into a non-empty destination the shift takes D's end": {st: fresh(7), batches: [][]byte{src(0, 2, 0, 0)},
			entries: "segment(0,Δ-7) batch(0-1@7,seq0)", writes: 1},
		"the next batch follows": {st: base, batches: [][]byte{src(10, 2, 1, 0)},
			entries: "batch(10-11@10,seq10)", writes: 1},
		"a hole within max_fill is filled": {st: base, batches: [][]byte{src(60, 2, 1, 0)},
			entries: "filler(10-59@10,seq10) batch(60-61@60,seq60)", writes: 2},
		"a hole of exactly max_fill is filled": {st: base, batches: [][]byte{src(110, 1, 1, 0)},
			entries: "filler(10-109@10,seq10) batch(110-110@110,seq110)", writes: 2},
		"a hole over max_fill starts a segment": {st: base, batches: [][]byte{src(111, 1, 1, 0)},
			entries: "segment(111,Δ101) batch(111-111@10,seq10)", writes: 1},
		"holes between the batches of one request": {st: base, batches: [][]byte{src(12, 1, 1, 0), src(500, 1, 2, 0)},
			entries: "filler(10-11@10,seq10) batch(12-12@12,seq12) segment(500,Δ487) batch(500-500@13,seq13)", writes: 3},
		"an exact resend of a confirmed batch is acknowledged, not written": {st: base, batches: [][]byte{src(5, 5, 1, 0)},
			entries: "", writes: 0},
		"a resend of confirmed batches then a new one": {st: base, batches: [][]byte{src(0, 5, 1, 0), src(5, 5, 1, 0), src(10, 1, 1, 0)},
			entries: "batch(10-10@10,seq10)", writes: 1},
		"after a crash the pending batch is retried with its own producer values": {st: crashed, batches: [][]byte{src(5, 5, 1, 0), src(10, 1, 1, 0)},
			entries: "batch(10-10@10,seq10)", writes: 2, retries: 1},
		"after a crash a new batch before the retry is refused": {st: crashed, batches: [][]byte{src(10, 1, 1, 0)}, code: ErrOutOfOrder},
		"a different batch at a pending offset is refused":      {st: crashed, batches: [][]byte{src(5, 4, 1, 0)}, code: ErrOutOfOrder},
		"a different batch at a confirmed offset is refused":    {st: base, batches: [][]byte{src(5, 5, 2, 0)}, code: ErrOutOfOrder},
		"a partial overlap is refused":                          {st: base, batches: [][]byte{src(8, 4, 1, 0)}, code: ErrOutOfOrder},
		"a lower epoch is refused":                              {st: mirrored(t, base, src(10, 1, 3, 0)), batches: [][]byte{src(11, 1, 2, 0)}, code: ErrFencedEpoch},
		"a higher epoch is taken": {st: base, batches: [][]byte{src(10, 1, 9, 0)},
			entries: "batch(10-10@10,seq10)", writes: 1},
		"after a failure a request past the mirrored end is refused": {st: resync, batches: [][]byte{src(12, 1, 1, 0)}, code: ErrOutOfOrder},
		"after a failure a request from the mirrored end is taken": {st: resync, batches: [][]byte{src(10, 1, 1, 0)},
			entries: "batch(10-10@10,seq10)", writes: 1},
		"a transactional batch is written (without the bit on D)": {st: base, batches: [][]byte{src(10, 2, 1, batch.AttrTransactional)},
			entries: "batch(10-11@10,seq10)", writes: 1},
		"a transaction marker is held by a filler": {st: base, batches: [][]byte{src(10, 2, 1, batch.AttrTransactional), marker(12, true)},
			entries: "batch(10-11@10,seq10) control(12-12@12,seq12)", writes: 2},
		"an exact resend of a confirmed marker is acknowledged": {st: mirrored(t, base, marker(10, false)), batches: [][]byte{marker(10, false)},
			entries: "", writes: 0},
		"a control batch that is not a transaction marker is refused": {st: base, batches: [][]byte{src(10, 1, 1, batch.AttrControl|batch.AttrTransactional)}, code: ErrInvalidRecord},
		"batches out of order are refused":                            {st: base, batches: [][]byte{src(20, 1, 1, 0), src(15, 1, 1, 0)}, code: ErrInvalidRecord},
	} {
		t.Run(name, func(t *testing.T) {
			before := kinds(c.st.Recent) + fmt.Sprint(c.st.Next, c.st.DNext, c.st.Seq, len(c.st.Pending))
			sets, hs := split(t, c.batches...)
			p := c.st.Plan(sets, hs, Options{MaxFill: 100})
			if after := kinds(c.st.Recent) + fmt.Sprint(c.st.Next, c.st.DNext, c.st.Seq, len(c.st.Pending)); after != before {
				t.Fatal("Plan changed the state it was given")
			}
			if p.Refusal.Code != c.code {
				t.Fatalf("code %d (%s), want %d", p.Refusal.Code, p.Refusal.Msg, c.code)
			}
			if c.code != 0 {
				if p.Refusal.Msg == "" || len(p.Entries)+len(p.Writes) != 0 {
					t.Fatalf("a refusal without a message, or with work: %+v", p)
				}
				return
			}
			if got := kinds(p.Entries); got != c.entries {
				t.Fatalf("entries\n got %s\nwant %s", got, c.entries)
			}
			retries := 0
			for i, w := range p.Writes {
				h, err := batch.ReadHeader(w.Data)
				if err != nil {
					t.Fatal(err)
				}
				if h.Attributes&(batch.AttrTransactional|batch.AttrControl) != 0 {
					t.Fatalf("write %d would give D a transactional or control batch (attributes %#x)", i, h.Attributes)
				}
				if w.Entry.Kind == ledger.KindControl && (len(w.Entry.Raw) == 0 || w.Entry.Marker == "") {
					t.Fatalf("control entry without its batch or marker: %+v", w.Entry)
				}
				if h.ProducerID != w.Entry.PID || h.BaseSequence != w.Entry.Seq || h.ProducerEpoch != w.Entry.PEpoch {
					t.Fatalf("write %d carries producer %d/%d/%d, its entry %d/%d/%d", i, h.ProducerID, h.ProducerEpoch, h.BaseSequence, w.Entry.PID, w.Entry.PEpoch, w.Entry.Seq)
				}
				if int64(h.LastOffsetDelta)+1 != int64(w.Entry.Count) {
					t.Fatalf("write %d holds %d offsets for an entry of %d", i, h.LastOffsetDelta+1, w.Entry.Count)
				}
				if w.Retry {
					retries++
				}
			}
			if len(p.Writes) != c.writes || retries != c.retries {
				t.Fatalf("%d writes (%d retries), want %d (%d)", len(p.Writes), retries, c.writes, c.retries)
			}
			// Applied, the state continues where the plan ends, with the new writes pending.
			s := c.st
			s.Apply(p)
			if c.writes > 0 && s.MirroredEnd() != p.Writes[0].Entry.Src && len(c.st.Pending) == 0 {
				t.Fatalf("mirrored end %d after applying, want the first pending write %d", s.MirroredEnd(), p.Writes[0].Entry.Src)
			}
			for _, w := range p.Writes {
				s.confirm(w.Entry.Src)
			}
			if len(s.Pending) != 0 {
				t.Fatalf("%d writes still pending after every one was confirmed", len(s.Pending))
			}
			if last := hs[len(hs)-1].LastOffset() + 1; s.Next != max(last, c.st.Next) {
				t.Fatalf("next %d, want %d", s.Next, max(last, c.st.Next))
			}
		})
	}
}

// A writer taking a partition over (and offsetgate status) rebuild from the ledger the state
// the writer had: replaying what the plans recorded gives the same state.
func TestReplay(t *testing.T) {
	s := fresh(3)
	var ledgerEntries []ledger.Entry
	for _, req := range [][][]byte{
		{src(100, 3, 1, 0)},
		{src(103, 2, 1, 0), src(110, 1, 2, 0)},
		{src(5000, 4, 2, 0)},
	} {
		sets, hs := split(t, req...)
		p := s.Plan(sets, hs, Options{MaxFill: 100})
		if p.Refusal.Code != 0 {
			t.Fatal(p.Refusal.Msg)
		}
		s.Apply(p)
		for _, w := range p.Writes {
			s.confirm(w.Entry.Src)
		}
		ledgerEntries = append(ledgerEntries, p.Entries...)
	}
	ledgerEntries = append(ledgerEntries, ledger.Entry{Kind: ledger.KindOwner, Owner: "a"})
	r := Replay(ledgerEntries)
	if r.Next != s.Next || r.DNext != s.DNext || r.Seq != s.Seq || r.Epoch != s.Epoch || r.PID != s.PID ||
		fmt.Sprint(r.Segments) != fmt.Sprint(s.Segments) || kinds(r.Recent) != kinds(s.Recent) {
		t.Fatalf("replayed %+v\nwriter had %+v", r.State, s)
	}
	if r.Batches != 4 || r.Fillers != 5 || r.Owner != "a" || r.Entries != len(ledgerEntries) {
		t.Fatalf("replayed batches %d fillers %d owner %q", r.Batches, r.Fillers, r.Owner)
	}
}

// cleaned is src(base, n, ...) as a compacted source's cleaner leaves it: only the records at
// the offset deltas kept, the batch's range, producer fields and first timestamp unchanged.
func cleaned(base int64, n int, epoch int32, kept ...int32) []byte {
	var recs []byte
	for _, d := range kept {
		r := kmsg.Record{OffsetDelta: d, Key: []byte(fmt.Sprintf("k%d", base+int64(d))), Value: []byte("v")}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		recs = r.AppendTo(recs)
	}
	b := kmsg.RecordBatch{FirstOffset: base, PartitionLeaderEpoch: epoch, Magic: 2, LastOffsetDelta: int32(n - 1),
		FirstTimestamp: 1000, MaxTimestamp: 1000, ProducerID: 7, ProducerEpoch: 1, FirstSequence: int32(base), NumRecords: int32(len(kept)), Records: recs}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[8:], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[17:], batch.CRC(out))
	return out
}

// Compaction: a gappy or empty batch is written as a dense copy with the batch kept in the
// ledger; fillers on a compacted topic are tombstones; a batch the source's cleaner changed
// since it was mirrored is recorded (a rewrite), never written again, and only where compaction
// explains it.
func TestPlanCompaction(t *testing.T) {
	compact := Options{MaxFill: 100, Compacted: true}
	base := mirrored(t, fresh(0), src(0, 5, 1, 0), src(5, 5, 1, 0))
	plan := func(st State, o Options, bs ...[]byte) Plan {
		sets, hs := split(t, bs...)
		return st.Plan(sets, hs, o)
	}
	// A gappy batch after a hole: both written, the hole as tombstones, the batch dense.
	p := plan(base, compact, cleaned(12, 4, 1, 1, 3))
	if p.Refusal.Code != 0 || kinds(p.Entries) != "filler(10-11@10,seq10) batch(12-15@12,seq12)" || len(p.Writes) != 2 {
		t.Fatalf("gappy batch: %s %s, %d writes", p.Refusal.Msg, kinds(p.Entries), len(p.Writes))
	}
	if e := p.Entries[1]; len(e.Raw) == 0 || e.Records != 2 {
		t.Fatalf("the gappy batch's entry keeps %d bytes and %d records", len(e.Raw), e.Records)
	}
	for _, w := range p.Writes {
		h, _ := batch.ReadHeader(w.Data)
		if h.Gappy() {
			t.Fatalf("D would get a gappy batch at %d", w.Entry.Src)
		}
	}
	if rs := fillerKeys(t, p.Writes[0].Data); rs != "offsetgate.filler,offsetgate.filler" {
		t.Fatalf("fillers on a compacted topic have keys %q", rs)
	}
	// An empty batch (kept for its producer's state).
	if p := plan(base, compact, cleaned(10, 3, 1)); p.Refusal.Code != 0 || kinds(p.Entries) != "batch(10-12@10,seq10)" {
		t.Fatalf("empty batch: %s %s", p.Refusal.Msg, kinds(p.Entries))
	}
	// The cleaner removed records of a mirrored batch: recorded, not written.
	p = plan(base, compact, src(0, 5, 1, 0), cleaned(5, 5, 1, 0, 4))
	if p.Refusal.Code != 0 || kinds(p.Entries) != "rewrite(5-9@5,seq0)" || len(p.Writes) != 0 {
		t.Fatalf("a cleaned batch sent again: %s %s, %d writes", p.Refusal.Msg, kinds(p.Entries), len(p.Writes))
	}
	after := base
	after.Recent = append([]ledger.Entry(nil), base.Recent...) // Apply changes entries in place
	after.Apply(p)
	if p := plan(after, compact, cleaned(5, 5, 1, 0, 4)); p.Refusal.Code != 0 || len(p.Entries) != 0 || len(p.Writes) != 0 {
		t.Fatalf("the cleaned batch sent once more is not an exact resend: %s %s", p.Refusal.Msg, kinds(p.Entries))
	}
	// Sent again in order, a batch the source no longer has is recorded as gone.
	three := mirrored(t, fresh(0), src(0, 5, 1, 0), src(5, 5, 1, 0), src(10, 5, 1, 0))
	if p := plan(three, compact, src(0, 5, 1, 0), src(10, 5, 1, 0)); p.Refusal.Code != 0 || len(p.Entries) != 1 || !p.Entries[0].Gone || p.Entries[0].Src != 5 {
		t.Fatalf("a batch the cleaner removed whole: %s %+v", p.Refusal.Msg, p.Entries)
	}
	if p := plan(three, Options{MaxFill: 100}, src(0, 5, 1, 0), src(10, 5, 1, 0)); len(p.Entries) != 0 {
		t.Fatalf("a batch left out of a resend on a topic that is not compacted was recorded gone: %+v", p.Entries)
	}
	// The request's from offset: the source has nothing between it and the first batch, so
	// what was mirrored there is gone, even before the first batch sent again, and even when
	// that batch is new.
	from := func(o Options, f int64) Options { o.HasFrom, o.From = true, f; return o }
	if p := plan(three, from(compact, 0), src(10, 5, 1, 0)); p.Refusal.Code != 0 || kinds(p.Entries) != "rewrite(0-4@0,seq0) rewrite(5-9@5,seq0)" || !p.Entries[0].Gone || !p.Entries[1].Gone {
		t.Fatalf("batches before the first one sent from 0: %s %s", p.Refusal.Msg, kinds(p.Entries))
	}
	if p := plan(three, from(compact, 3), src(16, 5, 1, 0)); p.Refusal.Code != 0 || kinds(p.Entries) != "rewrite(5-9@5,seq0) rewrite(10-14@10,seq0) filler(15-15@15,seq15) batch(16-20@16,seq16)" {
		t.Fatalf("batches gone before a new one: %s %s", p.Refusal.Msg, kinds(p.Entries))
	}
	if p := plan(three, compact, src(10, 5, 1, 0)); p.Refusal.Code != 0 || len(p.Entries) != 0 {
		t.Fatalf("without a from offset, a resend that starts later marks nothing gone: %s %s", p.Refusal.Msg, kinds(p.Entries))
	}
	if p := plan(three, from(Options{MaxFill: 100}, 0), src(10, 5, 1, 0)); p.Refusal.Code != 0 || len(p.Entries) != 0 {
		t.Fatalf("a topic that is not compacted lost batches: %s %s", p.Refusal.Msg, kinds(p.Entries))
	}
	if p := plan(three, from(compact, 11), src(10, 5, 1, 0)); p.Refusal.Code == 0 {
		t.Fatal("a from offset past the first batch was taken")
	}
	pend := three
	pend.Pending = []ledger.Entry{*pend.find(5), *pend.find(10)}
	if p := plan(pend, from(compact, 0), src(5, 5, 1, 0)); p.Refusal.Code != 0 || kinds(p.Entries) != "rewrite(0-4@0,seq0)" {
		t.Fatalf("an unconfirmed batch was taken for gone: %s %s", p.Refusal.Msg, kinds(p.Entries))
	}
	// The cleaner sets a marker's delete horizon (an attribute and its base timestamp): the
	// same marker with other bytes is a rewrite; another marker or a data batch there is not.
	withMarkers := mirrored(t, fresh(0), src(0, 5, 1, batch.AttrTransactional), marker(5, true))
	horizoned := func(b []byte) []byte {
		b = append([]byte(nil), b...)
		binary.BigEndian.PutUint16(b[21:], binary.BigEndian.Uint16(b[21:])|0x40)
		binary.BigEndian.PutUint64(b[27:], 99000)
		binary.BigEndian.PutUint32(b[17:], batch.CRC(b))
		return b
	}
	if p := plan(withMarkers, compact, horizoned(marker(5, true))); p.Refusal.Code != 0 || kinds(p.Entries) != "rewrite(5-5@5,seq0)" || len(p.Writes) != 0 {
		t.Fatalf("a marker the cleaner gave a delete horizon: %s %s, %d writes", p.Refusal.Msg, kinds(p.Entries), len(p.Writes))
	}
	for name, b := range map[string][]byte{"the other marker": horizoned(marker(5, false)), "a data batch": src(5, 1, 1, batch.AttrTransactional)} {
		if p := plan(withMarkers, compact, b); p.Refusal.Code == 0 {
			t.Errorf("%s at a mirrored marker's offset: taken (%s)", name, kinds(p.Entries))
		}
	}
	for name, c := range map[string]struct {
		o  Options
		bs [][]byte
	}{
		"not a compacted topic": {Options{MaxFill: 100}, [][]byte{cleaned(5, 5, 1, 0, 4)}},
		"other records":         {compact, [][]byte{src(5, 5, 2, 0)}},
		"another range":         {compact, [][]byte{cleaned(5, 4, 1, 0)}},
		"a pending batch":       {compact, nil},
		"a gappy control batch": {compact, [][]byte{cleaned(10, 2, 1)}},
	} {
		st := base
		bs := c.bs
		switch name {
		case "a pending batch":
			st.Pending = []ledger.Entry{*st.find(5)}
			bs = [][]byte{cleaned(5, 5, 1, 0)}
		case "a gappy control batch":
			b := cleaned(10, 2, 1, 0)
			binary.BigEndian.PutUint16(b[21:], batch.AttrControl|batch.AttrTransactional)
			binary.BigEndian.PutUint32(b[17:], batch.CRC(b))
			bs = [][]byte{b}
		}
		if p := plan(st, c.o, bs...); p.Refusal.Code == 0 {
			t.Errorf("%s: taken (%s)", name, kinds(p.Entries))
		}
	}
}

func fillerKeys(t *testing.T, b []byte) string {
	t.Helper()
	var rb kmsg.RecordBatch
	if err := rb.ReadFrom(b); err != nil {
		t.Fatal(err)
	}
	var keys []string
	raw := rb.Records
	for len(raw) > 0 {
		l, n := binary.Varint(raw)
		var r kmsg.Record
		if err := r.ReadFrom(raw[:n+int(l)]); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, string(r.Key))
		raw = raw[n+int(l):]
	}
	return strings.Join(keys, ",")
}

// A write whose answer was lost but that reached D: once D's high watermark shows it, it is
// confirmed, and a client resuming from D's end is taken instead of refused.
func TestConfirmHeld(t *testing.T) {
	st := fresh(0)
	sets, hs := split(t, src(0, 5, 1, 0), src(5, 5, 1, 0))
	p := st.Plan(sets, hs, Options{MaxFill: 100})
	if p.Refusal.Code != 0 {
		t.Fatal(p.Refusal.Msg)
	}
	st.Apply(p) // written, never confirmed
	st.Resync = true
	sets, hs = split(t, src(10, 5, 1, 0))
	if p := st.Plan(sets, hs, Options{MaxFill: 100}); p.Refusal.Code != ErrOutOfOrder {
		t.Fatalf("a request past unconfirmed writes was taken: %s", kinds(p.Entries))
	}
	if st.ConfirmHeld(4) || len(st.Pending) != 2 {
		t.Fatalf("a watermark inside the first batch confirmed something: %d pending", len(st.Pending))
	}
	if !st.ConfirmHeld(5) || len(st.Pending) != 1 || st.MirroredEnd() != 5 {
		t.Fatalf("watermark 5: %d pending, mirrored end %d", len(st.Pending), st.MirroredEnd())
	}
	if p := st.Plan(sets, hs, Options{MaxFill: 100}); p.Refusal.Code != ErrOutOfOrder {
		t.Fatal("a request past a write D does not hold was taken")
	}
	if !st.ConfirmHeld(10) || len(st.Pending) != 0 {
		t.Fatalf("watermark 10: %d pending", len(st.Pending))
	}
	if p := st.Plan(sets, hs, Options{MaxFill: 100}); p.Refusal.Code != 0 || kinds(p.Entries) != "batch(10-14@10,seq10)" {
		t.Fatalf("the request from D's end: %s %s", p.Refusal.Msg, kinds(p.Entries))
	}
}

// A mirror that starts above D's end is aligned: fillers, in batches a broker takes, up to the
// first batch keep D's offsets the source's (within Align offsets); beyond Align it starts with a
// shift, as it always did. The replayed ledger knows where the fillers end (the writer deletes
// below it) and says whether clients may read D directly.
func TestPlanAlign(t *testing.T) {
	sets, hs := split(t, src(25000, 3, 4, 0))
	p := fresh(0).Plan(sets, hs, Options{MaxFill: 100, Align: 100000})
	if p.Refusal.Code != 0 {
		t.Fatal(p.Refusal.Msg)
	}
	want := "segment(0,Δ0) filler(0-9999@0,seq0) filler(10000-19999@10000,seq10000) filler(20000-24999@20000,seq20000) batch(25000-25002@25000,seq25000)"
	if got := kinds(p.Entries); got != want {
		t.Fatalf("aligned start planned\n%s\nwant\n%s", got, want)
	}
	for _, e := range p.Entries[1:4] {
		if !e.Align {
			t.Fatalf("alignment filler %+v not marked", e)
		}
	}
	if len(p.Writes) != 4 || p.alignTo != 25000 {
		t.Fatalf("%d writes, fillers end at %d; want 4 and 25000", len(p.Writes), p.alignTo)
	}
	for i, w := range p.Writes[:3] {
		_, fh, err := batch.Split(w.Data)
		if err != nil || len(fh) != 1 || int64(fh[0].RecordCount) != int64(w.Entry.Count) || fh[0].BaseSequence != w.Entry.Seq {
			t.Fatalf("filler write %d: %v %+v for entry %+v", i, err, fh, w.Entry)
		}
	}
	var s State = fresh(0)
	s.Apply(p)
	if s.AlignTo != 25000 {
		t.Fatalf("state aligned to %d", s.AlignTo)
	}
	// Later requests keep the alignment point; the replayed ledger finds it again.
	for _, w := range p.Writes {
		s.confirm(w.Entry.Src)
	}
	sets, hs = split(t, src(25003, 2, 4, 0))
	p2 := s.Plan(sets, hs, Options{MaxFill: 100, Align: 100000})
	if p2.Refusal.Code != 0 || p2.alignTo != 25000 || kinds(p2.Entries) != "batch(25003-25004@25003,seq25003)" {
		t.Fatalf("next request: %s %d %s", p2.Refusal.Msg, p2.alignTo, kinds(p2.Entries))
	}
	r := Replay(append(p.Entries, p2.Entries...))
	if r.AlignTo != 25000 || r.Aligned != 25000 || r.Fillers != 0 || r.Next != 25005 {
		t.Fatalf("replayed: aligned to %d, %d aligned fillers, %d fillers, next %d", r.AlignTo, r.Aligned, r.Fillers, r.Next)
	}
	if ok, why := r.Direct(); !ok {
		t.Fatalf("an aligned dense mirror is not direct: %s", why)
	}

	// Beyond Align, or with alignment off: a shift, no fillers.
	for _, align := range []int64{24999, 0} {
		sets, hs = split(t, src(25000, 3, 4, 0))
		p = fresh(0).Plan(sets, hs, Options{MaxFill: 100, Align: align})
		if got := kinds(p.Entries); got != "segment(25000,Δ25000) batch(25000-25002@0,seq0)" || p.alignTo != 0 {
			t.Fatalf("align %d planned %s (fillers to %d)", align, got, p.alignTo)
		}
		if ok, why := Replay(p.Entries).Direct(); ok || !strings.Contains(why, "shifted by 25000") {
			t.Fatalf("a shifted mirror is direct (%v, %q)", ok, why)
		}
	}
	// A mirror that starts at D's end needs no alignment.
	sets, hs = split(t, src(0, 3, 4, 0))
	if p = fresh(0).Plan(sets, hs, Options{MaxFill: 100, Align: 100000}); kinds(p.Entries) != "segment(0,Δ0) batch(0-2@0,seq0)" || p.alignTo != 0 {
		t.Fatalf("start at D's end planned %s", kinds(p.Entries))
	}
	// Transaction markers are held as fillers on D: not for direct readers.
	s = mirrored(t, fresh(0), src(0, 3, 1, batch.AttrTransactional), marker(3, true))
	var es []ledger.Entry
	for _, e := range s.Recent {
		es = append(es, e)
	}
	if ok, why := Replay(es).Direct(); ok || !strings.Contains(why, "transaction markers") {
		t.Fatalf("a mirror with markers is direct (%v, %q)", ok, why)
	}
}

// A partition's next write is planned while the data of the one before are on their way:
// after flying pending entries, never after failed ones; a flying batch is not resent; a
// pipelined request whose from offset passes the end of the writes before it is refused
// (a request between them went missing), never filled as a hole.
func TestPlanPipelined(t *testing.T) {
	base := mirrored(t, fresh(0), src(0, 5, 1, 0)) // [0,5) confirmed
	sets, hs := split(t, src(5, 5, 1, 0))
	first := base.Plan(sets, hs, Options{MaxFill: 100})
	if first.Refusal.Code != 0 {
		t.Fatal(first.Refusal.Msg)
	}
	st := base
	st.Apply(first) // [5,10) pending, its data on the way
	flying := map[int64]bool{5: true}
	fly := func(src int64) bool { return flying[src] }

	plan := func(o Options, bs ...[]byte) Plan {
		o.MaxFill = 100
		sets, hs := split(t, bs...)
		return st.Plan(sets, hs, o)
	}
	if p := plan(Options{}, src(10, 2, 1, 0)); p.Refusal.Code != ErrOutOfOrder {
		t.Fatalf("a new batch after an unconfirmed one not flying: code %d, want %d", p.Refusal.Code, ErrOutOfOrder)
	}
	p := plan(Options{Flying: fly, Follows: true, HasFrom: true, From: 10}, src(10, 2, 1, 0))
	if p.Refusal.Code != 0 || kinds(p.Entries) != "batch(10-11@10,seq10)" || len(p.Writes) != 1 {
		t.Fatalf("the next batch after a flying one: %q %s", p.Refusal.Msg, kinds(p.Entries))
	}
	if p := plan(Options{Flying: fly}, src(5, 5, 1, 0)); p.Refusal.Code != ErrRetriable || !p.awaitFlying {
		t.Fatalf("a resend of a flying batch: code %d (waits for it: %v), want %d, waiting", p.Refusal.Code, p.awaitFlying, ErrRetriable)
	}
	if p := plan(Options{Flying: fly, Follows: true, HasFrom: true, From: 12}, src(12, 2, 1, 0)); p.Refusal.Code != ErrOutOfOrder {
		t.Fatalf("a pipelined request from past the end of the writes before it: code %d (%s), want %d", p.Refusal.Code, kinds(p.Entries), ErrOutOfOrder)
	}
	// The same request not pipelined: a hole the client read (from 10), filled.
	if p := plan(Options{Flying: fly, HasFrom: true, From: 10}, src(12, 2, 1, 0)); p.Refusal.Code != 0 || kinds(p.Entries) != "filler(10-11@10,seq10) batch(12-13@12,seq12)" {
		t.Fatalf("a hole after a flying write: %q %s", p.Refusal.Msg, kinds(p.Entries))
	}
	// Once the flying write failed, its entries hold the partition until resent.
	flying = map[int64]bool{}
	if p := plan(Options{Flying: fly}, src(10, 2, 1, 0)); p.Refusal.Code != ErrOutOfOrder {
		t.Fatalf("a new batch after a write that failed: code %d, want %d", p.Refusal.Code, ErrOutOfOrder)
	}
	if p := plan(Options{Flying: fly}, src(5, 5, 1, 0), src(10, 2, 1, 0)); p.Refusal.Code != 0 || len(p.Writes) != 2 || !p.Writes[0].Retry || !p.retries() {
		t.Fatalf("the resend after the failure: %q, %d writes", p.Refusal.Msg, len(p.Writes))
	}
}
