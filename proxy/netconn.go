package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2/pkg/pool/byteslice"
	"go.uber.org/zap"

	"offsetgate/session"
)

// netTransport serves a client connection with goroutines over net.Conn: a reader per side
// feeds the session under the connection's lock, and a writer per side drains that side's
// queue, so nothing blocks while the lock is held. TLS connections (crypto/tls) use it; so can
// plaintext, which keeps the session's transport boundary honest. The upstream side (its
// connection, writer and reader) starts at the first request that goes upstream.
type netClient struct {
	srv   *Server
	log   *zap.Logger
	node  int32
	ln    *listener
	creds *SASLConfig // the mapped upstream identity's login, if any

	mu      sync.Mutex // guards sess and the fields below
	sess    *session.Session
	closed  bool
	side    string // who ended the connection, and why
	err     error
	up      net.Conn // nil until dialed
	dialing bool     // the upstream side has started
	held    int      // the session's held bytes as last counted

	client   net.Conn
	toClient *outQueue
	toUp     *outQueue
	resume   chan struct{}
	drained  chan struct{} // the client's output shrank: the budget may let the readers go on
	upTaken  chan struct{} // the upstream took its queue down to upstreamBacklog
	dialed   chan struct{} // closed when the upstream dial ended, either way
	done     chan struct{}
	ctx      context.Context // ends when the connection does
	cancel   context.CancelFunc
	wg       sync.WaitGroup

	acct account
	// upReading is the upstream reader's buffer while it holds part of a frame: left out of
	// the budget's decision (see account.over).
	upReading  atomic.Int64
	lastActive atomic.Int64 // unix nanoseconds of the last request or answer
}

// serveNet runs one client connection to completion. The caller owns the goroutine.
func (s *Server) serveNet(c net.Conn, ln *listener, node int32) {
	if s.draining.Load() {
		c.Close()
		return
	}
	ip, ok := s.takeConn(c.RemoteAddr())
	if !ok {
		c.Close()
		return
	}
	log := s.log.With(zap.String("client", c.RemoteAddr().String()), zap.String("listener", ln.cfg.Name), zap.Int32("node", node))
	s.connOpened()
	closed := func(side string, err error) {
		s.releaseConn(ip)
		s.connClosed(log, side, err)
	}
	if ln.tls != nil {
		tc := tls.Server(c, ln.tls.Config())
		ctx, cancel := context.WithTimeout(context.Background(), ln.cfg.TLS.Timeout())
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			c.Close()
			closed("client", fmt.Errorf("%w: %v", errTLSHandshake, err))
			return
		}
		c = tc
	}
	id := identityOf(c, log)
	id.Listener = ln.cfg.Name
	nc := &netClient{srv: s, node: node, ln: ln, client: c, creds: s.mapping(id), log: log,
		resume: make(chan struct{}, 1), drained: make(chan struct{}, 1), upTaken: make(chan struct{}, 1), dialed: make(chan struct{}), done: make(chan struct{})}
	nc.ctx, nc.cancel = context.WithCancel(context.Background())
	nc.acct.b = s.budget
	nc.lastActive.Store(time.Now().UnixNano())
	nc.sess = session.New(s.sessionConfig(nc.log, nc.creds != nil, ln, node), nc)
	nc.sess.SetIdentity(id)
	lowWater := s.cfg.Limits.ClientHighWaterBytes / 2
	nc.toClient = newOutQueue(lowWater, nc.signal, func(d int64) {
		nc.acct.addOut(d)
		if d < 0 {
			select {
			case nc.drained <- struct{}{}:
			default:
			}
		}
	})
	nc.toUp = newOutQueue(upstreamBacklog, func() {
		select {
		case nc.upTaken <- struct{}{}:
		default:
		}
	}, nc.acct.addIn)
	// A connection whose TLS handshake ended after shutdown listed the connections to close
	// would never be closed (its session could wait for good, and Run with it): registering
	// and the draining check happen under the lock shutdown lists them under.
	s.mu.Lock()
	draining := s.draining.Load()
	if !draining {
		s.conns[nc] = struct{}{}
	}
	s.mu.Unlock()
	if draining {
		nc.sess.Close()
		c.Close()
		nc.cancel()
		closed("server", errShutdown)
		return
	}
	defer func() {
		s.mu.Lock()
		delete(s.conns, nc)
		s.mu.Unlock()
	}()
	nc.wg.Add(1)
	go func() { defer nc.wg.Done(); nc.close("client", nc.toClient.run(c)) }()
	nc.readClient()
	nc.wg.Wait()
	nc.mu.Lock()
	nc.sess.Close()
	side, cerr := nc.side, nc.err
	nc.mu.Unlock()
	nc.acct.release()
	closed(side, cerr)
}

// connectUpstream dials the broker, logs in as the mapped identity when there is one, and
// then runs the upstream side: a reader goroutine, and the writer on this one.
func (nc *netClient) connectUpstream() {
	up, err := nc.srv.dialUpstream(nc.ctx, nc.ln, nc.node)
	if err == nil && nc.creds != nil {
		ctx, cancel := context.WithTimeout(nc.ctx, 3*nc.srv.cfg.Limits.DialTimeout)
		err = saslLogin(ctx, up, nc.creds)
		cancel()
		if err != nil {
			up.Close()
			nc.srv.metrics.upstreamErrors.Inc()
			err = fmt.Errorf("logging in to the destination as the mapped identity of %s: %w", nc.sess.Identity(), err)
		}
	}
	if err != nil {
		close(nc.dialed)
		nc.close("upstream", err)
		return
	}
	nc.mu.Lock()
	if nc.closed {
		nc.mu.Unlock()
		close(nc.dialed)
		up.Close()
		return
	}
	nc.up = up
	nc.mu.Unlock()
	close(nc.dialed)
	nc.wg.Add(1)
	go func() { defer nc.wg.Done(); nc.readUpstream(up) }()
	nc.close("upstream", nc.toUp.run(up))
}

func (nc *netClient) signal() {
	select {
	case nc.resume <- struct{}{}:
	default:
	}
}

// close ends both sides once; the first caller's side and error are the ones logged.
func (nc *netClient) close(side string, err error) {
	nc.mu.Lock()
	if nc.closed {
		nc.mu.Unlock()
		return
	}
	nc.closed = true
	nc.side, nc.err = side, err
	up := nc.up
	nc.mu.Unlock()
	close(nc.done)
	nc.cancel()
	nc.client.Close()
	if up != nil {
		up.Close()
	}
	nc.toClient.close()
	nc.toUp.close()
}

// closeIfIdle closes the connection when no request arrived and no answer was passed on since
// cutoff (unix nanoseconds) and it has no request in flight.
func (nc *netClient) closeIfIdle(cutoff int64) {
	nc.mu.Lock()
	idle := !nc.closed && nc.lastActive.Load() < cutoff && !nc.sess.Busy()
	nc.mu.Unlock()
	if idle {
		nc.close("client", errIdle)
	}
}

// waitBudget returns once the connection is within its share of the budget (true), or when
// the connection ends (false).
func (nc *netClient) waitBudget() bool {
	if !nc.acct.over(nc.upReading.Load()) {
		return true
	}
	nc.acct.pause()
	defer nc.acct.unpause()
	// The client's output shrinking signals drained; the others' (the total) is polled.
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-nc.drained:
		case <-t.C:
		case <-nc.done:
			return false
		}
		if !nc.acct.over(nc.upReading.Load()) {
			return true
		}
	}
}

// waitUpstream holds the client's next read while more than upstreamBacklog of its requests wait
// to be written to the upstream (see gnetClient.backlogged); false when the connection ended.
func (nc *netClient) waitUpstream() bool {
	counted := false
	for nc.toUp.pending() > upstreamBacklog {
		if !counted {
			nc.srv.metrics.backlogHolds.Inc()
			counted = true
		}
		nc.toUp.notifyBelowLowWater()
		select {
		case <-nc.upTaken:
		case <-nc.done:
			return false
		}
	}
	return true
}

// readLoop reads from r and hands whole frames to handle; it returns when reading fails or
// handle does. When handle consumes nothing (the session paused) it calls wait before reading
// on, and before every read gate (the budget); either returning false ends the loop. A frame
// larger than the first buffer gets a pooled buffer, given back once it has been handled, so
// that an idle connection keeps no large buffer: of the frame's size at once when the peer is
// trusted (the broker), else growing with what arrived as on gnet (see firstChunk), because a
// client's size prefix is only its claim. held hears the bytes the loop holds: its buffer's size
// while it holds part of a frame, else 0.
func readLoop(r io.Reader, trusted bool, maxBuffered int, size func([]byte) (int, error),
	handle func([]byte) (int, error), wait, gate func() bool, held func(int)) error {
	first := make([]byte, 0, 64<<10)
	buf := first
	pooled := false
	last := 0
	defer func() {
		if pooled {
			byteslice.Put(buf)
		}
		held(0)
	}()
	grow := func(size int) {
		nb := byteslice.Get(size)[:len(buf)]
		copy(nb, buf)
		if pooled {
			byteslice.Put(buf)
		}
		buf, pooled = nb, true
	}
	// room is the buffer for a frame of want bytes of which have arrived.
	room := func(have, want int) int {
		if trusted {
			return want
		}
		return min(want, max(have+1, 8*have, firstChunk))
	}
	for {
		want := 0 // the frame in progress, once its size is known
		// Hand over what is whole first: a paused session leaves frames behind.
		for len(buf) >= 4 {
			w, err := size(buf)
			if err != nil {
				return err
			}
			if len(buf) < w {
				want = w
				if cap(buf) < w {
					grow(room(len(buf), w))
				}
				break
			}
			n, err := handle(buf)
			if err != nil {
				return err
			}
			buf = buf[:copy(buf, buf[n:])]
			if n == 0 {
				// Paused: wait to be resumed before reading more.
				if !wait() {
					return nil
				}
			}
		}
		if len(buf) == 0 && pooled {
			byteslice.Put(buf)
			buf, pooled = first, false
		}
		if h := cap(buf) * min(len(buf), 1); h != last {
			last = h
			held(h)
		}
		if len(buf) > maxBuffered {
			return errBufferCap
		}
		if !gate() {
			return nil
		}
		if len(buf) == cap(buf) {
			if want > cap(buf) {
				grow(room(len(buf), want))
			} else {
				grow(2 * cap(buf))
			}
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err != nil {
			return err
		}
	}
}

func (nc *netClient) readClient() {
	var last int64
	err := readLoop(nc.client, false, nc.srv.cfg.Limits.MaxBufferedBytes, nc.sess.FrameSize,
		func(b []byte) (int, error) {
			nc.mu.Lock()
			n, err := nc.sess.HandleClient(b)
			nc.countHeld()
			if n > 0 {
				nc.active()
			}
			dialing := nc.dialing && nc.up == nil
			nc.mu.Unlock()
			if dialing {
				// The requests after the first that goes upstream wait for its connection.
				select {
				case <-nc.dialed:
				case <-nc.done:
				}
			}
			return n, err
		},
		func() bool {
			select {
			case <-nc.resume:
				return true
			case <-nc.done:
				return false
			}
		},
		func() bool { return nc.waitBudget() && nc.waitUpstream() },
		func(h int) {
			nc.acct.addIn(int64(h) - last)
			last = int64(h)
		})
	nc.close("client", err)
}

func (nc *netClient) readUpstream(up net.Conn) {
	err := readLoop(up, true, nc.srv.cfg.Limits.MaxBufferedBytes, nc.sess.UpstreamFrameSize,
		func(b []byte) (int, error) {
			nc.mu.Lock()
			defer nc.mu.Unlock()
			n, err := nc.sess.HandleUpstream(b)
			nc.countHeld()
			if n > 0 {
				nc.active()
			}
			return n, err
		},
		func() bool { return false },
		nc.waitBudget,
		func(h int) {
			nc.acct.addOut(int64(h) - nc.upReading.Swap(int64(h)))
		})
	if errors.Is(err, session.ErrLogin) {
		// The destination's refusal goes to the client before the connection ends.
		nc.toClient.drain(2 * time.Second)
	}
	nc.close("upstream", err)
}

// active notes that a request arrived or an answer was passed on, for the idle timeout;
// called with nc.mu held (closeIfIdle reads it under the lock).
func (nc *netClient) active() { nc.lastActive.Store(time.Now().UnixNano()) }

// countHeld counts what the session holds; called with nc.mu held.
func (nc *netClient) countHeld() {
	h := nc.sess.Held()
	nc.acct.addOut(int64(h - nc.held))
	nc.held = h
}

// session.Conn; called with nc.mu held.

// Close runs close on a goroutine of its own: the caller holds nc.mu, which close takes.
func (nc *netClient) Close(err error) { go nc.close("client", err) }

func (nc *netClient) WriteClient(b []byte) { nc.toClient.push(b) }

// WriteClientv queues an answer written as slices as one buffer: a TLS connection would
// otherwise seal every slice in a record of its own.
func (nc *netClient) WriteClientv(bs [][]byte) { nc.toClient.pushv(bs) }

// WriteUpstream queues bytes for the upstream broker and, at the first request, starts the
// upstream side.
func (nc *netClient) WriteUpstream(b []byte) {
	nc.toUp.push(b)
	if !nc.dialing && !nc.closed {
		nc.dialing = true
		nc.wg.Add(1)
		go func() { defer nc.wg.Done(); nc.connectUpstream() }()
	}
}

func (nc *netClient) ClientPending() int { return nc.toClient.pending() }
func (nc *netClient) Resume()            { nc.signal() }
func (nc *netClient) Post(fn func()) {
	nc.mu.Lock()
	defer nc.mu.Unlock()
	if !nc.closed {
		fn()
		nc.countHeld()
		nc.active()
	}
}
func (nc *netClient) WaitClientDrain() {
	nc.srv.metrics.pausedTotal.Inc()
	nc.toClient.notifyBelowLowWater()
}

// outQueue is one side's outbound bytes and the goroutine that writes them.
type outQueue struct {
	mu       sync.Mutex
	cond     *sync.Cond
	bufs     net.Buffers
	n        int
	closed   bool
	lowWater int
	notify   func()
	want     bool // notify once pending falls to lowWater
	count    func(int64)
}

// newOutQueue makes a queue; count hears every change of its size.
func newOutQueue(lowWater int, notify func(), count func(int64)) *outQueue {
	q := &outQueue{lowWater: lowWater, notify: notify, count: count}
	q.cond = sync.NewCond(&q.mu)
	return q
}

func (q *outQueue) push(b []byte) { q.add(bytes.Clone(b)) }

// pushv is push of the slices' concatenation.
func (q *outQueue) pushv(bs [][]byte) { q.add(bytes.Join(bs, nil)) }

// add queues a buffer the queue now owns.
func (q *outQueue) add(cp []byte) {
	q.mu.Lock()
	q.bufs = append(q.bufs, cp)
	q.n += len(cp)
	q.mu.Unlock()
	q.count(int64(len(cp)))
	q.cond.Signal()
}

func (q *outQueue) pending() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}

func (q *outQueue) notifyBelowLowWater() {
	q.mu.Lock()
	now := q.n <= q.lowWater
	q.want = !now
	q.mu.Unlock()
	if now && q.notify != nil {
		q.notify()
	}
}

// drain waits until the queued bytes are written, the queue is closed or d has passed.
func (q *outQueue) drain(d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		q.mu.Lock()
		done := q.n == 0 || q.closed
		q.mu.Unlock()
		if done {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (q *outQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.cond.Broadcast()
}

// run writes queued bytes to w until the queue is closed (nil) or a write fails (the error).
func (q *outQueue) run(w net.Conn) error {
	for {
		q.mu.Lock()
		for len(q.bufs) == 0 && !q.closed {
			q.cond.Wait()
		}
		if q.closed {
			q.mu.Unlock()
			return nil
		}
		bufs := q.bufs
		q.bufs = nil
		q.mu.Unlock()
		n := 0
		for _, b := range bufs {
			n += len(b)
		}
		if _, err := bufs.WriteTo(w); err != nil {
			return err
		}
		q.mu.Lock()
		q.n -= n
		fire := q.want && q.n <= q.lowWater && q.notify != nil
		if fire {
			q.want = false
		}
		q.mu.Unlock()
		q.count(-int64(n))
		if fire {
			q.notify()
		}
	}
}
