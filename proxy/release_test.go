package proxy

import (
	"runtime"
	"runtime/debug"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// After a burst, a quiet proxy gives the heap's unused pages back; while it holds bytes for
// clients, or keeps little unused, it does not pay for a collection.
func TestReleaserAfterBurst(t *testing.T) {
	// The releaser measures growth from the heap it starts with: start from a quiet one, not
	// from the garbage earlier tests left (it would be collected during the burst and hide it).
	debug.FreeOSMemory()
	var held int64
	count := prometheus.NewCounter(prometheus.CounterOpts{Name: "releases"})
	r := newReleaser(func() int64 { return held }, count)

	// A burst: 128 MiB of buffers in use.
	bufs := make([][]byte, 128)
	for i := range bufs {
		bufs[i] = make([]byte, 1<<20)
		bufs[i][0] = 1
	}
	held = 8 << 20 // still busy: no collection
	if r.check() {
		t.Fatal("released while the proxy held 8 MiB for clients")
	}
	runtime.KeepAlive(bufs)
	// Half of them end in a pool, as a proxy's buffers do: they must go too.
	var pool sync.Pool
	for _, b := range bufs[:64] {
		pool.Put(&b)
	}
	bufs = nil
	held = 0
	before := r.heap()
	if !r.check() {
		t.Fatalf("did not release after the burst (heap %d, base %d)", before, r.base)
	}
	if after := r.heap(); after+64<<20 > before {
		t.Fatalf("the heap kept %d of %d bytes after the release", after, before)
	}
	if r.check() {
		t.Fatal("released again without a new burst")
	}
	var m dto.Metric
	if err := count.Write(&m); err != nil || m.GetCounter().GetValue() != 1 {
		t.Fatalf("releases counted %v (%v), want 1", m.GetCounter().GetValue(), err)
	}
}

// The releaser judges quiet by the most bytes held since its last look, not at one instant.
func TestBudgetPeakSince(t *testing.T) {
	b := newBudget(0, prometheus.NewCounter(prometheus.CounterOpts{Name: "pauses"}))
	b.add(5 << 20)
	b.add(-5 << 20)
	if p := b.peakSince(); p != 5<<20 {
		t.Fatalf("peak %d, want the 5 MiB held in between", p)
	}
	if p := b.peakSince(); p != 0 {
		t.Fatalf("peak %d after a quiet interval, want 0", p)
	}
	b.add(2 << 20)
	if p := b.peakSince(); p != 2<<20 {
		t.Fatalf("peak %d, want 2 MiB", p)
	}
	if p := b.peakSince(); p != 2<<20 {
		t.Fatalf("peak %d while 2 MiB are still held, want 2 MiB", p)
	}
}
