// Package bench measures what offsetgate's pass-through costs against a real Kafka cluster.
//
// Every workload runs on three paths to the same destination cluster, in one run, so that
// each ratio is against a baseline measured on the same machine at the same time:
//
//   - direct: the client talks to the brokers;
//   - relay: through a minimal TCP relay process (io.Copy both ways, one listener per broker,
//     the client's dialer sends each broker address to its relay listener);
//   - offsetgate: through an `offsetgate serve` process (gnet transport).
//
// Command ogbench (bench/cmd/ogbench) runs it and scripts/bench builds and starts that.
// docs/benchmarks.md describes the method and every number.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"offsetgate/internal/testkafka"
)

// The three paths, and a fourth when a baseline binary is given.
const (
	PathDirect     = "direct"
	PathRelay      = "relay"
	PathOffsetgate = "offsetgate"
	// PathBaseline is another offsetgate binary (an earlier build, say) measured in the same
	// run, so that a change to offsetgate is judged against what it replaces on equal terms.
	PathBaseline = "baseline"
	// PathPeer is grepplabs/kafka-proxy (PeerVersion), the pass-through proxy users would pick
	// instead, when its binary is given.
	PathPeer = "kafka-proxy"
)

// Paths lists the paths every run measures, in report order.
var Paths = []string{PathDirect, PathRelay, PathOffsetgate}

// allPaths is Paths and the baseline, for what a run may hold.
var allPaths = []string{PathDirect, PathRelay, PathOffsetgate, PathPeer, PathBaseline}

// optional reports whether a path is measured only when its binary is given.
func optional(p string) bool { return p == PathBaseline || p == PathPeer }

// Config is one benchmark run.
type Config struct {
	// Dest is the destination cluster (running).
	Dest *testkafka.Cluster
	// OffsetgateBin is the offsetgate binary (`offsetgate serve` is run from it).
	OffsetgateBin string
	// BaselineBin, when set, is a second offsetgate binary measured as path "baseline".
	BaselineBin string
	// PeerBin, when set, is a grepplabs/kafka-proxy binary measured as path "kafka-proxy".
	PeerBin string
	// Relay makes the command that runs RelayMain for the given broker addresses.
	Relay func(targets []string) *exec.Cmd
	// Mode labels the run in the report: "full", "quick", "test".
	Mode string
	// BytesPerCase is the data set of every case: record payload bytes produced per path.
	BytesPerCase int64
	// RecordSizes and Partitions span the cases (every size with every partition count).
	RecordSizes []int
	Partitions  []int
	// Rounds repeats every measurement (paths alternate order); the report gives medians.
	Rounds int
	// LoadFraction is the fixed offered load as a fraction of the direct saturation rate.
	LoadFraction float64
	// KafkaData says where the brokers keep their data, for the report.
	KafkaData string
	// Linger is the producer's linger (franz-go's default is 10 ms; zero is no linger).
	Linger time.Duration
	// IdleConns is how many idle connections to open to offsetgate.
	IdleConns int
	// LogDir receives the offsetgate and relay logs; empty: a temporary folder, removed.
	LogDir string
	// Progress receives one line per measurement; nil: discarded.
	Progress io.Writer
}

// Report holds every number of a run; it is what the JSON file contains.
type Report struct {
	RunHeader
	Settings Settings `json:"settings"`
	Cases    []Case   `json:"cases"`
	Idle     *Idle    `json:"idle,omitempty"`
	// Quiet says how much CPU the rest of the machine used while samples were taken.
	Quiet *Quiet `json:"quiet,omitempty"`
	// Memory is the relay's and offsetgate's resident memory at the end of the throughput
	// cases (VmRSS), its peak over them (VmHWM), and VmRSS again after five quiet seconds.
	Memory []ProcMemory `json:"memory,omitempty"`
	// OffsetgateMetrics is offsetgate's /metrics at the end of the throughput cases.
	OffsetgateMetrics map[string]float64 `json:"offsetgate_metrics,omitempty"`
	Targets           []Target           `json:"targets"`
	// Error is why the run ended early, if it did; the numbers are those it got.
	Error string `json:"error,omitempty"`
}

// ProcMemory is a process's resident memory.
type ProcMemory struct {
	Process    string `json:"process"`
	RSSKiB     int64  `json:"rss_kib"`
	PeakRSSKiB int64  `json:"peak_rss_kib"`
	// QuietRSSKiB is VmRSS five seconds after the cases ended (a burst's buffers given back).
	QuietRSSKiB int64 `json:"quiet_rss_kib,omitempty"`
}

// Quiet sums, over every sample, the time measured and the CPU time of processes outside the
// benchmark (and the hypervisor's steal) during it.
type Quiet struct {
	MeasuredSeconds float64 `json:"measured_s"`
	OtherCPUSeconds float64 `json:"other_cpu_s"`
	StealCPUSeconds float64 `json:"steal_cpu_s"`
}

// Settings are the run's parameters.
type Settings struct {
	BytesPerCase        int64   `json:"bytes_per_case"`
	RecordSizes         []int   `json:"record_sizes"`
	Partitions          []int   `json:"partitions"`
	Rounds              int     `json:"rounds"`
	LoadFraction        float64 `json:"load_fraction"`
	IdleConns           int     `json:"idle_conns"`
	Brokers             int     `json:"brokers"`
	KafkaData           string  `json:"kafka_data,omitempty"`
	ReplicationFactor   int     `json:"replication_factor"`
	Producer            string  `json:"producer"`
	Consumer            string  `json:"consumer"`
	OffsetgateTransport string  `json:"offsetgate_transport"`
	Units               string  `json:"units"`
	// Baseline describes the baseline binary, when one was measured.
	Baseline string `json:"baseline,omitempty"`
	// Peer describes the kafka-proxy binary and its settings, when it was measured.
	Peer string `json:"peer,omitempty"`
}

// Case is one record size and partition count.
type Case struct {
	Name        string       `json:"name"`
	RecordBytes int          `json:"record_bytes"`
	Partitions  int          `json:"partitions"`
	Records     int          `json:"records"`
	Saturation  []Throughput `json:"saturation"`
	Consume     []Throughput `json:"consume"`
	FixedLoad   *FixedLoad   `json:"fixed_load"`
}

// Throughput is one path's result of a throughput measurement: medians over the rounds.
type Throughput struct {
	Path          string  `json:"path"`
	MBps          float64 `json:"mb_per_s"`
	RatioToDirect float64 `json:"ratio_to_direct"`
	// ProxyCPUPerGB is the relay's or offsetgate's CPU seconds per GB moved (0 for direct).
	ProxyCPUPerGB float64 `json:"proxy_cpu_s_per_gb"`
	// KafkaCPUPerGB is the brokers' CPU seconds per GB.
	KafkaCPUPerGB float64 `json:"kafka_cpu_s_per_gb"`
	// ClientCPUPerGB is the benchmark process's (the Kafka client's) CPU seconds per GB.
	ClientCPUPerGB float64 `json:"client_cpu_s_per_gb"`
	// PeakRSSKiB is the most the path's process held resident in any of the samples.
	PeakRSSKiB int64    `json:"peak_rss_kib,omitempty"`
	Samples    []Sample `json:"samples"`
}

// Sample is one round of a measurement.
type Sample struct {
	Round     int     `json:"round"`
	Records   int64   `json:"records"`
	Bytes     int64   `json:"bytes"`
	Seconds   float64 `json:"seconds"`
	MBps      float64 `json:"mb_per_s"`
	ProxyCPU  float64 `json:"proxy_cpu_s"`
	KafkaCPU  float64 `json:"kafka_cpu_s"`
	ClientCPU float64 `json:"client_cpu_s"`
	// OtherCPU is the CPU time of everything else on the machine during the sample (busy time
	// from /proc/stat minus the brokers, the client, the relay and offsetgate); StealCPU is
	// time the hypervisor took. Both say how quiet the machine was.
	OtherCPU   float64 `json:"other_cpu_s"`
	StealCPU   float64 `json:"steal_cpu_s"`
	P50Ms      float64 `json:"p50_ms,omitempty"`
	P90Ms      float64 `json:"p90_ms,omitempty"`
	P99Ms      float64 `json:"p99_ms,omitempty"`
	P999Ms     float64 `json:"p999_ms,omitempty"`
	MaxMs      float64 `json:"max_ms,omitempty"`
	Latencies  int     `json:"latencies,omitempty"`
	OfferedMBs float64 `json:"offered_mb_per_s,omitempty"`
	// PeakRSSKiB is the path's process's peak resident memory during the sample (VmHWM, reset
	// through /proc/<pid>/clear_refs when the sample starts); 0 for the direct path.
	PeakRSSKiB int64 `json:"peak_rss_kib,omitempty"`
}

// FixedLoad is the paced produce measurement.
type FixedLoad struct {
	OfferedMBps float64   `json:"offered_mb_per_s"`
	Paths       []Latency `json:"paths"`
}

// Latency is one path's paced produce result: medians over the rounds.
type Latency struct {
	Path          string   `json:"path"`
	AchievedMBps  float64  `json:"achieved_mb_per_s"`
	P50Ms         float64  `json:"p50_ms"`
	P90Ms         float64  `json:"p90_ms"`
	P99Ms         float64  `json:"p99_ms"`
	P999Ms        float64  `json:"p999_ms"`
	MaxMs         float64  `json:"max_ms"`
	AddedP50Ms    float64  `json:"added_p50_ms"`
	AddedP99Ms    float64  `json:"added_p99_ms"`
	ProxyCPUPerGB float64  `json:"proxy_cpu_s_per_gb"`
	Samples       []Sample `json:"samples"`
}

// Idle is the idle connection measurement.
type Idle struct {
	Requested      int     `json:"requested"`
	Opened         int     `json:"opened"`
	RSSBeforeKiB   int64   `json:"rss_before_kib"`
	RSSAfterKiB    int64   `json:"rss_after_kib"`
	BytesPerConn   float64 `json:"bytes_per_conn"`
	FDsBefore      int     `json:"fds_before"`
	FDsAfter       int     `json:"fds_after"`
	SessionsOpen   float64 `json:"sessions_open"`
	HeapBeforeKiB  float64 `json:"go_heap_inuse_before_kib"`
	HeapAfterKiB   float64 `json:"go_heap_inuse_after_kib"`
	OpenSeconds    float64 `json:"open_seconds"`
	BrokerFDsAfter int     `json:"broker_fds_after"`
	// FDLimit is offsetgate's open file limit; Note says when it capped the count.
	FDLimit int    `json:"fd_limit"`
	Note    string `json:"note,omitempty"`
	Error   string `json:"error,omitempty"`
}

// Target is a goal evaluated on a run (never asserted by tests).
type Target struct {
	Name  string  `json:"name"`
	Case  string  `json:"case,omitempty"`
	Value float64 `json:"value"`
	Limit float64 `json:"limit"`
	Unit  string  `json:"unit"`
	Pass  bool    `json:"pass"`
}

type pathSetup struct {
	name string
	opts []kgo.Opt // how a client reaches the cluster on this path
	pid  int       // the process in the path (0: none)
}

type runner struct {
	cfg      Config
	rep      *Report
	paths    []pathSetup
	brokers  []int
	runID    string
	adm      *kadm.Client
	warm     string
	warmN    int64
	payloads map[int][]byte
}

func (r *runner) logf(format string, a ...any) {
	if r.cfg.Progress != nil {
		fmt.Fprintf(r.cfg.Progress, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, a...))
	}
}

func (r *runner) kafkaCPU() float64 { return cpuOf(r.brokers...) }

// Run runs the benchmark and returns its report; the report is filled as far as the run got
// when an error ends it.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Dest == nil || cfg.OffsetgateBin == "" || cfg.Relay == nil {
		return nil, errors.New("bench: Dest, OffsetgateBin and Relay are required")
	}
	if cfg.BytesPerCase <= 0 || len(cfg.RecordSizes) == 0 || len(cfg.Partitions) == 0 {
		return nil, errors.New("bench: BytesPerCase, RecordSizes and Partitions are required")
	}
	if cfg.Rounds < 1 {
		cfg.Rounds = 1
	}
	if cfg.LoadFraction <= 0 {
		cfg.LoadFraction = 0.5
	}
	cleanup, err := tempLogDir(&cfg.LogDir, "ogbench-")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	rep := &Report{
		RunHeader: newHeader("ogbench", cfg.Mode, cfg.OffsetgateBin),
		Settings: Settings{
			BytesPerCase: cfg.BytesPerCase, RecordSizes: cfg.RecordSizes, Partitions: cfg.Partitions,
			Rounds: cfg.Rounds, LoadFraction: cfg.LoadFraction, IdleConns: cfg.IdleConns,
			Brokers: len(cfg.Dest.Nodes), ReplicationFactor: 1, KafkaData: cfg.KafkaData,
			Producer: producerSettings(cfg.Linger), Consumer: consumerSettings, OffsetgateTransport: "gnet",
			Units: "MB = 1e6 bytes of record payload, GB = 1e9; CPU in seconds (utime+stime from /proc)",
		},
	}
	if cfg.BaselineBin != "" {
		rep.Settings.Baseline = cfg.BaselineBin
		if c := binaryCommit(cfg.BaselineBin); c != "" {
			rep.Settings.Baseline += ", built from commit " + c
		}
	}
	if cfg.PeerBin != "" {
		rep.Settings.Peer = fmt.Sprintf("grepplabs/kafka-proxy %s (%s) with %v", PeerVersion, cfg.PeerBin, PeerArgs)
	}
	r := &runner{cfg: cfg, rep: rep, runID: strconv.FormatInt(time.Now().Unix()%1e6, 36) + strconv.Itoa(rand.IntN(1000)),
		payloads: map[int][]byte{}}
	for _, n := range cfg.Dest.Nodes {
		r.brokers = append(r.brokers, n.Pid())
	}
	err = r.run(ctx)
	rep.Machine.LoadAvgEnd = loadAvg()
	rep.Finished = time.Now().UTC()
	rep.Targets = Evaluate(rep)
	rep.Quiet = quiet(rep)
	if err != nil {
		rep.Error = err.Error()
	}
	return rep, err
}

func (r *runner) run(ctx context.Context) error {
	cfg := r.cfg
	admCl, err := cfg.Dest.Client(kgo.MetadataMinAge(20 * time.Millisecond))
	if err != nil {
		return err
	}
	r.adm = kadm.NewClient(admCl)
	defer r.adm.Close()

	relay, err := startRelay(cfg.Relay, cfg.Dest.Addrs(), cfg.LogDir)
	if err != nil {
		return err
	}
	defer relay.stop()
	og, err := startOffsetgate(ctx, cfg.OffsetgateBin, cfg.Dest, cfg.LogDir, "offsetgate")
	if err != nil {
		return err
	}
	ogUp := true
	defer func() {
		if ogUp {
			og.stop()
		}
	}()
	// Topics are created just before they are used: clients may ask for their metadata again
	// after 100 ms rather than the default 5 s, which would otherwise stall every run.
	common := kgo.MetadataMinAge(100 * time.Millisecond)
	r.paths = []pathSetup{
		{name: PathDirect, opts: []kgo.Opt{common, kgo.SeedBrokers(cfg.Dest.Addrs()...)}},
		{name: PathRelay, opts: []kgo.Opt{common, kgo.SeedBrokers(cfg.Dest.Addrs()...), redirectDialer(relay.addr)}, pid: relay.pid()},
		{name: PathOffsetgate, opts: []kgo.Opt{common, kgo.SeedBrokers(og.listen)}, pid: og.pid()},
	}
	r.logf("offsetgate %s (pid %d, admin %s), relay pid %d %v, brokers %s", og.listen, og.pid(), og.admin, relay.pid(), relay.addr, cfg.Dest.Bootstrap())
	if cfg.PeerBin != "" {
		peer, err := startPeer(ctx, cfg.PeerBin, cfg.Dest.Addrs(), cfg.LogDir)
		if err != nil {
			return err
		}
		defer peer.stop()
		r.paths = append(r.paths, pathSetup{name: PathPeer, opts: []kgo.Opt{common, kgo.SeedBrokers(peer.listen[0])}, pid: peer.pid()})
		r.logf("kafka-proxy %v (pid %d) from %s %v", peer.listen, peer.pid(), cfg.PeerBin, PeerArgs)
	}
	if cfg.BaselineBin != "" {
		base, err := startOffsetgate(ctx, cfg.BaselineBin, cfg.Dest, cfg.LogDir, "baseline")
		if err != nil {
			return fmt.Errorf("baseline offsetgate: %w", err)
		}
		defer base.stop()
		r.paths = append(r.paths, pathSetup{name: PathBaseline, opts: []kgo.Opt{common, kgo.SeedBrokers(base.listen)}, pid: base.pid()})
		r.logf("baseline offsetgate %s (pid %d) from %s", base.listen, base.pid(), cfg.BaselineBin)
	}

	// A small topic with a partition on every broker warms up consumers, and a first pass of
	// data through every path warms up the brokers' JIT, before anything is measured.
	r.warm = r.topic("warm", 0, 0, "all", 0)
	if err := r.createTopic(ctx, r.warm, 16); err != nil {
		return err
	}
	defer r.deleteTopics(r.warm)
	if err := r.warmUp(ctx); err != nil {
		return err
	}

	for _, size := range cfg.RecordSizes {
		for _, parts := range cfg.Partitions {
			c, err := r.runCase(ctx, size, parts)
			if c != nil {
				r.rep.Cases = append(r.rep.Cases, *c)
			}
			if err != nil {
				return err
			}
		}
	}

	for _, p := range r.paths[1:] {
		rss, err1 := procStatusKiB(p.pid, "VmRSS")
		hwm, err2 := procStatusKiB(p.pid, "VmHWM")
		// The peak is reset at every sample: the run's is the largest sample's.
		hwm = max(hwm, r.samplePeak(p.name))
		if err1 == nil && err2 == nil {
			r.rep.Memory = append(r.rep.Memory, ProcMemory{Process: p.name, RSSKiB: rss, PeakRSSKiB: hwm})
		}
	}
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
	}
	for i, p := range r.paths[1:] {
		if rss, err := procStatusKiB(p.pid, "VmRSS"); err == nil && i < len(r.rep.Memory) && r.rep.Memory[i].Process == p.name {
			r.rep.Memory[i].QuietRSSKiB = rss
		}
	}
	if m, err := og.counters(); err == nil {
		r.rep.OffsetgateMetrics = m
	} else {
		r.logf("reading offsetgate's metrics: %v", err)
	}
	// Idle connections on a fresh process, so the before/after RSS is not the heap the
	// throughput runs grew.
	og.stop()
	ogUp = false
	if cfg.IdleConns > 0 {
		idle, err := r.idle(ctx)
		r.rep.Idle = idle
		if err != nil {
			return err
		}
	}
	return nil
}

func (r *runner) topic(phase string, size, parts int, path string, round int) string {
	return fmt.Sprintf("ogbench-%s-%s-%d-%dp-%s-r%d", r.runID, phase, size, parts, path, round)
}

// createTopic creates a topic with replication factor 1 and waits until every partition has
// a leader. (The admin client asks for metadata every 20 ms: with franz-go's default 5 s
// minimum metadata age a topic not yet known to the broker asked would cost 5 s.)
func (r *runner) createTopic(ctx context.Context, topic string, parts int) error {
	resp, err := r.adm.CreateTopic(ctx, int32(parts), 1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("creating %s: %w", topic, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		md, err := r.adm.Metadata(ctx, topic)
		if err == nil {
			if td, ok := md.Topics[topic]; ok && td.Err == nil && len(td.Partitions) == parts {
				ok := true
				for _, p := range td.Partitions {
					if p.Err != nil || p.Leader < 0 {
						ok = false
					}
				}
				if ok {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("creating %s: no leader for every partition within 30s (last error %v)", topic, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (r *runner) deleteTopics(topics ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := r.adm.DeleteTopics(ctx, topics...); err != nil {
		r.logf("deleting topics: %v", err)
	}
}

func (r *runner) payload(size int) []byte {
	if p, ok := r.payloads[size]; ok {
		return p
	}
	p := make([]byte, size)
	for i := range p {
		p[i] = byte(rand.IntN(256))
	}
	r.payloads[size] = p
	return p
}

func (r *runner) newProducer(p pathSetup) (*kgo.Client, error) {
	return kgo.NewClient(append(slices.Clone(p.opts), producerOpts(r.cfg.Linger)...)...)
}

func (r *runner) warmUp(ctx context.Context) error {
	cl, err := r.newProducer(r.paths[0])
	if err != nil {
		return err
	}
	defer cl.Close()
	n, err := warmProducer(ctx, cl, r.warm, 16)
	if err != nil {
		return err
	}
	r.warmN = n
	// JIT warm-up: an eighth of a case's data (at least 4 MiB) in each record size on every
	// path, produced and read back, not measured.
	warmBytes := max(r.cfg.BytesPerCase/8, 4<<20)
	for _, size := range r.cfg.RecordSizes {
		topic := r.topic("jit", size, 16, "all", 0)
		if err := r.createTopic(ctx, topic, 16); err != nil {
			return err
		}
		payload := r.payload(size)
		var total int64
		for _, p := range r.paths {
			cl, err := r.newProducer(p)
			if err != nil {
				return err
			}
			res, err := produce(ctx, cl, topic, payload, int(max(warmBytes/int64(size), 1)), 0)
			cl.Close()
			if err != nil {
				r.deleteTopics(topic)
				return fmt.Errorf("warm-up on %s: %w", p.name, err)
			}
			total += res.records
			if _, err := consume(ctx, p.opts, r.warm, r.warmN, topic, total); err != nil {
				r.deleteTopics(topic)
				return fmt.Errorf("warm-up on %s: %w", p.name, err)
			}
		}
		r.deleteTopics(topic)
	}
	r.logf("warmed up: %s in each record size through each path", sizeString(warmBytes))
	return nil
}

// order is the path order of a round: each second round the one before reversed, so every
// path runs before and after every other, and the pairs rotated so no path always goes
// first. Rotation alone kept offsetgate just before the baseline build in every round, and a
// path measured later in a round was faster in 10 of 12 rounds of two runs (roles swapped
// between them): the comparison of two builds measured the order.
func (r *runner) order(round int) []pathSetup {
	return pathOrder(r.paths, round)
}

func pathOrder[T any](paths []T, round int) []T {
	n := len(paths)
	out := make([]T, 0, n)
	for i := 0; i < n; i++ {
		out = append(out, paths[(i+round/2)%n])
	}
	if round%2 == 1 {
		slices.Reverse(out)
	}
	return out
}

func caseName(size, parts int) string {
	s := strconv.Itoa(size) + "B"
	if size%1024 == 0 {
		s = strconv.Itoa(size/1024) + "KiB"
	}
	return fmt.Sprintf("%s x %dp", s, parts)
}

func (r *runner) runCase(ctx context.Context, size, parts int) (*Case, error) {
	cfg := r.cfg
	payload := r.payload(size)
	n := int(cfg.BytesPerCase / int64(size))
	if n < 1 {
		n = 1
	}
	c := &Case{Name: caseName(size, parts), RecordBytes: size, Partitions: parts, Records: n}
	sat := map[string][]Sample{}
	cons := map[string][]Sample{}

	for round := 0; round < cfg.Rounds; round++ {
		order := r.order(round)
		topics := map[string]string{}
		warmed := map[string]int64{}
		for _, p := range order {
			topic := r.topic("sat", size, parts, p.name, round)
			topics[p.name] = topic
			if err := r.createTopic(ctx, topic, parts); err != nil {
				return c, err
			}
			s, w, err := r.saturate(ctx, p, topic, payload, n, parts)
			if err != nil {
				r.deleteTopics(topic)
				return c, fmt.Errorf("%s saturation on %s: %w", c.Name, p.name, err)
			}
			s.Round = round
			warmed[p.name] = w
			sat[p.name] = append(sat[p.name], s)
			r.logf("%-12s saturation  %-10s round %d: %8.1f MB/s", c.Name, p.name, round+1, s.MBps)
		}
		// Every path reads back the topic the direct path wrote.
		src := topics[PathDirect]
		for _, p := range order {
			s, err := r.consumeRun(ctx, p, src, int64(n)+warmed[PathDirect])
			if err != nil {
				r.deleteTopics(values(topics)...)
				return c, fmt.Errorf("%s consume on %s: %w", c.Name, p.name, err)
			}
			s.Round = round
			cons[p.name] = append(cons[p.name], s)
			r.logf("%-12s consume     %-10s round %d: %8.1f MB/s", c.Name, p.name, round+1, s.MBps)
		}
		r.deleteTopics(values(topics)...)
	}
	c.Saturation = throughputs(sat)
	c.Consume = throughputs(cons)

	direct := c.Saturation[0].MBps
	offered := cfg.LoadFraction * direct
	fl := &FixedLoad{OfferedMBps: offered}
	lat := map[string][]Sample{}
	for round := 0; round < cfg.Rounds; round++ {
		for _, p := range r.order(round) {
			topic := r.topic("fixed", size, parts, p.name, round)
			if err := r.createTopic(ctx, topic, parts); err != nil {
				return c, err
			}
			s, err := r.paced(ctx, p, topic, payload, n, parts, offered*1e6)
			r.deleteTopics(topic)
			if err != nil {
				return c, fmt.Errorf("%s fixed load on %s: %w", c.Name, p.name, err)
			}
			s.Round = round
			lat[p.name] = append(lat[p.name], s)
			r.logf("%-12s fixed load  %-10s round %d: %6.1f of %6.1f MB/s, p50 %.3f ms, p99 %.3f ms",
				c.Name, p.name, round+1, s.MBps, offered, s.P50Ms, s.P99Ms)
		}
	}
	fl.Paths = latencies(lat)
	c.FixedLoad = fl
	return c, nil
}

func quiet(rep *Report) *Quiet {
	q := &Quiet{}
	add := func(ss []Sample) {
		for _, s := range ss {
			q.MeasuredSeconds += s.Seconds
			q.OtherCPUSeconds += s.OtherCPU
			q.StealCPUSeconds += s.StealCPU
		}
	}
	for _, c := range rep.Cases {
		for _, t := range c.Saturation {
			add(t.Samples)
		}
		for _, t := range c.Consume {
			add(t.Samples)
		}
		if c.FixedLoad != nil {
			for _, l := range c.FixedLoad.Paths {
				add(l.Samples)
			}
		}
	}
	return q
}

func values(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

type cpuMark struct{ proxy, kafka, client, proxies, busy, steal float64 }

// mark starts a sample: the CPU counters, and the path's process's peak RSS counted again from
// now (so that each sample says what its own load cost; the run's peak is the largest of them).
func (r *runner) mark(p pathSetup) cpuMark {
	if p.pid > 0 {
		if err := resetPeakRSS(p.pid); err != nil {
			r.logf("peak RSS of %s cannot be reset, samples show the peak so far: %v", p.name, err)
		}
	}
	m := cpuMark{proxy: cpuOf(p.pid), kafka: r.kafkaCPU(), client: cpuOf(os.Getpid())}
	for _, q := range r.paths {
		m.proxies += cpuOf(q.pid)
	}
	m.busy, m.steal = machineCPU()
	return m
}

// samplePeak is the largest peak RSS of the path's samples so far.
func (r *runner) samplePeak(path string) int64 {
	var peak int64
	for _, c := range r.rep.Cases {
		for _, ts := range [][]Throughput{c.Saturation, c.Consume} {
			for _, t := range ts {
				if t.Path == path {
					peak = max(peak, t.PeakRSSKiB)
				}
			}
		}
		if c.FixedLoad != nil {
			for _, l := range c.FixedLoad.Paths {
				for _, s := range l.Samples {
					if l.Path == path {
						peak = max(peak, s.PeakRSSKiB)
					}
				}
			}
		}
	}
	return peak
}

func (r *runner) since(p pathSetup, m cpuMark, s *Sample) {
	now := r.mark(p)
	s.ProxyCPU = now.proxy - m.proxy
	s.KafkaCPU = now.kafka - m.kafka
	s.ClientCPU = now.client - m.client
	s.StealCPU = now.steal - m.steal
	s.OtherCPU = max(0, (now.busy-m.busy)-s.KafkaCPU-s.ClientCPU-(now.proxies-m.proxies))
	if p.pid > 0 {
		s.PeakRSSKiB, _ = procStatusKiB(p.pid, "VmHWM")
	}
}

func (r *runner) saturate(ctx context.Context, p pathSetup, topic string, payload []byte, n, parts int) (Sample, int64, error) {
	cl, err := r.newProducer(p)
	if err != nil {
		return Sample{}, 0, err
	}
	defer cl.Close()
	w, err := warmProducer(ctx, cl, topic, parts)
	if err != nil {
		return Sample{}, 0, err
	}
	m := r.mark(p)
	res, err := produce(ctx, cl, topic, payload, n, 0)
	var s Sample
	r.since(p, m, &s)
	s.Records, s.Bytes, s.Seconds = res.records, res.bytes, res.dur.Seconds()
	s.MBps = mbps(res.bytes, res.dur)
	if err == nil && res.records != int64(n) {
		err = fmt.Errorf("%d of %d records acknowledged", res.records, n)
	}
	return s, w, err
}

func (r *runner) consumeRun(ctx context.Context, p pathSetup, topic string, want int64) (Sample, error) {
	m := r.mark(p)
	res, err := consume(ctx, p.opts, r.warm, r.warmN, topic, want)
	var s Sample
	r.since(p, m, &s)
	s.Records, s.Bytes, s.Seconds = res.records, res.bytes, res.dur.Seconds()
	s.MBps = mbps(res.bytes, res.dur)
	return s, err
}

func (r *runner) paced(ctx context.Context, p pathSetup, topic string, payload []byte, n, parts int, rate float64) (Sample, error) {
	cl, err := r.newProducer(p)
	if err != nil {
		return Sample{}, err
	}
	defer cl.Close()
	if _, err := warmProducer(ctx, cl, topic, parts); err != nil {
		return Sample{}, err
	}
	m := r.mark(p)
	res, err := produce(ctx, cl, topic, payload, n, rate)
	s := Sample{OfferedMBs: rate / 1e6}
	r.since(p, m, &s)
	s.Records, s.Bytes, s.Seconds = res.records, res.bytes, res.dur.Seconds()
	s.MBps = mbps(res.bytes, res.dur)
	if err == nil && res.records != int64(n) {
		err = fmt.Errorf("%d of %d records acknowledged", res.records, n)
	}
	if err != nil {
		return s, err
	}
	lat := res.lat
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	s.Latencies = len(lat)
	s.P50Ms, s.P90Ms = ms(percentile(lat, 50)), ms(percentile(lat, 90))
	s.P99Ms, s.P999Ms = ms(percentile(lat, 99)), ms(percentile(lat, 99.9))
	s.MaxMs = ms(lat[len(lat)-1])
	return s, nil
}

func mbps(bytes int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(bytes) / d.Seconds() / 1e6
}

func perGB(cpu float64, bytes int64) float64 {
	if bytes <= 0 {
		return 0
	}
	return cpu / (float64(bytes) / 1e9)
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func medianOf(ss []Sample, f func(Sample) float64) float64 {
	xs := make([]float64, len(ss))
	for i, s := range ss {
		xs[i] = f(s)
	}
	return median(xs)
}

func throughputs(m map[string][]Sample) []Throughput {
	var out []Throughput
	for _, p := range allPaths {
		ss, ok := m[p]
		if !ok && optional(p) {
			continue
		}
		t := Throughput{Path: p, Samples: ss,
			MBps:           medianOf(ss, func(s Sample) float64 { return s.MBps }),
			ProxyCPUPerGB:  medianOf(ss, func(s Sample) float64 { return perGB(s.ProxyCPU, s.Bytes) }),
			KafkaCPUPerGB:  medianOf(ss, func(s Sample) float64 { return perGB(s.KafkaCPU, s.Bytes) }),
			ClientCPUPerGB: medianOf(ss, func(s Sample) float64 { return perGB(s.ClientCPU, s.Bytes) }),
		}
		for _, s := range ss {
			t.PeakRSSKiB = max(t.PeakRSSKiB, s.PeakRSSKiB)
		}
		out = append(out, t)
	}
	for i := range out {
		if out[0].MBps > 0 {
			out[i].RatioToDirect = out[i].MBps / out[0].MBps
		}
	}
	return out
}

func latencies(m map[string][]Sample) []Latency {
	var out []Latency
	for _, p := range allPaths {
		ss, ok := m[p]
		if !ok && optional(p) {
			continue
		}
		out = append(out, Latency{Path: p, Samples: ss,
			AchievedMBps:  medianOf(ss, func(s Sample) float64 { return s.MBps }),
			P50Ms:         medianOf(ss, func(s Sample) float64 { return s.P50Ms }),
			P90Ms:         medianOf(ss, func(s Sample) float64 { return s.P90Ms }),
			P99Ms:         medianOf(ss, func(s Sample) float64 { return s.P99Ms }),
			P999Ms:        medianOf(ss, func(s Sample) float64 { return s.P999Ms }),
			MaxMs:         medianOf(ss, func(s Sample) float64 { return s.MaxMs }),
			ProxyCPUPerGB: medianOf(ss, func(s Sample) float64 { return perGB(s.ProxyCPU, s.Bytes) }),
		})
	}
	for i := range out {
		out[i].AddedP50Ms = out[i].P50Ms - out[0].P50Ms
		out[i].AddedP99Ms = out[i].P99Ms - out[0].P99Ms
	}
	return out
}
