package proxy

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// budgetFloor is what a connection may always hold in responses, whatever the budget's state:
// below it a connection is never paused, so every connection can go on.
const budgetFloor = 1 << 20

// budget bounds the bytes offsetgate holds for all clients together (limits.max_held_bytes).
//
// A connection holds responses (unsent output to its client, answers waiting in order in the
// session, answers read from its upstream and not yet handed over) and requests (its client's
// input not yet consumed, requests not yet sent upstream). The rule is about responses, because
// only the client can drain them: a connection whose responses exceed its share stops reading
// its upstream, so the broker's TCP window fills and the broker stops sending, and stops reading
// its client, until the client has read enough. Its share is the budget divided by the number of
// connections holding responses, counting at least two (one connection never takes more than
// half), and never less than budgetFloor. Besides, while all connections together hold more
// than the budget, every connection holding more than the floor in responses stops as well.
// Requests are bounded per connection by the in-flight cap and limits.max_buffered_bytes; they
// count in the total.
//
// What a connection holds beyond its share is at most the frame it was reading when it went
// over and one read of the event loop (64 KiB): offsetgate finishes a frame it started.
type budget struct {
	limit   int64 // <= 0: no budget
	total   atomic.Int64
	high    atomic.Int64 // largest total seen
	recent  atomic.Int64 // largest total since the last quietSince call
	holders atomic.Int64 // accounts holding responses
	paused  atomic.Int64 // accounts stopped by the budget
	pauses  prometheus.Counter
}

func newBudget(limit int64, pauses prometheus.Counter) *budget {
	return &budget{limit: limit, pauses: pauses}
}

func (b *budget) add(d int64) {
	if d == 0 {
		return
	}
	t := b.total.Add(d)
	raise(&b.recent, t)
	raise(&b.high, t)
}

// raise sets v to t when t is larger.
func raise(v *atomic.Int64, t int64) {
	for {
		h := v.Load()
		if t <= h || v.CompareAndSwap(h, t) {
			return
		}
	}
}

// peakSince returns the largest total since its previous call and starts counting again.
func (b *budget) peakSince() int64 {
	return b.recent.Swap(b.total.Load())
}

// share is what one connection may hold in responses now.
func (b *budget) share() int64 {
	return max(b.limit/max(b.holders.Load(), 2), budgetFloor)
}

// account is what one client connection holds. The gnet transport updates it from the
// connection's event loop (set); the goroutine transport from its reader and writer goroutines
// (addOut, addIn).
type account struct {
	b       *budget
	out, in atomic.Int64
	pausers atomic.Int32 // goroutines of the connection stopped by the budget
}

func (a *account) addOut(d int64) {
	if d == 0 {
		return
	}
	now := a.out.Add(d)
	switch was := now - d; {
	case was <= 0 && now > 0:
		a.b.holders.Add(1)
	case was > 0 && now <= 0:
		a.b.holders.Add(-1)
	}
	a.b.add(d)
}

func (a *account) addIn(d int64) {
	if d == 0 {
		return
	}
	a.in.Add(d)
	a.b.add(d)
}

// set replaces the account's counts; only one goroutine may call it.
func (a *account) set(out, in int64) {
	a.addOut(out - a.out.Load())
	a.addIn(in - a.in.Load())
}

// over reports whether the connection must stop reading its upstream and its client. reading
// is the part of its responses still being read from upstream: the transport finishes such a
// frame in any case, so it is left out of the decision (counting it could stop the connection
// for bytes that only finishing the frame frees).
func (a *account) over(reading int64) bool {
	if a.b.limit <= 0 {
		return false
	}
	out := a.out.Load() - reading
	if out <= budgetFloor {
		return false
	}
	return out > a.b.share() || a.b.total.Load() > a.b.limit
}

// pause and unpause count a goroutine of the connection stopped by the budget; the connection
// is paused while one is.
func (a *account) pause() {
	if a.pausers.Add(1) == 1 {
		a.b.paused.Add(1)
		a.b.pauses.Inc()
	}
}

func (a *account) unpause() {
	if a.pausers.Add(-1) == 0 {
		a.b.paused.Add(-1)
	}
}

// release removes what the connection held when it ends.
func (a *account) release() {
	a.set(0, 0)
	if a.pausers.Swap(0) > 0 {
		a.b.paused.Add(-1)
	}
}
