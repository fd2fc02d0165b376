//go:build !linux

package proxy

import "errors"

// Record sets are spliced only on Linux; elsewhere they are read and written as before.

// spliceProbe: see splice.go (never used here: spliceStep never asks for a probe).
const spliceProbe = 16 << 10

var errSpliceCheck = errors.New("spliced bytes outside a record set")

type recordPipe struct{}

func (cl *gnetClient) piped() int               { return 0 }
func (cl *gnetClient) closePipe()               {}
func (cl *gnetClient) drainPipe() (bool, error) { return true, nil }
func (cl *gnetClient) spliceStep() (moved int, wait, probe bool, err error) {
	return 0, false, false, nil
}
