package session

// Streamed requests. A transport reading a large client frame may pass its bytes upstream as
// they arrive, all but the last, before the session has judged it: the frame is still judged
// whole, as every other, and only once the session forwards it unchanged does the transport
// send the rest. Any other outcome (a refusal, a rebuilt request, a local answer) closes the
// connection instead: the destination broker acts only on whole frames, so the part it got is
// never acted on, and nothing of the request is written. Bytes written while they are still in
// the processor's cache cost half as much to hand to the kernel as a frame of megabytes
// written after it was read whole (docs/benchmarks.md), and that copy was most of the CPU
// offsetgate spent above a streaming proxy on Produce requests.
//
// Only Produce requests are streamed (the large requests), only without the magic header and
// from identities the policy does not approve for mirroring (those are written by offsetgate
// itself), and only when nothing else of the connection is under way, so that nothing else
// can go upstream between the frame's start and its end.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// StreamConn is implemented by a transport that streams requests (StartStream).
type StreamConn interface {
	// FinishStream sends what the transport has not sent yet of the streamed frame, given
	// whole: the frame it read, or the session's copy of it after an asynchronous step.
	FinishStream(frame []byte)
}

// ErrStreamCut closes a connection whose streamed request was not forwarded unchanged.
var ErrStreamCut = errors.New("a request whose start was already on its way to the destination was not forwarded unchanged (refused, rebuilt or answered here); the connection is closed so that the destination never receives its end, and nothing of it is written")

// StartStream reports whether the client frame that begins with prefix (its size, its header
// and whatever else arrived; not the whole frame) may be streamed. When it says yes, the next
// frame HandleClient is given must be that frame, and the transport must send nothing else
// upstream until FinishStream or the connection's end.
func (s *Session) StartStream(prefix []byte) bool {
	if _, ok := s.conn.(StreamConn); !ok || s.streamNext || len(prefix) < 12 {
		return false
	}
	h, err := parseReqHeader(prefix[4:])
	if err != nil || kmsg.Key(h.key) != kmsg.Produce || !Supported(h.key, h.version) || h.magic.Present {
		return false
	}
	switch {
	case s.closing != nil, s.closed, s.blocked, s.writes > 0, s.paused, s.streamWaiting,
		s.slots.len() >= s.cfg.MaxInFlight,
		s.conn.ClientPending() > s.cfg.ClientHighWater,
		s.cfg.Draining != nil && s.cfg.Draining(),
		s.saslBusy(),
		s.cfg.Admit != nil && !s.admitted,
		s.cfg.NodeShift > 0,
		s.cfg.Policy().Mirroring(s.ident):
		return false
	}
	s.streamNext = true
	return true
}

// streamedOutcome finishes a streamed request once its outcome is known: forwarded unchanged
// (asIs), the rest goes; anything else ends the connection.
func (s *Session) streamedOutcome(frame []byte, asIs bool) error {
	if !asIs {
		return ErrStreamCut
	}
	s.conn.(StreamConn).FinishStream(frame)
	return nil
}

// CompactProduce drops from a streamed Produce request being read the record sets the
// transport has already sent upstream, so that a request of megabytes is not held whole while
// it is judged: the judge reads only its topics and partitions (the record sets of a request
// that is streamed are never rebuilt: any outcome other than forwarding it unchanged closes
// the connection). buf is the frame so far, its size prefix included; done is how many of its
// bytes have been sent upstream. Every record set kmsg's decoder finds whole below done is
// replaced by an empty one, in place, and the size prefix is set to the shorter frame's; out
// is buf shortened by removed bytes. The structure is kmsg's: the decoder reads the prefix that
// arrived (it stops where the bytes end), and the record sets it returns alias buf, so their
// places are known without a schema of offsetgate's own, and what is left decodes to the same
// topics and partitions. ok is false when a record set's length is not in the form this
// writes back (then the caller holds the frame whole, as before).
func CompactProduce(buf []byte, done int) (out []byte, removed int, ok bool) {
	return CompactProduceFunc(buf, done, nil)
}

// CompactProduceFunc is CompactProduce, and calls dropped with the place in buf (before the
// compaction) of every record set it drops.
func CompactProduceFunc(buf []byte, done int, dropped func(start, end int)) (out []byte, removed int, ok bool) {
	if len(buf) < 12 || done > len(buf) {
		return buf, 0, true
	}
	h, err := parseReqHeader(buf[4:])
	if err != nil || kmsg.Key(h.key) != kmsg.Produce {
		return buf, 0, false
	}
	bodyOff := 4 + h.bodyOff
	if bodyOff > len(buf) {
		return buf, 0, true
	}
	req := kmsg.ProduceRequest{Version: h.version}
	_ = req.UnsafeReadFrom(buf[bodyOff:]) // a prefix: it stops where the bytes end
	flexible := h.version >= 9
	base := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	w := -1 // write position once the first record set is dropped
	prev := 0
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			if len(p.Records) == 0 {
				continue
			}
			start := int(uintptr(unsafe.Pointer(unsafe.SliceData(p.Records))) - base)
			end := start + len(p.Records)
			if start < bodyOff || end > done {
				continue // not in buf, or not all sent yet
			}
			// The length in front of the record set, as kmsg read it.
			var lenBytes []byte
			if flexible {
				lenBytes = binary.AppendUvarint(nil, uint64(len(p.Records))+1)
			} else {
				lenBytes = binary.BigEndian.AppendUint32(nil, uint32(len(p.Records)))
			}
			at := start - len(lenBytes)
			if at < prev || !bytes.Equal(buf[at:start], lenBytes) {
				return buf, 0, false
			}
			if dropped != nil {
				dropped(start, end)
			}
			if w < 0 {
				w = at
			} else {
				w += copy(buf[w:], buf[prev:at])
			}
			if flexible {
				buf[w] = 1 // uvarint 1: an empty, non-null record set
				w++
			} else {
				w += copy(buf[w:], []byte{0, 0, 0, 0})
			}
			prev = end
		}
	}
	if w < 0 {
		return buf, 0, true
	}
	w += copy(buf[w:], buf[prev:])
	removed = len(buf) - w
	out = buf[:w]
	size := int(binary.BigEndian.Uint32(out)) - removed
	binary.BigEndian.PutUint32(out, uint32(size))
	return out, removed, true
}

// RecordSetEnd finds the end of the record set a streamed Produce request is in the middle of,
// before that record set has arrived whole, so that the transport can pass its rest on without
// reading it (spliced from socket to socket): the bytes of a streamed request's record sets are
// never looked at (CompactProduce), only where they lie. buf is the frame so far (compacted by
// CompactProduce), at the offset of its next byte to arrive. ok is false when that byte lies
// outside a record set (in the partitions' headers) or in one whose length is written in a
// form CompactProduce would not drop.
//
// kmsg cannot say where a record set lies before it has arrived whole (its decoder gives
// nothing for a prefix that ends inside a field), so this walks the fields in front of the
// record sets itself. The walk is not trusted: a transport that splices on its word checks
// every spliced range against the record sets kmsg's decoder finds once they have arrived
// (RecordSetsOf), and ends the connection before the request's last byte on a disagreement,
// so a wrong walk can cost a connection, never forward bytes that were not judged.
func RecordSetEnd(buf []byte, at int) (end int, ok bool) {
	if len(buf) < 12 || at < 0 || at > len(buf) {
		return 0, false
	}
	frameEnd := 4 + int(binary.BigEndian.Uint32(buf))
	h, err := parseReqHeader(buf[4:])
	if err != nil || kmsg.Key(h.key) != kmsg.Produce || h.version < 3 {
		return 0, false
	}
	w := walker{b: buf, off: 4 + h.bodyOff, flexible: h.version >= 9, ok: true}
	w.nullableLen(true) // transactional id
	w.skip(max(w.n, 0))
	w.skip(2 + 4) // acks, timeout
	for topics := w.array(); topics > 0 && w.ok; topics-- {
		if h.version >= 13 {
			w.skip(16) // topic id
		} else {
			w.nullableLen(true)
			w.skip(max(w.n, 0))
		}
		for parts := w.array(); parts > 0 && w.ok; parts-- {
			w.skip(4) // partition
			lenAt := w.off
			w.nullableLen(false)
			if !w.ok {
				return 0, false
			}
			start, n := w.off, w.n
			if start > at {
				return 0, false // the next byte lies in the headers before this record set
			}
			if n > 0 && at < start+n {
				// Only the length form CompactProduce writes back (the shortest).
				var form []byte
				if w.flexible {
					form = binary.AppendUvarint(nil, uint64(n)+1)
				} else {
					form = binary.BigEndian.AppendUint32(nil, uint32(n))
				}
				if !bytes.Equal(buf[lenAt:start], form) || start+n > frameEnd {
					return 0, false
				}
				return start + n, true
			}
			w.skip(max(n, 0))
			w.tags()
		}
		w.tags()
	}
	return 0, false
}

// walker reads the fields in front of a Produce request's record sets (RecordSetEnd); ok turns
// false at the first field that does not lie whole in b, and stays false.
type walker struct {
	b        []byte
	off      int
	flexible bool
	ok       bool
	n        int // the length last read
}

func (w *walker) skip(n int) {
	if !w.ok {
		return
	}
	w.off += n
	if n < 0 || w.off > len(w.b) {
		w.ok = false
	}
}

// nullableLen reads a (nullable) string's or bytes' length into n: -1 for null. short: a
// string (int16 length) in versions without flexible fields, else bytes (int32).
func (w *walker) nullableLen(short bool) {
	if !w.ok {
		w.n = 0
		return
	}
	switch {
	case w.flexible:
		v, k := binary.Uvarint(w.b[min(w.off, len(w.b)):])
		if k <= 0 || v > 1<<31 {
			w.ok, w.n = false, 0
			return
		}
		w.off += k
		w.n = int(v) - 1
	case short:
		if w.off+2 > len(w.b) {
			w.ok, w.n = false, 0
			return
		}
		w.n = int(int16(binary.BigEndian.Uint16(w.b[w.off:])))
		w.off += 2
	default:
		if w.off+4 > len(w.b) {
			w.ok, w.n = false, 0
			return
		}
		w.n = int(int32(binary.BigEndian.Uint32(w.b[w.off:])))
		w.off += 4
	}
}

// array reads an array's length (0 for a null one, or where the bytes end).
func (w *walker) array() int {
	if !w.ok {
		return 0
	}
	if w.flexible {
		v, k := binary.Uvarint(w.b[min(w.off, len(w.b)):])
		if k <= 0 || v > 1<<31 {
			w.ok = false
			return 0
		}
		w.off += k
		return max(int(v)-1, 0)
	}
	if w.off+4 > len(w.b) {
		w.ok = false
		return 0
	}
	n := int(int32(binary.BigEndian.Uint32(w.b[w.off:])))
	w.off += 4
	return max(n, 0)
}

// tags skips a tagged-field section (flexible versions).
func (w *walker) tags() {
	if !w.ok || !w.flexible {
		return
	}
	end, err := skipTags(w.b, w.off)
	if err != nil {
		w.ok = false
		return
	}
	w.off = end
}

// InRecordSets reports whether every range of frame (a whole Produce request) lies inside
// one of its record sets, as kmsg's decoder finds them: the check a transport makes of bytes
// it spliced on RecordSetEnd's word before it lets the request's last byte go.
func InRecordSets(frame []byte, ranges [][2]int) bool {
	if len(ranges) == 0 {
		return true
	}
	if len(frame) < 12 {
		return false
	}
	h, err := parseReqHeader(frame[4:])
	if err != nil || kmsg.Key(h.key) != kmsg.Produce || 4+h.bodyOff > len(frame) {
		return false
	}
	req := kmsg.ProduceRequest{Version: h.version}
	if err := req.UnsafeReadFrom(frame[4+h.bodyOff:]); err != nil {
		return false
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(frame)))
	for _, r := range ranges {
		in := false
		for _, t := range req.Topics {
			for _, p := range t.Partitions {
				if len(p.Records) == 0 {
					continue
				}
				start := int(uintptr(unsafe.Pointer(unsafe.SliceData(p.Records))) - base)
				if start <= r[0] && r[1] <= start+len(p.Records) {
					in = true
				}
			}
		}
		if !in {
			return false
		}
	}
	return true
}
