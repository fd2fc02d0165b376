package faults

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"offsetgate/internal/ports"
	"offsetgate/internal/relay"
	"offsetgate/internal/testcerts"
	"offsetgate/internal/testkafka"
)

// aliasHost is the second loopback address: the destination's brokers and offsetgate's
// listeners are advertised there, and relays listening there stand in the links the campaign
// cuts and stalls.
const aliasHost = "127.0.0.2"

// env is the campaign's world: two clusters, offsetgate and the mirror as processes, and the
// relays on their links.
type env struct {
	cfg      Config
	dir      string
	topic    string
	txnTopic string // written by a transactional producer, read at read_committed
	// compactTopic, with Config.Compacted, is a compacted source topic written with few keys
	// and cleaned every few seconds (empty: not in the campaign).
	compactTopic string

	src, dst *testkafka.Cluster
	// dstLinks stand between the offsetgate instances and the destination's brokers (one per
	// broker), ogLinks between the mirrors and offsetgate (each instance's bootstrap and broker
	// listeners).
	dstLinks, ogLinks []*relay.Relay

	certs          *testcerts.Set
	server, mirror *testcerts.KeyPair

	// ogs are the offsetgate instances in front of the destination, mrs the mirror processes:
	// mirror i writes through instance i; with more than one they form a mirror group.
	ogs []*instance
	mrs []*proc

	srcAdm, dstAdm *kadm.Client
	srcCl, dstCl   *kgo.Client
}

// topics are the mirrored topics.
func (e *env) topics() []string {
	ts := []string{e.topic, e.txnTopic}
	if e.compactTopic != "" {
		ts = append(ts, e.compactTopic)
	}
	return ts
}

// compactResync is the mirror's --resync with Config.Compacted.
const compactResync = 10 * time.Second

// instance is one offsetgate process and its addresses.
type instance struct {
	*proc
	listen string // bootstrap on 127.0.0.1
	alias  string // the same through its relay on aliasHost
	admin  string
}

// procs is every process of the campaign: the mirrors first, so that stopping them in this
// order leaves no mirror writing to a stopped instance.
func (e *env) procs() []*proc {
	out := append([]*proc{}, e.mrs...)
	for _, o := range e.ogs {
		out = append(out, o.proc)
	}
	return out
}

// named is n with the index of the process appended when the campaign runs several.
func (e *env) named(n string, i int) string {
	if e.cfg.Instances > 1 {
		return fmt.Sprintf("%s-%d", n, i)
	}
	return n
}

func (e *env) logf(format string, a ...any) {
	fmt.Fprintf(e.cfg.Log, time.Now().Format("15:04:05.000")+" "+format+"\n", a...)
}

// setup starts everything but the producers and consumers.
func setup(ctx context.Context, cfg Config, dir string) (_ *env, err error) {
	e := &env{cfg: cfg, dir: dir, topic: "faults-t", txnTopic: "faults-txn"}
	if cfg.Compacted {
		e.compactTopic = "faults-compact"
	}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	if ln, lerr := net.Listen("tcp", aliasHost+":0"); lerr != nil {
		return nil, fmt.Errorf("the campaign needs the loopback address %s: %w", aliasHost, lerr)
	} else {
		ln.Close()
	}
	e.logf("starting the source cluster")
	if e.src, err = testkafka.Start(ctx, testkafka.Options{Name: "faults-source", Dir: filepath.Join(dir, "source")}); err != nil {
		return nil, err
	}
	e.logf("starting the destination cluster")
	if e.dst, err = testkafka.Start(ctx, testkafka.Options{Name: "faults-dest", Dir: filepath.Join(dir, "dest"), AliasHost: aliasHost}); err != nil {
		return nil, err
	}
	for _, n := range e.dst.Nodes {
		_, p, _ := net.SplitHostPort(n.AliasAddr())
		// Frames, not chunks: dest-refuse-writes reads and rewrites Produce traffic.
		r, err := relay.Listen(n.AliasAddr(), net.JoinHostPort("127.0.0.1", p), false)
		if err != nil {
			return nil, fmt.Errorf("relay to destination node %d: %w", n.ID, err)
		}
		e.dstLinks = append(e.dstLinks, r)
	}
	if e.srcCl, err = e.src.Client(); err != nil {
		return nil, err
	}
	if e.dstCl, err = e.dst.Client(); err != nil {
		return nil, err
	}
	e.srcAdm, e.dstAdm = kadm.NewClient(e.srcCl), kadm.NewClient(e.dstCl)

	if e.certs, err = testcerts.New(filepath.Join(dir, "certs")); err != nil {
		return nil, err
	}
	if e.server, err = e.certs.CA.Issue(testcerts.Template{CommonName: "offsetgate", Server: true, File: "offsetgate",
		SANs: testcerts.SANs{IPs: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(aliasHost)}}}); err != nil {
		return nil, err
	}
	if e.mirror, err = e.certs.Client("mirror", testcerts.SANs{URIs: []string{"spiffe://faults/mirror"}}); err != nil {
		return nil, err
	}

	for i := 0; i < cfg.Instances; i++ {
		if err := e.addInstance(i); err != nil {
			return nil, err
		}
	}
	for i := 0; i < cfg.Instances; i++ {
		metrics, err := ports.One()
		if err != nil {
			return nil, err
		}
		proxies := e.ogs[i].alias
		if cfg.MirrorsAll {
			for j := 1; j < cfg.Instances; j++ {
				proxies += "," + e.ogs[(i+j)%cfg.Instances].alias
			}
		}
		args := []string{"mirror",
			"--source", e.src.Bootstrap(), "--proxy", proxies, "--topics", strings.Join(e.topics(), ","), "--replication-factor", "2",
			"--group-interval", "1s", "--progress", "lines", "--max-bytes", "262144", "--metrics", "127.0.0.1:" + strconv.Itoa(metrics),
			"--tls-ca", e.certs.CA.CertFile, "--tls-cert", e.mirror.CertFile, "--tls-key", e.mirror.KeyFile}
		if cfg.Compacted {
			// What the source's cleaner changed is recorded at the next resync; the checks
			// wait for one (campaign.verifyCompacted).
			args = append(args, "--resync", compactResync.String())
		}
		if cfg.Instances > 1 {
			// The group's session is shorter than a mirror-stop, sometimes: a stopped member's
			// partitions move to the other, which writes them through its own instance (a
			// takeover of their ownership).
			args = append(args, "--mirror-group", "faults-mirrors", "--mirror-group-session", "6s")
		}
		e.mrs = append(e.mrs, &proc{name: e.named("mirror", i), bin: cfg.Bin, log: filepath.Join(dir, e.named("mirror", i)+".log"),
			metrics: "http://127.0.0.1:" + strconv.Itoa(metrics) + "/metrics", args: args})
	}

	for _, t := range []string{e.topic, e.txnTopic} {
		if err := e.src.CreateTopic(ctx, t, cfg.Partitions, 2, nil); err != nil {
			return nil, err
		}
	}
	if e.compactTopic != "" {
		// Segments roll every few seconds and the cleaner takes any dirty share: the source
		// rewrites and removes mirrored batches all the time.
		str := func(v string) *string { return &v }
		if err := e.src.CreateTopic(ctx, e.compactTopic, cfg.Partitions, 2, map[string]*string{
			"cleanup.policy": str("compact"), "segment.ms": str("3000"), "min.cleanable.dirty.ratio": str("0.01"),
			"min.compaction.lag.ms": str("0"),
		}); err != nil {
			return nil, err
		}
	}
	for _, o := range e.ogs {
		if err := e.startOG(ctx, o); err != nil {
			return nil, err
		}
	}
	for _, m := range e.mrs {
		if err := e.startMirror(ctx, m); err != nil {
			return nil, err
		}
	}
	// The mirror creates the mirror topic through offsetgate.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		md, err := e.dstAdm.Metadata(ctx, e.topics()...)
		if err == nil {
			all := true
			for _, n := range e.topics() {
				t, ok := md.Topics[n]
				all = all && ok && t.Err == nil && int32(len(t.Partitions)) == cfg.Partitions
			}
			if all {
				break
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the mirror did not create %s on the destination (see %s)", e.topic, e.mrs[0].log)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return e, nil
}

// addInstance writes offsetgate instance i's configuration and the relays on the mirror's
// links to it.
func (e *env) addInstance(i int) error {
	cfg := e.cfg
	base, err := ports.Block(4)
	if err != nil {
		return err
	}
	admin, err := ports.One()
	if err != nil {
		return err
	}
	o := &instance{listen: "127.0.0.1:" + strconv.Itoa(base), alias: aliasHost + ":" + strconv.Itoa(base),
		admin: "127.0.0.1:" + strconv.Itoa(admin)}
	// offsetgate's broker listeners are port+1+node id.
	for _, p := range []int{base, base + 2, base + 3} {
		r, err := relay.Listen(aliasHost+":"+strconv.Itoa(p), "127.0.0.1:"+strconv.Itoa(p), true)
		if err != nil {
			return fmt.Errorf("relay to offsetgate's port %d: %w", p, err)
		}
		e.ogLinks = append(e.ogLinks, r)
	}
	conf := fmt.Sprintf(`listen: %s
advertise: %s
bootstrap: [%s]
admin: %s
instance_id: %s
ownership_lease: %s
tls:
  listener: {cert_file: %s, key_file: %s, client_ca_file: %s, client_auth: request}
mirroring:
  clients: [{tls_san: "URI:spiffe://faults/mirror", topics: ["faults-*"]}]
log: {level: info, format: json}
`, o.listen, aliasHost, strings.Join(e.dst.AliasAddrs(), ", "), o.admin, e.named("faults-offsetgate", i), cfg.Lease,
		e.server.CertFile, e.server.KeyFile, e.certs.CA.CertFile)
	if extra := strings.TrimSpace(cfg.ServeYAML); extra != "" {
		conf += extra + "\n"
	}
	confPath := filepath.Join(e.dir, e.named("offsetgate", i)+".yaml")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return err
	}
	o.proc = &proc{name: e.named("offsetgate", i), bin: cfg.Bin, args: []string{"serve", "--config", confPath},
		log: filepath.Join(e.dir, e.named("offsetgate", i)+".log"), metrics: "http://" + o.admin + "/metrics"}
	e.ogs = append(e.ogs, o)
	return nil
}

// startOG starts an offsetgate instance and waits until it is ready.
func (e *env) startOG(ctx context.Context, o *instance) error {
	if err := o.start(); err != nil {
		return err
	}
	return waitHTTP(ctx, "http://"+o.admin+"/readyz", 2*time.Minute, o.proc)
}

// startMirror starts a mirror process and waits until its metrics answer.
func (e *env) startMirror(ctx context.Context, m *proc) error {
	if err := m.start(); err != nil {
		return err
	}
	return waitHTTP(ctx, m.metrics, time.Minute, m)
}

func waitHTTP(ctx context.Context, url string, d time.Duration, p *proc) error {
	deadline := time.Now().Add(d)
	hc := &http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := hc.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if !p.running() {
			return fmt.Errorf("%s ended while starting: %s (see %s)", p.name, p.exited(), p.log)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready at %s after %s: %v", p.name, url, d, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// consumerOpts are the options of a client reading through offsetgate instance i (of those
// there are, counted round): TLS without a client certificate, and a dialer that reaches
// offsetgate's listeners on 127.0.0.1 directly, not through the relays on the mirror's link.
func (e *env) consumerOpts(i int) []kgo.Opt {
	tc := e.certs.ClientTLS(nil)
	dial := func(ctx context.Context, network, host string) (net.Conn, error) {
		h, p, err := net.SplitHostPort(host)
		if err != nil {
			return nil, err
		}
		target := host
		if h == aliasHost {
			target = net.JoinHostPort("127.0.0.1", p)
		}
		d := net.Dialer{Timeout: 10 * time.Second}
		c, err := d.DialContext(ctx, network, target)
		if err != nil {
			return nil, err
		}
		cfg := tc.Clone()
		cfg.ServerName = h
		return tls.Client(c, cfg), nil
	}
	return []kgo.Opt{kgo.SeedBrokers(e.ogs[i%len(e.ogs)].listen), kgo.Dialer(dial), kgo.MetadataMinAge(500 * time.Millisecond)}
}

// fromStart is a client reading every partition of topic through offsetgate instance i from
// the start, keeping its own positions (no group).
func (e *env) fromStart(i int, topic string, opts ...kgo.Opt) (*kgo.Client, error) {
	parts := map[int32]kgo.Offset{}
	for p := int32(0); p < e.cfg.Partitions; p++ {
		parts[p] = kgo.NewOffset().AtStart()
	}
	opts = append(append(e.consumerOpts(i), opts...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: parts}))
	return kgo.NewClient(opts...)
}

// close stops everything the campaign started.
func (e *env) close() {
	for _, p := range e.procs() {
		p.kill()
	}
	for _, r := range append(append([]*relay.Relay{}, e.dstLinks...), e.ogLinks...) {
		r.Close()
	}
	if e.srcCl != nil {
		e.srcCl.Close()
	}
	if e.dstCl != nil {
		e.dstCl.Close()
	}
	if e.dst != nil {
		e.dst.Stop()
	}
	if e.src != nil {
		e.src.Stop()
	}
}
