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
	"errors"

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
