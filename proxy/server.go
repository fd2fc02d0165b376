// Package proxy runs offsetgate's listeners: a bootstrap listener and one listener per
// destination broker, the transports that carry client connections (gnet event loops for
// plaintext, goroutines over net.Conn for TLS), the upstream connections, and the admin HTTP
// endpoint (metrics, health). Protocol handling lives in package session.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"crypto/tls"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"offsetgate/atoffset"
	"offsetgate/catalog"
	"offsetgate/moves"
	"offsetgate/rules"
	"offsetgate/session"
	"offsetgate/state"
	ogtls "offsetgate/tls"
	"offsetgate/view"
)

// Server is a running offsetgate proxy.
type Server struct {
	cfg     Config
	log     *zap.Logger
	metrics *metrics
	reg     *prometheus.Registry
	brokers *brokers
	lns     []*listener   // the named listeners, in configuration order
	upTLS   *ogtls.Client // nil: plaintext to the destination
	// source and srcTLS are the source cluster's brokers and TLS (nil: no source mode).
	source *brokers
	srcTLS *ogtls.Client
	// moves is the groups' live moves as source connections see them (nil without a source).
	moves session.Moves

	policy  atomic.Pointer[rules.Policy]
	catalog *catalog.Catalog
	writer  *atoffset.Writer
	view    *view.View

	gnet       *gnetTransport
	draining   atomic.Bool
	inFlight   atomic.Int64
	bufHigh    atomic.Int64
	budget     *budget
	climits    connLimits
	pollWarned atomic.Bool
	cut        *cutClients // clients whose streamed request was cut (stream.go)

	mu         sync.Mutex
	listeners  map[brokerListener]net.Listener // broker listeners, by listener and node id
	conns      map[*netClient]struct{}         // goroutine-transport connections, closed at shutdown
	bootstraps []net.Listener                  // bootstrap listeners the event loops do not own
	wg         sync.WaitGroup                  // accept loops and goroutine-transport connections
	ready      chan struct{}                   // closed once listeners are up
}

// listener is one named listener at run time.
type listener struct {
	cfg   ListenerConfig
	index int
	tls   *ogtls.Server // nil: plaintext
	addrs session.Addresses
	// srcAddrs, on a listener that fronts the source, is the address map of its source
	// connections; nil on the others.
	srcAddrs session.Addresses
}

// brokerListener names the listener that stands for a destination broker on a listener.
type brokerListener struct {
	listener int
	node     int32
}

// New checks cfg and prepares a server; Run starts it.
func New(cfg Config, log *zap.Logger) (*Server, error) {
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = zap.NewNop()
	}
	s := &Server{cfg: cfg, log: log, reg: prometheus.NewRegistry(), listeners: map[brokerListener]net.Listener{}, conns: map[*netClient]struct{}{}, ready: make(chan struct{}), cut: newCutClients()}
	s.metrics = newMetrics(s.reg, func() float64 { return float64(s.inFlight.Load()) })
	s.budget = newBudget(cfg.Limits.MaxHeldBytes, s.metrics.budgetPauses)
	registerBudget(s.reg, s.budget)
	s.reg.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	onErr := func(err error) {
		log.Error("certificate reload failed; the previous certificate stays in use", zap.Error(err))
	}
	if cfg.TLS.Upstream.Enabled {
		t, err := ogtls.NewClient(cfg.TLS.Upstream, onErr)
		if err != nil {
			return nil, err
		}
		s.upTLS = t
	}
	opts, err := s.ownClientOpts()
	if err != nil {
		return nil, err
	}
	s.brokers = newBrokers(&s.cfg, "destination", cfg.Bootstrap, log.Named("brokers"), opts)
	if cfg.Source != nil {
		if cfg.Source.TLS.Enabled {
			t, err := ogtls.NewClient(cfg.Source.TLS, onErr)
			if err != nil {
				return nil, err
			}
			s.srcTLS = t
		}
		sopts, err := s.sourceClientOpts()
		if err != nil {
			return nil, err
		}
		s.source = newBrokers(&s.cfg, "source", cfg.Source.Bootstrap, log.Named("source-brokers"), sopts)
	}
	for i, lc := range cfg.ListenerList() {
		ln := &listener{cfg: lc, index: i, addrs: listenerAddresses{s.brokers, lc}}
		if s.source != nil && lc.Upstream == UpstreamSource {
			ln.srcAddrs = sourceAddresses{s.source, lc, cfg.Source.NodeIDOffset}
		}
		if lc.TLS != nil {
			t, err := ogtls.NewServer(*lc.TLS, onErr)
			if err != nil {
				return nil, fmt.Errorf("listener %s: %w", lc.Name, err)
			}
			ln.tls = t
		}
		s.lns = append(s.lns, ln)
	}
	pol, err := rules.NewPolicy(cfg.Mirroring)
	if err != nil {
		return nil, err
	}
	s.policy.Store(pol)
	if s.lendsIdentity() && s.cfg.Identities.AllowSharedUpstreamIdentity {
		log.Warn("identities.allow_shared_upstream_identity is on: clients that do not log in with SASL act on the destination with offsetgate's own certificate")
	}
	return s, nil
}

// Registry is the server's metrics registry.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// Ready is closed once the listeners accept connections.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// BootstrapAddr is the (first) bootstrap listener's address.
func (s *Server) BootstrapAddr() string { return s.cfg.BootstrapListen() }

// ListenerAddr is the bootstrap address of the listener named name, "" when there is none.
func (s *Server) ListenerAddr(name string) string {
	for _, ln := range s.lns {
		if ln.cfg.Name == name {
			return ln.cfg.Listen
		}
	}
	return ""
}

// toSource reports whether a connection to node on listener ln goes to the source: a source
// broker's raised id, or the bootstrap of a listener that fronts the source.
func (s *Server) toSource(ln *listener, node int32) bool {
	if ln.srcAddrs == nil {
		return false
	}
	return node < 0 || node >= s.cfg.Source.NodeIDOffset
}

func (s *Server) sessionConfig(log *zap.Logger, mapped bool, ln *listener, node int32) session.Config {
	if s.toSource(ln, node) {
		// The mirror rules judge the destination only: a source connection is a direct
		// client's, with node ids and addresses translated (session/source.go).
		return session.Config{
			Admit:           s.admit(false),
			NoSASL:          !ln.cfg.SASL(),
			OnIdentity:      s.logIdentity(log),
			MaxFrame:        s.cfg.Limits.MaxFrameBytes,
			MaxInFlight:     s.cfg.Limits.MaxInFlight,
			ClientHighWater: s.cfg.Limits.ClientHighWaterBytes,
			Addresses:       ln.srcAddrs,
			NodeShift:       s.cfg.Source.NodeIDOffset,
			CarryLogins:     s.cfg.Source.CarryLogins,
			SourceFetchWait: max(s.cfg.Source.FetchMaxWait, 0),
			Moves:           s.moves,
			Observer:        observer{s.metrics},
			Log:             log,
			Draining:        s.draining.Load,
			InFlight:        &s.inFlight,
			Policy:          s.policy.Load,
		}
	}
	return session.Config{
		Admit:            s.admit(mapped),
		UpstreamLoggedIn: mapped,
		NoSASL:           !ln.cfg.SASL(),
		OnIdentity:       s.logIdentity(log),
		MaxFrame:         s.cfg.Limits.MaxFrameBytes,
		MaxInFlight:      s.cfg.Limits.MaxInFlight,
		ClientHighWater:  s.cfg.Limits.ClientHighWaterBytes,
		Addresses:        ln.addrs,
		Observer:         observer{s.metrics},
		Log:              log,
		Draining:         s.draining.Load,
		InFlight:         &s.inFlight,
		Policy:           s.policy.Load,
		Catalog:          s.sessionCatalog(),
		Mirror:           s.sessionMirror(),
		View:             s.sessionView(),
	}
}

// Run serves until ctx ends, then drains in-flight requests (up to limits.drain_timeout) and
// stops. It returns an error when a listener cannot start.
func (s *Server) Run(ctx context.Context) error {
	runCtx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var admin *http.Server
	if s.cfg.Admin != "" {
		l, err := net.Listen("tcp", s.cfg.Admin)
		if err != nil {
			return fmt.Errorf("admin listener %s: %w", s.cfg.Admin, err)
		}
		admin = &http.Server{Handler: s.adminHandler(), ReadHeaderTimeout: 5 * time.Second}
		s.wg.Add(1)
		go func() { defer s.wg.Done(); _ = admin.Serve(l) }()
	}

	// offsetgate's state in the destination first: no client is served before offsetgate
	// knows its mirror topics.
	opts, err := s.ownClientOpts()
	if err != nil {
		return err
	}
	instance := s.cfg.InstanceID
	if instance == "" {
		host, _ := os.Hostname()
		instance = host + "/" + s.cfg.BootstrapListen()
	}
	st, err := state.Open(ctx, runCtx, state.Config{ClientOpts: append(opts, kgo.SeedBrokers(s.cfg.Bootstrap...)), Instance: instance,
		MaxFill: s.cfg.MaxFill, Align: s.cfg.AlignMax, SnapshotEvery: s.cfg.SnapshotEvery, DataLanes: s.cfg.DataLanes, LedgerLeaderAcks: s.cfg.LedgerAcks == "leader", ViewMemory: viewMemory(s.cfg.ViewMemoryMB), Lease: s.cfg.OwnershipLease, Dial: s.dialOwn, BeforeAppend: s.cfg.BeforeLedgerAppend, Metrics: s.reg, Log: s.log})
	if err != nil {
		return fmt.Errorf("destination %v: %w", s.cfg.Bootstrap, err)
	}
	defer st.Close()
	defer cancel() // st.Close waits for what runs until runCtx ends
	s.catalog, s.view, s.writer = st.Catalog, st.View, st.Writer
	if s.source != nil {
		stop, err := s.startMoves(runCtx, st)
		if err != nil {
			return err
		}
		defer stop()
	}
	if s.cfg.Path != "" {
		s.wg.Add(1)
		w := newConfigWatcher(&s.cfg, s.log, func(p *rules.Policy) { s.policy.Store(p) })
		go func() { defer s.wg.Done(); s.watchConfig(runCtx, w) }()
	}
	if s.cfg.Limits.ConnectionsMaxIdle > 0 {
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.closeIdle(runCtx) }()
	}
	rel := newReleaser(s.budget.peakSince, s.metrics.memoryReleases)
	s.wg.Add(1)
	go func() { defer s.wg.Done(); rel.run(runCtx) }()

	errc := make(chan error, 1)
	// The event loops own the first listener's bootstrap address; every other bootstrap
	// listener (and every one on the goroutine transport) is a Go listener whose connections
	// go to the transport with their listener.
	own := 0
	if s.cfg.Transport == "gnet" {
		s.gnet = newGnetTransport(s)
		first := s.lns[0].cfg.Listen
		go func() { errc <- s.gnet.run(first) }()
		select {
		case <-s.gnet.started:
		case err := <-errc:
			s.gnet.closeWatch()
			return fmt.Errorf("bootstrap listener %s (%s): %w", first, s.lns[0].cfg.Name, err)
		}
		own = 1
	}
	for _, ln := range s.lns[own:] {
		l, err := net.Listen("tcp", ln.cfg.Listen)
		if err != nil {
			s.shutdown(admin)
			return fmt.Errorf("bootstrap listener %s (%s): %w", ln.cfg.Listen, ln.cfg.Name, err)
		}
		s.mu.Lock()
		s.bootstraps = append(s.bootstraps, l)
		s.mu.Unlock()
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.accept(l, ln, -1) }()
	}

	// Learn the destination's brokers and keep their listeners up.
	s.wg.Add(1)
	go func() { defer s.wg.Done(); s.refreshLoop(runCtx, s.brokers) }()
	if s.source != nil {
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.refreshLoop(runCtx, s.source) }()
	}
	for _, ln := range s.lns {
		s.log.Info("offsetgate listening", zap.String("listener", ln.cfg.Name), zap.String("bootstrap", ln.cfg.Listen),
			zap.String("advertise", ln.cfg.AdvertiseHost()), zap.String("security_protocol", ln.cfg.SecurityProtocol),
			zap.Strings("destination", s.cfg.Bootstrap), zap.String("transport", s.cfg.Transport))
	}
	close(s.ready)

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	s.shutdown(admin)
	cancel()
	s.wg.Wait()
	return runErr
}

// shutdown stops taking connections and requests, waits for in-flight requests, and closes.
func (s *Server) shutdown(admin *http.Server) {
	s.draining.Store(true)
	s.mu.Lock()
	for _, l := range s.listeners {
		l.Close()
	}
	for _, l := range s.bootstraps {
		l.Close()
	}
	s.mu.Unlock()
	deadline := time.Now().Add(s.cfg.Limits.DrainTimeout)
	for s.inFlight.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := s.inFlight.Load(); n > 0 {
		s.log.Warn("drain timeout: closing with requests in flight", zap.Int64("in_flight", n))
	} else {
		s.log.Info("drained: no request in flight")
	}
	if s.gnet != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = s.gnet.stop(ctx)
		cancel()
	}
	s.mu.Lock()
	conns := make([]*netClient, 0, len(s.conns))
	for nc := range s.conns {
		conns = append(conns, nc)
	}
	s.mu.Unlock()
	for _, nc := range conns {
		nc.close("server", errShutdown)
	}
	if admin != nil {
		_ = admin.Close()
	}
}

// sessionMirror is the produce-at-offset path as sessions see it.
func (s *Server) sessionMirror() session.Mirror {
	if s.writer == nil {
		return nil
	}
	return mirrorAdapter{s.writer}
}

// sessionView is the source view as sessions see it.
func (s *Server) sessionView() session.View {
	if s.view == nil {
		return nil
	}
	return s.view
}

type mirrorAdapter struct{ w *atoffset.Writer }

func (a mirrorAdapter) Write(ctx context.Context, t catalog.Topic, p int32, records []byte, from int64, follows bool, queued func()) (int16, string, int64) {
	r := a.w.Write(ctx, t, p, records, from, follows, queued)
	return r.Code, r.Msg, r.BaseOffset
}

// sessionCatalog is the catalog as sessions see it (nil until loaded).
func (s *Server) sessionCatalog() session.Catalog {
	if s.catalog == nil {
		return nil
	}
	return s.catalog
}

// Policy is the mirroring rules in force.
func (s *Server) Policy() *rules.Policy { return s.policy.Load() }

// Catalog is the server's catalog of topic ids and mirror marks (nil before Run loads it).
func (s *Server) Catalog() *catalog.Catalog { return s.catalog }

// refreshLoop keeps a cluster's brokers and their listeners current.
func (s *Server) refreshLoop(ctx context.Context, b *brokers) {
	delay := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
			if err := b.refresh(ctx); err != nil {
				s.log.Warn("metadata refresh failed", zap.String("cluster", b.cluster), zap.Error(err))
				delay = 2 * time.Second
			} else {
				delay = 30 * time.Second
			}
		case <-b.seen:
		}
		s.ensureListeners()
	}
}

// ensureListeners opens, on every listener, a listener for every known destination broker
// that has none, and on every source listener one for every known source broker (at its
// raised node id).
func (s *Server) ensureListeners() {
	for _, node := range s.brokers.nodes() {
		if s.source != nil && node >= s.cfg.Source.NodeIDOffset {
			s.log.Error("a destination node id is in the range of the source's presented ids: raise source.node_id_offset", zap.Int32("node", node))
			continue
		}
		s.ensureBrokerListeners(node, false)
	}
	if s.source != nil {
		for _, node := range s.source.nodes() {
			s.ensureBrokerListeners(node+s.cfg.Source.NodeIDOffset, true)
		}
	}
}

// ensureBrokerListeners opens the listeners that stand for one presented node id (on source
// listeners only, for a source broker).
func (s *Server) ensureBrokerListeners(node int32, source bool) {
	cluster := "destination"
	if source {
		cluster = "source"
	}
	for _, ln := range s.lns {
		if source && ln.srcAddrs == nil {
			continue
		}
		k := brokerListener{ln.index, node}
		s.mu.Lock()
		_, ok := s.listeners[k]
		s.mu.Unlock()
		if ok || s.draining.Load() {
			continue
		}
		port := ln.cfg.BrokerPort(node)
		if port > 65535 {
			s.log.Error("the listener port of a broker is beyond 65535: pin it with broker_ports or lower source.node_id_offset",
				zap.String("listener", ln.cfg.Name), zap.String("cluster", cluster), zap.Int32("node", node), zap.Int("port", port))
			continue
		}
		addr := net.JoinHostPort(ln.cfg.ListenHost(), strconv.Itoa(port))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			s.log.Error("cannot open the listener for a broker", zap.String("listener", ln.cfg.Name), zap.String("cluster", cluster), zap.Int32("node", node),
				zap.String("addr", addr), zap.Error(err))
			continue
		}
		s.mu.Lock()
		s.listeners[k] = l
		s.mu.Unlock()
		s.log.Info("broker listener up", zap.String("listener", ln.cfg.Name), zap.String("cluster", cluster), zap.Int32("node", node), zap.String("addr", addr))
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.accept(l, ln, node) }()
	}
}

// setSendBuffer sizes a socket's kernel send buffer (see Limits.SocketSendBytes).
func setSendBuffer(c net.Conn, n int) {
	if tc, ok := c.(*net.TCPConn); ok && n > 0 {
		_ = tc.SetWriteBuffer(n)
	}
}

// accept takes connections from a Go listener and hands them to the transport.
func (s *Server) accept(l net.Listener, ln *listener, node int32) {
	for {
		c, err := l.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				s.log.Warn("accept failed", zap.Error(err))
				time.Sleep(50 * time.Millisecond)
				continue
			}
			return
		}
		if s.draining.Load() {
			c.Close()
			continue
		}
		setSendBuffer(c, s.cfg.Limits.SocketSendBytes)
		if s.gnet != nil {
			if err := s.gnet.enroll(c, ln, node); err != nil {
				s.log.Warn("cannot hand a connection to the event loops", zap.Error(err))
				c.Close()
			}
			continue
		}
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.serveNet(c, ln, node) }()
	}
}

// dialUpstream connects to the broker a listener stands for (node -1: a bootstrap broker,
// trying each in turn). It blocks: never call it on an event loop.
func (s *Server) dialUpstream(ctx context.Context, ln *listener, node int32) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*s.cfg.Limits.DialTimeout)
	defer cancel()
	b, upTLS, cluster := s.brokers, s.upTLS, "destination"
	if s.toSource(ln, node) {
		b, upTLS, cluster = s.source, s.srcTLS, "source"
		if node >= 0 {
			node -= s.cfg.Source.NodeIDOffset
		}
	}
	attempts := 1
	if node < 0 {
		attempts = len(b.bootstrap)
	}
	var last error
	for i := 0; i < attempts; i++ {
		addr, err := b.resolve(ctx, node, i)
		if err != nil {
			last = err
			continue
		}
		d := net.Dialer{Timeout: s.cfg.Limits.DialTimeout}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetNoDelay(true)
				setSendBuffer(tc, s.cfg.Limits.SocketSendBytes)
			}
			if upTLS == nil {
				s.metrics.upstreamDials.Inc()
				return c, nil
			}
			host, _, _ := net.SplitHostPort(addr)
			tc := tls.Client(c, upTLS.Config(host))
			if err = tc.HandshakeContext(ctx); err == nil {
				s.metrics.upstreamDials.Inc()
				return tc, nil
			}
			c.Close()
			err = fmt.Errorf("TLS to %s broker %s: %w", cluster, addr, err)
		}
		last = err
	}
	s.metrics.upstreamErrors.Inc()
	return nil, last
}

func (s *Server) connOpened() {
	s.metrics.connsOpen.Inc()
	s.metrics.connsTotal.Inc()
}

// errShutdown closes connections when offsetgate stops.
var errShutdown = errors.New("offsetgate is shutting down")

// errTLSHandshake marks a failed client TLS handshake.
var errTLSHandshake = errors.New("TLS handshake failed")

// errBufferCap closes a connection whose unconsumed input exceeds limits.max_buffered_bytes.
var errBufferCap = errors.New("unconsumed bytes exceed limits.max_buffered_bytes")

// closeKind labels why a connection ended, for the metric and the log level.
func closeKind(side string, err error) string {
	switch {
	case errors.Is(err, session.ErrFrame):
		return "protocol_error"
	case errors.Is(err, errBufferCap):
		return "limit"
	case errors.Is(err, errIdle):
		return "idle"
	case errors.Is(err, errShutdown):
		return "shutdown"
	case errors.Is(err, errTLSHandshake):
		return "tls"
	case errors.Is(err, session.ErrForbidden):
		return "forbidden"
	case errors.Is(err, session.ErrUndecodable):
		return "undecodable"
	case errors.Is(err, session.ErrUnjudged):
		return "unjudged"
	case errors.Is(err, session.ErrLogin):
		return "authentication"
	case side == "upstream":
		return "upstream"
	case err == nil, errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "normal"
	default:
		return "other"
	}
}

// connClosed logs a connection's end once and counts it. side says which end failed first
// ("client" or "upstream").
func (s *Server) connClosed(log *zap.Logger, side string, err error) {
	s.metrics.connsOpen.Dec()
	kind := closeKind(side, err)
	s.metrics.connsClosed.WithLabelValues(kind).Inc()
	if kind == "normal" {
		log.Debug("connection closed", zap.String("by", side))
		return
	}
	log.Info("connection closed", zap.String("kind", kind), zap.String("by", side), zap.Error(err))
}

// bufferMark records a per-connection buffered byte count for the high-water gauge.
func (s *Server) bufferMark(n int) {
	for {
		cur := s.bufHigh.Load()
		if int64(n) <= cur {
			return
		}
		if s.bufHigh.CompareAndSwap(cur, int64(n)) {
			s.metrics.bufferHigh.Set(float64(n))
			return
		}
	}
}

func (s *Server) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if s.draining.Load() {
			http.Error(w, "draining", http.StatusServiceUnavailable)
			return
		}
		if !s.brokers.isReady() {
			http.Error(w, "destination cluster not reached yet", http.StatusServiceUnavailable)
			return
		}
		if s.source != nil && !s.source.isReady() {
			http.Error(w, "source cluster not reached yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	if s.cfg.AdminPprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// viewMemory is the source view's page budget in bytes for view_memory_mb (0: the default;
// -1: unbounded).
func viewMemory(mb int64) int64 {
	if mb <= 0 {
		return mb
	}
	return mb << 20
}

// startMoves runs the driver of the groups' live moves (package moves) and gives source
// connections the moves; stop waits for the driver and closes its clients.
func (s *Server) startMoves(ctx context.Context, st *state.State) (stop func(), err error) {
	sopts, err := s.sourceClientOpts()
	if err != nil {
		return nil, err
	}
	src, err := kgo.NewClient(append(sopts, kgo.SeedBrokers(s.cfg.Source.Bootstrap...), kgo.ClientID("offsetgate-moves"))...)
	if err != nil {
		return nil, fmt.Errorf("source %v: %w", s.cfg.Source.Bootstrap, err)
	}
	dopts, err := s.ownClientOpts()
	if err != nil {
		src.Close()
		return nil, err
	}
	dest, err := kgo.NewClient(append(dopts, kgo.SeedBrokers(s.cfg.Bootstrap...), kgo.ClientID("offsetgate-moves"))...)
	if err != nil {
		src.Close()
		return nil, fmt.Errorf("destination %v: %w", s.cfg.Bootstrap, err)
	}
	mcfg := &moves.Config{Catalog: st.Catalog, View: st.View, Source: src, Dest: dest, Dial: s.dialOwn,
		Metrics: moves.RegisterMetrics(s.reg, st.Catalog), Log: s.log.Named("moves")}
	s.moves = sessionMoves{st.Catalog, mcfg}
	d := moves.New(*mcfg)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	return func() {
		cancel()
		<-done
		src.Close()
		dest.Close()
	}, nil
}

// sessionMoves is session.Moves: the catalog's moves, and carriers of moved groups' requests.
type sessionMoves struct {
	*catalog.Catalog
	cfg *moves.Config
}

func (m sessionMoves) Carrier() session.Carrier { return moves.NewCarrier(m.cfg) }
