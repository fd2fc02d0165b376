package proxy

import (
	"context"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// After a burst the Go heap keeps the pages the burst's buffers used: a proxy that goes quiet
// allocates nothing, so no collection runs to find those buffers dead and shrink the heap's
// goal, and the runtime's scavenger returns pages only down to that goal. Resident memory then
// stays at the burst's size for minutes (the runtime forces a collection every two minutes).
// releaser gives those pages back once the proxy held nearly nothing for its clients since its
// last check (a producer at full speed holds megabytes at every moment) and the heap has grown
// by more than surplus since its last release (or start): two collections and a return of free
// pages (debug.FreeOSMemory, twice: see check), paid only after a burst, never while busy, and
// at most once per surplus of growth when the heap grows for good (views loaded, say).
type releaser struct {
	held    func() int64 // the most bytes held for clients since the last check (the budget's peak)
	every   time.Duration
	idle    int64  // held below this since the last check: quiet enough to release
	surplus uint64 // growth of the heap worth a collection
	base    uint64 // the heap after the last release
	count   prometheus.Counter
	samples []rtmetrics.Sample
}

func newReleaser(held func() int64, count prometheus.Counter) *releaser {
	r := &releaser{held: held, every: 2 * time.Second, idle: 1 << 20, surplus: 32 << 20, count: count,
		samples: []rtmetrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/free:bytes"},
			{Name: "/memory/classes/heap/unused:bytes"}}}
	r.base = r.heap()
	return r
}

// heap is the heap memory the process keeps: objects (live, or dead and not yet collected),
// free pages not returned to the OS, and unused room in spans.
func (r *releaser) heap() uint64 {
	rtmetrics.Read(r.samples)
	var n uint64
	for _, s := range r.samples {
		if s.Value.Kind() == rtmetrics.KindUint64 {
			n += s.Value.Uint64()
		}
	}
	return n
}

// check releases memory when the proxy is quiet and the heap grew by more than surplus since
// the last release; true when it did.
func (r *releaser) check() bool {
	if r.held() >= r.idle || r.heap() < r.base+r.surplus {
		return false
	}
	// Twice: buffers pooled in a sync.Pool (gnet's byte slices) survive one collection in the
	// pool's victim cache and are freed by the second.
	debug.FreeOSMemory()
	debug.FreeOSMemory()
	r.base = r.heap()
	r.count.Inc()
	return true
}

// run checks every r.every until ctx ends.
func (r *releaser) run(ctx context.Context) {
	t := time.NewTicker(r.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.check()
		}
	}
}
