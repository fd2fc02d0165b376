//go:build linux

package proxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// writeWatch says when a socket can take more bytes. gnet says nothing when it has written what
// a connection's outbound buffer held, and keeps in that buffer a copy of whatever the socket did
// not take: for a large Produce request forwarded to a broker slower than its client, a fifth of
// offsetgate's CPU and a buffer as large as the request (docs/benchmarks.md). With writeWatch the
// gnet transport writes a large request to the broker's socket itself, keeps the rest where it
// already lies (the frame's own buffer), and writes it when the socket is writable again
// (gnetClient.flushDirect).
//
// It is one epoll set of its own, watched by one goroutine, holding each watched socket with
// EPOLLOUT|EPOLLONESHOT: armed after a write the socket did not take whole, reported once when
// the socket has room. A socket leaves the set when it is closed (epoll drops a closed file).
type writeWatch struct {
	epfd int
	stop int // an eventfd: written by close to end the goroutine

	mu      sync.Mutex
	waiters map[int32]func() // by the id armed with
	next    int32
	done    chan struct{}
}

func newWriteWatch() (*writeWatch, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("write watch: epoll_create1: %w", err)
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		_ = unix.Close(epfd)
		return nil, fmt.Errorf("write watch: eventfd: %w", err)
	}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, efd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: -1}); err != nil {
		_ = unix.Close(epfd)
		_ = unix.Close(efd)
		return nil, fmt.Errorf("write watch: epoll_ctl: %w", err)
	}
	w := &writeWatch{epfd: epfd, stop: efd, waiters: map[int32]func(){}, done: make(chan struct{})}
	go w.run()
	return w, nil
}

// register returns the id a connection arms its socket with; fn runs on the watch's goroutine
// each time the socket is reported writable, and must only hand the work to the connection's
// event loop.
func (w *writeWatch) register(fn func()) int32 {
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		w.next++
		if w.next < 0 {
			w.next = 1
		}
		if _, taken := w.waiters[w.next]; !taken {
			w.waiters[w.next] = fn
			return w.next
		}
	}
}

// forget drops a connection's callback; an event already on its way finds nothing.
func (w *writeWatch) forget(id int32) {
	w.mu.Lock()
	delete(w.waiters, id)
	w.mu.Unlock()
}

// arm asks for one report when fd can take more bytes (at once if it already can).
// added says whether fd is in the set already (armed before).
func (w *writeWatch) arm(fd int, id int32, added bool) error {
	ev := unix.EpollEvent{Events: unix.EPOLLOUT | unix.EPOLLONESHOT, Fd: id}
	op := unix.EPOLL_CTL_MOD
	if !added {
		op = unix.EPOLL_CTL_ADD
	}
	err := unix.EpollCtl(w.epfd, op, fd, &ev)
	switch {
	case errors.Is(err, unix.ENOENT) && added:
		err = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, fd, &ev)
	case errors.Is(err, unix.EEXIST) && !added:
		err = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_MOD, fd, &ev)
	}
	if err != nil {
		return fmt.Errorf("write watch: epoll_ctl: %w", err)
	}
	return nil
}

func (w *writeWatch) run() {
	defer close(w.done)
	events := make([]unix.EpollEvent, 128)
	for {
		n, err := unix.EpollWait(w.epfd, events, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return // the set was closed under it: nothing more to watch
		}
		for _, ev := range events[:n] {
			if ev.Fd == -1 {
				return
			}
			w.mu.Lock()
			fn := w.waiters[ev.Fd]
			w.mu.Unlock()
			if fn != nil {
				fn()
			}
		}
	}
}

// close ends the goroutine and releases the set.
func (w *writeWatch) close() {
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	if _, err := unix.Write(w.stop, one[:]); err == nil {
		<-w.done
	}
	_ = unix.Close(w.epfd)
	_ = unix.Close(w.stop)
}

// writeFD writes b to a non-blocking socket and returns how much it took. A short write means
// the socket is full: no second call to hear EAGAIN.
func writeFD(fd int, b []byte) (int, error) {
	for {
		m, err := unix.Write(fd, b)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EAGAIN):
			return 0, nil
		case err != nil:
			return 0, err
		}
		return m, nil
	}
}
