package proxy

import (
	"errors"
	"fmt"
	"io"

	"github.com/panjf2000/gnet/v2/pkg/pool/byteslice"
	"golang.org/x/sys/unix"
)

// Answers passed as they arrive (session.StartAnswer). A large answer of the broker that goes
// to the client unchanged (a consumer's Fetch of topics without a source view) is written to
// the client piece by piece as it is read, never held whole: consuming 16 partitions, the
// assembly of every answer (frames of megabytes, one per connection) was most of offsetgate's
// memory above a proxy that copies through small buffers. Each piece is read from the broker's
// socket into a pooled buffer of at most answerStep bytes and handed to gnet's Write, which
// copies into the client's outbound buffer only what the client's socket does not take; the
// buffer goes back to the pool at the end of every round of reads.

// answerStep is the most of a passing answer read at once: large enough that a frame of
// megabytes costs a few calls, small enough to be written on while in the processor's cache.
const answerStep = 256 << 10

// answerPrefix is what of a large answer is waited for before the session is asked whether it
// passes: its size and correlation id, and for a Fetch that opened a fetch session the
// session's id, which the session reads (a frame of 128 KiB or more always brings that much).
const answerPrefix = 64

// errAnswerOrder closes a connection where something else was to be written to the client
// while an answer was passing to it; the session never does that (a safety net: the client
// would read the bytes as part of the answer).
var errAnswerOrder = errors.New("something was to be written to the client while an answer was passing to it unfinished")

// answerState is the broker's answer being passed to the client, if any.
type answerState struct {
	on   bool
	left int // its bytes not yet written to the client
	size int // its whole length
}

// PassesAnswers tells the session that this transport passes large answers as they arrive
// (session.AnswerConn).
func (cl *gnetClient) PassesAnswers() bool { return true }

// startAnswer asks the session whether the large frame of want bytes whose first bytes sit in
// the upstream's inbound buffer passes to the client as it arrives, and starts it if so.
func (cl *gnetClient) startAnswer(want int) bool {
	p, err := cl.up.Peek(min(cl.up.InboundBuffered(), answerPrefix))
	if err != nil || !cl.sess.StartAnswer(p) {
		return false
	}
	cl.answer = answerState{on: true, left: want, size: want}
	cl.t.srv.metrics.answersPassed.Inc()
	return true
}

// passAnswer writes on what arrived of the passing answer and reads on from the broker's
// socket, until the answer is done, the socket has nothing more for now (gnet's epoll is
// level-triggered: it calls back when bytes arrive), or the connection is over its share of
// the budget (settle stops reading; reading again calls back). It reports whether the answer
// is done; a failure closes the connection.
func (cl *gnetClient) passAnswer() bool {
	// What gnet read of it before calling.
	if k := min(cl.up.InboundBuffered(), cl.answer.left); k > 0 {
		p, err := cl.up.Peek(k)
		if err != nil {
			cl.failClient("upstream", fmt.Errorf("passing a %d-byte answer: %w", cl.answer.size, err))
			return false
		}
		if !cl.answerOut(p) {
			return false
		}
		discard(cl.up, k)
	}
	if cl.answer.left > 0 {
		buf := byteslice.Get(min(cl.answer.left, answerStep))
		defer byteslice.Put(buf)
		for cl.answer.left > 0 {
			if cl.settle(); cl.paused || cl.closed {
				return false
			}
			ask := min(cl.answer.left, len(buf))
			n, err := unix.Read(cl.up.Fd(), buf[:ask])
			switch {
			case errors.Is(err, unix.EAGAIN):
				return false
			case errors.Is(err, unix.EINTR):
				continue
			case err != nil:
				cl.failClient("upstream", fmt.Errorf("reading a %d-byte answer: %w", cl.answer.size, err))
				return false
			case n == 0:
				cl.failClient("upstream", fmt.Errorf("reading a %d-byte answer: %w", cl.answer.size, io.ErrUnexpectedEOF))
				return false
			}
			if !cl.answerOut(buf[:n]) {
				return false
			}
			if n < ask && cl.answer.left > 0 {
				return false // most likely empty: a read less than asked ends the round
			}
		}
	}
	cl.answer = answerState{}
	cl.sess.FinishAnswer()
	cl.t.srv.bufferMark(cl.c.OutboundBuffered())
	return true
}

// answerOut writes a piece of the passing answer to the client.
func (cl *gnetClient) answerOut(p []byte) bool {
	if _, err := cl.c.Write(p); err != nil {
		if !cl.closed {
			cl.failClient("client", fmt.Errorf("writing a %d-byte answer: %w", cl.answer.size, err))
		}
		return false
	}
	cl.answer.left -= len(p)
	cl.active()
	return true
}
