package batch

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A batch rewritten for the destination keeps its records and codec and carries a valid CRC;
// a filler batch decodes to n keyless, valueless records with the filler header.
func TestForDestinationAndFiller(t *testing.T) {
	rec := kmsg.Record{Key: []byte("k"), Value: []byte("v"), OffsetDelta: 0}
	rec.Length = int32(len(rec.AppendTo(nil)) - 1)
	src := kmsg.RecordBatch{FirstOffset: 1000, PartitionLeaderEpoch: 7, Magic: 2, Attributes: AttrLogAppendTime,
		FirstTimestamp: 5, MaxTimestamp: 9, ProducerID: 42, ProducerEpoch: 3, FirstSequence: 11, NumRecords: 1, Records: rec.AppendTo(nil)}
	b := src.AppendTo(nil)
	putLenCRC(b)
	if !Valid(b) {
		t.Fatal("test batch has a bad CRC")
	}
	sets, hs, err := Split(append(append([]byte(nil), b...), b...))
	if err != nil || len(sets) != 2 || hs[1].BaseOffset != 1000 || hs[0].LeaderEpoch != 7 {
		t.Fatalf("split: %d batches, %+v, %v", len(sets), hs, err)
	}
	if _, _, err := Split(b[:len(b)-1]); err == nil {
		t.Fatal("a truncated batch was accepted")
	}
	d := ForDestination(b, Producer{ID: 99, Epoch: 0, Sequence: 4})
	h, err := ReadHeader(d)
	if err != nil || !Valid(d) {
		t.Fatalf("rewritten batch invalid: %v", err)
	}
	if h.BaseOffset != 0 || h.ProducerID != 99 || h.BaseSequence != 4 || h.Attributes&AttrLogAppendTime != 0 || h.MaxTimestamp != 9 {
		t.Fatalf("rewritten header %+v", h)
	}
	if string(d[HeaderLen:]) != string(b[HeaderLen:]) {
		t.Fatal("records changed")
	}

	f := Filler(5, 1234, Producer{ID: 99, Sequence: 5}, false)
	fh, err := ReadHeader(f)
	if err != nil || !Valid(f) || fh.RecordCount != 5 || fh.LastOffsetDelta != 4 || fh.BaseTimestamp != 1234 {
		t.Fatalf("filler header %+v, %v", fh, err)
	}
	fp := kmsg.FetchResponseTopicPartition{RecordBatches: f}
	p, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Topic: "t", Partition: 0, KeepControlRecords: true, Offset: 0}, &fp, kgo.DefaultDecompressor(), nil)
	if len(p.Records) != 5 {
		t.Fatalf("filler decodes to %d records, want 5", len(p.Records))
	}
	for _, r := range p.Records {
		if r.Key != nil || r.Value != nil || len(r.Headers) != 1 || r.Headers[0].Key != FillerHeader || r.Timestamp.UnixMilli() != 1234 {
			t.Fatalf("filler record %+v", r)
		}
	}
	_ = context.Background
}

func putLenCRC(b []byte) {
	n := uint32(len(b) - 12)
	b[8], b[9], b[10], b[11] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
	c := CRC(b)
	b[17], b[18], b[19], b[20] = byte(c>>24), byte(c>>16), byte(c>>8), byte(c)
}

// marker builds a control batch as a transaction coordinator writes it.
func marker(base int64, commit bool) []byte {
	typ := kmsg.ControlRecordKeyType(0)
	if commit {
		typ = 1
	}
	key := (&kmsg.ControlRecordKey{Type: typ}).AppendTo(nil)
	val := (&kmsg.EndTxnMarker{CoordinatorEpoch: 5}).AppendTo(nil)
	r := kmsg.Record{Key: key, Value: val}
	r.Length = int32(len(r.AppendTo(nil)) - 1)
	b := kmsg.RecordBatch{FirstOffset: base, Magic: 2, Attributes: AttrControl | AttrTransactional, FirstTimestamp: 1, MaxTimestamp: 1,
		ProducerID: 77, ProducerEpoch: 3, FirstSequence: -1, NumRecords: 1, Records: r.AppendTo(nil)}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[8:], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[17:], CRC(out))
	return out
}

func TestMarker(t *testing.T) {
	for _, commit := range []bool{true, false} {
		got, err := Marker(marker(10, commit))
		if err != nil || got != commit {
			t.Fatalf("Marker(commit=%v) = %v, %v", commit, got, err)
		}
	}
	if _, err := Marker(Filler(1, 1, Producer{}, false)); !errors.Is(err, ErrNotMarker) {
		t.Fatalf("a data batch read as a marker: %v", err)
	}
}

// A transactional batch goes to the destination without its transactional bit (offsetgate's
// producer is not transactional), at the same length, so restoring the source's attributes
// and CRC gives the source batch back byte for byte.
func TestForDestinationTransactional(t *testing.T) {
	src := Filler(2, 5, Producer{ID: 77, Epoch: 3, Sequence: 0}, false)
	binary.BigEndian.PutUint16(src[21:], AttrTransactional)
	binary.BigEndian.PutUint32(src[17:], CRC(src))
	h, _ := ReadHeader(src)
	d := ForDestination(src, Producer{ID: 1, Epoch: 0, Sequence: 9})
	dh, _ := ReadHeader(d)
	if dh.Attributes&AttrTransactional != 0 || !Valid(d) || len(d) != len(src) {
		t.Fatalf("destination batch attributes %#x, valid %v, %d bytes for %d", dh.Attributes, Valid(d), len(d), len(src))
	}
	Restore(d, Source{BaseOffset: h.BaseOffset, LeaderEpoch: h.LeaderEpoch, Attributes: h.Attributes, MaxTimestamp: h.MaxTimestamp,
		ProducerID: h.ProducerID, ProducerEpoch: h.ProducerEpoch, BaseSequence: h.BaseSequence, CRC: h.CRC, Length: h.Length})
	if !bytes.Equal(d, src) {
		t.Fatal("the restored batch differs from the source's")
	}
}

// value is a test record's value: 'v', its offset delta and pad zero bytes.
func value(d int32, pad int) []byte { return append([]byte{'v', byte(d)}, make([]byte, pad)...) }

// gappy builds a batch of offsets [base, base+span) holding records only at the offset deltas
// given, as a compacted source's cleaner leaves it, compressed with codec (nil: none).
func gappy(t *testing.T, base int64, span int32, deltas []int32, codec *kgo.CompressionCodec, pad int) []byte {
	t.Helper()
	var recs []byte
	for _, d := range deltas {
		r := kmsg.Record{OffsetDelta: d, TimestampDelta64: int64(d) * 10, Key: []byte{'k', byte(d)}, Value: value(d, pad),
			Headers: []kmsg.Header{{Key: "h", Value: []byte{byte(d)}}}}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		recs = r.AppendTo(recs)
	}
	attrs := int16(0)
	if codec != nil {
		c, err := kgo.DefaultCompressor(*codec)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		out, typ := c.Compress(&buf, recs)
		recs, attrs = append([]byte(nil), out...), int16(typ)
	}
	b := kmsg.RecordBatch{FirstOffset: base, Magic: 2, Attributes: attrs, LastOffsetDelta: span - 1, FirstTimestamp: 1000,
		MaxTimestamp: 1000 + int64(span)*10, ProducerID: 5, ProducerEpoch: 1, FirstSequence: 0, NumRecords: int32(len(deltas)), Records: recs}
	return finish(b.AppendTo(nil))
}

// A gappy or empty batch becomes a dense one for the destination: a record at every offset,
// each survivor at its own with its key, value, headers and timestamp, fillers between.
func TestDense(t *testing.T) {
	gz := kgo.GzipCompression()
	for name, c := range map[string]struct {
		deltas []int32
		codec  *kgo.CompressionCodec
		keyed  bool
		pad    int
	}{
		"gaps":            {[]int32{0, 3, 4}, nil, true, 0},
		"gaps, gzip":      {[]int32{1, 5}, &gz, true, 0},
		"empty":           {nil, nil, true, 0},
		"first removed":   {[]int32{2}, nil, false, 0},
		"last one kept":   {[]int32{5}, &gz, false, 0},
		"nothing missing": {[]int32{0, 1, 2, 3, 4, 5}, nil, true, 0},
		// A record of 64 bytes or more has a length of two bytes or more.
		"large records":       {[]int32{1, 4}, nil, true, 300},
		"large records, gzip": {[]int32{0, 5}, &gz, false, 70000},
	} {
		t.Run(name, func(t *testing.T) {
			src := gappy(t, 100, 6, c.deltas, c.codec, c.pad)
			h, _ := ReadHeader(src)
			if h.Gappy() != (len(c.deltas) != 6) {
				t.Fatalf("Gappy() = %v for %d records of 6 offsets", h.Gappy(), len(c.deltas))
			}
			d, err := Dense(src, Producer{ID: 9, Epoch: 2, Sequence: 40}, c.keyed)
			if err != nil {
				t.Fatal(err)
			}
			dh, err := ReadHeader(d)
			if err != nil || !Valid(d) || dh.RecordCount != 6 || dh.LastOffsetDelta != 5 || dh.Attributes&AttrCodecMask != 0 ||
				dh.ProducerID != 9 || dh.BaseSequence != 40 || dh.BaseTimestamp != h.BaseTimestamp {
				t.Fatalf("dense header %+v (valid %v, %v)", dh, Valid(d), err)
			}
			rs := records(t, d)
			survivors := map[int32]bool{}
			for _, x := range c.deltas {
				survivors[x] = true
			}
			for i, r := range rs {
				switch {
				case r.OffsetDelta != int32(i):
					t.Fatalf("record %d has offset delta %d", i, r.OffsetDelta)
				case survivors[int32(i)] && (string(r.Key) != string([]byte{'k', byte(i)}) || string(r.Value) != string(value(int32(i), c.pad)) || r.TimestampDelta64 != int64(i)*10):
					t.Fatalf("survivor %d came out as %+v", i, r)
				case !survivors[int32(i)] && (r.Value != nil || len(r.Headers) != 1 || r.Headers[0].Key != FillerHeader || (r.Key != nil) != c.keyed):
					t.Fatalf("filler %d came out as %+v", i, r)
				case !survivors[int32(i)] && dh.BaseTimestamp+r.TimestampDelta64 != NoTimestamp:
					// A time lookup on D must pass over offsets the source has no record at.
					t.Fatalf("filler %d has timestamp %d", i, dh.BaseTimestamp+r.TimestampDelta64)
				}
			}
		})
	}
}

func records(t *testing.T, b []byte) []kmsg.Record {
	t.Helper()
	h, _ := ReadHeader(b)
	raw := b[HeaderLen:h.Size()]
	var out []kmsg.Record
	for len(raw) > 0 {
		n, err := recordLen(raw)
		if err != nil {
			t.Fatal(err)
		}
		var r kmsg.Record
		if err := r.ReadFrom(raw[:n]); err != nil {
			t.Fatal(err)
		}
		// The length must be the body's, as Kafka checks it (kmsg's decoder does not).
		l, k := binary.Varint(raw)
		body := r
		body.Length = 0
		if got := len(body.AppendTo(nil)) - 1; int64(got) != l || k+got != n {
			t.Fatalf("record at offset delta %d says it is %d bytes, its body is %d", r.OffsetDelta, l, got)
		}
		out = append(out, r)
		raw = raw[n:]
	}
	return out
}

// Two writes of the same source batch by different producers, as a broker stores them (its
// own base offset and leader epoch), have the same content; a different timestamp, record or
// attribute, a broken CRC or another length does not.
func TestSameContent(t *testing.T) {
	rec := kmsg.Record{Key: []byte("k"), Value: []byte("v"), OffsetDelta: 0}
	rec.Length = int32(len(rec.AppendTo(nil)) - 1)
	build := func(ts int64, value string, attrs int16) []byte {
		r := rec
		r.Value = []byte(value)
		b := kmsg.RecordBatch{FirstOffset: 10, Magic: 2, Attributes: attrs, FirstTimestamp: ts, MaxTimestamp: ts,
			ProducerID: 1, ProducerEpoch: 0, FirstSequence: 0, NumRecords: 1, Records: r.AppendTo(nil)}
		out := b.AppendTo(nil)
		putLenCRC(out)
		return out
	}
	src := build(5, "v", 0)
	stored := func(b []byte, offset int64, leaderEpoch int32) []byte {
		out := append([]byte(nil), b...)
		binary.BigEndian.PutUint64(out[0:], uint64(offset))
		binary.BigEndian.PutUint32(out[12:], uint32(leaderEpoch))
		return out
	}
	a := stored(ForDestination(src, Producer{ID: 7, Epoch: 1, Sequence: 30}), 500, 3)
	b := stored(ForDestination(src, Producer{ID: 8, Epoch: 0, Sequence: 0}), 500, 4)
	if !SameContent(a, b) {
		t.Fatal("the same batch from two producers differs")
	}
	broken := append([]byte(nil), a...)
	broken[len(broken)-1] ^= 1
	for name, other := range map[string][]byte{
		"timestamp": ForDestination(build(6, "v", 0), Producer{ID: 8}),
		"record":    ForDestination(build(5, "w", 0), Producer{ID: 8}),
		"codec bit": ForDestination(build(5, "v", 1), Producer{ID: 8}),
		"length":    ForDestination(build(5, "vv", 0), Producer{ID: 8}),
		"bad CRC":   broken,
	} {
		if SameContent(a, other) {
			t.Errorf("%s: taken for the same content", name)
		}
	}
}
