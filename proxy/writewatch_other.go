//go:build !linux

package proxy

import "errors"

// writeWatch needs epoll: elsewhere large requests go through gnet's outbound buffer, copied.
type writeWatch struct{}

func newWriteWatch() (*writeWatch, error) {
	return nil, errors.New("write watch: only on Linux")
}

func (*writeWatch) register(func()) int32      { return 0 }
func (*writeWatch) forget(int32)               {}
func (*writeWatch) arm(int, int32, bool) error { return errors.New("write watch: only on Linux") }
func (*writeWatch) close()                     {}
func writeFD(int, []byte) (int, error)         { return 0, errors.New("write watch: only on Linux") }
