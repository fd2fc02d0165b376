package bench

// The source-view fetch benchmark: how fast consumers read a mirror topic through offsetgate
// (every batch restored to the source's header fields, offsets translated) compared with an
// ordinary topic holding the same records through the same offsetgate process (pass-through),
// in one run, rounds alternating. A direct read of the ordinary topic is the reference. The
// mirror topic is written by an in-process offsetgate with an approved mirroring client (mTLS);
// the measured `offsetgate serve` process is a second instance that has never written it, so
// its view comes from the ledger, as a consumers' instance's would.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"offsetgate/internal/ports"
	"offsetgate/internal/testcerts"
	"offsetgate/internal/testkafka"
	"offsetgate/mirror"
	"offsetgate/proxy"
	"offsetgate/rules"
	ogtls "offsetgate/tls"
)

// FetchConfig is one fetch benchmark run.
type FetchConfig struct {
	Source, Dest  *testkafka.Cluster
	OffsetgateBin string
	Mode          string
	Bytes         int64 // record payload per topic
	RecordBytes   int
	Partitions    int
	Rounds        int
	LogDir        string
	Progress      io.Writer
}

// FetchReport is what the JSON file of a fetch run holds.
type FetchReport struct {
	RunHeader
	Settings struct {
		Bytes       int64  `json:"bytes"`
		RecordBytes int    `json:"record_bytes"`
		Partitions  int    `json:"partitions"`
		Rounds      int    `json:"rounds"`
		Consumer    string `json:"consumer"`
		Units       string `json:"units"`
	} `json:"settings"`
	// Paths: "direct" (ordinary topic, no proxy), "passthrough" (ordinary topic through
	// offsetgate), "mirror" (the mirror topic through offsetgate).
	Paths []Throughput `json:"paths"`
	// MirrorToPassthrough is the mirror topic's median MB/s over the ordinary topic's, both
	// through offsetgate (target >= 0.90).
	MirrorToPassthrough float64 `json:"mirror_to_passthrough"`
	Error               string  `json:"error,omitempty"`
}

// RunFetch runs the fetch benchmark.
func RunFetch(ctx context.Context, cfg FetchConfig) (*FetchReport, error) {
	if cfg.Source == nil || cfg.Dest == nil || cfg.OffsetgateBin == "" {
		return nil, errors.New("bench: Source, Dest and OffsetgateBin are required")
	}
	if cfg.Rounds < 1 {
		cfg.Rounds = 1
	}
	if cfg.RecordBytes <= 0 {
		cfg.RecordBytes = 1024
	}
	if cfg.Partitions <= 0 {
		cfg.Partitions = 4
	}
	cleanup, err := tempLogDir(&cfg.LogDir, "ogbench-fetch-")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	logf := func(format string, a ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, format+"\n", a...)
		}
	}
	rep := &FetchReport{RunHeader: newHeader("ogbench fetch", cfg.Mode, cfg.OffsetgateBin)}
	rep.Settings.Bytes, rep.Settings.RecordBytes, rep.Settings.Partitions, rep.Settings.Rounds = cfg.Bytes, cfg.RecordBytes, cfg.Partitions, cfg.Rounds
	rep.Settings.Consumer = consumerSettings
	rep.Settings.Units = "MB = 1e6 bytes of record payload, GB = 1e9; CPU in seconds (utime+stime from /proc)"
	err = runFetch(ctx, cfg, rep, logf)
	rep.Finished = time.Now().UTC()
	if err != nil {
		rep.Error = err.Error()
	}
	return rep, err
}

func runFetch(ctx context.Context, cfg FetchConfig, rep *FetchReport, logf func(string, ...any)) error {
	id := strconv.FormatInt(time.Now().Unix()%1e6, 36) + strconv.Itoa(rand.IntN(1000))
	mirrored, ordinary, warm := "ogbench-fetch-mirror-"+id, "ogbench-fetch-plain-"+id, "ogbench-fetch-warm-"+id
	n := int(cfg.Bytes / int64(cfg.RecordBytes))
	payload := make([]byte, cfg.RecordBytes)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}

	// The same records on the source (to be mirrored) and in an ordinary topic of D.
	for _, c := range []struct {
		cl    *testkafka.Cluster
		topic string
	}{{cfg.Source, mirrored}, {cfg.Dest, ordinary}} {
		if err := c.cl.CreateTopic(ctx, c.topic, int32(cfg.Partitions), 1, nil); err != nil {
			return err
		}
		cl, err := c.cl.Client(producerOpts(10 * time.Millisecond)...)
		if err != nil {
			return err
		}
		res, err := produce(ctx, cl, c.topic, payload, n, 0)
		cl.Close()
		if err != nil {
			return err
		}
		logf("produced %d records (%.0f MB) to %s on %s", res.records, float64(res.bytes)/1e6, c.topic, c.cl.Name)
	}
	if err := cfg.Dest.CreateTopic(ctx, warm, int32(len(cfg.Dest.Nodes)), 1, nil); err != nil {
		return err
	}
	wcl, err := cfg.Dest.Client()
	if err != nil {
		return err
	}
	warmN, err := warmProducer(ctx, wcl, warm, len(cfg.Dest.Nodes))
	wcl.Close()
	if err != nil {
		return err
	}

	// Mirror through an in-process offsetgate with an approved client.
	start := time.Now()
	if err := mirrorForBench(ctx, cfg, mirrored); err != nil {
		return fmt.Errorf("mirroring: %w", err)
	}
	logf("mirrored %s in %v", mirrored, time.Since(start).Round(time.Millisecond))

	og, err := startOffsetgate(ctx, cfg.OffsetgateBin, cfg.Dest, cfg.LogDir, "offsetgate-fetch")
	if err != nil {
		return err
	}
	defer og.stop()
	ogOpts := []kgo.Opt{kgo.SeedBrokers(og.listen), kgo.MetadataMinAge(100 * time.Millisecond)}
	directOpts := []kgo.Opt{kgo.SeedBrokers(cfg.Dest.Addrs()...), kgo.MetadataMinAge(100 * time.Millisecond)}
	// One unmeasured read of each through offsetgate loads the views and warms the caches.
	for _, t := range []string{mirrored, ordinary} {
		if _, err := consume(ctx, ogOpts, warm, warmN, t, int64(n)); err != nil {
			return err
		}
	}
	samples := map[string][]Sample{}
	paths := []struct {
		name  string
		topic string
		opts  []kgo.Opt
	}{{"direct", ordinary, directOpts}, {"passthrough", ordinary, ogOpts}, {"mirror", mirrored, ogOpts}}
	for round := 1; round <= cfg.Rounds; round++ {
		for i := range paths {
			p := paths[(i+round)%len(paths)]
			m0, b0, s0 := cpuOf(og.pid()), cpuOf(brokerPids(cfg.Dest)...), cpuOf(os.Getpid())
			res, err := consume(ctx, p.opts, warm, warmN, p.topic, int64(n))
			if err != nil {
				return fmt.Errorf("%s: %w", p.name, err)
			}
			s := Sample{Round: round, Records: res.records, Bytes: res.bytes, Seconds: res.dur.Seconds(), MBps: mbps(res.bytes, res.dur),
				KafkaCPU: cpuOf(brokerPids(cfg.Dest)...) - b0, ClientCPU: cpuOf(os.Getpid()) - s0}
			if p.name != "direct" {
				s.ProxyCPU = cpuOf(og.pid()) - m0
			}
			samples[p.name] = append(samples[p.name], s)
			logf("round %d %-11s %8.1f MB/s  offsetgate CPU %.2fs", round, p.name, s.MBps, s.ProxyCPU)
		}
	}
	for _, p := range paths {
		ss := samples[p.name]
		th := Throughput{Path: p.name, MBps: medianOf(ss, func(s Sample) float64 { return s.MBps }),
			ProxyCPUPerGB:  medianOf(ss, func(s Sample) float64 { return perGB(s.ProxyCPU, s.Bytes) }),
			KafkaCPUPerGB:  medianOf(ss, func(s Sample) float64 { return perGB(s.KafkaCPU, s.Bytes) }),
			ClientCPUPerGB: medianOf(ss, func(s Sample) float64 { return perGB(s.ClientCPU, s.Bytes) }),
			Samples:        ss}
		rep.Paths = append(rep.Paths, th)
	}
	direct := rep.Paths[0].MBps
	for i := range rep.Paths {
		if direct > 0 {
			rep.Paths[i].RatioToDirect = rep.Paths[i].MBps / direct
		}
	}
	if pt := rep.Paths[1].MBps; pt > 0 {
		rep.MirrorToPassthrough = rep.Paths[2].MBps / pt
	}
	return nil
}

func brokerPids(c *testkafka.Cluster) []int {
	var out []int
	for _, n := range c.Nodes {
		out = append(out, n.Pid())
	}
	return out
}

// mirrorForBench mirrors topic from the source into D through an in-process offsetgate whose
// TLS listener approves the test certificate's identity.
func mirrorForBench(ctx context.Context, cfg FetchConfig, topic string) error {
	dir, err := os.MkdirTemp(cfg.LogDir, "certs-")
	if err != nil {
		return err
	}
	set, err := testcerts.New(dir)
	if err != nil {
		return err
	}
	kp, err := set.Client("ogbench-mirror", testcerts.SANs{URIs: []string{"spiffe://ogbench/mirror"}})
	if err != nil {
		return err
	}
	addr, err := ports.Addr()
	if err != nil {
		return err
	}
	pcfg := proxy.Config{
		Listen: addr, Bootstrap: cfg.Dest.Addrs(), InstanceID: "ogbench-writer",
		BrokerPorts: map[int32]int{},
		TLS: proxy.TLSConfig{Listener: &ogtls.ServerConfig{CertFile: set.Server.CertFile, KeyFile: set.Server.KeyFile,
			ClientCAFile: set.CA.CertFile, ClientAuth: "request"}},
		Mirroring: rules.MirroringConfig{Clients: []rules.ClientConfig{{TLSSAN: "URI:spiffe://ogbench/mirror", Topics: []string{topic}}}},
	}
	for _, n := range cfg.Dest.Nodes {
		port, err := ports.One()
		if err != nil {
			return err
		}
		pcfg.BrokerPorts[n.ID] = port
	}
	srv, err := proxy.New(pcfg, zap.NewNop())
	if err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Run(rctx) }()
	defer func() { cancel(); <-done }()
	select {
	case <-srv.Ready():
	case err := <-done:
		return err
	}
	_, err = mirror.Once(ctx, mirror.Config{Source: cfg.Source.Addrs(), Proxy: []string{addr}, ProxyTLS: set.ClientTLS(kp),
		Topics: []string{topic}, MaxBytes: 4 << 20, Parallel: cfg.Partitions, ReplicationFactor: 1})
	return err
}
