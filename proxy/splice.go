//go:build linux

package proxy

import (
	"errors"
	"fmt"
	"io"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"offsetgate/session"
)

// Spliced record sets. A streamed Produce request's record sets are never looked at
// (session.CompactProduce drops them once sent), so the rest of a record set whose start has
// arrived can go from the client's socket to the broker's through a pipe (splice(2)) without
// entering offsetgate's memory: the kernel moves the pages instead of copying every byte into
// offsetgate and out again, which was 76% of offsetgate's CPU producing (docs/benchmarks.md,
// "Run 8"). The topics and partitions in front of each record set are still read and judged,
// the request's last byte still waits for the judgment, and where a record set lies is checked
// against kmsg's decoder once it has arrived (checkSpliced) before that byte goes.

// spliceMin is the least rest of a record set worth a splice: below it, two splice calls and a
// look for the record set cost about what the copies save.
const spliceMin = 64 << 10

// spliceProbe is the most read at once while the next byte lies in the headers between record
// sets, so that the next record set's rest is spliced rather than read.
const spliceProbe = 16 << 10

// pipeSize is the room asked for each connection's pipe: a record set of up to about this much
// goes in one pair of calls. Linux grants up to 1 MiB to an unprivileged process.
const pipeSize = 1 << 20

// errSpliceCheck ends a connection where bytes spliced as a record set's turned out not to lie
// in one by kmsg's reading of the request (a walk that went wrong): its last byte never goes,
// so the broker acts on none of it.
var errSpliceCheck = errors.New("bytes passed on as a record set's do not lie in one of the request's record sets; the connection is closed before the request's end, so nothing of it is written")

// recordPipe is a connection's pipe between the client's socket and the broker's.
type recordPipe struct {
	r, w int
	size int
	held int // bytes in it the broker's socket has not taken yet
}

func newRecordPipe() (*recordPipe, error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		return nil, fmt.Errorf("pipe2: %w", err)
	}
	p := &recordPipe{r: fds[0], w: fds[1], size: 64 << 10}
	if n, err := unix.FcntlInt(uintptr(p.w), unix.F_SETPIPE_SZ, pipeSize); err == nil {
		p.size = n
	}
	return p, nil
}

func (p *recordPipe) close() {
	_ = unix.Close(p.r)
	_ = unix.Close(p.w)
}

// in moves up to n bytes from the socket fd into the pipe; EAGAIN when the socket has none.
func (p *recordPipe) in(fd, n int) (int, error) {
	for {
		m, err := unix.Splice(fd, nil, p.w, nil, n, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if m > 0 {
			p.held += int(m)
		}
		return int(max(m, 0)), err
	}
}

// out moves what the pipe holds to the socket fd, as far as the socket takes it.
func (p *recordPipe) out(fd int) error {
	for p.held > 0 {
		m, err := unix.Splice(p.r, nil, fd, nil, p.held, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
		if m > 0 {
			p.held -= int(m)
		}
		switch {
		case errors.Is(err, unix.EINTR):
		case errors.Is(err, unix.EAGAIN):
			return nil
		case err != nil:
			return err
		case m == 0:
			return io.ErrShortWrite
		}
	}
	return nil
}

// piped is what the connection's pipe holds for the broker.
func (cl *gnetClient) piped() int {
	if cl.pipe == nil {
		return 0
	}
	return cl.pipe.held
}

// closePipe closes the connection's pipe, if it has one.
func (cl *gnetClient) closePipe() {
	if cl.pipe != nil {
		cl.pipe.close()
		cl.pipe = nil
	}
}

// drainPipe writes on what the pipe holds; it reports whether the pipe is empty.
func (cl *gnetClient) drainPipe() (bool, error) {
	if cl.piped() == 0 {
		return true, nil
	}
	if err := cl.pipe.out(cl.up.Fd()); err != nil {
		return false, fmt.Errorf("splicing a record set to the broker: %w", err)
	}
	if cl.pipe.held > 0 {
		cl.armWatch()
		return false, nil
	}
	return true, nil
}

// spliceStep passes on the rest of the record set the streamed request is in the middle of,
// as far as the client's socket has it, when all that was read of the request is sent and
// nothing else waits for the broker's socket. moved is what it passed on; wait ends the round
// (the client's socket is empty); probe asks for a short read (the next byte lies in headers).
// What the broker's socket did not take stays in the pipe until the write watch says it has
// room (flushDirect); meanwhile the request is read on into the frame buffer as far as a
// streamed request may be read ahead of its broker (streamLagging counts the pipe), and
// nothing is written behind the pipe's bytes (streamOut, WriteUpstream).
func (cl *gnetClient) spliceStep() (moved int, wait, probe bool, err error) {
	a, st := &cl.inFrame, &cl.stream
	if cl.noSplice || !st.reading || !st.compact || cl.up == nil || st.sent != len(a.buf) ||
		cl.up.OutboundBuffered() > 0 || len(cl.direct) > 0 || cl.piped() > 0 || cl.c.InboundBuffered() > 0 {
		return 0, false, false, nil
	}
	if st.setEnd <= len(a.buf) {
		end, ok := session.RecordSetEnd(a.buf, len(a.buf))
		if !ok {
			return 0, false, true, nil
		}
		st.setEnd = end
	}
	rest := st.setEnd - len(a.buf)
	if st.setEnd >= st.size {
		rest = st.size - 1 - len(a.buf) // the request's last byte waits for the judgment
	}
	if cl.pipe == nil && rest >= spliceMin {
		p, err := newRecordPipe()
		if err != nil {
			// Without a pipe (out of descriptors) the connection's bytes are read as before.
			cl.noSplice = true
			cl.log.Debug("record sets of this connection are read, not spliced", zap.Error(err))
			return 0, false, false, nil
		}
		cl.pipe = p
	}
	if cl.pipe != nil {
		rest = min(rest, cl.pipe.size)
	}
	// The spliced bytes are stood for in the frame buffer (never written there, never sent
	// from there), so the buffer must have the room.
	rest = min(rest, cap(a.buf)-len(a.buf))
	if rest < spliceMin {
		return 0, false, false, nil
	}
	n, err := cl.pipe.in(cl.c.Fd(), rest)
	switch {
	case errors.Is(err, unix.EAGAIN):
		return 0, true, false, nil
	case err != nil:
		return 0, false, false, fmt.Errorf("splicing a record set from the client: %w", err)
	case n == 0:
		return 0, false, false, fmt.Errorf("splicing a record set from the client: %w", io.ErrUnexpectedEOF)
	}
	from := len(a.buf)
	// The buffer's length covers the spliced bytes, whatever it holds there: they lie below the
	// sent mark and in a record set, so they are neither sent from here nor read, and go when
	// the record set is dropped (compactStream) or the request is forwarded.
	a.buf = a.buf[:from+n]
	st.sent += n
	st.spliced = append(st.spliced, [2]int{from, from + n})
	cl.t.srv.metrics.streamSpliced.Add(float64(n))
	if _, err := cl.drainPipe(); err != nil {
		return 0, false, false, err
	}
	if err := cl.compactStream(); err != nil {
		return 0, false, false, err
	}
	return n, false, false, nil
}
