// Package magic is the produce-at-offset magic header (docs/PROTOCOL.md): a tagged field of the
// request header of flexible Produce requests (v9+), and the walker of tagged-field sections
// that finds it. Both offsetgate's sessions (which read, attach and strip it) and its wire
// client (which sends it) use this package; it imports nothing of offsetgate's.
//
//	tag   Tag (20295, "OG")
//	value version (1 byte, Version) | flags (1 byte; bit 0: produce at offset, bit 1: from)
//	      [from: the source offset the request continues from, 8 bytes big-endian]
package magic

import (
	"encoding/binary"
	"errors"
)

const (
	// Tag is the request-header tag number.
	Tag = 20295
	// Version is the value format version this offsetgate writes and reads.
	Version = 1
	// AtOffset is the produce-at-offset flag.
	AtOffset = 1
	// FromFlag says the value carries a from offset: the source offset the request's one
	// partition continues from. The client read the source from there, and the source has no
	// batch between it and the request's first batch (on a compacted source, batches that were
	// mirrored there are gone).
	FromFlag = 2
)

// Header is what a request header's magic tag said.
type Header struct {
	Present bool
	Valid   bool // a version this offsetgate knows, with the produce-at-offset flag
	Version byte
	Flags   byte
	// From is the source offset the request continues from; -1: not given.
	From int64
}

// Parse reads the tag's value.
func Parse(v []byte) Header {
	h := Header{Present: true, From: -1}
	if len(v) >= 2 {
		h.Version, h.Flags = v[0], v[1]
		h.Valid = h.Version == Version && h.Flags&AtOffset != 0
		if h.Flags&FromFlag != 0 {
			// A from offset that is missing or negative makes the tag invalid: a client
			// that meant to give one is not taken to have given none.
			if len(v) < 10 || int64(binary.BigEndian.Uint64(v[2:])) < 0 {
				h.Valid = false
			} else {
				h.From = int64(binary.BigEndian.Uint64(v[2:]))
			}
		}
	}
	return h
}

// Value is the tag value a mirroring client sends; from < 0: no from offset.
func Value(from int64) []byte {
	if from < 0 {
		return []byte{Version, AtOffset}
	}
	return binary.BigEndian.AppendUint64([]byte{Version, AtOffset | FromFlag}, uint64(from))
}

// AppendHeader writes a flexible request header with the magic tag: api key, version,
// correlation id, client id (nullable, non-compact) and the tag section. The body follows.
// from < 0: no from offset.
func AppendHeader(dst []byte, key, version int16, corr int32, clientID string, from int64) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(key))
	dst = binary.BigEndian.AppendUint16(dst, uint16(version))
	dst = binary.BigEndian.AppendUint32(dst, uint32(corr))
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(clientID)))
	dst = append(dst, clientID...)
	val := Value(from)
	dst = binary.AppendUvarint(dst, 1)
	dst = binary.AppendUvarint(dst, Tag)
	dst = binary.AppendUvarint(dst, uint64(len(val)))
	return append(dst, val...)
}

// ErrTags is a tagged-field section that is truncated or encoded in a way Kafka would read
// differently.
var ErrTags = errors.New("malformed tagged fields")

// Uvarint reads an unsigned varint as Kafka's ByteUtils.readUnsignedVarint must agree on it: at
// most five bytes, and a fifth byte that does not overflow 32 bits. Kafka reads an overflowing
// fifth byte by dropping the high bits (so 80 80 80 80 10 is 0 to Kafka, 2^32 to a 64-bit
// reader); such encodings are refused rather than read one way here and another there.
func Uvarint(p []byte) (uint32, int) {
	var x uint32
	for i := 0; i < 5; i++ {
		if i >= len(p) {
			return 0, 0
		}
		b := p[i]
		if i == 4 && b > 0x0f {
			return 0, -1
		}
		x |= uint32(b&0x7f) << (7 * i)
		if b < 0x80 {
			return x, i + 1
		}
	}
	return 0, -1
}

// WalkTags walks a tagged-field section starting at off, handing each tag to fn, and returns
// where the section ends.
func WalkTags(p []byte, off int, fn func(tag uint32, val []byte)) (int, error) {
	if off > len(p) {
		return 0, ErrTags
	}
	count, n := Uvarint(p[off:])
	if n <= 0 {
		return 0, ErrTags
	}
	off += n
	for i := uint32(0); i < count; i++ {
		tag, n := Uvarint(p[off:])
		if n <= 0 {
			return 0, ErrTags
		}
		off += n
		size, n := Uvarint(p[off:])
		if n <= 0 {
			return 0, ErrTags
		}
		off += n
		if uint64(off)+uint64(size) > uint64(len(p)) {
			return 0, ErrTags
		}
		if fn != nil {
			fn(tag, p[off:off+int(size)])
		}
		off += int(size)
	}
	return off, nil
}
