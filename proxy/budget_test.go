package proxy

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/panjf2000/gnet/v2"
	"github.com/prometheus/client_golang/prometheus"

	"offsetgate/internal/ports"
)

// The budget's rule: a connection holding responses beyond its share (the budget divided by
// the connections holding responses, at least two, never below the floor) stops, and so does
// every connection above the floor while all of them hold more than the budget.
func TestBudgetRule(t *testing.T) {
	const limit = 64 << 20
	b := newBudget(limit, prometheus.NewCounter(prometheus.CounterOpts{Name: "x"}))
	a1, a2 := &account{b: b}, &account{b: b}
	a1.set(20<<20, 0)
	if a1.over(0) {
		t.Fatalf("20 MiB of a 64 MiB budget, alone: over")
	}
	a1.set(33<<20, 0)
	if !a1.over(0) {
		t.Fatalf("33 MiB of a 64 MiB budget, alone: not over (one connection never takes more than half)")
	}
	if a1.over(2 << 20) {
		t.Fatalf("a frame being read counts in the decision")
	}
	a2.set(1<<20, 0)
	a1.set(30<<20, 0)
	if a2.over(0) || a1.over(0) {
		t.Fatalf("30 + 1 MiB of 64: over")
	}
	// Requests count in the total: past the budget, everything above the floor stops.
	a2.set(2<<20, 40<<20)
	if !a1.over(0) || !a2.over(0) {
		t.Fatalf("72 MiB held of 64: a connection above the floor goes on")
	}
	a2.set(budgetFloor, 40<<20)
	if a2.over(0) {
		t.Fatalf("a connection at the floor stops")
	}
	if b.holders.Load() != 2 {
		t.Fatalf("%d holders, want 2", b.holders.Load())
	}
	a1.release()
	a2.release()
	if b.total.Load() != 0 || b.holders.Load() != 0 || b.high.Load() != 72<<20 {
		t.Fatalf("after release: total %d, holders %d, high water %d", b.total.Load(), b.holders.Load(), b.high.Load())
	}
	off := newBudget(-1, prometheus.NewCounter(prometheus.CounterOpts{Name: "y"}))
	a := &account{b: off}
	a.set(1<<30, 0)
	if a.over(0) {
		t.Fatalf("no budget: over")
	}
}

// pauseHandler turns reading off at open and counts what gnet hands over.
type pauseHandler struct {
	gnet.BuiltinEventEngine
	eng     atomic.Pointer[gnet.Engine]
	conn    atomic.Value // gnet.Conn
	traffic atomic.Int64
	errs    chan error
}

func (h *pauseHandler) OnBoot(eng gnet.Engine) gnet.Action {
	h.eng.Store(&eng)
	return gnet.None
}

func (h *pauseHandler) OnOpen(c gnet.Conn) ([]byte, gnet.Action) {
	h.conn.Store(c)
	h.errs <- setReading(c, false)
	return nil, gnet.None
}

func (h *pauseHandler) OnTraffic(c gnet.Conn) gnet.Action {
	n, _ := c.Discard(-1)
	h.traffic.Add(int64(n))
	return gnet.None
}

// setReading really stops gnet from reading a connection, and starts it again: offsetgate
// reaches into gnet for the event loop's epoll descriptor, and a gnet that moved it fails here.
func TestEpollDescriptorFound(t *testing.T) {
	port, err := ports.One()
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	h := &pauseHandler{errs: make(chan error, 2)}
	done := make(chan error, 1)
	go func() { done <- gnet.Run(h, "tcp://"+addr, gnet.WithNumEventLoop(1)) }()
	var c net.Conn
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c, err = net.Dial("tcp", addr); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	defer func() {
		c.Close()
		if e := h.eng.Load(); e != nil {
			_ = e.Stop(context.Background())
		}
		<-done
	}()
	if err := <-h.errs; err != nil {
		t.Fatalf("stopping reads: %v", err)
	}
	if _, err := c.Write(make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if n := h.traffic.Load(); n != 0 {
		t.Fatalf("gnet read %d bytes of a connection whose reading was turned off", n)
	}
	gc := h.conn.Load().(gnet.Conn)
	_ = gc.EventLoop().Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
		h.errs <- setReading(gc, true)
		return nil
	}))
	if err := <-h.errs; err != nil {
		t.Fatalf("starting reads: %v", err)
	}
	for deadline := time.Now().Add(5 * time.Second); h.traffic.Load() < 1000; {
		if time.Now().After(deadline) {
			t.Fatalf("gnet read %d of 1000 bytes after reading was turned on again", h.traffic.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The new limits are validated and name their key; -1 turns each off.
func TestLimitsValidation(t *testing.T) {
	base := func() Config {
		return Config{Listen: "127.0.0.1:9092", Bootstrap: []string{"127.0.0.1:19092"}}
	}
	for _, c := range []struct {
		mutate func(*Limits)
		bad    string
	}{
		{func(l *Limits) { l.MaxHeldBytes = 1 << 20 }, "limits.max_held_bytes"},
		{func(l *Limits) { l.MaxHeldBytes = -2 }, "limits.max_held_bytes"},
		{func(l *Limits) { l.MaxConnections = -2 }, "limits.max_connections"},
		{func(l *Limits) { l.MaxConnectionsPerIP = -5 }, "limits.max_connections_per_ip"},
		{func(l *Limits) { l.GCPercent = -1 }, "limits.gc_percent"},
		{func(l *Limits) { l.GCPercent = 100 }, ""},
		{func(l *Limits) {
			l.MaxHeldBytes, l.MaxConnections, l.MaxConnectionsPerIP, l.ConnectionsMaxIdle = -1, -1, -1, -time.Second
		}, ""},
	} {
		cfg := base()
		c.mutate(&cfg.Limits)
		cfg.Defaults()
		err := cfg.Validate()
		switch {
		case c.bad == "" && err != nil:
			t.Errorf("valid limits refused: %v", err)
		case c.bad != "" && (err == nil || !strings.Contains(err.Error(), `"`+c.bad+`"`)):
			t.Errorf("want an error naming %s, got %v", c.bad, err)
		}
	}
	cfg := base()
	cfg.Defaults()
	if l := cfg.Limits; l.MaxHeldBytes != DefaultMaxHeldBytes || l.ConnectionsMaxIdle != 10*time.Minute || l.MaxConnections <= 0 || l.MaxConnectionsPerIP <= 0 || l.GCPercent != DefaultGCPercent {
		t.Fatalf("defaults: %+v", l)
	}
}
