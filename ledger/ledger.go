// Package ledger is offsetgate's write-ahead record of produce-at-offset, kept in the
// destination itself: one topic per mirror topic, __offsetgate_ledger_<topic id>, with the
// mirror topic's partition count, so mirror partition p's history is ledger partition p, in
// order. An entry is written (acks=all) before the data it describes; after a crash the entries
// beyond what the destination confirmed are retried with exactly the producer values they hold.
//
// Entries are versioned JSON. Each record's timestamp is the entry's source base offset, so a
// timestamp lookup (ListOffsets) finds the entry of a source offset without reading the whole
// partition; the ledger topics therefore keep CreateTime timestamps and never expire by time.
package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/rawread"
	"offsetgate/rules"
)

// Version is the newest entry format this offsetgate reads. Entries are written with the
// lowest version that holds them (VersionOf), so an older offsetgate that shares the ledger
// keeps reading what it can and stops at what it cannot.
const Version = 2

// VersionOf is the format version an entry is written with: 2 for what version 2 added
// (control batches, compaction rewrites, batches kept whole), 1 for the rest.
func VersionOf(e Entry) int {
	if e.Kind == KindControl || e.Kind == KindRewrite || len(e.Raw) > 0 {
		return 2
	}
	return 1
}

// Entry kinds.
const (
	KindBatch   = "batch"   // a source batch written at D offset D
	KindFiller  = "filler"  // filler records for a small hole in the source offsets
	KindSegment = "segment" // a new shift segment: D = S - Delta from Src on
	KindOwner   = "owner"   // the instance that writes this partition, and until when
	KindHalt    = "halt"    // the partition stopped: D did not hold what was expected
	// KindRewrite records that a compacted source's cleaner changed a mirrored batch: its
	// records now are Raw's (Src, Last, D and Count stay those of the batch).
	KindRewrite = "rewrite"
	// KindControl is a source control batch (a transaction's COMMIT or ABORT marker), which
	// a stock destination does not take from a client: D holds filler records at its offsets
	// and the entry keeps the original batch (Raw) to serve in its place.
	KindControl = "control"
)

// Data reports whether an entry stands for records on D (a batch, fillers, or a control
// batch held by fillers), as opposed to a segment, an ownership claim or a halt.
func (e Entry) Data() bool {
	return e.Kind == KindBatch || e.Kind == KindFiller || e.Kind == KindControl
}

// Markers of a control entry.
const (
	MarkerCommit = "commit"
	MarkerAbort  = "abort"
)

// Entry is one ledger record.
type Entry struct {
	V    int    `json:"v"`
	Kind string `json:"k"`

	// batch, filler: source range [Src, Last] at destination offsets from D.
	Src   int64 `json:"src"`
	Last  int64 `json:"last,omitempty"`
	D     int64 `json:"d,omitempty"`
	Count int32 `json:"n,omitempty"`

	// batch: the source header fields offsetgate changed or must give back.
	Epoch     int32  `json:"epoch,omitempty"`
	CRC       uint32 `json:"crc,omitempty"`
	Len       int32  `json:"len,omitempty"`
	Attrs     int16  `json:"attrs,omitempty"`
	MaxTS     int64  `json:"maxts,omitempty"`
	SrcPID    int64  `json:"spid,omitempty"`
	SrcPEpoch int16  `json:"sepoch,omitempty"`
	SrcSeq    int32  `json:"sseq,omitempty"`

	// batch, filler: offsetgate's producer values on D (retries reuse them exactly).
	PID    int64 `json:"pid,omitempty"`
	PEpoch int16 `json:"pepoch,omitempty"`
	Seq    int32 `json:"seq,omitempty"`

	// segment
	Delta int64 `json:"delta,omitempty"`

	// owner
	Owner string    `json:"owner,omitempty"`
	Until time.Time `json:"until,omitzero"`

	// halt
	Reason string `json:"reason,omitempty"`

	// control: the marker and the whole source batch, byte for byte (also Src, Last, D, Count,
	// Epoch, CRC, Len, Attrs, SrcPID, SrcPEpoch as for a batch; PID, PEpoch, Seq of the filler
	// written in its place). batch: Raw is set for a gappy or empty batch (compaction), which
	// D holds as a dense copy. rewrite: Raw is the batch as the source's cleaner left it.
	Marker string `json:"marker,omitempty"`
	Raw    []byte `json:"raw,omitempty"`
	// batch, rewrite: the source batch's record count (Count is its offsets).
	Records int32 `json:"records,omitempty"`
	// rewrite: the source's cleaner removed every record of the batch (and the batch).
	Gone bool `json:"gone,omitempty"`
	// filler: written at the mirror's start so that D's offsets are the source's (the source's
	// log start, or the offset the mirror started at, was above D's end). Nothing of the
	// source stands behind these offsets: offsetgate deletes them from D (DeleteRecords) once
	// they are written, so D's log start is the source's. An older offsetgate reads the entry
	// as a plain filler, which it is.
	Align bool `json:"align,omitempty"`
}

// Decode reads one ledger record's value. It refuses what it cannot read exactly: bad JSON, an
// entry written by a newer offsetgate (a field or kind this version does not know could change
// what the entry means), an unknown kind.
func Decode(value []byte) (Entry, error) {
	var e Entry
	if !fastDecode(value, &e) {
		var slow Entry // its own: one escaping to encoding/json would take e to the heap too
		if err := json.Unmarshal(value, &slow); err != nil {
			return Entry{}, fmt.Errorf("unreadable entry: %w", err)
		}
		e = slow
	}
	if e.V > Version {
		return Entry{}, fmt.Errorf("entry of format version %d, written by a newer offsetgate (this one reads up to %d)", e.V, Version)
	}
	switch e.Kind {
	case KindBatch, KindFiller, KindSegment, KindOwner, KindHalt:
	case KindControl:
		if (e.Marker != MarkerCommit && e.Marker != MarkerAbort) || len(e.Raw) == 0 {
			return Entry{}, fmt.Errorf("control entry at source offset %d without its marker or batch", e.Src)
		}
	case KindRewrite:
		if len(e.Raw) == 0 && !e.Gone {
			return Entry{}, fmt.Errorf("rewrite entry at source offset %d without its batch", e.Src)
		}
	default:
		return Entry{}, fmt.Errorf("entry of unknown kind %q", e.Kind)
	}
	return e, nil
}

// Topic names the ledger topic of a mirror topic.
func Topic(topicID string) string { return rules.OwnTopicPrefix + "ledger_" + topicID }

// Ledger reads and writes ledger topics with offsetgate's own client.
type Ledger struct {
	cl  *kgo.Client
	dec kgo.Decompressor
	// zstd compresses the fenced appends' records in the ledger topic's own codec: a batch
	// in another codec is recompressed by the broker on every append, on the write's
	// critical path (see Fenced.batch).
	zstd kgo.Compressor

	// ensured remembers the ledger topics this process made sure of, with their partition
	// counts: every takeover of a partition ensures its topic, and asking the destination
	// each time (its brokers, a CreateTopics) made starting N partitions cost N round trips
	// of cluster-wide metadata.
	mu      sync.Mutex
	ensured map[string]int32

	// meta shares the metadata lookups of concurrent takeovers and reads (rawread.Meta).
	meta *rawread.Meta
}

// New wraps offsetgate's own client (acks=all, no linger), which both writes and reads.
func New(cl *kgo.Client) *Ledger {
	// DefaultCompressor fails only for a codec it does not know; zstd is one it does.
	zstd, _ := kgo.DefaultCompressor(kgo.ZstdCompression())
	return &Ledger{cl: cl, dec: kgo.DefaultDecompressor(), zstd: zstd, meta: rawread.NewMeta(cl)}
}

// Meta is the ledger's shared metadata lookups, for the other lookups of the same takeovers.
func (l *Ledger) Meta() *rawread.Meta { return l.meta }

// Ensure creates the ledger topic of a mirror topic if it does not exist, with at least the
// mirror topic's partition count (once per process and count).
func (l *Ledger) Ensure(ctx context.Context, topicID string, partitions int32) error {
	l.mu.Lock()
	done := l.ensured[topicID] >= partitions
	l.mu.Unlock()
	if done {
		return nil
	}
	if err := l.ensure(ctx, topicID, partitions); err != nil {
		return err
	}
	l.mu.Lock()
	if l.ensured == nil {
		l.ensured = map[string]int32{}
	}
	l.ensured[topicID] = max(l.ensured[topicID], partitions)
	l.mu.Unlock()
	return nil
}

func (l *Ledger) ensure(ctx context.Context, topicID string, partitions int32) error {
	adm := kadm.NewClient(l.cl)
	// The brokers only (no topic's metadata): how many replicas the ledger can have.
	meta, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	rf := int16(len(meta.Brokers))
	if rf > 3 {
		rf = 3
	}
	_, err = adm.CreateTopic(ctx, partitions, rf, map[string]*string{
		"cleanup.policy":                 kmsg.StringPtr("delete"),
		"retention.ms":                   kmsg.StringPtr("-1"),
		"retention.bytes":                kmsg.StringPtr("-1"),
		"unclean.leader.election.enable": kmsg.StringPtr("false"),
		"message.timestamp.type":         kmsg.StringPtr("CreateTime"),
		"message.timestamp.after.max.ms": kmsg.StringPtr("9223372036854775807"),
		"compression.type":               kmsg.StringPtr("zstd"),
	}, Topic(topicID))
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("ledger: creating %s: %w", Topic(topicID), err)
	}
	if err == nil {
		return nil
	}
	// It exists: partitions added to the mirror topic (the source grew) are added to its
	// ledger too, partition p's history being ledger partition p.
	td, err := adm.ListTopics(ctx, Topic(topicID))
	if err != nil {
		return fmt.Errorf("ledger: partitions of %s: %w", Topic(topicID), err)
	}
	t, ok := td[Topic(topicID)]
	if !ok || errors.Is(t.Err, kerr.UnknownTopicOrPartition) {
		return nil // created a moment ago by another caller, with the mirror topic's count
	}
	if t.Err != nil {
		return fmt.Errorf("ledger: partitions of %s: %v", Topic(topicID), t.Err)
	}
	if int32(len(t.Partitions)) >= partitions {
		return nil
	}
	resps, err := adm.UpdatePartitions(ctx, int(partitions), Topic(topicID))
	if err != nil {
		return fmt.Errorf("ledger: adding partitions to %s: %w", Topic(topicID), err)
	}
	if r := resps[Topic(topicID)]; r.Err != nil && !errors.Is(r.Err, kerr.InvalidPartitions) {
		// INVALID_PARTITIONS: another instance grew it a moment ago.
		return fmt.Errorf("ledger: adding partitions to %s (to %d): %w", Topic(topicID), partitions, r.Err)
	}
	l.cl.ForceMetadataRefresh()
	return nil
}

// Append writes entries to a partition's ledger, durably (acks=all), in order.
func (l *Ledger) Append(ctx context.Context, topicID string, partition int32, es []Entry) error {
	_, err := l.AppendNext(ctx, topicID, partition, es)
	return err
}

// AppendNext is Append, and returns the ledger offset after the last entry written: a writer
// that reads from there later sees exactly what others appended since.
func (l *Ledger) AppendNext(ctx context.Context, topicID string, partition int32, es []Entry) (int64, error) {
	rs := make([]*kgo.Record, 0, len(es))
	for _, e := range es {
		e.V = VersionOf(e)
		b, err := json.Marshal(e)
		if err != nil {
			return 0, err
		}
		rs = append(rs, &kgo.Record{Topic: Topic(topicID), Partition: partition, Key: []byte(e.Kind + ":" + strconv.FormatInt(e.Src, 10)),
			Value: b, Timestamp: time.UnixMilli(max(e.Src, 0))})
	}
	res := l.cl.ProduceSync(ctx, rs...)
	err := res.FirstErr()
	// A partition added to the ledger a moment ago (here or by another instance) is not in
	// the client's metadata yet: the client does not refresh for that by itself.
	for wait := 100 * time.Millisecond; err != nil && strings.Contains(err.Error(), "invalid record partitioning choice") && wait < 5*time.Second; wait *= 2 {
		l.cl.ForceMetadataRefresh()
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("ledger: appending to %s[%d]: %w", Topic(topicID), partition, err)
		case <-time.After(wait):
		}
		res = l.cl.ProduceSync(ctx, rs...)
		err = res.FirstErr()
	}
	if err != nil {
		return 0, fmt.Errorf("ledger: appending to %s[%d]: %w", Topic(topicID), partition, err)
	}
	next := int64(0)
	for _, r := range res {
		next = max(next, r.Record.Offset+1)
	}
	return next, nil
}

// Read returns every entry of a partition's ledger, in order.
func (l *Ledger) Read(ctx context.Context, topicID string, partition int32) ([]Entry, error) {
	es, _, err := l.ReadFrom(ctx, topicID, partition, 0)
	return es, err
}

// ReadFrom returns the entries of a partition's ledger from ledger offset from up to its high
// watermark, and the ledger offset to read from next time (Scan, collected).
func (l *Ledger) ReadFrom(ctx context.Context, topicID string, partition int32, from int64) ([]Entry, int64, error) {
	var out []Entry
	next, err := l.Scan(ctx, topicID, partition, from, -1, func(_ int64, e Entry) error {
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, from, err
	}
	return out, next, nil
}

// ScanWhole hands every entry of a partition's ledger to fn as it is read (as Scan does) and returns the
// ledger offset to read from next time, or an error wrapping rawread.ErrGone when the ledger
// no longer starts at 0 (it was trimmed below a snapshot, before or during the read): a replay
// that needs the whole history learns from the read itself that it has it. An error of fn
// stops the read and is returned as it is.
func (l *Ledger) ScanWhole(ctx context.Context, topicID string, partition int32, fn func(offset int64, e Entry) error) (int64, error) {
	topic := Topic(topicID)
	var fnErr error
	next, err := l.meta.EachExact(ctx, l.cl, topic, partition, 0, -1, func(r *kgo.Record) error {
		e, err := Decode(r.Value)
		if err != nil {
			fnErr = fmt.Errorf("ledger: %s[%d] at ledger offset %d: %w", topic, partition, r.Offset, err)
		} else {
			fnErr = fn(r.Offset, e)
		}
		return fnErr
	})
	switch {
	case fnErr != nil:
		return 0, fnErr
	case err != nil:
		return 0, fmt.Errorf("ledger: %w", err)
	}
	return next, nil
}

// Scan hands the entries of a partition's ledger from ledger offset from up to to (exclusive;
// -1: its high watermark) to fn with their ledger offsets, one fetch at a time (rawread.Each:
// raw fetches from the leader with offsetgate's own client), and returns the ledger offset to
// read from next time. An entry it cannot decode stops the read with the partition, the ledger
// offset and the reason: a write-ahead ledger that skipped what it cannot read would serve and
// write on a guess. An error of fn stops the read and is returned as it is.
func (l *Ledger) Scan(ctx context.Context, topicID string, partition int32, from, to int64, fn func(offset int64, e Entry) error) (int64, error) {
	return l.ScanWith(ctx, nil, topicID, partition, from, to, fn)
}

// ScanWith is Scan with a hint of where the ledger partition's leader is (rawread.EachWith),
// for a reader that reads the same partition often.
func (l *Ledger) ScanWith(ctx context.Context, hint *rawread.Partition, topicID string, partition int32, from, to int64, fn func(offset int64, e Entry) error) (int64, error) {
	topic := Topic(topicID)
	var fnErr error
	next, err := l.meta.EachWith(ctx, l.cl, hint, topic, partition, from, to, func(r *kgo.Record) error {
		e, err := Decode(r.Value)
		if err != nil {
			fnErr = fmt.Errorf("ledger: %s[%d] at ledger offset %d: %w", topic, partition, r.Offset, err)
		} else {
			fnErr = fn(r.Offset, e)
		}
		return fnErr
	})
	switch {
	case fnErr != nil:
		return from, fnErr
	case err != nil:
		return from, fmt.Errorf("ledger: %w", err)
	}
	return next, nil
}
