// Package verify is the prover behind `offsetgate verify`: it reads raw record batches from
// the source and through offsetgate over the range both hold when it starts (from the larger
// log start to the smaller high watermark) and compares them batch by batch, every header
// field and the records, or record by record. Comparing nothing is an error, never a success.
//
// What lies outside that range is reported too, at both ends: the source's tail beyond the
// copy's end (not mirrored yet), and the source's head below the copy's log start. The mirror
// moves the copy's log start up to the source's and never beyond it, so a copy whose log start
// is above the source's lacks records the source still holds: a loss, never explained by the
// mirror's own log-start following.
package verify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/batch"
	"offsetgate/rawread"
)

// Level is what is compared.
type Level string

const (
	Bytes   Level = "bytes"   // every batch header field and the record bytes
	Records Level = "records" // offsets, epochs, timestamps, keys, values and headers per record
)

// Config is one verification.
type Config struct {
	Source, Proxy *kgo.Client
	Topic         string
	Partitions    []int32 // empty: all
	Level         Level
	MaxBytes      int32 // per fetch; 0: 1 MiB
	// CopyName names the second side in reports (default "through offsetgate").
	CopyName string
}

// Difference is the first place the two sides differ.
type Difference struct {
	Offset int64  // source offset of the batch (bytes) or record (records)
	Field  string // the header field, "records", or a record's field
	Source string
	Proxy  string
	copy   string
}

func (d *Difference) String() string {
	name := d.copy
	if name == "" {
		name = "through offsetgate"
	}
	return fmt.Sprintf("first difference at offset %d, %s: source %s, %s %s", d.Offset, d.Field, d.Source, name, d.Proxy)
}

// Result is one partition's outcome.
type Result struct {
	Partition int32
	From, To  int64 // the range compared: [From, To)
	Batches   int64
	Records   int64
	Bytes     int64
	Diff      *Difference
	// Tail is how many source offsets are beyond what offsetgate holds (not mirrored yet).
	Tail int64
	// HeadLost is how many source offsets the source still holds below the copy's log start:
	// [SourceStart, SourceStart+HeadLost) is on the source and no longer on the copy. The
	// mirror only ever moves the copy's log start up to the source's, so this is a loss
	// (records deleted on the destination directly, say).
	HeadLost int64
	// SourceStart and CopyStart are the log starts read (source offsets).
	SourceStart, CopyStart int64
	// Transactional is set when a transactional batch was compared; then the read_committed
	// views were compared too: the last stable offsets (SourceLSO, ProxyLSO) and the aborted
	// transactions each side names over the range (Aborted, the source's count).
	Transactional       bool
	SourceLSO, ProxyLSO int64
	Aborted             int
	Err                 error
}

// Line is the one-line report of a partition.
func (r Result) Line(topic string) string {
	head := fmt.Sprintf("%s[%d] [%d, %d): %d batches, %d records, %d bytes compared, source tail not mirrored: %d, source head lost: %d",
		topic, r.Partition, r.From, r.To, r.Batches, r.Records, r.Bytes, r.Tail, r.HeadLost)
	if r.Transactional {
		head += fmt.Sprintf(", last stable offset %d (source %d), %d aborted transactions", r.ProxyLSO, r.SourceLSO, r.Aborted)
	}
	switch {
	case r.Err != nil:
		return head + ": ERROR: " + r.Err.Error()
	case r.Diff != nil:
		return head + ": DIFFERENT: " + r.Diff.String()
	case r.HeadLost > 0:
		return head + ": LOST: " + r.LostString()
	}
	return head + ": identical"
}

// LostString says what the copy lacks at the head, or "" when nothing.
func (r Result) LostString() string {
	if r.HeadLost <= 0 {
		return ""
	}
	s := fmt.Sprintf("the source still holds offsets [%d, %d) and the copy does not (its log start is %d)",
		r.SourceStart, r.SourceStart+r.HeadLost, r.CopyStart)
	if r.Batches > 0 {
		s += fmt.Sprintf("; identical over [%d, %d)", r.From, r.To)
	}
	return s
}

// ErrNothing is returned for a partition where no batch could be compared.
var ErrNothing = errors.New("nothing to compare (no range held by both sides)")

// Run verifies each partition and calls report with its result as soon as it is known.
func Run(ctx context.Context, cfg Config, report func(Result)) ([]Result, error) {
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = 1 << 20
	}
	if cfg.Level == "" {
		cfg.Level = Bytes
	}
	if cfg.Level != Bytes && cfg.Level != Records {
		return nil, fmt.Errorf("unknown level %q (bytes or records)", cfg.Level)
	}
	copyName := cfg.CopyName
	if copyName == "" {
		copyName = "through offsetgate"
	}
	sadm, padm := kadm.NewClient(cfg.Source), kadm.NewClient(cfg.Proxy)
	// The copy first: log starts only rise, and the mirror moves the copy's up to the source's
	// as it was then, so a source log start read afterwards is at least the copy's unless the
	// copy lost records. (Read the other way round, the source's retention moving on between
	// the two reads, and the mirror following it, would look like a loss.)
	pStart, pEnd, err := bounds(ctx, padm, cfg.Topic)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", copyName, err)
	}
	sStart, sEnd, err := bounds(ctx, sadm, cfg.Topic)
	if err != nil {
		return nil, fmt.Errorf("on the source: %w", err)
	}
	parts := cfg.Partitions
	if len(parts) == 0 {
		for p := range sEnd {
			parts = append(parts, p)
		}
		sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
	}
	var out []Result
	for _, p := range parts {
		r := Result{Partition: p}
		se, ok1 := sEnd[p]
		pe, ok2 := pEnd[p]
		switch {
		case !ok1:
			r.Err = fmt.Errorf("partition %d does not exist on the source", p)
		case !ok2:
			r.Err = fmt.Errorf("partition %d does not exist through offsetgate", p)
		default:
			r.From, r.To, r.Tail = max(sStart[p], pStart[p]), min(se, pe), max(se-pe, 0)
			r.SourceStart, r.CopyStart = sStart[p], pStart[p]
			r.HeadLost = max(min(pStart[p], se)-sStart[p], 0)
			r.Err = compare(ctx, cfg, &r)
			if r.Err == nil && r.Diff == nil && r.Transactional {
				r.Err = compareCommitted(ctx, cfg, &r)
			}
			if r.Diff != nil {
				r.Diff.copy = cfg.CopyName
			}
			if r.Err == nil && r.Diff == nil && r.Batches == 0 && r.HeadLost == 0 {
				// (A copy that lost everything the source holds is reported as a loss.)
				r.Err = ErrNothing
			}
		}
		if report != nil {
			report(r)
		}
		out = append(out, r)
	}
	return out, nil
}

func bounds(ctx context.Context, adm *kadm.Client, topic string) (map[int32]int64, map[int32]int64, error) {
	var s, e map[int32]int64
	var err error
	for attempt := 0; attempt < 10; attempt++ {
		if s, e, err = boundsOnce(ctx, adm, topic); err == nil || !kerr.IsRetriable(err) {
			return s, e, err
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return s, e, err
}

func boundsOnce(ctx context.Context, adm *kadm.Client, topic string) (map[int32]int64, map[int32]int64, error) {
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return nil, nil, err
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, nil, err
	}
	s, e := map[int32]int64{}, map[int32]int64{}
	var ferr error
	// An error of the whole topic comes as partition -1.
	where := func(what string, o kadm.ListedOffset) error {
		if o.Partition < 0 {
			if errors.Is(o.Err, kerr.UnknownTopicOrPartition) {
				return fmt.Errorf("topic %s does not exist: %w", topic, o.Err)
			}
			return fmt.Errorf("%s of topic %s: %w", what, topic, o.Err)
		}
		return fmt.Errorf("%s of %s[%d]: %w", what, topic, o.Partition, o.Err)
	}
	starts.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			ferr = where("log start", o)
			return
		}
		s[o.Partition] = o.Offset
	})
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			ferr = where("high watermark", o)
			return
		}
		e[o.Partition] = o.Offset
	})
	if len(e) == 0 && ferr == nil {
		ferr = fmt.Errorf("topic %s not found", topic)
	}
	return s, e, ferr
}

// stream hands out one side's batches in order.
type stream struct {
	rd   *rawread.Reader
	next int64
	to   int64
	max  int32
	buf  [][]byte
}

func (s *stream) batch(ctx context.Context) ([]byte, error) {
	for empty := 0; len(s.buf) == 0; empty++ {
		if s.next >= s.to {
			return nil, nil
		}
		bs, _, err := s.rd.Fetch(ctx, s.next, s.max)
		if err != nil {
			return nil, err
		}
		if len(bs) == 0 {
			// offsetgate answers empty while its index catches up with the destination.
			if empty == 20 {
				return nil, fmt.Errorf("no batch at offset %d below the high watermark %d", s.next, s.to)
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
		s.buf = bs
	}
	b := s.buf[0]
	s.buf = s.buf[1:]
	h, err := batch.ReadHeader(b)
	if err != nil {
		return nil, err
	}
	if h.BaseOffset >= s.to {
		s.next, s.buf = s.to, nil
		return nil, nil
	}
	s.next = h.LastOffset() + 1
	return b, nil
}

func compare(ctx context.Context, cfg Config, r *Result) error {
	if r.From >= r.To {
		return nil
	}
	src := &stream{rd: rawread.New(cfg.Source, cfg.Topic, r.Partition), next: r.From, to: r.To, max: cfg.MaxBytes}
	px := &stream{rd: rawread.New(cfg.Proxy, cfg.Topic, r.Partition), next: r.From, to: r.To, max: cfg.MaxBytes}
	if cfg.Level == Records {
		return compareRecords(ctx, src, px, r)
	}
	for {
		sb, err := src.batch(ctx)
		if err != nil {
			return fmt.Errorf("reading the source: %w", err)
		}
		pb, err := px.batch(ctx)
		if err != nil {
			return fmt.Errorf("reading through offsetgate: %w", err)
		}
		if sb == nil && pb == nil {
			return nil
		}
		if sb == nil || pb == nil {
			at := src.next
			if sb != nil {
				at = mustHeader(sb).BaseOffset
			} else if pb != nil {
				at = mustHeader(pb).BaseOffset
			}
			r.Diff = &Difference{Offset: at, Field: "batch", Source: present(sb), Proxy: present(pb)}
			return nil
		}
		if d := compareBatch(sb, pb); d != nil {
			r.Diff = d
			return nil
		}
		h := mustHeader(sb)
		r.Batches++
		r.Records += int64(h.RecordCount)
		r.Bytes += int64(len(sb))
		r.Transactional = r.Transactional || h.Attributes&batch.AttrTransactional != 0
	}
}

// committedView reads one side at read_committed over [from, to): its last stable offset and
// the aborted transactions it names, as a consumer would act on them ("producer@offset": the
// first record of the producer that the entry hides). An entry that hides no record is left
// out: the source's transaction index keeps entries whose records its cleaner removed (with
// the first offset as written, which a mirror of what is left cannot know), and a consumer
// skips nothing for them on either side.
func committedView(ctx context.Context, rd *rawread.Reader, from, to int64, maxBytes int32) (int64, map[string]int64, error) {
	var entries []kmsg.FetchResponseTopicPartitionAbortedTransaction
	var hs []batch.Header
	next, lso := from, int64(-1)
	for {
		sets, c, err := rd.FetchCommitted(ctx, next, maxBytes)
		if err != nil {
			return 0, nil, err
		}
		lso = c.LastStable
		for _, a := range c.Aborted {
			if a.FirstOffset < to {
				entries = append(entries, a)
			}
		}
		for _, b := range sets {
			hs = append(hs, mustHeader(b))
		}
		if len(sets) == 0 {
			break
		}
		next = hs[len(hs)-1].LastOffset() + 1
		if next >= min(to, lso) {
			break
		}
	}
	aborted := map[string]int64{}
	for _, a := range entries {
		if at, ok := hides(hs, a.ProducerID, a.FirstOffset); ok {
			aborted[fmt.Sprintf("%d@%d", a.ProducerID, at)] = at
		}
	}
	return lso, aborted, nil
}

// hides finds the first record an aborted-transaction entry hides: the first data batch of the
// producer at or after first, before the producer's next marker.
func hides(hs []batch.Header, pid, first int64) (int64, bool) {
	for _, h := range hs {
		if h.ProducerID != pid || h.LastOffset() < first {
			continue
		}
		if h.Attributes&batch.AttrControl != 0 {
			return 0, false // the transaction's marker: nothing of it is left
		}
		if h.RecordCount > 0 {
			return max(first, h.BaseOffset), true
		}
	}
	return 0, false
}

// compareCommitted compares what read_committed consumers are told on both sides over the
// range compared: the last stable offset (when the mirror holds everything) and the aborted
// transactions.
//
// A live source commits transactions while verify reads, so the two sides are read in an
// order that makes a difference mean something: through offsetgate first, then the source.
// The mirror never commits what the source has not, and a source's LSO only grows, so a
// proxy LSO above the source's read after it is a fault at once. One below it, when the mirror
// held everything, may be a transaction that committed on the source between the two reads:
// both are read again (up to 10 times, 300 ms apart) before it counts. Both are clipped to the
// range compared, and aborted transactions compared below both LSOs.
func compareCommitted(ctx context.Context, cfg Config, r *Result) error {
	for attempt := 0; ; attempt++ {
		plso, pab, err := committedView(ctx, rawread.New(cfg.Proxy, cfg.Topic, r.Partition), r.From, r.To, cfg.MaxBytes)
		if err != nil {
			return fmt.Errorf("reading through offsetgate at read_committed: %w", err)
		}
		slso, sab, err := committedView(ctx, rawread.New(cfg.Source, cfg.Topic, r.Partition), r.From, r.To, cfg.MaxBytes)
		if err != nil {
			return fmt.Errorf("reading the source at read_committed: %w", err)
		}
		r.SourceLSO, r.ProxyLSO = slso, plso
		sl, pl := min(slso, r.To), min(plso, r.To)
		if pl < sl && r.Tail == 0 && attempt < 10 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(300 * time.Millisecond):
			}
			continue
		}
		if pl > sl || pl < sl && r.Tail == 0 {
			r.Diff = &Difference{Offset: min(sl, pl), Field: "last stable offset", Source: fmt.Sprint(slso), Proxy: fmt.Sprint(plso)}
			return nil
		}
		limit := min(sl, pl)
		r.Aborted = 0
		for k, at := range sab {
			if at >= limit {
				continue
			}
			r.Aborted++
			if _, ok := pab[k]; !ok {
				r.Diff = &Difference{Offset: r.From, Field: "aborted transactions", Source: "producer@first " + k, Proxy: "not named"}
				return nil
			}
		}
		for k, at := range pab {
			if _, ok := sab[k]; !ok && at < limit {
				r.Diff = &Difference{Offset: r.From, Field: "aborted transactions", Source: "not named", Proxy: "producer@first " + k}
				return nil
			}
		}
		return nil
	}
}

func present(b []byte) string {
	if b == nil {
		return "no batch"
	}
	return fmt.Sprintf("a batch at %d", mustHeader(b).BaseOffset)
}

func mustHeader(b []byte) batch.Header {
	h, _ := batch.ReadHeader(b)
	return h
}

// compareBatch compares every header field, then the records.
func compareBatch(sb, pb []byte) *Difference {
	sh, _ := batch.ReadHeader(sb)
	ph, _ := batch.ReadHeader(pb)
	fields := []struct {
		name string
		s, p any
	}{
		{"base offset", sh.BaseOffset, ph.BaseOffset},
		{"batch length", sh.Length, ph.Length},
		{"partition leader epoch", sh.LeaderEpoch, ph.LeaderEpoch},
		{"magic", sh.Magic, ph.Magic},
		{"crc", sh.CRC, ph.CRC},
		{"attributes", sh.Attributes, ph.Attributes},
		{"last offset delta", sh.LastOffsetDelta, ph.LastOffsetDelta},
		{"base timestamp", sh.BaseTimestamp, ph.BaseTimestamp},
		{"max timestamp", sh.MaxTimestamp, ph.MaxTimestamp},
		{"producer id", sh.ProducerID, ph.ProducerID},
		{"producer epoch", sh.ProducerEpoch, ph.ProducerEpoch},
		{"base sequence", sh.BaseSequence, ph.BaseSequence},
		{"record count", sh.RecordCount, ph.RecordCount},
	}
	for _, f := range fields {
		if f.s != f.p {
			return &Difference{Offset: sh.BaseOffset, Field: f.name, Source: fmt.Sprint(f.s), Proxy: fmt.Sprint(f.p)}
		}
	}
	if !bytes.Equal(sb[batch.HeaderLen:], pb[batch.HeaderLen:]) {
		// Name the record and field that differ when the records can be read.
		sr, err1 := decode(sb)
		pr, err2 := decode(pb)
		if err1 == nil && err2 == nil {
			for i := range min(len(sr), len(pr)) {
				if d := compareRecord(sr[i], pr[i]); d != nil {
					return d
				}
			}
		}
		return &Difference{Offset: sh.BaseOffset, Field: "records", Source: "record bytes", Proxy: "other record bytes"}
	}
	if !batch.Valid(pb) {
		return &Difference{Offset: sh.BaseOffset, Field: "crc", Source: "valid", Proxy: "does not match the batch's bytes"}
	}
	return nil
}

var decompressor = kgo.DefaultDecompressor()

// decode reads a batch's records without checking its CRC (the prover reports differences; it
// does not stop at them).
func decode(b []byte) ([]*kgo.Record, error) {
	h, err := batch.ReadHeader(b)
	if err != nil {
		return nil, err
	}
	rp := kmsg.FetchResponseTopicPartition{HighWatermark: h.LastOffset() + 1, RecordBatches: b}
	fp, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{DisableCRCValidation: true, KeepControlRecords: true,
		Offset: h.BaseOffset, IsolationLevel: kgo.ReadUncommitted()}, &rp, decompressor, nil)
	if fp.Err != nil {
		return nil, fp.Err
	}
	return fp.Records, nil
}

func compareRecord(s, p *kgo.Record) *Difference {
	hs := func(r *kgo.Record) string {
		var b bytes.Buffer
		for _, h := range r.Headers {
			fmt.Fprintf(&b, "%q=%q;", h.Key, h.Value)
		}
		return b.String()
	}
	fields := []struct {
		name string
		s, p string
	}{
		{"offset", fmt.Sprint(s.Offset), fmt.Sprint(p.Offset)},
		{"leader epoch", fmt.Sprint(s.LeaderEpoch), fmt.Sprint(p.LeaderEpoch)},
		{"timestamp", fmt.Sprint(s.Timestamp.UnixMilli()), fmt.Sprint(p.Timestamp.UnixMilli())},
		{"key", fmt.Sprintf("%q", s.Key), fmt.Sprintf("%q", p.Key)},
		{"value", fmt.Sprintf("%q", s.Value), fmt.Sprintf("%q", p.Value)},
		{"headers", hs(s), hs(p)},
		{"producer id", fmt.Sprint(s.ProducerID), fmt.Sprint(p.ProducerID)},
		{"producer epoch", fmt.Sprint(s.ProducerEpoch), fmt.Sprint(p.ProducerEpoch)},
		{"attributes", fmt.Sprint(s.Attrs), fmt.Sprint(p.Attrs)},
	}
	for _, f := range fields {
		if f.s != f.p {
			sv, pv := f.s, f.p
			if len(sv) > 80 {
				sv = sv[:80] + "..."
			}
			if len(pv) > 80 {
				pv = pv[:80] + "..."
			}
			return &Difference{Offset: s.Offset, Field: "record " + f.name, Source: sv, Proxy: pv}
		}
	}
	return nil
}

func compareRecords(ctx context.Context, src, px *stream, r *Result) error {
	var sq, pq []*kgo.Record
	fill := func(st *stream, q *[]*kgo.Record, side string) (bool, error) {
		for len(*q) == 0 {
			b, err := st.batch(ctx)
			if err != nil {
				return false, fmt.Errorf("reading %s: %w", side, err)
			}
			if b == nil {
				return false, nil
			}
			rs, err := decode(b)
			if err != nil {
				return false, fmt.Errorf("decoding a batch %s: %w", side, err)
			}
			if st == src {
				r.Batches++
				r.Bytes += int64(len(b))
			}
			for _, rec := range rs {
				if rec.Offset >= r.From && rec.Offset < r.To {
					*q = append(*q, rec)
				}
			}
		}
		return true, nil
	}
	for {
		okS, err := fill(src, &sq, "the source")
		if err != nil {
			return err
		}
		okP, err := fill(px, &pq, "through offsetgate")
		if err != nil {
			return err
		}
		if !okS && !okP {
			return nil
		}
		if !okS || !okP {
			d := &Difference{Field: "record", Source: "no record", Proxy: "no record"}
			if okS {
				d.Offset, d.Source = sq[0].Offset, "a record"
			} else {
				d.Offset, d.Proxy = pq[0].Offset, "a record"
			}
			r.Diff = d
			return nil
		}
		if d := compareRecord(sq[0], pq[0]); d != nil {
			r.Diff = d
			return nil
		}
		sq, pq = sq[1:], pq[1:]
		r.Records++
	}
}
