package session

// The produce-at-offset magic header (package magic, docs/PROTOCOL.md): approved mirroring
// clients send it, or offsetgate treats their requests as carrying it (attach_header); it is
// stripped from every request before the destination sees it, unless the destination is
// configured as supporting it natively.

import (
	"encoding/binary"

	"offsetgate/magic"
)

// magicTag is what a request's header tag said, and whether offsetgate already removed it
// from what it forwards.
type magicTag struct {
	magic.Header
	stripped bool
}

// stripMagic rebuilds a request frame without the magic tag (and keeps any other tag).
func stripMagic(frame []byte, h reqHeader) []byte {
	p := frame[4:]
	out := make([]byte, 4, len(frame))
	out = append(out, p[:h.tagsOff]...)
	type kv struct {
		tag uint32
		val []byte
	}
	var keep []kv
	_, _ = magic.WalkTags(p, h.tagsOff, func(tag uint32, val []byte) {
		if tag != magic.Tag {
			keep = append(keep, kv{tag, val})
		}
	})
	out = binary.AppendUvarint(out, uint64(len(keep)))
	for _, t := range keep {
		out = binary.AppendUvarint(out, uint64(t.tag))
		out = binary.AppendUvarint(out, uint64(len(t.val)))
		out = append(out, t.val...)
	}
	out = append(out, p[h.bodyOff:]...)
	binary.BigEndian.PutUint32(out, uint32(len(out)-4))
	return out
}
