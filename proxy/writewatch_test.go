//go:build linux

package proxy

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The watch reports a full socket once it has room again, once per arming, and never for a
// connection that was forgotten.
func TestWriteWatch(t *testing.T) {
	w, err := newWriteWatch()
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])

	fill := func() int {
		chunk, n := make([]byte, 64<<10), 0
		for {
			m, err := writeFD(fds[0], chunk)
			n += m
			if err != nil {
				t.Fatal(err)
			}
			if m < len(chunk) {
				return n
			}
		}
	}
	drain := func(n int) {
		buf := make([]byte, 64<<10)
		for n > 0 {
			m, err := unix.Read(fds[1], buf[:min(n, len(buf))])
			if err != nil {
				t.Fatal(err)
			}
			n -= m
		}
	}
	reported := make(chan struct{}, 4)
	id := w.register(func() { reported <- struct{}{} })

	wrote := fill()
	if err := w.arm(fds[0], id, false); err != nil {
		t.Fatal(err)
	}
	select {
	case <-reported:
		t.Fatal("a full socket was reported writable")
	case <-time.After(100 * time.Millisecond):
	}
	drain(wrote)
	select {
	case <-reported:
	case <-time.After(5 * time.Second):
		t.Fatal("a socket with room was never reported")
	}
	select {
	case <-reported:
		t.Fatal("one arming was reported twice")
	case <-time.After(100 * time.Millisecond):
	}

	// Armed again while it has room: reported at once.
	if err := w.arm(fds[0], id, true); err != nil {
		t.Fatal(err)
	}
	select {
	case <-reported:
	case <-time.After(5 * time.Second):
		t.Fatal("a socket armed with room was never reported")
	}

	// Forgotten: the report finds nobody.
	w.forget(id)
	if err := w.arm(fds[0], id, true); err != nil {
		t.Fatal(err)
	}
	select {
	case <-reported:
		t.Fatal("a forgotten connection was called")
	case <-time.After(100 * time.Millisecond):
	}
}
