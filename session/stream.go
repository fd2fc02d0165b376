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
