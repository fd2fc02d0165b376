package proxy

import (
	"errors"
	"fmt"
	"io"
	"time"
	"unsafe"

	"github.com/panjf2000/gnet/v2"
	"github.com/panjf2000/gnet/v2/pkg/pool/byteslice"
	"golang.org/x/sys/unix"
)

// largeFrame is the frame size from which a frame is assembled in a buffer of its own, read
// straight from the socket, rather than in gnet's inbound buffer. gnet reads a socket in
// chunks of its read buffer (64 KiB) and copies every chunk a handler leaves unread into the
// connection's ring buffer, then copies it out again when the ring has wrapped: for a 1 MiB
// Fetch answer that is two copies of every byte and sixteen read calls. Read straight into a
// buffer of the frame's size, the frame costs the kernel's copy and about one call.
const largeFrame = 128 << 10

// firstChunk is the most an assembly of a client's frame holds before the bytes arrive: a
// frame's size prefix is the client's claim, and a client that claims 100 MiB and sends nothing
// must not cost 100 MiB. From there the buffer grows to eight times what arrived (and an eighth
// more, kept for the next frames: see keptFrame): a client's frame costs at most 1 MiB or nine
// times the bytes it sent, and a Produce request of up to
// 8 MiB is copied once, 1 MiB of it (growing by doubling copied a 16 MiB frame four more times).
const firstChunk = 1 << 20

// keptFrame is the size above which a frame is read into a buffer the connection keeps for its
// next ones instead of a pooled one. The pool keeps buffers by power of two, so a Fetch answer
// or a Produce request of 8 MiB and a few bytes took 16 MiB, and every pooled buffer is kept
// until the next collections: offsetgate's peak RSS was 110-195 MiB for 16 partitions' load,
// against 26 MiB for a streaming proxy. A buffer of the connection's own, an eighth larger than
// the frame that made it, serves the next frames of about that size without a new one (a new
// buffer is zeroed and faulted in page by page: giving every large frame a new one cost 40-90%
// more CPU). The event loop drops it when the connection has not used it for spareIdle.
const keptFrame = 1 << 20

// spareIdle is how long a connection keeps its frame buffer unused.
const spareIdle = time.Second

// assembly is one large frame being read from a gnet connection. Only the connection's event
// loop touches it.
type assembly struct {
	buf     []byte // the frame so far, its 4-byte size included
	want    int    // the whole frame's length; 0: no frame in progress
	trusted bool   // the peer is the destination broker: its frame gets its full size at once
	// spare is the connection's own buffer for frames above keptFrame (buf is the spare while
	// such a frame is read); spareUsed is when it last held a frame. Buffers above keptFrame
	// are never pooled.
	spare     []byte
	spareUsed time.Time
	// step, when above zero, bounds each read (a streamed frame is passed on in pieces that
	// are still in the processor's cache), and onRead is called after every piece.
	step   int
	onRead func() error
	// tight: the frame shrinks while it is read (a compacted streamed request): it grows by
	// doubling as far as it needs, not to its claimed size, and keeps that room for the next
	// such frames.
	tight bool
}

// tightRoom is the room a compacted streamed request grows to by doubling: what may be read
// ahead of the broker (streamLag) and half as much again for the record set being sent. The
// buffer, kept by the connection as its spare, serves its next streamed requests (a spare up to
// twice tightRoom is kept): replacing the spare with a smaller one for a smaller request and
// growing it again took 9-14% of offsetgate's CPU producing 1 KiB records to 16 partitions, and
// the collector 4-5% more (new buffers allocated, zeroed and faulted in, grow copies;
// docs/benchmarks.md, "Run 7").
const tightRoom = streamLag + streamLag/2

// start takes a frame of want bytes whose first bytes sit in c's inbound buffer.
func (a *assembly) start(c gnet.Conn, want int, trusted bool) {
	a.buf, a.want, a.trusted = a.get(a.firstSize(want, trusted)), want, trusted
	a.take(c)
}

// firstSize is the room a frame of want bytes gets before its bytes arrive: its size for the
// destination's frames; for a client's, at most firstChunk (see there), unless the connection's
// spare holds it whole. The spare's memory is held already, so a liar gains nothing there, and a
// frame read into it is not copied when it outgrows a first chunk: a producer sending requests
// of a few MiB each paid a copy of every request's first MiB (a tenth of offsetgate's CPU
// producing to 16 partitions).
func (a *assembly) firstSize(want int, trusted bool) int {
	if trusted || (want > keptFrame && cap(a.spare) >= want && !a.tight) {
		return want
	}
	if a.tight && cap(a.spare) > firstChunk {
		// A frame that shrinks as it is read starts in the spare the previous one grew, not
		// in a first chunk it would outgrow again with a copy; the spare is kept whole even
		// for a smaller frame (get), so a connection's streamed requests share one buffer.
		return min(want, cap(a.spare), tightRoom+tightRoom/8)
	}
	return min(want, firstChunk)
}

// get returns an empty buffer with room for size bytes: the spare above keptFrame (a larger
// one first if it is too small), else a pooled one.
func (a *assembly) get(size int) []byte {
	if size <= keptFrame {
		return byteslice.Get(size)[:0]
	}
	// A frame that shrinks as it is read replaces a spare far larger than its room (one left by
	// a frame held whole), rather than keeping it in use; a spare of about its room is kept.
	if cap(a.spare) < size || a.tight && cap(a.spare) > 2*max(size+size/8, tightRoom) {
		a.spare = make([]byte, 0, size+size/8)
	}
	a.spareUsed = time.Now()
	return a.spare[:0]
}

// dropSpare lets the collector have the kept buffer when the connection has not read a large
// frame since before cutoff.
func (a *assembly) dropSpare(cutoff time.Time) {
	if a.spare != nil && a.want == 0 && a.spareUsed.Before(cutoff) {
		a.spare = nil
	}
}

// grow makes room for need more bytes of the frame, and more (see firstChunk).
func (a *assembly) grow(need int) {
	size := a.want
	switch {
	case a.tight:
		// Doubling, as far as the broker's pace needs, up to tightRoom: a connection whose
		// broker keeps up holds a record set and a few pieces (growing straight to tightRoom
		// cost 18 MiB more at a fixed load); only a record set that does not fit beside what
		// is read ahead takes more. The room it grew to is kept for its next requests (get).
		size = min(a.want, max(len(a.buf)+need, min(2*len(a.buf), tightRoom), firstChunk))
	case !a.trusted:
		size = min(a.want, max(len(a.buf)+need, 8*len(a.buf), firstChunk))
	}
	nb := a.get(size)[:len(a.buf)]
	copy(nb, a.buf)
	a.giveBack(a.buf)
	a.buf = nb
}

// take moves what c's inbound buffer holds of the frame into the assembly.
func (a *assembly) take(c gnet.Conn) {
	k := min(c.InboundBuffered(), a.want-len(a.buf))
	if k <= 0 {
		return
	}
	if cap(a.buf)-len(a.buf) < k {
		a.grow(k)
	}
	p, _ := c.Peek(k)
	a.buf = append(a.buf, p...)
	_, _ = c.Discard(k)
}

// fill reads the rest of the frame straight from the socket. It reports whether the frame is
// whole; false with a nil error means the socket had nothing more for now, and the event loop
// calls back when it has. A read that returns less than it asked for ends the round: the socket
// is most likely empty, and gnet's epoll is level-triggered, so bytes still there call back at
// once; reading on until EAGAIN cost a system call in every round.
func (a *assembly) fill(c gnet.Conn) (bool, error) {
	a.take(c)
	if err := a.read(); err != nil {
		return false, held(err)
	}
	for len(a.buf) < a.want {
		if len(a.buf) == cap(a.buf) {
			a.grow(1)
		}
		ask := min(a.want, cap(a.buf)) - len(a.buf)
		if a.step > 0 {
			ask = min(ask, a.step)
		}
		n, err := unix.Read(c.Fd(), a.buf[len(a.buf):len(a.buf)+ask])
		switch {
		case errors.Is(err, unix.EAGAIN):
			return false, nil
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return false, fmt.Errorf("reading a %d-byte frame: %w", a.want, err)
		case n == 0:
			return false, fmt.Errorf("reading a %d-byte frame: %w", a.want, io.ErrUnexpectedEOF)
		}
		a.buf = a.buf[:len(a.buf)+n]
		if err := a.read(); err != nil && (len(a.buf) < a.want || !errors.Is(err, errStreamLag)) {
			return false, held(err) // a frame read whole goes on however far ahead it is
		}
		if n < ask && len(a.buf) < a.want {
			return false, nil
		}
	}
	return true, nil
}

// read tells onRead that bytes arrived; errStreamLag from it ends the round (held: not an
// error).
func (a *assembly) read() error {
	if a.onRead == nil {
		return nil
	}
	return a.onRead()
}

// held turns errStreamLag into a round that ends with the frame unfinished.
func held(err error) error {
	if errors.Is(err, errStreamLag) {
		return nil
	}
	return err
}

// release gives back the buffer, to the pool or as the connection's spare; whoever was handed
// the frame has copied what it keeps.
func (a *assembly) release() {
	a.giveBack(a.buf)
	a.buf, a.want, a.trusted, a.step, a.onRead, a.tight = nil, 0, false, 0, nil, false
}

// holds reports whether b lies in the frame's buffer.
func (a *assembly) holds(b []byte) bool {
	if len(b) == 0 || len(a.buf) == 0 {
		return false
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(a.buf)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return p >= start && p+uintptr(len(b)) <= start+uintptr(len(a.buf))
}

// lend ends the frame without giving its buffer back: part of it is still to be written
// upstream, and the writer gives the buffer back with giveBack when done.
func (a *assembly) lend() {
	a.buf, a.want, a.trusted, a.step, a.onRead, a.tight = nil, 0, false, 0, nil, false
}

// giveBack returns a pooled buffer to the pool; the spare (or one it replaced) stays out of it.
func (a *assembly) giveBack(b []byte) {
	if cap(b) > 0 && cap(b) <= keptFrame {
		byteslice.Put(b)
	}
}

// close gives back everything, the spare too.
func (a *assembly) close() {
	a.release()
	a.spare = nil
}
