package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	"go.uber.org/zap"

	"offsetgate/rules"
	"offsetgate/session"
)

// gnetTransport serves plaintext client connections on gnet event loops. A client connection
// and its upstream broker connection live on the same loop (the upstream is dialed off-loop
// and enrolled on the client's loop), so a session is only touched by that loop's goroutine.
type gnetTransport struct {
	gnet.BuiltinEventEngine
	srv *Server
	eng gnet.Engine

	booted chan struct{}
	// started is closed at the first tick: gnet calls OnBoot before it registers its event
	// loops, and the ticker goroutine starts after, so only then may connections be enrolled.
	started     chan struct{}
	startedOnce sync.Once

	// mu guards the sets below. The ticker goroutine wakes the connections in waiting (paused
	// until their client drains its responses) and paused (stopped by the budget), and every
	// tenth tick those that hold bytes, so that what they hold is counted again after gnet
	// sent their output (gnet does not say when it did); each re-checks on its own loop.
	mu      sync.Mutex
	waiting map[*gnetClient]struct{}
	paused  map[*gnetClient]struct{}
	clients map[*gnetClient]struct{}
	ticks   int

	// watch reports upstream sockets writable again for requests written around gnet (see
	// writeWatch); nil where it cannot run, and then every request goes through gnet.
	watch     *writeWatch
	watchOnce sync.Once
}

// gnetClient is one client connection and its upstream.
type gnetClient struct {
	t    *gnetTransport
	c    gnet.Conn
	up   gnet.Conn
	sess *session.Session
	// inFrame and upFrame are large frames being read from the client and the upstream (see
	// assembly).
	inFrame, upFrame assembly
	// stream is the client frame being passed upstream as it arrives (stream.go).
	stream streamState
	// answer is the broker's answer being passed to the client as it arrives (answer.go).
	answer answerState
	log    *zap.Logger
	ln     *listener
	node   int32 // -1: bootstrap
	ip     string
	closed bool
	// side and err say who ended the connection and why, for the one log line.
	side string
	err  error

	// The upstream connection is dialed at the first request that goes upstream; requests
	// forwarded until it is open wait in pendingUp, and the client's further frames wait in
	// gnet's buffer.
	dialing   bool
	pendingUp []byte

	acct   account
	paused bool // stopped by the budget: neither socket is read
	// holding: the client is not read while the upstream has more than upstreamBacklog of
	// requests the kernel has not taken, or any written around gnet.
	holding bool
	// direct is what the upstream's socket has not taken yet of requests written to it around
	// gnet, oldest first: a large request's rest where it lies, in directBuf (the client's frame
	// buffer, lent until it is written), and anything forwarded behind it (copied). watchID
	// names the connection to the write watch; watchAdded: its upstream socket is in the set.
	direct      [][]byte
	directBytes int
	directBuf   []byte
	watchID     int32
	watchAdded  bool
	// lastActive is when the last request arrived or answer was passed on (unix nanoseconds),
	// for the idle timeout.
	lastActive atomic.Int64
}

// gnetUpstream marks an upstream connection's context.
type gnetUpstream struct{ cl *gnetClient }

// brokerTarget marks a client connection accepted on a Go listener: a broker listener, or the
// bootstrap listener of a listener other than the first.
type brokerTarget struct {
	ln   *listener
	node int32
}

func newGnetTransport(srv *Server) *gnetTransport {
	t := &gnetTransport{srv: srv, booted: make(chan struct{}), started: make(chan struct{}),
		waiting: map[*gnetClient]struct{}{}, paused: map[*gnetClient]struct{}{}, clients: map[*gnetClient]struct{}{}}
	w, err := newWriteWatch()
	if err != nil {
		srv.log.Warn("large requests are copied into gnet's buffers when the broker is slower than its client", zap.Error(err))
	} else {
		t.watch = w
	}
	return t
}

func (t *gnetTransport) run(addr string) error {
	n := t.srv.cfg.EventLoops
	opts := []gnet.Option{
		gnet.WithMulticore(true),
		gnet.WithLoadBalancing(gnet.LeastConnections),
		gnet.WithTCPNoDelay(gnet.TCPNoDelay),
		gnet.WithTicker(true),
		gnet.WithReuseAddr(true),
		gnet.WithLogger(t.srv.log.Named("gnet").Sugar()),
	}
	if n > 0 {
		opts = append(opts, gnet.WithNumEventLoop(n))
	}
	if v := t.srv.cfg.Limits.SocketSendBytes; v > 0 {
		opts = append(opts, gnet.WithSocketSendBuffer(v))
	}
	return gnet.Run(t, "tcp://"+addr, opts...)
}

func (t *gnetTransport) OnBoot(eng gnet.Engine) gnet.Action {
	t.eng = eng
	close(t.booted)
	return gnet.None
}

// enroll hands a connection accepted on a Go listener to the event loops.
func (t *gnetTransport) enroll(c net.Conn, ln *listener, node int32) error {
	ctx := gnet.NewNetConnContext(gnet.NewContext(context.Background(), &brokerTarget{ln: ln, node: node}), c)
	_, err := t.eng.Register(ctx)
	return err
}

func (t *gnetTransport) stop(ctx context.Context) error {
	var err error
	select {
	case <-t.booted:
		err = t.eng.Stop(ctx)
	default:
	}
	t.closeWatch()
	return err
}

// closeWatch ends the write watch's goroutine. The field stays set: a loop that outlived the
// engine's stop finds a closed set (arming fails and closes its connection), never nil.
func (t *gnetTransport) closeWatch() {
	if t.watch != nil {
		t.watchOnce.Do(t.watch.close)
	}
}

func (t *gnetTransport) OnOpen(c gnet.Conn) ([]byte, gnet.Action) {
	node, ln := int32(-1), t.srv.lns[0] // the event loops' own listener: the first one's bootstrap
	switch v := c.Context().(type) {
	case *gnetUpstream:
		cl := v.cl
		if cl.closed {
			return nil, gnet.Close
		}
		cl.up, cl.dialing = c, false
		if len(cl.pendingUp) > 0 {
			_, _ = c.Write(cl.pendingUp)
			cl.pendingUp = nil
		}
		// Requests that arrived while dialing are still buffered on the client side.
		if cl.clientTraffic() == gnet.Close {
			_ = cl.c.Close()
		}
		return nil, gnet.None
	case *brokerTarget:
		node, ln = v.node, v.ln
	}
	if t.srv.draining.Load() {
		return nil, gnet.Close
	}
	ip, ok := t.srv.takeConn(c.RemoteAddr())
	if !ok {
		return nil, gnet.Close
	}
	cl := &gnetClient{t: t, c: c, node: node, ln: ln, ip: ip}
	cl.acct.b = t.srv.budget
	cl.lastActive.Store(time.Now().UnixNano())
	cl.log = t.srv.log.With(zap.String("client", c.RemoteAddr().String()), zap.String("listener", ln.cfg.Name), zap.Int32("node", node))
	cl.sess = session.New(t.srv.sessionConfig(cl.log, false, ln, node), cl)
	cl.sess.SetIdentity(rules.Identity{Addr: c.RemoteAddr().String(), Listener: ln.cfg.Name})
	c.SetContext(cl)
	t.mu.Lock()
	t.clients[cl] = struct{}{}
	t.mu.Unlock()
	t.srv.connOpened()
	return nil, gnet.None
}

// dial connects to the upstream broker off the loop and enrolls the connection on the
// client's loop.
func (t *gnetTransport) dial(cl *gnetClient, c gnet.Conn) {
	up, err := t.srv.dialUpstream(context.Background(), cl.ln, cl.node)
	if err != nil {
		cl.onLoop(func() {
			cl.log.Warn("closing client: cannot reach the destination broker", zap.Error(err))
			cl.failClient("upstream", err)
		})
		return
	}
	ctx := gnet.NewContext(context.Background(), &gnetUpstream{cl: cl})
	if _, err := c.EventLoop().Enroll(ctx, up); err != nil {
		_ = up.Close()
		cl.log.Warn("closing client: cannot register the upstream connection", zap.Error(err))
		_ = c.Close()
	}
}

func (t *gnetTransport) OnTraffic(c gnet.Conn) gnet.Action {
	switch v := c.Context().(type) {
	case *gnetClient:
		return v.clientTraffic()
	case *gnetUpstream:
		return v.cl.upstreamTraffic()
	}
	return gnet.None
}

func (t *gnetTransport) OnClose(c gnet.Conn, err error) gnet.Action {
	switch v := c.Context().(type) {
	case *gnetClient:
		v.closed = true
		if v.up != nil {
			_ = v.up.Close()
		}
		t.mu.Lock()
		delete(t.waiting, v)
		delete(t.paused, v)
		delete(t.clients, v)
		t.mu.Unlock()
		v.sess.Close()
		v.inFrame.close()
		v.upFrame.close()
		v.pendingUp = nil
		v.direct, v.directBuf, v.directBytes = nil, nil, 0
		if v.watchID != 0 {
			t.watch.forget(v.watchID)
		}
		v.acct.release()
		t.srv.releaseConn(v.ip) // before the gauge moves, so that a place is free once it shows
		if v.side == "" {
			v.side, v.err = "client", err
		}
		t.srv.connClosed(v.log, v.side, v.err)
	case *gnetUpstream:
		if !v.cl.closed {
			if v.cl.side == "" {
				v.cl.side, v.cl.err = "upstream", err
			}
			_ = v.cl.c.Close()
		}
	}
	return gnet.None
}

// OnTick wakes connections that paused until their client read its responses or that the
// budget stopped, and now and then those that hold bytes; each re-checks on its own loop.
func (t *gnetTransport) OnTick() (time.Duration, gnet.Action) {
	t.startedOnce.Do(func() { close(t.started) })
	t.mu.Lock()
	for cl := range t.waiting {
		_ = cl.c.Wake(nil)
		delete(t.waiting, cl)
	}
	for cl := range t.paused {
		_ = cl.c.Wake(nil)
	}
	if t.ticks++; t.ticks%10 == 0 {
		for cl := range t.clients {
			if cl.acct.out.Load() > 0 || cl.acct.in.Load() > 0 {
				_ = cl.c.Wake(nil)
			}
		}
	}
	t.mu.Unlock()
	return 10 * time.Millisecond, gnet.None
}

// closeIdle closes the connections where no request arrived and no answer was passed on since
// cutoff (unix nanoseconds), and that have no request in flight.
func (t *gnetTransport) closeIdle(cutoff int64) {
	t.mu.Lock()
	var idle []*gnetClient
	for cl := range t.clients {
		if cl.lastActive.Load() < cutoff {
			idle = append(idle, cl)
		}
	}
	t.mu.Unlock()
	for _, cl := range idle {
		cl.onLoop(func() {
			if cl.lastActive.Load() < cutoff && !cl.sess.Busy() {
				cl.failClient("client", errIdle)
			}
		})
	}
}

// wholeFrames reports whether conn holds at least one whole frame, so that a large frame
// arriving in many reads is not copied out of gnet's buffer at every read.
func wholeFrames(c gnet.Conn, size func([]byte) (int, error)) (bool, error) {
	n := c.InboundBuffered()
	if n < 4 {
		return false, nil
	}
	p, err := c.Peek(4)
	if err != nil {
		return false, err
	}
	want, err := size(p)
	if err != nil {
		return false, err
	}
	return n >= want, nil
}

// upstreamBacklog is the most of a connection's requests offsetgate holds written to the
// upstream and not yet taken by the kernel. Past it the client's next request is not read until
// the broker has taken some, so a producer faster than its broker is slowed by TCP as on a
// direct connection; before, its pipelined requests piled up here (five in flight of 8 MiB
// each, per connection).
const upstreamBacklog = 1 << 20

// unconsumedBacklog is the most of a client's bytes gnet holds read and not yet taken by the
// session before the client is not read: while the session cannot take the next request (an
// asynchronous step in flight, the upstream being dialed), gnet would otherwise go on reading
// a producer's pipelined requests into its buffer (measured: 10-41 MiB for one producer on a
// busy machine). Larger than largeFrame, so a frame that waits whole in gnet's buffer always
// fits.
const unconsumedBacklog = 1 << 20

// backlogged reports whether the client must wait for the upstream to take its requests, or
// to open: while it is dialed, gnet would go on reading the client into its buffer, and a
// producer that pipelines large requests piled up megabytes there, more the slower the dial.
func (cl *gnetClient) backlogged() bool {
	if cl.up == nil {
		return len(cl.pendingUp) > 0
	}
	return len(cl.direct) > 0 || cl.up.OutboundBuffered() > upstreamBacklog || cl.streamLagging()
}

func (cl *gnetClient) clientTraffic() gnet.Action {
	lim := cl.t.srv.cfg.Limits
	if err := cl.streamOut(); err != nil && !errors.Is(err, errStreamLag) {
		return cl.fail("upstream", err)
	}
	if cl.paused || (cl.up == nil && len(cl.pendingUp) > 0) || cl.backlogged() {
		// Stopped by the budget, waiting for the upstream connection, or for the upstream to
		// take the requests already written: frames wait.
		cl.settle()
		return cl.checkBuffered(lim.MaxBufferedBytes)
	}
	for {
		if cl.up == nil && len(cl.pendingUp) > 0 {
			break // the upstream is being dialed: the next requests wait for it
		}
		if cl.inFrame.want == 0 && cl.backlogged() {
			break // the next request waits until the upstream has taken what was written
		}
		if cl.inFrame.want > 0 {
			had := len(cl.inFrame.buf)
			whole, err := cl.inFrame.fill(cl.c)
			if err != nil {
				return cl.fail("client", err)
			}
			if len(cl.inFrame.buf) > had {
				cl.active()
			}
			if !whole {
				break
			}
			used, err := cl.sess.HandleClient(cl.inFrame.buf)
			if err != nil {
				cl.noteCut(err)
				return cl.fail("client", err)
			}
			if used == 0 {
				break // paused: the frame waits here until the session resumes
			}
			// A streamed frame is finished now, or waits in the session's copy for its
			// asynchronous step (FinishStream).
			cl.stream.reading = false
			if cl.directBuf != nil && cl.inFrame.holds(cl.directBuf) {
				cl.inFrame.lend() // its rest is still to be written: flushDirect gives it back
			} else {
				cl.inFrame.release()
			}
			continue // gnet's buffer may hold the start of the next frame
		}
		n := cl.c.InboundBuffered()
		if n < 4 {
			break
		}
		p, err := cl.c.Peek(4)
		if err != nil {
			return cl.fail("client", err)
		}
		want, err := cl.sess.FrameSize(p)
		if err != nil {
			return cl.fail("client", err)
		}
		if n < want {
			if want < largeFrame {
				break
			}
			streamed := cl.startStream(cl.c, want)
			cl.inFrame.tight = streamed && cl.stream.compact
			cl.inFrame.start(cl.c, want, false)
			if streamed {
				cl.inFrame.step, cl.inFrame.onRead = streamStep, cl.streamOut
				if err := cl.streamOut(); err != nil {
					return cl.fail("upstream", err)
				}
			}
			continue
		}
		buf, _ := cl.c.Peek(-1)
		used, err := cl.sess.HandleClient(buf)
		discard(cl.c, used)
		if err != nil {
			return cl.fail("client", err)
		}
		if used == 0 {
			break
		}
		cl.active()
	}
	if a := cl.checkBuffered(lim.MaxBufferedBytes); a != gnet.None {
		return a
	}
	cl.t.srv.bufferMark(cl.c.OutboundBuffered())
	cl.settle()
	return gnet.None
}

// active notes that a request (or part of one) arrived or an answer was passed on, for the
// idle timeout.
func (cl *gnetClient) active() { cl.lastActive.Store(time.Now().UnixNano()) }

func (cl *gnetClient) checkBuffered(max int) gnet.Action {
	if n := cl.c.InboundBuffered(); n > max {
		return cl.fail("client", errBufferCap)
	}
	return gnet.None
}

func (cl *gnetClient) upstreamTraffic() gnet.Action {
	if cl.closed {
		// The client closed in the same round of events: its session is gone, and gnet closes
		// this connection after the round.
		return gnet.Close
	}
	for {
		if cl.answer.on {
			if !cl.passAnswer() {
				if cl.closed || cl.side != "" {
					return gnet.Close // failed, or the client is gone
				}
				break // the rest has not arrived, or the budget stopped reading
			}
			continue // gnet's buffer may hold the start of the next frame
		}
		if cl.upFrame.want > 0 {
			whole, err := cl.upFrame.fill(cl.up)
			if err != nil {
				cl.failClient("upstream", err)
				return gnet.Close
			}
			if !whole {
				break
			}
			_, err = cl.sess.HandleUpstream(cl.upFrame.buf)
			cl.upFrame.release()
			cl.active()
			if err != nil {
				cl.failClient("upstream", err)
				return gnet.Close
			}
			cl.t.srv.bufferMark(cl.c.OutboundBuffered())
			continue // gnet's buffer may hold the start of the next frame
		}
		// Between frames: a connection over its share of the budget takes no more answers.
		if cl.settle(); cl.paused {
			return gnet.None
		}
		n := cl.up.InboundBuffered()
		if n < 4 {
			break
		}
		p, err := cl.up.Peek(4)
		if err != nil {
			cl.failClient("upstream", err)
			return gnet.Close
		}
		want, err := cl.sess.UpstreamFrameSize(p)
		if err != nil {
			cl.failClient("upstream", err)
			return gnet.Close
		}
		if n < want {
			if want < largeFrame || n < answerPrefix {
				break
			}
			if !cl.startAnswer(want) {
				cl.upFrame.start(cl.up, want, true)
			}
			continue
		}
		buf, _ := cl.up.Peek(-1)
		used, err := cl.sess.HandleUpstream(buf)
		discard(cl.up, used)
		if err != nil {
			cl.failClient("upstream", err)
			return gnet.Close
		}
		cl.t.srv.bufferMark(cl.c.OutboundBuffered())
		if used == 0 {
			break
		}
		cl.active()
	}
	cl.settle()
	return gnet.None
}

// settle counts what the connection holds and stops or resumes its reading by the budget's
// rule. A frame being read from upstream is left out of the decision: it is finished however
// the budget stands, and stopping for it would wait for bytes only it can free.
func (cl *gnetClient) settle() {
	if cl.closed {
		return
	}
	// Every tenth tick wakes a connection that holds bytes, so an unused spare goes in time.
	cutoff := time.Now().Add(-spareIdle)
	cl.inFrame.dropSpare(cutoff)
	cl.upFrame.dropSpare(cutoff)
	out := cl.c.OutboundBuffered() + cl.sess.Held()
	in := cl.c.InboundBuffered() + cap(cl.inFrame.buf) + len(cl.pendingUp)
	if cl.inFrame.want == 0 {
		in += cap(cl.inFrame.spare)
	}
	reading := cap(cl.upFrame.buf)
	if cl.upFrame.want == 0 {
		in += cap(cl.upFrame.spare) // kept for the next answers: held, but no answer to wait for
	}
	if cl.up != nil {
		reading += cl.up.InboundBuffered()
		in += cl.up.OutboundBuffered() + cl.directBytes
	}
	cl.acct.set(int64(out+reading), int64(in))
	over := cl.acct.over(int64(reading))
	switch {
	case over && !cl.paused:
		cl.paused = true
		cl.acct.pause()
		cl.t.mu.Lock()
		cl.t.paused[cl] = struct{}{}
		cl.t.mu.Unlock()
		fallthrough
	case over:
		// Again at every callback: gnet turns reading on when it writes or drains output.
		cl.stopReading(cl.c)
		if cl.up != nil {
			cl.stopReading(cl.up)
		}
	case cl.paused:
		cl.paused = false
		cl.acct.unpause()
		cl.t.mu.Lock()
		delete(cl.t.paused, cl)
		cl.t.mu.Unlock()
		cl.startReading(cl.c)
		_ = cl.c.Wake(nil)
		if cl.up != nil {
			cl.startReading(cl.up)
			_ = cl.up.Wake(nil) // what gnet buffered meanwhile is not announced again
		}
	}
	// The upstream's backlog, or what the session has not taken yet, holds the client alone:
	// answers must go on arriving. An answer read, a finished step or the next tick (the
	// broker may send no answers: acks=0) looks again.
	switch hold := cl.backlogged() || cl.c.InboundBuffered() > unconsumedBacklog; {
	case hold:
		if !cl.holding {
			cl.t.srv.metrics.backlogHolds.Inc()
		}
		cl.holding = true
		cl.stopReading(cl.c) // again at every callback, as above
		cl.t.mu.Lock()
		cl.t.waiting[cl] = struct{}{}
		cl.t.mu.Unlock()
	case cl.holding:
		cl.holding = false
		if !cl.paused {
			cl.startReading(cl.c)
			_ = cl.c.Wake(nil)
		}
	}
}

func (cl *gnetClient) stopReading(c gnet.Conn) {
	if err := setReading(c, false); err != nil {
		cl.t.srv.pollFailed(err)
	}
}

func (cl *gnetClient) startReading(c gnet.Conn) {
	if err := setReading(c, true); err != nil {
		cl.t.srv.pollFailed(err)
	}
}

func (cl *gnetClient) fail(side string, err error) gnet.Action {
	cl.side, cl.err = side, err
	return gnet.Close
}

func (cl *gnetClient) failClient(side string, err error) {
	cl.side, cl.err = side, err
	_ = cl.c.Close()
}

// session.Conn

// Close is called from a Post callback, on the connection's event loop.
func (cl *gnetClient) Close(err error) {
	cl.noteCut(err)
	cl.failClient("client", err)
}

func (cl *gnetClient) WriteClient(b []byte) {
	if cl.answer.on {
		cl.failClient("client", errAnswerOrder)
		return
	}
	if !cl.closed {
		_, _ = cl.c.Write(b)
	}
}

// WriteClientv sends an answer written as slices with one writev; gnet copies what the socket
// did not take.
func (cl *gnetClient) WriteClientv(bs [][]byte) {
	if cl.answer.on {
		cl.failClient("client", errAnswerOrder)
		return
	}
	if !cl.closed {
		_, _ = cl.c.Writev(bs)
	}
}

// WriteUpstream sends to the upstream broker, dialing it at the first request.
func (cl *gnetClient) WriteUpstream(b []byte) {
	if cl.stream.on {
		cl.failClient("client", errStreamOrder)
		return
	}
	if cl.up != nil {
		switch {
		case cl.closed:
		case len(cl.direct) > 0:
			// Behind a request still being written around gnet: queued after it, in order.
			cl.direct = append(cl.direct, bytes.Clone(b))
			cl.directBytes += len(b)
		case cl.t.watch != nil && cl.up.OutboundBuffered() == 0 && cl.inFrame.holds(b):
			cl.writeDirect(b)
		default:
			_, _ = cl.up.Write(b)
		}
		return
	}
	if cl.closed {
		return
	}
	cl.pendingUp = append(cl.pendingUp, b...)
	if !cl.dialing {
		cl.dialing = true
		go cl.t.dial(cl, cl.c)
	}
}

// writeDirect writes a request that lies in the client's frame buffer to the upstream's
// socket itself. What the socket does not take stays where it is, the buffer lent until
// flushDirect has written it: gnet would copy it into its outbound buffer, a copy as large as
// the rest of the request (see writeWatch).
func (cl *gnetClient) writeDirect(b []byte) {
	n, err := writeFD(cl.up.Fd(), b)
	if err != nil {
		cl.failClient("upstream", fmt.Errorf("writing a request: %w", err))
		return
	}
	if n == len(b) {
		return
	}
	cl.direct = append(cl.direct, b[n:])
	cl.directBytes += len(b) - n
	cl.directBuf = cl.inFrame.buf
	cl.t.srv.metrics.directRests.Inc()
	cl.armWatch()
}

// armWatch asks the write watch for one report when the upstream's socket has room.
func (cl *gnetClient) armWatch() {
	if cl.watchID == 0 {
		cl.watchID = cl.t.watch.register(func() { cl.onLoop(cl.flushDirect) })
	}
	if err := cl.t.watch.arm(cl.up.Fd(), cl.watchID, cl.watchAdded); err != nil {
		cl.failClient("upstream", err)
		return
	}
	cl.watchAdded = true
}

// flushDirect writes on what the upstream's socket did not take, when the write watch says it
// has room; once all is written the frame buffer goes back and the client is read again.
func (cl *gnetClient) flushDirect() {
	if cl.up == nil {
		return
	}
	if err := cl.streamOut(); err != nil && !errors.Is(err, errStreamLag) {
		cl.failClient("upstream", err)
		return
	}
	for len(cl.direct) > 0 {
		b := cl.direct[0]
		n, err := writeFD(cl.up.Fd(), b)
		cl.directBytes -= n
		if err != nil {
			cl.failClient("upstream", fmt.Errorf("writing a request: %w", err))
			return
		}
		if n < len(b) {
			cl.direct[0] = b[n:]
			cl.armWatch()
			return
		}
		cl.direct[0] = nil
		cl.direct = cl.direct[1:]
	}
	cl.direct = nil
	if cl.directBuf != nil {
		cl.inFrame.giveBack(cl.directBuf)
		cl.directBuf = nil
	}
	cl.settle()
}

func (cl *gnetClient) ClientPending() int { return cl.c.OutboundBuffered() }

func (cl *gnetClient) Resume() { _ = cl.c.Wake(nil) }

// Post runs a session's finishing step on the loop; it passes an answer on or forwards a
// request.
func (cl *gnetClient) Post(fn func()) {
	cl.onLoop(func() {
		fn()
		cl.active()
		cl.settle()
	})
}

// onLoop runs fn on the connection's loop unless the connection closed.
func (cl *gnetClient) onLoop(fn func()) {
	_ = cl.c.EventLoop().Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
		if !cl.closed {
			fn()
		}
		return nil
	}))
}

func (cl *gnetClient) WaitClientDrain() {
	cl.t.srv.metrics.pausedTotal.Inc()
	cl.t.mu.Lock()
	cl.t.waiting[cl] = struct{}{}
	cl.t.mu.Unlock()
}

// discard drops n consumed bytes. gnet's Discard(0) drops everything buffered, so zero must
// not reach it.
func discard(c gnet.Conn, n int) {
	if n > 0 {
		_, _ = c.Discard(n)
	}
}
