package atoffset

import (
	"fmt"
	"strings"
	"time"

	"offsetgate/batch"
	"offsetgate/ledger"
)

// State is what the planner knows of a mirror partition: where the mirror ends on both sides,
// offsetgate's producer values on D, the shift table, and the recent and unconfirmed ledger
// entries. The writer keeps one per partition; Plan never changes it.
type State struct {
	Next     int64 // next source offset expected; -1: nothing mirrored yet
	DNext    int64 // D offset of the next write (for a fresh partition, D's end)
	Epoch    int32 // highest source leader epoch mirrored; -1: none
	PID      int64 // offsetgate's producer on D
	PEpoch   int16
	Seq      int32 // next sequence number of that producer
	Segments []Segment
	// Recent holds the last batch and filler entries, oldest first: exact resends below the
	// mirrored end are recognised against them.
	Recent []ledger.Entry
	// Pending holds entries written to the ledger whose data D has not confirmed (after a
	// crash, or a failed write): they are retried with their own producer values before
	// anything new.
	Pending []ledger.Entry
	// Cursor is the source offset after the last batch the partition was sent (new or sent
	// again): on a compacted topic sent again in order, mirrored batches between it and the
	// next batch sent are gone from the source.
	Cursor int64
	// Resync is set after a write failed or was refused: the next request must start exactly
	// at the mirrored end, so a request sent before the client saw the failure is never taken
	// for a hole in the source and filled.
	Resync bool
	// AlignTo is the D offset the alignment fillers end at (0: none were written): the writer
	// deletes D's records below it.
	AlignTo int64
}

// MirroredEnd is the source offset a mirroring client resends from: the first unconfirmed
// batch, or the next offset expected.
func (s *State) MirroredEnd() int64 {
	if len(s.Pending) > 0 {
		return s.Pending[0].Src
	}
	return s.Next
}

func (s *State) find(src int64) *ledger.Entry {
	for i := len(s.Recent) - 1; i >= 0; i-- {
		if s.Recent[i].Src == src {
			return &s.Recent[i]
		}
	}
	return nil
}

// Write is one planned write of a batch to D.
type Write struct {
	Entry ledger.Entry
	// Data is the batch as D receives it: the source batch with offsetgate's producer values
	// (the entry's), or filler records.
	Data []byte
	// Retry marks a pending entry's batch, resent with the producer values recorded for it.
	Retry bool
}

// Plan is what one produce-at-offset request for a partition comes to.
type Plan struct {
	// Refusal, when its Code is not 0, refuses the request: nothing is written.
	Refusal Result
	// Entries go to the ledger, in order, before D gets a byte of Writes (write-ahead).
	Entries []ledger.Entry
	// Writes go to D in order, one batch per Produce request. Exact resends of confirmed
	// batches are acknowledged without a write and appear in neither list.
	Writes []Write
	// Base is the source offset of the request's first batch (the answer's base offset).
	Base int64
	// awaitFlying: refused because the request resends a batch an earlier write is still
	// carrying to D (its client lost that write's answer and sent it again): the writer waits
	// for the earlier write to land and plans the request again, which then acknowledges or
	// retries the batch.
	awaitFlying bool

	// The state's new ends, for Apply.
	next, dnext, cursor int64
	seq, epoch          int32
	segments            []Segment
	alignTo             int64
}

// fillChunk is the most filler records in one alignment batch: 10,000 fillers are about
// 270 KB, well under a topic's smallest sensible max.message.bytes.
const fillChunk = 10000

// Options are what the planner knows of the mirror topic.
type Options struct {
	// MaxFill is the largest hole filled with filler records.
	MaxFill int64
	// Align is the most offsets filled at a mirror partition's start so that D's offsets are
	// the source's (Delta 0) when the first batch starts above D's end; the fillers are then
	// deleted from D. A larger distance starts the mirror with a shift. 0: never.
	Align int64
	// Compacted: the source topic is compacted. Fillers are tombstones of a reserved key
	// (the destination refuses keyless records on a compacted topic, and its own cleaner
	// removes them again), and a batch below the mirrored end may come again with fewer
	// records: the source's cleaner removed some since it was mirrored.
	Compacted bool
	// Find looks up a mirrored batch older than the recent entries (a compacted source sent
	// again from its log start); nil: only the recent entries are known.
	Find func(src int64) (ledger.Entry, bool)
	// Between lists the mirrored batches and markers (not fillers, not gone) that start in
	// [from, to):
	// on a compacted topic sent again, the ones between two batches the source still has are
	// gone (its cleaner removed every record of them). nil: the recent entries only.
	Between func(from, to int64) []ledger.Entry
	// HasFrom: From is the source offset the request continues from (the magic header's):
	// the client read the source from there, and the source has no batch between it and the
	// request's first batch.
	HasFrom bool
	From    int64
	// Flying reports the pending entries whose data are on their way to D (a write of the
	// partition before this one): new batches may be planned after them, as they will be
	// confirmed or fail first. nil: none.
	Flying func(src int64) bool
	// Follows: the client sent the request behind an earlier one for the partition, before
	// that one's answer (pipelined). It must continue exactly where the writes before it end:
	// a from offset past that end means a request between them was refused or lost, and the
	// offsets between are never taken for a hole.
	Follows bool
}

// Plan decides, without any I/O, what a produce-at-offset request for one partition becomes:
// the batch checks, duplicate and retry detection, epoch fencing, holes filled with fillers up
// to MaxFill offsets, larger holes as new shift segments, the batches a stock destination does
// not take (markers, gappy and empty batches) held by fillers or dense copies with the source
// batch kept in the ledger, compaction rewrites, and the ledger entries and writes that follow.
// sets and hs are the request's batches and their headers, in order.
func (s State) Plan(sets [][]byte, hs []batch.Header, o Options) Plan {
	maxFill := o.MaxFill
	refuse := func(code int16, format string, a ...any) Plan {
		return Plan{Refusal: Result{Code: code, Msg: "offsetgate: " + fmt.Sprintf(format, a...)}}
	}
	if len(sets) == 0 {
		return refuse(ErrInvalidRecord, "no record batch")
	}
	commits := make([]bool, len(hs)) // of the control batches: commit or abort
	for i, h := range hs {
		if h.Attributes&batch.AttrControl != 0 {
			c, err := batch.Marker(sets[i])
			if err != nil {
				return refuse(ErrInvalidRecord, "control batch at %d: %v", h.BaseOffset, err)
			}
			commits[i] = c
		}
		switch {
		case h.RecordCount < 0 || int64(h.RecordCount) > int64(h.LastOffsetDelta)+1:
			return refuse(ErrInvalidRecord, "batch at %d holds %d records for %d offsets", h.BaseOffset, h.RecordCount, h.LastOffsetDelta+1)
		case h.Gappy() && h.Attributes&batch.AttrControl != 0:
			return refuse(ErrInvalidRecord, "control batch at %d holds %d records", h.BaseOffset, h.RecordCount)
		case !batch.Valid(sets[i]):
			return refuse(ErrInvalidRecord, "batch at %d fails its CRC", h.BaseOffset)
		case i > 0 && h.BaseOffset <= hs[i-1].LastOffset():
			return refuse(ErrInvalidRecord, "batch at %d does not follow the batch before it (which ends at %d)", h.BaseOffset, hs[i-1].LastOffset())
		}
	}
	if s.Resync && s.Next >= 0 && hs[0].BaseOffset > s.MirroredEnd() {
		return refuse(ErrOutOfOrder, "the previous write failed; resend from the mirrored end %d (this request starts at %d)", s.MirroredEnd(), hs[0].BaseOffset)
	}
	out := Plan{Base: hs[0].BaseOffset}
	next, dnext, seq, epoch := s.Next, s.DNext, s.Seq, s.Epoch
	cursor := s.Cursor
	if o.HasFrom {
		if o.From > hs[0].BaseOffset {
			return refuse(ErrInvalidRecord, "the request continues from offset %d, past its first batch at %d", o.From, hs[0].BaseOffset)
		}
		cursor = o.From
		if o.Follows && next >= 0 && o.From > next {
			return refuse(ErrOutOfOrder, "the request continues from offset %d, past the end %d of the writes sent before it: one between them was refused or lost; resend from the mirrored end %d", o.From, next, s.MirroredEnd())
		}
	}
	segments := s.Segments
	producer := func(seq int32) batch.Producer { return batch.Producer{ID: s.PID, Epoch: s.PEpoch, Sequence: seq} }
	pendingIdx := 0
	for i, h := range hs {
		// Fillers for offsets a compacted source has no record at carry no timestamp (a time
		// lookup on D passes over them, as on the source); others the next batch's.
		fillTS := h.BaseTimestamp
		if o.Compacted {
			fillTS = batch.NoTimestamp
		}
		if h.LeaderEpoch < epoch {
			return refuse(ErrFencedEpoch, "batch at %d has leader epoch %d, below the %d already mirrored", h.BaseOffset, h.LeaderEpoch, epoch)
		}
		if end := min(h.BaseOffset, next); o.Compacted && next >= 0 && cursor < end {
			// Sent in order from the cursor: what was mirrored between it and this batch, the
			// source no longer has (its cleaner removed every record of it).
			for _, g := range s.between(o, cursor, end) {
				if s.pending(g.Src) {
					continue // unconfirmed: retried first, never taken for gone
				}
				out.Entries = append(out.Entries, ledger.Entry{Kind: ledger.KindRewrite, Src: g.Src, Last: g.Last, D: g.D, Count: g.Count, Gone: true})
			}
		}
		cursor = h.LastOffset() + 1
		if next >= 0 && h.BaseOffset < next {
			e := s.find(h.BaseOffset)
			if e == nil && o.Find != nil {
				if old, ok := o.Find(h.BaseOffset); ok {
					e = &old
				}
			}
			same := e != nil && (e.Kind == ledger.KindBatch || e.Kind == ledger.KindControl) && e.Last == h.LastOffset() && e.Epoch == h.LeaderEpoch
			if same && (e.CRC != h.CRC || e.Len != h.Length) {
				// The same batch with other content: only a compacted source's cleaner makes
				// that (fewer records, the producer fields kept; on a marker or a batch with
				// tombstones, the delete horizon in its base timestamp and attributes), and not
				// while it is pending.
				rewritable := e.Kind == ledger.KindBatch && h.Attributes&batch.AttrControl == 0 ||
					e.Kind == ledger.KindControl && h.Attributes&batch.AttrControl != 0 && commits[i] == (e.Marker == ledger.MarkerCommit)
				if !o.Compacted || !rewritable || h.RecordCount > e.Records && e.Records > 0 ||
					h.ProducerID != e.SrcPID || h.ProducerEpoch != e.SrcPEpoch || h.BaseSequence != e.SrcSeq ||
					pendingIdx < len(s.Pending) && s.Pending[pendingIdx].Src == e.Src {
					same = false
				} else {
					out.Entries = append(out.Entries, ledger.Entry{Kind: ledger.KindRewrite, Src: h.BaseOffset, Last: h.LastOffset(), D: e.D, Count: e.Count,
						Epoch: h.LeaderEpoch, CRC: h.CRC, Len: h.Length, Attrs: h.Attributes, MaxTS: h.MaxTimestamp, Records: h.RecordCount,
						SrcPID: h.ProducerID, SrcPEpoch: h.ProducerEpoch, SrcSeq: h.BaseSequence, Raw: append([]byte(nil), sets[i]...)})
					continue
				}
			}
			if !same {
				return refuse(ErrOutOfOrder, "batch at %d overlaps what is mirrored with different content; the mirror expects offset %d next", h.BaseOffset, s.MirroredEnd())
			}
			if pendingIdx < len(s.Pending) && s.Pending[pendingIdx].Src == e.Src {
				if o.Flying != nil && o.Flying(e.Src) {
					p := refuse(ErrRetriable, "batch at %d is still being written by an earlier request; retry from offset %d", e.Src, s.MirroredEnd())
					p.awaitFlying = true
					return p
				}
				pendingIdx++
				data, err := destination(sets[i], h, *e, batch.Producer{ID: e.PID, Epoch: e.PEpoch, Sequence: e.Seq}, o.Compacted)
				if err != nil {
					return refuse(ErrInvalidRecord, "%v", err)
				}
				out.Writes = append(out.Writes, Write{Entry: *e, Retry: true, Data: data})
			}
			continue // a confirmed batch sent again: acknowledged, not written twice
		}
		if pendingIdx < len(s.Pending) && !s.allFlying(pendingIdx, o) {
			return refuse(ErrOutOfOrder, "unconfirmed writes from offset %d must be retried first", s.Pending[pendingIdx].Src)
		}
		switch {
		case next < 0 && o.Compacted && h.BaseOffset > dnext && h.BaseOffset-dnext <= maxFill:
			// A compacted source's first batch often starts past offsets its cleaner emptied:
			// the mirror starts at D's end with no shift, and fillers hold the offsets before
			// the batch, so D's offsets are the source's.
			seg := Segment{Src: dnext, Delta: 0}
			segments = append(segments[:len(segments):len(segments)], seg)
			out.Entries = append(out.Entries, ledger.Entry{Kind: ledger.KindSegment, Src: seg.Src, Delta: seg.Delta})
			n := int32(h.BaseOffset - dnext)
			fe := ledger.Entry{Kind: ledger.KindFiller, Src: dnext, Last: h.BaseOffset - 1, D: dnext, Count: n, PID: s.PID, PEpoch: s.PEpoch, Seq: seq}
			out.Writes = append(out.Writes, Write{Entry: fe, Data: batch.Filler(int(n), fillTS, producer(seq), o.Compacted)})
			out.Entries = append(out.Entries, fe)
			dnext += int64(n)
			seq += n
		case next < 0 && !o.Compacted && h.BaseOffset > dnext && h.BaseOffset-dnext <= o.Align:
			// The mirror's start above D's end (the source's log start, or a mirror started
			// past it): fillers up to the batch keep Delta 0, so clients can one day read D
			// directly at the offsets they knew; the writer then deletes the fillers from D.
			seg := Segment{Src: dnext, Delta: 0}
			segments = append(segments[:len(segments):len(segments)], seg)
			out.Entries = append(out.Entries, ledger.Entry{Kind: ledger.KindSegment, Src: seg.Src, Delta: seg.Delta})
			for dnext < h.BaseOffset {
				n := int32(min(h.BaseOffset-dnext, fillChunk))
				fe := ledger.Entry{Kind: ledger.KindFiller, Src: dnext, Last: dnext + int64(n) - 1, D: dnext, Count: n, PID: s.PID, PEpoch: s.PEpoch, Seq: seq, Align: true}
				out.Writes = append(out.Writes, Write{Entry: fe, Data: batch.Filler(int(n), fillTS, producer(seq), false)})
				out.Entries = append(out.Entries, fe)
				dnext += int64(n)
				seq += n
			}
			out.alignTo = dnext
		case next < 0 || h.BaseOffset-next > maxFill:
			// The mirror's start, or a hole too large to fill: a new shift segment.
			seg := Segment{Src: h.BaseOffset, Delta: h.BaseOffset - dnext}
			segments = append(segments[:len(segments):len(segments)], seg)
			out.Entries = append(out.Entries, ledger.Entry{Kind: ledger.KindSegment, Src: seg.Src, Delta: seg.Delta})
		case h.BaseOffset > next:
			n := int32(h.BaseOffset - next)
			fe := ledger.Entry{Kind: ledger.KindFiller, Src: next, Last: h.BaseOffset - 1, D: dnext, Count: n, PID: s.PID, PEpoch: s.PEpoch, Seq: seq}
			out.Writes = append(out.Writes, Write{Entry: fe, Data: batch.Filler(int(n), fillTS, producer(seq), o.Compacted)})
			out.Entries = append(out.Entries, fe)
			dnext += int64(n)
			seq += n
		}
		count := h.LastOffsetDelta + 1
		e := ledger.Entry{Kind: ledger.KindBatch, Src: h.BaseOffset, Last: h.LastOffset(), D: dnext, Count: count,
			Epoch: h.LeaderEpoch, CRC: h.CRC, Len: h.Length, Attrs: h.Attributes, MaxTS: h.MaxTimestamp,
			SrcPID: h.ProducerID, SrcPEpoch: h.ProducerEpoch, SrcSeq: h.BaseSequence, PID: s.PID, PEpoch: s.PEpoch, Seq: seq}
		e.Records = h.RecordCount
		switch {
		case h.Attributes&batch.AttrControl != 0:
			// A stock destination takes no control batch from a client: fillers hold its
			// offsets, and the ledger keeps the batch to serve in their place.
			e.Kind, e.Raw = ledger.KindControl, append([]byte(nil), sets[i]...)
			e.Marker = ledger.MarkerAbort
			if commits[i] {
				e.Marker = ledger.MarkerCommit
			}
		case h.Gappy():
			// Nor a batch with fewer records than offsets (compaction): a dense copy holds
			// its offsets, each surviving record at its own, and the ledger keeps the batch.
			e.Raw = append([]byte(nil), sets[i]...)
		}
		data, err := destination(sets[i], h, e, producer(seq), o.Compacted)
		if err != nil {
			return refuse(ErrInvalidRecord, "%v", err)
		}
		out.Writes = append(out.Writes, Write{Entry: e, Data: data})
		out.Entries = append(out.Entries, e)
		dnext += int64(count)
		seq += count
		next = h.LastOffset() + 1
		epoch = max(epoch, h.LeaderEpoch)
	}
	out.next, out.dnext, out.seq, out.epoch, out.segments, out.cursor = next, dnext, seq, epoch, segments, cursor
	out.alignTo = max(out.alignTo, s.AlignTo)
	return out
}

// between lists the mirrored batches starting in [from, to), from Options.Between or else the
// recent entries.
func (s *State) between(o Options, from, to int64) []ledger.Entry {
	if o.Between != nil {
		return o.Between(from, to)
	}
	var out []ledger.Entry
	for _, e := range s.Recent {
		if (e.Kind == ledger.KindBatch || e.Kind == ledger.KindControl) && e.Src >= from && e.Src < to {
			out = append(out, e)
		}
	}
	return out
}

// destination is what D receives for a source batch: the batch with offsetgate's producer
// fields, fillers for a marker, a dense copy for a gappy or empty batch.
func destination(src []byte, h batch.Header, e ledger.Entry, p batch.Producer, compacted bool) ([]byte, error) {
	switch {
	case e.Kind == ledger.KindControl:
		return batch.Filler(int(e.Count), h.MaxTimestamp, p, compacted), nil
	case h.Gappy():
		return batch.Dense(src, p, compacted)
	}
	return batch.ForDestination(src, p), nil
}

// Apply makes the partition's state what it is once the ledger holds the plan's entries: the
// mirror ends after them, and their writes are pending until D confirms them.
func (s *State) Apply(p Plan) {
	s.Segments, s.Next, s.DNext, s.Seq, s.Epoch, s.Cursor = p.segments, p.next, p.dnext, p.seq, p.epoch, p.cursor
	s.AlignTo = p.alignTo
	for _, e := range p.Entries {
		switch {
		case e.Data():
			s.remember(e)
			s.Pending = append(s.Pending, e)
		case e.Kind == ledger.KindRewrite:
			s.rewrite(e)
		}
	}
}

// rewrite records a compaction rewrite on the recent entry it concerns: a resend of the batch
// as it is now is an exact resend, and a gone batch is no batch any more.
func (s *State) rewrite(e ledger.Entry) {
	r := s.find(e.Src)
	switch {
	case r == nil:
	case e.Gone:
		r.Kind = ledger.KindFiller // never matched by a batch again
	default:
		r.CRC, r.Len, r.Attrs, r.MaxTS, r.Records = e.CRC, e.Len, e.Attrs, e.MaxTS, e.Records
	}
}

// remember keeps an entry among the recent ones, dropping the oldest half when there are too
// many (duplicate checks look this far back).
func (s *State) remember(e ledger.Entry) {
	s.Recent = append(s.Recent, e)
	if len(s.Recent) > recentEntries {
		s.Recent = append(s.Recent[:0], s.Recent[len(s.Recent)-recentEntries/2:]...)
	}
}

// retries reports whether the plan sends unconfirmed writes again.
func (p Plan) retries() bool {
	for _, wr := range p.Writes {
		if wr.Retry {
			return true
		}
	}
	return false
}

// allFlying reports whether the pending entries from i on are all on their way to D.
func (s *State) allFlying(i int, o Options) bool {
	if o.Flying == nil {
		return false
	}
	for _, e := range s.Pending[i:] {
		if !o.Flying(e.Src) {
			return false
		}
	}
	return true
}

// pending reports whether the entry at source offset src is unconfirmed.
func (s *State) pending(src int64) bool {
	for _, e := range s.Pending {
		if e.Src == src {
			return true
		}
	}
	return false
}

// confirm drops a pending entry once D acknowledged its data at the planned offset.
func (s *State) confirm(src int64) {
	for i, e := range s.Pending {
		if e.Src == src {
			s.Pending = append(s.Pending[:i:i], s.Pending[i+1:]...)
			return
		}
	}
}

// ConfirmHeld confirms the pending entries D holds, given its high watermark: this writer
// writes a partition's entries to D in order and nothing else writes there, so an entry that
// ends at or below the watermark reached D even if its answer never came back. It reports
// whether any was confirmed.
func (s *State) ConfirmHeld(hwm int64) bool {
	kept := s.Pending[:0:0]
	for _, e := range s.Pending {
		if e.D+int64(e.Count) > hwm {
			kept = append(kept, e)
		}
	}
	confirmed := len(kept) != len(s.Pending)
	s.Pending = kept
	return confirmed
}

// Replayed is a partition's state rebuilt from its ledger, with what the ledger says beyond
// planning: the last ownership claim, a halt, and how many batches and fillers it records.
type Replayed struct {
	State
	Owner      string
	OwnerUntil time.Time
	Halted     string
	Counts
	Entries int
}

// Counts are what a partition's ledger records, counted: offsetgate status shows them, and
// they say whether clients could read D directly (Replayed.Direct). A snapshot keeps them, so
// they cover the whole ledger after a replay from one.
type Counts struct {
	Batches  int64 `json:"batches"`
	Controls int64 `json:"controls"` // control batches (transaction markers)
	Fillers  int64 `json:"fillers"`  // filler records in holes of the source's offsets (not alignment ones)
	Aligned  int64 `json:"aligned"`  // filler records written to align D with the source at the start
	Kept     int64 `json:"kept"`     // batches D holds as other records (gappy batches, compaction rewrites)
}

// add counts one ledger entry.
func (c *Counts) add(e ledger.Entry) {
	switch e.Kind {
	case ledger.KindBatch:
		c.Batches++
		if len(e.Raw) > 0 {
			c.Kept++
		}
	case ledger.KindControl:
		c.Controls++
	case ledger.KindFiller:
		if e.Align {
			c.Aligned += int64(e.Count)
		} else {
			c.Fillers += int64(e.Count)
		}
	case ledger.KindRewrite:
		c.Kept++
	}
}

// Direct says whether a client reading D directly (not through offsetgate) gets the same
// records at the same offsets as from the source, and if not, why: every segment without a
// shift, and D holding every mirrored batch as the source has it (no transaction markers,
// which D holds as fillers, no filled holes, no batches kept in the ledger).
func (r Replayed) Direct() (bool, string) {
	var why []string
	for _, sg := range r.Segments {
		if sg.Delta != 0 {
			why = append(why, fmt.Sprintf("shifted by %d from source offset %d", sg.Delta, sg.Src))
			break
		}
	}
	if r.Controls > 0 {
		why = append(why, fmt.Sprintf("%d transaction markers held as fillers", r.Controls))
	}
	if r.Fillers > 0 {
		why = append(why, fmt.Sprintf("%d filler records in holes", r.Fillers))
	}
	if r.Kept > 0 {
		why = append(why, fmt.Sprintf("%d batches held in another shape (compaction)", r.Kept))
	}
	return len(why) == 0, strings.Join(why, "; ")
}

// Replay rebuilds a partition's state from its ledger entries, in order: what a writer taking
// over the partition starts from, and what offsetgate status shows. Pending writes are not
// known from the ledger alone (they depend on D's high watermark): the writer adds them.
func Replay(es []ledger.Entry) Replayed {
	return ReplayOnto(Replayed{State: State{Next: -1, Epoch: -1}}, es)
}

// ReplayOnto is Replay of the entries that follow a ledger prefix whose replay is r (a
// snapshot's), counting on from r's counts.
func ReplayOnto(r Replayed, es []ledger.Entry) Replayed {
	rp := NewReplayer(r)
	for _, e := range es {
		rp.Add(e)
	}
	return rp.Result()
}

// Replayer is ReplayOnto one entry at a time, for a ledger read as it arrives: a partition's
// whole ledger (a million entries of some 230 bytes each) is never held at once, nor copied
// each time a slice of them grows.
type Replayer struct{ r Replayed }

// NewReplayer starts a replay onto r.
func NewReplayer(r Replayed) *Replayer {
	rp := &Replayer{r: r}
	rp.own()
	return rp
}

// own makes the replay's next appends take arrays of its own: never the ones of the state it
// started from or of a Result handed out.
func (rp *Replayer) own() {
	rp.r.Segments = rp.r.Segments[:len(rp.r.Segments):len(rp.r.Segments)]
	rp.r.Recent = rp.r.Recent[:len(rp.r.Recent):len(rp.r.Recent)]
}

// Add replays the next entry.
func (rp *Replayer) Add(e ledger.Entry) {
	r := &rp.r
	r.Entries++
	r.Counts.add(e)
	switch e.Kind {
	case ledger.KindSegment:
		r.Segments = append(r.Segments, Segment{Src: e.Src, Delta: e.Delta})
	case ledger.KindBatch, ledger.KindFiller, ledger.KindControl:
		r.remember(e)
		r.Next, r.DNext = e.Last+1, e.D+int64(e.Count)
		r.PID, r.PEpoch, r.Seq = e.PID, e.PEpoch, e.Seq+e.Count
		switch {
		case e.Kind == ledger.KindBatch || e.Kind == ledger.KindControl:
			r.Epoch = max(r.Epoch, e.Epoch)
		case e.Align:
			r.AlignTo = e.D + int64(e.Count)
		}
	case ledger.KindRewrite:
		r.rewrite(e)
	case ledger.KindOwner:
		r.Owner, r.OwnerUntil = e.Owner, e.Until
	case ledger.KindHalt:
		r.Halted = e.Reason
	}
}

// Result is the replay so far. The replay may go on after it, which leaves the Result taken
// before stale (a compaction rewrite changes recent entries in place).
func (rp *Replayer) Result() Replayed {
	r := rp.r
	r.Cursor = r.Next
	rp.own()
	return r
}
