//go:build linux && !poll_opt

package proxy

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/panjf2000/gnet/v2"
	"github.com/panjf2000/gnet/v2/pkg/netpoll"
	"golang.org/x/sys/unix"
)

// gnet has no way to stop reading a connection (its issues 712, 722, 764): a readable socket is
// always read into the connection's inbound buffer, which has no bound. To stop reading a
// connection over its share of the budget, offsetgate changes the connection's interest in the
// event loop's epoll set itself: no EPOLLIN while paused (EPOLLOUT only while output is
// pending), EPOLLIN again to resume. gnet keeps the epoll descriptor in unexported fields
// (conn.loop.poller.fd, gnet v2.9.7); reflection reads it at every change (pauses are rare), and
// TestEpollDescriptorFound fails on a gnet that moved it. gnet sets EPOLLIN again itself when a
// write leaves output behind or when pending output is drained; the transport then pauses the
// connection again at its next callback, so at most one read (64 KiB) slips through each time.
//
// With the poll_opt build tag gnet keeps a pointer, not the descriptor, in the epoll event
// data, which this would overwrite; that build gets pollctl_other.go.

var errNoEpoll = errors.New("the event loop's epoll descriptor cannot be found (gnet changed)")

// epollFD returns the epoll descriptor of c's event loop.
func epollFD(c gnet.Conn) (int, error) {
	v := reflect.ValueOf(c)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return 0, errNoEpoll
	}
	loop := v.Elem().FieldByName("loop")
	if !loop.IsValid() || loop.Kind() != reflect.Pointer || loop.IsNil() {
		return 0, errNoEpoll
	}
	poller := loop.Elem().FieldByName("poller")
	if !poller.IsValid() || poller.Kind() != reflect.Pointer || poller.IsNil() {
		return 0, errNoEpoll
	}
	fdv := poller.Elem().FieldByName("fd")
	if !fdv.IsValid() || fdv.Kind() != reflect.Int {
		return 0, errNoEpoll
	}
	return int(fdv.Int()), nil
}

func writeEvents(c gnet.Conn) uint32 {
	if c.OutboundBuffered() > 0 {
		return netpoll.WriteEvents
	}
	return 0
}

// setReading turns reading c on or off. It must run on c's event loop.
func setReading(c gnet.Conn, on bool) error {
	epfd, err := epollFD(c)
	if err != nil {
		return err
	}
	ev := unix.EpollEvent{Fd: int32(c.Fd()), Events: writeEvents(c)}
	if on {
		ev.Events |= netpoll.ReadEvents
	}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_MOD, c.Fd(), &ev); err != nil {
		return fmt.Errorf("%w: epoll_ctl: %v", errNoEpoll, err)
	}
	return nil
}
