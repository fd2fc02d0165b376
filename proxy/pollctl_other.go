//go:build !linux || poll_opt

package proxy

import (
	"errors"

	"github.com/panjf2000/gnet/v2"
)

var errNoEpoll = errors.New("stopping a connection's reads is only implemented for gnet's default epoll build")

// setReading cannot stop gnet's reads on this build: the budget then stops only the handling
// of a connection's frames, not the reading of its sockets.
func setReading(gnet.Conn, bool) error { return errNoEpoll }
