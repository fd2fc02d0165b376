package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"offsetgate/atoffset"
	"offsetgate/rules"
	ogtls "offsetgate/tls"
)

// Config is offsetgate serve's configuration (YAML; see examples/offsetgate.yaml).
type Config struct {
	// Listeners are the named listeners (listeners.go). A configuration with one listener may
	// describe it with Listen, Advertise, BrokerPorts and TLS.Listener instead: it is the
	// listener named "default".
	Listeners []ListenerConfig `yaml:"listeners"`
	// Listen is the bootstrap listener, host:port. Broker node N gets port+1+N on the same host
	// unless BrokerPorts names a port for it.
	Listen string `yaml:"listen"`
	// Advertise is the host clients are told to connect to; default: Listen's host.
	Advertise string `yaml:"advertise"`
	// Bootstrap lists the destination cluster's brokers, host:port.
	Bootstrap []string `yaml:"bootstrap"`
	// BrokerPorts pins the listener port of a node id.
	BrokerPorts map[int32]int `yaml:"broker_ports"`
	// Admin is the listener for /metrics, /healthz and /readyz; empty turns it off.
	Admin string `yaml:"admin"`
	// AdminPprof adds Go's profiling endpoints (/debug/pprof/) to the admin listener.
	AdminPprof bool `yaml:"admin_pprof"`
	// Transport is "gnet" (event loops) or "goroutine" (goroutines per connection). Empty
	// picks gnet for plaintext on both sides and goroutines when TLS is on either side (gnet has
	// no TLS).
	Transport string `yaml:"transport"`
	// EventLoops is the number of gnet event loops; 0 means one per CPU.
	EventLoops int `yaml:"event_loops"`

	// Source, when set, is the source cluster, fronted by the listeners with `upstream:
	// source` (source mode: clients that still use the source go through offsetgate).
	Source *SourceConfig `yaml:"source"`

	TLS TLSConfig `yaml:"tls"`
	// UpstreamSASL is offsetgate's own login for the requests it makes itself (metadata).
	UpstreamSASL *SASLConfig      `yaml:"upstream_sasl"`
	Identities   IdentitiesConfig `yaml:"identities"`
	// Mirroring approves mirroring clients; it is re-read from Path when the file changes
	// (reload.go). Every other section is read at start only.
	Mirroring rules.MirroringConfig `yaml:"mirroring"`
	// InstanceID names this offsetgate for mirror-partition ownership; default: host name and
	// listen address (a restarted instance takes its partitions back at once).
	InstanceID string `yaml:"instance_id"`
	// MaxFill is the largest hole in source offsets filled with filler records; larger holes
	// start a new shift segment. Default 10000.
	MaxFill int64 `yaml:"max_fill"`
	// AlignMax is the most offsets filled when a mirror partition starts above the
	// destination's end (the source's log start, or a mirror started past it), so that the
	// destination's offsets are the source's and clients can one day read it directly; the
	// fillers are then deleted from the destination. A larger distance starts the mirror with a
	// shift (offsets differ on D; through offsetgate they are the source's either way).
	// Default 1000000; -1: never.
	AlignMax int64 `yaml:"align_max"`
	// SnapshotEvery is how many ledger entries of a mirror partition are appended between two
	// snapshots of its writer's state, so that a takeover (another instance, a restart) reads
	// the newest snapshot and the ledger after it instead of the whole ledger. Default 10000;
	// -1: never.
	SnapshotEvery int64 `yaml:"snapshot_every"`
	// DataLanes is how many connections to each destination broker carry produce-at-offset
	// data, a mirror partition always on the same one. Default 4: a partition's
	// confirmations (acks=all) then wait for replication beside other partitions' rather
	// than behind them; 1 puts every partition's data in the fewest requests. At most 16.
	DataLanes int `yaml:"data_lanes"`
	// LedgerAcks is how a mirror write's ledger append is acknowledged before its data go to
	// the destination: "all" (the default) waits for the append's replication; "leader" sends
	// the data once the ledger partition's leader has it and answers the write once both are
	// replicated, one replication round trip less per following write. A ledger leader that
	// fails before its follower has the entries then halts the partition, its data on the
	// destination beyond what the ledger accounts for (docs/operations.md, "ledger_acks").
	LedgerAcks string `yaml:"ledger_acks"`
	// ViewMemoryMB bounds, in MiB, the source view's index pages kept in memory (the source
	// header fields of every mirrored batch, which consumers' fetches are served with) beyond
	// the page each mirror partition is filling; the least recently used pages beyond it are
	// dropped and read back from the ledger when a consumer reaches them. Default 256; -1:
	// unbounded.
	ViewMemoryMB int64 `yaml:"view_memory_mb"`
	// OwnershipLease is how long this instance's claim on a mirror partition it writes holds
	// without renewal (renewed by writing); another instance is refused until it runs out.
	// Default 30s; at least 1s.
	OwnershipLease time.Duration `yaml:"ownership_lease"`
	// Dial, when set, replaces the dialer of offsetgate's own connections to the destination
	// (catalog, ledger, produce-at-offset writes): a seam for fault-injection tests, never
	// from YAML. Client connections' upstreams do not use it.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error) `yaml:"-"`
	// BeforeLedgerAppend, when set, runs after a produce-at-offset write of a mirror partition
	// is planned and before its ledger entries are appended: a seam for tests that pause an
	// instance exactly there, never from YAML.
	BeforeLedgerAppend func(topic string, partition int32) `yaml:"-"`
	// Path is the file the configuration came from (set by LoadConfig), watched for changes
	// to the mirroring section.
	Path string `yaml:"-"`

	Limits Limits    `yaml:"limits"`
	Log    LogConfig `yaml:"log"`
}

// SourceConfig is the source cluster as source listeners reach it.
type SourceConfig struct {
	// Bootstrap lists the source cluster's brokers, host:port.
	Bootstrap []string `yaml:"bootstrap"`
	// NodeIDOffset is added to the source's node ids as clients see them, so that they never
	// meet the destination's; a source broker's listener port is that of the raised id.
	// Default 10000.
	NodeIDOffset int32 `yaml:"node_id_offset"`
	// TLS towards the source's brokers.
	TLS ogtls.ClientConfig `yaml:"tls"`
	// SASL is offsetgate's own login on the source (its Metadata requests); a SASL listener
	// needs it, as it needs upstream_sasl for the destination.
	SASL *SASLConfig `yaml:"sasl"`
	// CarryLogins lets a SASL source listener carry promoted topics' requests to the
	// destination: its clients logged in to the source, which authorized them, and the
	// destination sees offsetgate's login instead. Without it those requests are refused
	// TOPIC_AUTHORIZATION_FAILED (a listener without SASL carries them: the source saw
	// offsetgate's connection, not the client's login, there too).
	CarryLogins bool `yaml:"carry_logins"`
	// FetchMaxWait bounds how long a consumer's Fetch waits at the source for records (its
	// max wait is lowered to it). A fetch waiting there when a topic is sealed for its
	// promotion waits on with nothing new to come, and only then is its consumer served by
	// the destination: franz-go's default wait, 5 s, was the longest pause of a consumer at
	// a promotion. Default 1s (the Java client and librdkafka ask 500 ms and are untouched);
	// a negative duration leaves every client's wait as it is.
	FetchMaxWait time.Duration `yaml:"fetch_max_wait"`
}

// DefaultSourceFetchMaxWait is source.fetch_max_wait's default.
const DefaultSourceFetchMaxWait = time.Second

// DefaultSourceNodeIDOffset is source.node_id_offset's default.
const DefaultSourceNodeIDOffset = 10000

// TLSConfig turns TLS on for clients of the single listener (Listener; with `listeners`, each
// has its own) and towards the destination (Upstream).
type TLSConfig struct {
	Listener *ogtls.ServerConfig `yaml:"listener"`
	Upstream ogtls.ClientConfig  `yaml:"upstream"`
}

// Limits bound what one connection, and all of them together, may hold.
type Limits struct {
	MaxFrameBytes        int `yaml:"max_frame_bytes"`
	MaxInFlight          int `yaml:"max_in_flight"`
	ClientHighWaterBytes int `yaml:"client_high_water_bytes"`
	// MaxBufferedBytes closes a connection whose unconsumed input exceeds it.
	MaxBufferedBytes int `yaml:"max_buffered_bytes"`
	// MaxHeldBytes is the process-wide budget of bytes held for clients: responses waiting to
	// be sent or waiting in order, answers read from upstream and not yet handed over, requests
	// not yet consumed or sent. A connection over its share stops reading its upstream and its
	// client until its client has read enough (see budget). 0 means 256 MiB, -1 no budget.
	MaxHeldBytes int64 `yaml:"max_held_bytes"`
	// ConnectionsMaxIdle closes a client connection that sent no request for this long and has
	// none in flight, like Kafka's connections.max.idle.ms. 0 means 10 minutes; a negative
	// duration ("-1s") never closes one.
	ConnectionsMaxIdle time.Duration `yaml:"connections_max_idle"`
	// MaxConnections and MaxConnectionsPerIP cap open client connections, in all and per
	// source address; a connection over either is closed at once. 0 means 50000 and 20000,
	// -1 no cap.
	MaxConnections      int           `yaml:"max_connections"`
	MaxConnectionsPerIP int           `yaml:"max_connections_per_ip"`
	DialTimeout         time.Duration `yaml:"dial_timeout"`
	// MemoryLimitBytes is the Go runtime's soft memory limit (GOMEMLIMIT); 0 means 1 GiB, -1
	// none. Buffers churn under load; the limit makes the collector return memory sooner.
	MemoryLimitBytes int64 `yaml:"memory_limit_bytes"`
	// GCPercent is the Go collector's target (GOGC): the heap may grow this many percent over
	// what the last collection found live before the next one runs. 0 means 25. offsetgate
	// allocates little per byte it moves (large frames go through kept buffers), so the peak
	// heap is mostly the target over buffers in use, and a low target costs little CPU: at 25
	// the peak RSS under a 16-partition load fell by a fifth, the pass-through CPU per GB within
	// the runs' spread (1.00-1.15x), a mirror topic's consumers 5-10% more (docs/benchmarks.md,
	// "Run 8"). The environment's GOGC, when set, wins.
	GCPercent    int           `yaml:"gc_percent"`
	DrainTimeout time.Duration `yaml:"drain_timeout"`
	// SocketSendBytes is the kernel send buffer (SO_SNDBUF) of client and upstream sockets;
	// 0 means 4 MiB, -1 the kernel's own sizing. A large Fetch answer or Produce request that
	// the socket takes in one write is not copied into the event loop's outbound buffer first;
	// the kernel caps the value at net.core.wmem_max.
	SocketSendBytes int `yaml:"socket_send_bytes"`
}

// LogConfig selects the log format and level.
type LogConfig struct {
	// Format is "json", "console" or "" (console on a terminal, JSON otherwise).
	Format string `yaml:"format"`
	Level  string `yaml:"level"`
}

// DefaultGCPercent is limits.gc_percent when it is not set.
const DefaultGCPercent = 25

// DefaultMaxHeldBytes is limits.max_held_bytes when it is not set.
const DefaultMaxHeldBytes = 256 << 20

// minHeldBytes is the smallest budget: four times what every connection may always hold.
const minHeldBytes = 4 * budgetFloor

// Defaults fills what was left empty.
func (c *Config) Defaults() {
	if c.Transport == "" {
		c.Transport = "gnet"
		if c.anyTLSListener() || c.TLS.Upstream.Enabled || (c.Source != nil && c.Source.TLS.Enabled) {
			c.Transport = "goroutine"
		}
	}
	l := &c.Limits
	if l.MaxFrameBytes == 0 {
		l.MaxFrameBytes = 100 << 20
	}
	if l.MaxInFlight == 0 {
		l.MaxInFlight = 256
	}
	if l.ClientHighWaterBytes == 0 {
		l.ClientHighWaterBytes = 8 << 20
	}
	if l.MaxBufferedBytes == 0 {
		l.MaxBufferedBytes = l.MaxFrameBytes + 1<<20
	}
	if l.MaxHeldBytes == 0 {
		l.MaxHeldBytes = DefaultMaxHeldBytes
	}
	if l.ConnectionsMaxIdle == 0 {
		l.ConnectionsMaxIdle = 10 * time.Minute
	}
	if l.MaxConnections == 0 {
		l.MaxConnections = 50000
	}
	if l.MaxConnectionsPerIP == 0 {
		l.MaxConnectionsPerIP = 20000
	}
	if l.DialTimeout == 0 {
		l.DialTimeout = 10 * time.Second
	}
	if l.MemoryLimitBytes == 0 {
		l.MemoryLimitBytes = 1 << 30
	}
	if l.GCPercent == 0 {
		l.GCPercent = DefaultGCPercent
	}
	if l.DrainTimeout == 0 {
		l.DrainTimeout = 15 * time.Second
	}
	if l.SocketSendBytes == 0 {
		l.SocketSendBytes = 4 << 20
	}
	if c.Log.Level == "" {
		c.Log.Level = "info"
	}
	if c.Source != nil && c.Source.NodeIDOffset == 0 {
		c.Source.NodeIDOffset = DefaultSourceNodeIDOffset
	}
	if c.Source != nil && c.Source.FetchMaxWait == 0 {
		c.Source.FetchMaxWait = DefaultSourceFetchMaxWait
	}
	if c.OwnershipLease == 0 {
		c.OwnershipLease = 30 * time.Second
	}
}

// Validate checks the configuration and names the bad key in its error.
func (c *Config) Validate() error {
	var errs []error
	bad := func(key, format string, a ...any) {
		errs = append(errs, fmt.Errorf("config key %q: %s", key, fmt.Sprintf(format, a...)))
	}
	errs = append(errs, c.validateListeners(bad)...)
	if len(c.Bootstrap) == 0 {
		bad("bootstrap", "required: at least one destination broker host:port")
	}
	for i, b := range c.Bootstrap {
		if _, _, err := net.SplitHostPort(b); err != nil {
			bad(fmt.Sprintf("bootstrap[%d]", i), "%v", err)
		}
	}
	if c.Admin != "" {
		if _, _, err := net.SplitHostPort(c.Admin); err != nil {
			bad("admin", "%v", err)
		}
	}
	switch c.Transport {
	case "gnet":
		if c.anyTLSListener() || c.TLS.Upstream.Enabled || (c.Source != nil && c.Source.TLS.Enabled) {
			bad("transport", "gnet carries plaintext only; TLS connections need the goroutine transport (leave transport empty)")
		}
	case "goroutine":
	default:
		bad("transport", "%q is not one of gnet, goroutine", c.Transport)
	}
	if err := c.TLS.Upstream.Validate("tls.upstream"); err != nil {
		errs = append(errs, err)
	}
	if c.UpstreamSASL != nil {
		if err := c.UpstreamSASL.validate("upstream_sasl"); err != nil {
			errs = append(errs, err)
		}
	}
	for i, m := range c.Identities.MTLSUpstream {
		key := fmt.Sprintf("identities.mtls_upstream[%d]", i)
		if (m.Subject == "") == (m.SAN == "") {
			bad(key, "give exactly one of subject, san")
		}
		if m.Subject != "" {
			if err := rules.CheckSubject(m.Subject); err != nil {
				bad(key+".subject", "can never match a certificate: %v", err)
			}
		}
		if m.SAN != "" {
			if err := rules.CheckSAN(m.SAN); err != nil {
				bad(key+".san", "can never match a certificate: %v", err)
			}
		}
		if err := m.SASL.validate(key + ".sasl"); err != nil {
			errs = append(errs, err)
		}
	}
	if len(c.Identities.MTLSUpstream) > 0 && !c.ClientCertificates() {
		bad("identities.mtls_upstream", "needs a listener with tls and client_auth request or require (tls.listener, or listeners[].tls)")
	}
	if len(c.Identities.MTLSUpstream) > 0 && !c.DestinationSASL() {
		bad("identities.mtls_upstream", "logs clients in to the destination with SASL, which needs a destination that takes SASL (upstream_sasl)")
	}
	errs = append(errs, c.validateSource(bad)...)
	errs = append(errs, c.validateMirroring()...)
	if c.EventLoops < 0 {
		bad("event_loops", "must be >= 0")
	}
	if c.SnapshotEvery < -1 {
		bad("snapshot_every", "must be -1 (never), 0 (the default, 10000) or a number of ledger entries")
	}
	if c.DataLanes < 0 || c.DataLanes > atoffset.MaxDataLanes {
		bad("data_lanes", "must be 0 (the default, %d) to %d connections per destination broker", atoffset.DefaultDataLanes, atoffset.MaxDataLanes)
	}
	switch c.LedgerAcks {
	case "", "all", "leader":
	default:
		bad("ledger_acks", "must be all (the default) or leader, not %q", c.LedgerAcks)
	}
	if c.ViewMemoryMB < -1 {
		bad("view_memory_mb", "must be -1 (unbounded), 0 (the default, 256) or a number of MiB")
	}
	if c.AlignMax < -1 {
		bad("align_max", "must be -1 (never align), 0 (the default, 1000000) or a number of offsets")
	}
	if c.OwnershipLease < time.Second {
		bad("ownership_lease", "must be at least 1s (the claim is renewed when less than half of it is left)")
	}
	l := c.Limits
	if l.MaxFrameBytes < 1024 {
		bad("limits.max_frame_bytes", "must be at least 1024")
	}
	if l.MaxInFlight < 1 {
		bad("limits.max_in_flight", "must be at least 1")
	}
	if l.ClientHighWaterBytes < 1 {
		bad("limits.client_high_water_bytes", "must be positive")
	}
	if l.MaxBufferedBytes < l.MaxFrameBytes {
		bad("limits.max_buffered_bytes", "must be at least limits.max_frame_bytes (%d)", l.MaxFrameBytes)
	}
	if l.MaxHeldBytes != -1 && l.MaxHeldBytes < minHeldBytes {
		bad("limits.max_held_bytes", "must be at least %d (4 MiB), or -1 for no budget", minHeldBytes)
	}
	if l.GCPercent < 1 {
		bad("limits.gc_percent", "must be a positive percentage (Go's GOGC; 0 means %d)", DefaultGCPercent)
	}
	if l.MaxConnections < -1 || l.MaxConnections == 0 {
		bad("limits.max_connections", "must be positive, or -1 for no cap")
	}
	if l.MaxConnectionsPerIP < -1 || l.MaxConnectionsPerIP == 0 {
		bad("limits.max_connections_per_ip", "must be positive, or -1 for no cap")
	}
	if l.SocketSendBytes < -1 {
		bad("limits.socket_send_bytes", "must be a byte count, or -1 for the kernel's own sizing")
	}
	switch c.Log.Format {
	case "", "json", "console":
	default:
		bad("log.format", "%q is not one of json, console", c.Log.Format)
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		bad("log.level", "%q is not one of debug, info, warn, error", c.Log.Level)
	}
	return errors.Join(errs...)
}

// ClientCertificates reports whether clients can prove a certificate: a TLS listener that asks
// for client certificates.
func (c *Config) ClientCertificates() bool {
	for _, l := range c.ListenerList() {
		if l.ClientCertificates() {
			return true
		}
	}
	return false
}

// DestinationSASL reports whether clients can log in with SASL: offsetgate's connections to
// the destination go to the listener its own requests use, and that listener takes SASL
// exactly when offsetgate logs in there itself (upstream_sasl). Without it, offsetgate's own
// requests work without a login, so the listener is not a SASL one and no client login can be
// accepted.
func (c *Config) DestinationSASL() bool { return c.UpstreamSASL != nil }

// validateMirroring checks the mirroring section, and that each rule can match a client of
// this configuration.
func (c *Config) validateMirroring() []error {
	var errs []error
	if _, err := rules.NewPolicy(c.Mirroring); err != nil {
		errs = append(errs, err)
	}
	for i, cl := range c.Mirroring.Clients {
		key := fmt.Sprintf("mirroring.clients[%d]", i)
		ls, err := c.ruleListeners(cl)
		if err != nil {
			errs = append(errs, fmt.Errorf("config key %q: %v", key+".listeners", err))
			continue
		}
		// The rule must be able to match on one of the listeners it may come through.
		certs, logins := false, false
		for _, l := range ls {
			certs = certs || l.ClientCertificates()
			logins = logins || l.SASL()
		}
		where := "on a TLS listener with client_auth request or require (tls.listener)"
		if !c.legacyListener() {
			where = "on a listener with tls and client_auth request or require; the rule may come through " + listenerNames(ls)
		}
		switch {
		case (cl.TLSSubject != "" || cl.TLSSAN != "") && !certs:
			errs = append(errs, fmt.Errorf("config key %q: a certificate rule can never match: clients prove certificates only %s", key, where))
		case cl.SASLUser != "" && !c.DestinationSASL():
			errs = append(errs, fmt.Errorf("config key %q: a sasl_user rule can never match: the destination takes SASL logins only when offsetgate logs in there too (upstream_sasl)", key))
		case cl.SASLUser != "" && !logins:
			errs = append(errs, fmt.Errorf("config key %q: a sasl_user rule can never match: no listener it may come through takes SASL logins (security_protocol SASL_PLAINTEXT or SASL_SSL): %s", key, listenerNames(ls)))
		}
	}
	return errs
}

var unknownField = regexp.MustCompile(`line (\d+): field (\S+) not found in type`)

// LoadConfig reads a YAML file; unknown keys are errors that name the key and line.
func LoadConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("reading config: %w", err)
	}
	return parseConfig(b, path)
}

// parseConfig decodes a configuration file's bytes.
func parseConfig(b []byte, path string) (Config, error) {
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		msg := err.Error()
		if m := unknownField.FindAllStringSubmatch(msg, -1); m != nil {
			var parts []string
			for _, x := range m {
				parts = append(parts, fmt.Sprintf("line %s: unknown key %q", x[1], x[2]))
			}
			return c, fmt.Errorf("config %s: %s", path, strings.Join(parts, "; "))
		}
		return c, fmt.Errorf("config %s: %w", path, err)
	}
	c.Path = path
	return c, nil
}

// validateSource checks the source section and the listeners that front it.
func (c *Config) validateSource(bad func(key, format string, a ...any)) []error {
	var errs []error
	fronted := false
	for _, l := range c.ListenerList() {
		fronted = fronted || l.Upstream == UpstreamSource
	}
	if c.Source == nil {
		if fronted {
			bad("source", "required: a listener has upstream: source")
		}
		return nil
	}
	if !fronted {
		bad("source", "no listener fronts the source (give one upstream: source)")
	}
	if len(c.Source.Bootstrap) == 0 {
		bad("source.bootstrap", "required: at least one source broker host:port")
	}
	for i, b := range c.Source.Bootstrap {
		if _, _, err := net.SplitHostPort(b); err != nil {
			bad(fmt.Sprintf("source.bootstrap[%d]", i), "%v", err)
		}
	}
	if c.Source.NodeIDOffset < 1 {
		bad("source.node_id_offset", "must be at least 1 (above every destination node id)")
	}
	if err := c.Source.TLS.Validate("source.tls"); err != nil {
		errs = append(errs, err)
	}
	if c.Source.SASL != nil {
		if err := c.Source.SASL.validate("source.sasl"); err != nil {
			errs = append(errs, err)
		}
	}
	for i, l := range c.ListenerList() {
		if l.Upstream == UpstreamSource && l.SASL() && c.Source.SASL == nil {
			bad(fmt.Sprintf("listeners[%d].security_protocol", i), "%s passes SASL logins to the source too, which takes them only when offsetgate logs in there (source.sasl)", l.SecurityProtocol)
		}
	}
	if len(c.Identities.MTLSUpstream) > 0 {
		bad("identities.mtls_upstream", "maps certificates to destination logins; a source listener cannot lend them to the source (not supported with source)")
	}
	return errs
}
