// Package batch reads and writes Kafka record batches (magic v2) at the byte level, for the
// produce-at-offset path: it splits a partition's record set into batches, reads their header
// fields, rewrites the fields the destination must see differently (recomputing the CRC only
// when a field inside it changed), and builds filler batches that only hold offsets.
//
// Header layout (61 bytes): BaseOffset i64 @0, BatchLength i32 @8, PartitionLeaderEpoch i32
// @12, Magic i8 @16, CRC u32 @17 (CRC-32C of bytes 21..end), Attributes i16 @21,
// LastOffsetDelta i32 @23, BaseTimestamp i64 @27, MaxTimestamp i64 @35, ProducerId i64 @43,
// ProducerEpoch i16 @51, BaseSequence i32 @53, RecordCount i32 @57, records @61.
package batch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// HeaderLen is the size of a v2 batch header.
const HeaderLen = 61

// Attribute bits.
const (
	AttrCodecMask     = 0x07
	AttrLogAppendTime = 0x08
	AttrTransactional = 0x10
	AttrControl       = 0x20
	AttrDeleteHorizon = 0x40
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Header is a batch's header fields.
type Header struct {
	BaseOffset      int64
	Length          int32 // BatchLength: bytes after the length field
	LeaderEpoch     int32
	Magic           int8
	CRC             uint32
	Attributes      int16
	LastOffsetDelta int32
	BaseTimestamp   int64
	MaxTimestamp    int64
	ProducerID      int64
	ProducerEpoch   int16
	BaseSequence    int32
	RecordCount     int32
}

// LastOffset is the batch's last offset.
func (h Header) LastOffset() int64 { return h.BaseOffset + int64(h.LastOffsetDelta) }

// Size is the whole batch's size in bytes.
func (h Header) Size() int { return 12 + int(h.Length) }

// ErrTruncated marks a record set that ends inside a batch.
var ErrTruncated = errors.New("record batch truncated")

// ReadHeader reads the header of the batch at the start of b.
func ReadHeader(b []byte) (Header, error) {
	var h Header
	if len(b) < HeaderLen {
		return h, ErrTruncated
	}
	h.BaseOffset = int64(binary.BigEndian.Uint64(b[0:]))
	h.Length = int32(binary.BigEndian.Uint32(b[8:]))
	h.LeaderEpoch = int32(binary.BigEndian.Uint32(b[12:]))
	h.Magic = int8(b[16])
	h.CRC = binary.BigEndian.Uint32(b[17:])
	h.Attributes = int16(binary.BigEndian.Uint16(b[21:]))
	h.LastOffsetDelta = int32(binary.BigEndian.Uint32(b[23:]))
	h.BaseTimestamp = int64(binary.BigEndian.Uint64(b[27:]))
	h.MaxTimestamp = int64(binary.BigEndian.Uint64(b[35:]))
	h.ProducerID = int64(binary.BigEndian.Uint64(b[43:]))
	h.ProducerEpoch = int16(binary.BigEndian.Uint16(b[51:]))
	h.BaseSequence = int32(binary.BigEndian.Uint32(b[53:]))
	h.RecordCount = int32(binary.BigEndian.Uint32(b[57:]))
	if h.Magic != 2 {
		return h, fmt.Errorf("record batch magic %d: only v2 batches are supported", h.Magic)
	}
	if h.Length < HeaderLen-12 {
		return h, fmt.Errorf("record batch length %d is shorter than a header", h.Length)
	}
	return h, nil
}

// Split cuts a record set into whole batches. A trailing partial batch is an error.
func Split(b []byte) ([][]byte, []Header, error) {
	var out [][]byte
	var hs []Header
	for len(b) > 0 {
		h, err := ReadHeader(b)
		if err != nil {
			return nil, nil, err
		}
		if h.Size() > len(b) {
			return nil, nil, ErrTruncated
		}
		out = append(out, b[:h.Size()])
		hs = append(hs, h)
		b = b[h.Size():]
	}
	return out, hs, nil
}

// CRC computes a batch's CRC-32C (bytes 21..end).
func CRC(b []byte) uint32 { return crc32.Checksum(b[21:], castagnoli) }

// Valid reports whether a batch's stored CRC matches its bytes.
func Valid(b []byte) bool {
	return len(b) >= HeaderLen && binary.BigEndian.Uint32(b[17:]) == CRC(b)
}

// SameContent reports whether two batches are the same but for what a writer or a broker puts
// on a batch (base offset, partition leader epoch, producer id, epoch and sequence, and the CRC
// over them): the same length, magic, attributes, offsets, timestamps and records. A batch
// offsetgate planned is compared so with one the destination holds.
func SameContent(a, b []byte) bool {
	if len(a) != len(b) || len(a) < HeaderLen || !Valid(a) || !Valid(b) {
		return false
	}
	return string(a[8:12]) == string(b[8:12]) && a[16] == b[16] &&
		string(a[21:43]) == string(b[21:43]) && string(a[57:]) == string(b[57:])
}

// Producer fields a writer puts on a batch.
type Producer struct {
	ID       int64
	Epoch    int16
	Sequence int32
}

// ForDestination returns a copy of a source batch as the destination must receive it from a
// client: base offset 0 (Kafka assigns offsets from its log end), no partition leader epoch
// (the broker stamps its own), offsetgate's producer fields, the LogAppendTime bit cleared
// (the mirror topic is CreateTime; the ledger keeps the original), the transactional bit
// cleared (offsetgate's producer is not transactional; the ledger keeps it and the source
// view serves the transaction as the source had it), and a new CRC.
func ForDestination(src []byte, p Producer) []byte {
	out := append([]byte(nil), src...)
	binary.BigEndian.PutUint64(out[0:], 0)
	binary.BigEndian.PutUint32(out[12:], 0xffffffff)
	attrs := binary.BigEndian.Uint16(out[21:]) &^ (AttrLogAppendTime | AttrTransactional)
	binary.BigEndian.PutUint16(out[21:], attrs)
	binary.BigEndian.PutUint64(out[43:], uint64(p.ID))
	binary.BigEndian.PutUint16(out[51:], uint16(p.Epoch))
	binary.BigEndian.PutUint32(out[53:], uint32(p.Sequence))
	binary.BigEndian.PutUint32(out[17:], CRC(out))
	return out
}

// FillerHeader is the header key that marks filler records.
const FillerHeader = "offsetgate.filler"

// FillerKey is the key of filler records on compacted topics, which refuse keyless records:
// fillers are tombstones of this key there, so the destination's own compaction removes them
// again.
var FillerKey = []byte("offsetgate.filler")

// NoTimestamp is Kafka's "no timestamp" (-1): a destination takes it on a create-time topic
// whatever its timestamp bounds, and a time lookup never stops at such a record.
const NoTimestamp = -1

// Filler builds an uncompressed batch of n filler records: no value, the offsetgate.filler
// header, all with timestamp ts (a marker's, so a time lookup stops at its offsets as at the
// marker's; NoTimestamp where the source has nothing, so a lookup passes over them); keyed (tombstones of FillerKey)
// for compacted topics, keyless otherwise. Offsets are 0..n-1 (the destination assigns the
// real ones).
func Filler(n int, ts int64, p Producer, keyed bool) []byte {
	var recs []byte
	for i := 0; i < n; i++ {
		recs = appendFiller(recs, int32(i), 0, keyed)
	}
	b := kmsg.RecordBatch{
		FirstOffset: 0, PartitionLeaderEpoch: -1, Magic: 2, LastOffsetDelta: int32(n - 1),
		FirstTimestamp: ts, MaxTimestamp: ts, ProducerID: p.ID, ProducerEpoch: p.Epoch,
		FirstSequence: p.Sequence, NumRecords: int32(n), Records: recs,
	}
	return finish(b.AppendTo(nil))
}

func appendFiller(dst []byte, offsetDelta int32, tsDelta int64, keyed bool) []byte {
	r := kmsg.Record{OffsetDelta: offsetDelta, TimestampDelta64: tsDelta, Value: nil,
		Headers: []kmsg.Header{{Key: FillerHeader, Value: []byte{1}}}}
	if keyed {
		r.Key = FillerKey
	}
	r.Length = int32(len(r.AppendTo(nil)) - 1) // AppendTo writes Length as given (0: one byte)
	return r.AppendTo(dst)
}

// finish sets a built batch's length and CRC.
func finish(out []byte) []byte {
	binary.BigEndian.PutUint32(out[8:], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[17:], CRC(out))
	return out
}

// Gappy reports whether a batch holds fewer records than offsets: what a compacted source's
// cleaner leaves (records removed inside the batch, or none left at all, the batch kept for
// its producer state). A stock destination takes neither shape from a client.
func (h Header) Gappy() bool { return int64(h.RecordCount) != int64(h.LastOffsetDelta)+1 }

var decompressor = kgo.DefaultDecompressor()

// Dense builds what the destination can take in place of a gappy or empty source batch: one
// uncompressed batch with a record at every offset of the source batch's range, each surviving
// record at its offset (key, value, headers and timestamp as the source had them) and a filler
// in every gap, with the writer's producer fields. The ledger keeps the source batch itself,
// which the source view serves in its place.
func Dense(src []byte, p Producer, keyed bool) ([]byte, error) {
	h, err := ReadHeader(src)
	if err != nil {
		return nil, err
	}
	if h.Size() > len(src) {
		return nil, ErrTruncated
	}
	var rb kmsg.RecordBatch
	if err := rb.ReadFrom(src[:h.Size()]); err != nil {
		return nil, fmt.Errorf("batch at %d: %w", h.BaseOffset, err)
	}
	raw := rb.Records
	if codec := int8(h.Attributes & AttrCodecMask); codec != 0 && h.RecordCount > 0 {
		if raw, err = decompressor.Decompress(raw, kgo.CompressionCodecType(codec)); err != nil {
			return nil, fmt.Errorf("batch at %d: decompressing: %w", h.BaseOffset, err)
		}
	}
	var recs []byte
	next := int32(0)
	// Fillers carry no timestamp: a time lookup on D never stops at an offset the source
	// holds no record at.
	noTS := NoTimestamp - h.BaseTimestamp
	for i := int32(0); i < h.RecordCount; i++ {
		var r kmsg.Record
		n, err := recordLen(raw)
		if err != nil {
			return nil, fmt.Errorf("batch at %d, record %d: %w", h.BaseOffset, i, err)
		}
		if err := r.ReadFrom(raw[:n]); err != nil {
			return nil, fmt.Errorf("batch at %d, record %d: %w", h.BaseOffset, i, err)
		}
		raw = raw[n:]
		if r.OffsetDelta < next || r.OffsetDelta > h.LastOffsetDelta {
			return nil, fmt.Errorf("batch at %d: record offset delta %d out of order", h.BaseOffset, r.OffsetDelta)
		}
		for ; next < r.OffsetDelta; next++ {
			recs = appendFiller(recs, next, noTS, keyed)
		}
		recs = append(recs, raw0(r)...)
		next = r.OffsetDelta + 1
	}
	for ; next <= h.LastOffsetDelta; next++ {
		recs = appendFiller(recs, next, noTS, keyed)
	}
	out := kmsg.RecordBatch{
		FirstOffset: 0, PartitionLeaderEpoch: -1, Magic: 2, LastOffsetDelta: h.LastOffsetDelta,
		FirstTimestamp: h.BaseTimestamp, MaxTimestamp: max(h.MaxTimestamp, h.BaseTimestamp), ProducerID: p.ID, ProducerEpoch: p.Epoch,
		FirstSequence: p.Sequence, NumRecords: h.LastOffsetDelta + 1, Records: recs,
	}
	return finish(out.AppendTo(nil)), nil
}

// raw0 encodes a record again as it was read (its length recomputed). The length is measured
// with a zero length field, one byte long: the length the record was read with takes two bytes
// or more from 64 bytes on, and measuring with it would count those bytes into the body (a
// length Kafka refuses, INVALID_RECORD).
func raw0(r kmsg.Record) []byte {
	r.Length = 0
	r.Length = int32(len(r.AppendTo(nil)) - 1)
	return r.AppendTo(nil)
}

// recordLen is the encoded size of the record at the start of b: its varint length and what
// follows.
func recordLen(b []byte) (int, error) {
	l, n := binary.Varint(b)
	if n <= 0 || l < 0 || int64(n)+l > int64(len(b)) {
		return 0, errors.New("record truncated")
	}
	return n + int(l), nil
}

// Source is what the ledger kept of a source batch's header: the fields the destination
// holds differently.
type Source struct {
	BaseOffset    int64
	LeaderEpoch   int32
	Attributes    int16
	MaxTimestamp  int64
	ProducerID    int64
	ProducerEpoch int16
	BaseSequence  int32
	CRC           uint32
	Length        int32
}

// Restore rewrites, in place, a batch the destination holds into the source batch it stands
// for. When the destination kept the batch as written (same length) the source CRC is put back
// as it was, so a record the destination changed fails the consumer's CRC check instead of
// being passed off as the source's; otherwise the CRC is computed afresh.
func Restore(b []byte, s Source) {
	binary.BigEndian.PutUint64(b[0:], uint64(s.BaseOffset))
	binary.BigEndian.PutUint32(b[12:], uint32(s.LeaderEpoch))
	binary.BigEndian.PutUint16(b[21:], uint16(s.Attributes))
	binary.BigEndian.PutUint64(b[35:], uint64(s.MaxTimestamp))
	binary.BigEndian.PutUint64(b[43:], uint64(s.ProducerID))
	binary.BigEndian.PutUint16(b[51:], uint16(s.ProducerEpoch))
	binary.BigEndian.PutUint32(b[53:], uint32(s.BaseSequence))
	if int32(binary.BigEndian.Uint32(b[8:])) == s.Length {
		binary.BigEndian.PutUint32(b[17:], s.CRC)
	} else {
		binary.BigEndian.PutUint32(b[17:], CRC(b))
	}
}

// ErrNotMarker is a control batch whose record is not a transaction marker this version knows.
var ErrNotMarker = errors.New("not a transaction marker")

// Marker reads a control batch's marker: commit (true) or abort (false). Control batches are
// never compressed and hold one record whose key is a version and a type (0 ABORT, 1 COMMIT).
func Marker(b []byte) (commit bool, err error) {
	m, err := ReadMarker(b)
	return m.Commit, err
}

// MarkerInfo is what a transaction marker says: commit or abort, the epoch of the transaction
// coordinator that wrote it (its value) and its record's timestamp. A broker keeps the last
// two in a producer's state (DescribeProducers shows them).
type MarkerInfo struct {
	Commit           bool
	CoordinatorEpoch int32
	Timestamp        int64
}

// ReadMarker reads a control batch's marker whole. A marker whose value cannot be read has
// CoordinatorEpoch -1 (the broker's "none") and no error: its type decides what it does.
func ReadMarker(b []byte) (MarkerInfo, error) {
	h, err := ReadHeader(b)
	if err != nil {
		return MarkerInfo{}, err
	}
	if h.Attributes&AttrControl == 0 || h.Attributes&AttrCodecMask != 0 || h.RecordCount != 1 || len(b) < h.Size() {
		return MarkerInfo{}, fmt.Errorf("%w: batch at %d (attributes %#x, %d records)", ErrNotMarker, h.BaseOffset, h.Attributes, h.RecordCount)
	}
	var r kmsg.Record
	if err := r.ReadFrom(b[HeaderLen:h.Size()]); err != nil {
		return MarkerInfo{}, fmt.Errorf("%w: batch at %d: %v", ErrNotMarker, h.BaseOffset, err)
	}
	var k kmsg.ControlRecordKey
	if err := k.ReadFrom(r.Key); err != nil {
		return MarkerInfo{}, fmt.Errorf("%w: batch at %d: %v", ErrNotMarker, h.BaseOffset, err)
	}
	m := MarkerInfo{CoordinatorEpoch: -1, Timestamp: h.BaseTimestamp + r.TimestampDelta64}
	switch k.Type {
	case 0:
	case 1:
		m.Commit = true
	default:
		return MarkerInfo{}, fmt.Errorf("%w: batch at %d holds a %s control record", ErrNotMarker, h.BaseOffset, k.Type)
	}
	var v kmsg.EndTxnMarker
	if err := v.ReadFrom(r.Value); err == nil {
		m.CoordinatorEpoch = v.CoordinatorEpoch
	}
	return m, nil
}
