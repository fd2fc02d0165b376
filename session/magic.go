package session

// The produce-at-offset magic header (docs/PROTOCOL.md): a tagged field of the request header
// of flexible Produce requests (v9+).
//
//	tag   MagicTag (20295, "OG")
//	value version (1 byte, MagicVersion) | flags (1 byte; bit 0: produce at offset)
//
// Approved mirroring clients send it, or offsetgate treats their requests as carrying it
// (attach_header); it is stripped from every request before the destination sees it, unless
// the destination is configured as supporting it natively.

import (
	"encoding/binary"

	"github.com/twmb/franz-go/pkg/kbin"
)

const (
	// MagicTag is the request-header tag number.
	MagicTag = 20295
	// MagicVersion is the value format version this offsetgate writes and reads.
	MagicVersion = 1
	// MagicAtOffset is the produce-at-offset flag.
	MagicAtOffset = 1
)

type magicTag struct {
	present  bool
	valid    bool // a version this offsetgate knows, with the produce-at-offset flag
	version  byte
	flags    byte
	stripped bool
}

func parseMagic(v []byte) magicTag {
	m := magicTag{present: true}
	if len(v) >= 2 {
		m.version, m.flags = v[0], v[1]
		m.valid = m.version == MagicVersion && m.flags&MagicAtOffset != 0
	}
	return m
}

// MagicValue is the tag value a mirroring client sends.
func MagicValue() []byte { return []byte{MagicVersion, MagicAtOffset} }

// AppendMagicHeader writes a flexible request header with the magic tag: api key, version,
// correlation id, client id (nullable, non-compact) and the tag section. The body follows.
func AppendMagicHeader(dst []byte, key, version int16, corr int32, clientID string) []byte {
	dst = kbin.AppendInt16(dst, key)
	dst = kbin.AppendInt16(dst, version)
	dst = kbin.AppendInt32(dst, corr)
	dst = kbin.AppendNullableString(dst, &clientID)
	val := MagicValue()
	dst = kbin.AppendUvarint(dst, 1)
	dst = kbin.AppendUvarint(dst, MagicTag)
	dst = kbin.AppendUvarint(dst, uint32(len(val)))
	return append(dst, val...)
}

// stripMagic rebuilds a request frame without the magic tag (and keeps any other tag).
func stripMagic(frame []byte, h reqHeader) []byte {
	p := frame[4:]
	out := make([]byte, 4, len(frame))
	out = append(out, p[:h.tagsOff]...)
	type kv struct {
		tag uint64
		val []byte
	}
	var keep []kv
	_, _ = readTags(p, h.tagsOff, func(tag uint64, val []byte) {
		if tag != MagicTag {
			keep = append(keep, kv{tag, val})
		}
	})
	out = binary.AppendUvarint(out, uint64(len(keep)))
	for _, t := range keep {
		out = binary.AppendUvarint(out, t.tag)
		out = binary.AppendUvarint(out, uint64(len(t.val)))
		out = append(out, t.val...)
	}
	out = append(out, p[h.bodyOff:]...)
	binary.BigEndian.PutUint32(out, uint32(len(out)-4))
	return out
}
