package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"go.uber.org/zap"

	"offsetgate/session"
)

// netTransport serves a client connection with goroutines over net.Conn: a reader per side
// feeds the session under the connection's lock, and a writer per side drains that side's
// queue, so nothing blocks while the lock is held. TLS connections (crypto/tls) use it; so can
// plaintext, which keeps the session's transport boundary honest.
type netClient struct {
	srv  *Server
	log  *zap.Logger
	node int32

	mu     sync.Mutex // guards sess and the fields below
	sess   *session.Session
	closed bool
	side   string // who ended the connection, and why
	err    error

	client, up net.Conn
	toClient   *outQueue
	toUp       *outQueue
	resume     chan struct{}
	done       chan struct{}
}

// serveNet runs one client connection to completion. The caller owns the goroutine.
func (s *Server) serveNet(c net.Conn, node int32) {
	if s.draining.Load() {
		c.Close()
		return
	}
	log := s.log.With(zap.String("client", c.RemoteAddr().String()), zap.Int32("node", node))
	s.connOpened()
	if s.srvTLS != nil {
		tc := tls.Server(c, s.srvTLS.Config())
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.TLS.Listener.Timeout())
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			c.Close()
			s.connClosed(log, "client", fmt.Errorf("%w: %v", errTLSHandshake, err))
			return
		}
		c = tc
	}
	id := identityOf(c, log)
	creds := s.mapping(id)
	nc := &netClient{srv: s, node: node, client: c, resume: make(chan struct{}, 1), done: make(chan struct{}), log: log}
	nc.sess = session.New(s.sessionConfig(nc.log, creds != nil), nc)
	nc.sess.SetIdentity(id)
	up, err := s.dialUpstream(node)
	if err == nil && creds != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*s.cfg.Limits.DialTimeout)
		err = saslLogin(ctx, up, creds)
		cancel()
		if err != nil {
			up.Close()
			err = fmt.Errorf("logging in to the destination as the mapped identity of %s: %w", id, err)
		}
	}
	if err != nil {
		c.Close()
		s.metrics.upstreamErrors.Inc()
		s.connClosed(log, "upstream", err)
		return
	}
	nc.up = up
	lowWater := s.cfg.Limits.ClientHighWaterBytes / 2
	nc.toClient = newOutQueue(c, lowWater, nc.signal)
	nc.toUp = newOutQueue(up, 0, nil)
	s.mu.Lock()
	s.conns[nc] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, nc)
		s.mu.Unlock()
	}()
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); nc.close("client", nc.toClient.run()) }()
	go func() { defer wg.Done(); nc.close("upstream", nc.toUp.run()) }()
	go func() { defer wg.Done(); nc.readUpstream() }()
	nc.readClient()
	wg.Wait()
	nc.mu.Lock()
	nc.sess.Close()
	side, cerr := nc.side, nc.err
	nc.mu.Unlock()
	s.connClosed(log, side, cerr)
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
	nc.mu.Unlock()
	close(nc.done)
	nc.client.Close()
	nc.up.Close()
	nc.toClient.close()
	nc.toUp.close()
}

// readLoop reads from r into a growing buffer and hands whole frames to handle; it returns
// when reading fails or handle does.
func readLoop(r io.Reader, max int, size func([]byte) (int, error),
	handle func([]byte) (int, error), wait func() bool) error {
	buf := make([]byte, 0, 64<<10)
	for {
		// Hand over what is whole first: a paused session leaves frames behind.
		for len(buf) >= 4 {
			want, err := size(buf)
			if err != nil {
				return err
			}
			if len(buf) < want {
				if cap(buf) < want {
					nb := make([]byte, len(buf), want)
					copy(nb, buf)
					buf = nb
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
		if len(buf) > max {
			return errBufferCap
		}
		if len(buf) == cap(buf) {
			nb := make([]byte, len(buf), 2*cap(buf))
			copy(nb, buf)
			buf = nb
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err != nil {
			return err
		}
	}
}

func (nc *netClient) readClient() {
	err := readLoop(nc.client, nc.srv.cfg.Limits.MaxBufferedBytes, nc.sess.FrameSize,
		func(b []byte) (int, error) {
			nc.mu.Lock()
			defer nc.mu.Unlock()
			return nc.sess.HandleClient(b)
		},
		func() bool {
			select {
			case <-nc.resume:
				return true
			case <-nc.done:
				return false
			}
		})
	nc.close("client", err)
}

func (nc *netClient) readUpstream() {
	err := readLoop(nc.up, nc.srv.cfg.Limits.MaxBufferedBytes, nc.sess.UpstreamFrameSize,
		func(b []byte) (int, error) {
			nc.mu.Lock()
			defer nc.mu.Unlock()
			return nc.sess.HandleUpstream(b)
		},
		func() bool { return false })
	if errors.Is(err, session.ErrLogin) {
		// The destination's refusal goes to the client before the connection ends.
		nc.toClient.drain(2 * time.Second)
	}
	nc.close("upstream", err)
}

// session.Conn; called with nc.mu held.

// Close runs close on a goroutine of its own: the caller holds nc.mu, which close takes.
func (nc *netClient) Close(err error) { go nc.close("client", err) }

func (nc *netClient) WriteClient(b []byte)   { nc.toClient.push(b) }
func (nc *netClient) WriteUpstream(b []byte) { nc.toUp.push(b) }
func (nc *netClient) ClientPending() int     { return nc.toClient.pending() }
func (nc *netClient) Resume()                { nc.signal() }
func (nc *netClient) Post(fn func()) {
	nc.mu.Lock()
	defer nc.mu.Unlock()
	if !nc.closed {
		fn()
	}
}
func (nc *netClient) WaitClientDrain() {
	nc.srv.metrics.pausedTotal.Inc()
	nc.toClient.notifyBelowLowWater()
}

// outQueue is one side's outbound bytes and the goroutine that writes them.
type outQueue struct {
	w        net.Conn
	mu       sync.Mutex
	cond     *sync.Cond
	bufs     net.Buffers
	n        int
	closed   bool
	lowWater int
	notify   func()
	want     bool // notify once pending falls to lowWater
}

func newOutQueue(w net.Conn, lowWater int, notify func()) *outQueue {
	q := &outQueue{w: w, lowWater: lowWater, notify: notify}
	q.cond = sync.NewCond(&q.mu)
	return q
}

func (q *outQueue) push(b []byte) {
	cp := append([]byte(nil), b...)
	q.mu.Lock()
	q.bufs = append(q.bufs, cp)
	q.n += len(cp)
	q.mu.Unlock()
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

// run writes queued bytes until the queue is closed (nil) or a write fails (the error).
func (q *outQueue) run() error {
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
		if _, err := bufs.WriteTo(q.w); err != nil {
			return err
		}
		q.mu.Lock()
		q.n -= n
		fire := q.want && q.n <= q.lowWater && q.notify != nil
		if fire {
			q.want = false
		}
		q.mu.Unlock()
		if fire {
			q.notify()
		}
	}
}
