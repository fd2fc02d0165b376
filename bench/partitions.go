package bench

// The many-partitions benchmark (issue 18): what one `offsetgate mirror` process and the one
// `offsetgate serve` it writes through cost in memory and CPU while they mirror a topic of a
// thousand partitions, first catching up with what the source holds, then following a low
// produce rate spread over every partition. The baseline, measured in the same run on a data
// set of the same shape, is the plainest copy there is: a franz-go consumer handing records to
// a franz-go producer, in one process (CopyMain).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"offsetgate/batch"
	"offsetgate/catalog"
	"offsetgate/internal/ports"
	"offsetgate/internal/testkafka"
	"offsetgate/ledger"
	"offsetgate/mirror"
	"offsetgate/rawread"
)

// Tools of the partitions benchmark.
const (
	ToolCopy       = "copy"
	ToolOffsetgate = "offsetgate"
)

// PartitionsConfig is one run.
type PartitionsConfig struct {
	Source, Dest  *testkafka.Cluster
	OffsetgateBin string
	// Copy makes the command that runs CopyMain with the given flags (the baseline).
	Copy func(args []string) *exec.Cmd
	Mode string
	// Partitions of the source topic (1,000 by default), each holding Records records (200)
	// of RecordBytes bytes of value (100) when the tool starts.
	Partitions  int
	Records     int
	RecordBytes int
	// BatchRecords is how many records each record batch of the source holds (10 by default):
	// the fill writes every partition's records that many at a time. offsetgate keeps every
	// source batch as it is, with a ledger entry and a Produce request of its own on D, so its
	// cost follows the batches more than the records.
	BatchRecords int
	// Parallel is `offsetgate mirror --parallel` (mirror.DefaultParallel when zero).
	Parallel int
	// The steady phase: SteadyRate records a second (1,000 by default) spread evenly over
	// every partition, for SteadySeconds (30).
	SteadyRate    float64
	SteadySeconds float64
	// CatchUpTimeout bounds the catch-up of each tool (20 minutes by default): a tool that has
	// not copied every record by then failed.
	CatchUpTimeout time.Duration
	// Tools are the tools measured, in order (ToolCopy, then ToolOffsetgate, by default).
	Tools []string
	// Pprof turns on `admin_pprof` of the offsetgate serve process (its admin address is in
	// the progress output), for profiles taken by hand while the run goes on.
	Pprof bool
	// CopyLogLevel is the copy process's --log-level (franz-go's log; none by default).
	CopyLogLevel string
	// Prefix begins every topic name of the run (a fresh one per run by default).
	Prefix   string
	LogDir   string
	Progress io.Writer
}

// ProcFigures are one process's numbers over one phase.
type ProcFigures struct {
	Process    string  `json:"process"`
	CPUSeconds float64 `json:"cpu_s"` // user + system, from /proc/<pid>/stat
	// CPUPercent is CPUSeconds over the phase's wall time: 100 is one CPU.
	CPUPercent  float64 `json:"cpu_percent"`
	RSSStartKiB int64   `json:"rss_start_kib"` // VmRSS when the phase started
	PeakRSSKiB  int64   `json:"peak_rss_kib"`  // the most VmRSS sampled (every 100 ms) in the phase
	RSSKiB      int64   `json:"rss_kib"`       // VmRSS when the phase ended
	HWMKiB      int64   `json:"hwm_kib"`       // VmHWM when the phase ended: the peak since the process started
	// Go heap in use and goroutines when the phase ended, from the process's /metrics
	// (offsetgate's processes only).
	HeapInuseMiB float64 `json:"heap_inuse_mib,omitempty"`
	Goroutines   int     `json:"goroutines,omitempty"`
	// offsetgate serve's produce-at-offset work in the phase, from its metrics: partition
	// writes (offsetgate_mirror_write_seconds) and takeovers of a partition
	// (offsetgate_mirror_partition_load_seconds), how many and their mean time.
	Writes          int64   `json:"writes,omitempty"`
	WriteMeanSecs   float64 `json:"write_mean_seconds,omitempty"`
	Takeovers       int64   `json:"takeovers,omitempty"`
	TakeoverMeanSec float64 `json:"takeover_mean_seconds,omitempty"`
}

// PartitionsPhase is one tool's phase: catching up, or following the paced producer.
type PartitionsPhase struct {
	Seconds   float64       `json:"seconds"`
	Processes []ProcFigures `json:"processes"`
	// CPU of the rest of the machine meanwhile: the brokers of both clusters, ogbench (the
	// producer and the offset polling), everything else, and the hypervisor's steal.
	KafkaCPUSeconds   float64 `json:"kafka_cpu_s"`
	HarnessCPUSeconds float64 `json:"harness_cpu_s"`
	OtherCPUSeconds   float64 `json:"other_cpu_s"`
	StealCPUSeconds   float64 `json:"steal_cpu_s"`
}

// PartitionsResult is one tool's numbers.
type PartitionsResult struct {
	Tool      string `json:"tool"`
	Topic     string `json:"topic"`
	Processes string `json:"processes"` // what ran, for the report
	// Records in the source topic when the tool started (Partitions x Records), and the
	// record batches holding them (the producer's batches: offsetgate keeps each one, with a
	// ledger entry and a Produce request of its own on the destination).
	Records  int64   `json:"records"`
	Batches  int64   `json:"batches"`
	FillSecs float64 `json:"fill_seconds"`
	// FirstSeconds is from the tool's start until the destination held a record; the catch-up
	// phase runs from its start until every partition's end offset on the destination equals
	// the source's.
	FirstSeconds float64         `json:"first_record_seconds"`
	CatchUp      PartitionsPhase `json:"catch_up"`
	// The steady phase runs while the paced producer writes SteadyRecords records.
	Steady        PartitionsPhase `json:"steady"`
	SteadyRecords int64           `json:"steady_records"`
	// Records the source held and the destination did not, sampled once a second while the
	// paced producer ran: the most and the mean.
	SteadyMaxBehind  int64   `json:"steady_max_behind"`
	SteadyMeanBehind float64 `json:"steady_mean_behind"`
	// DrainSeconds is from the paced producer's last acknowledgement until every partition was
	// complete again on the destination.
	DrainSeconds float64 `json:"drain_seconds"`
	// Complete counts the partitions whose end offset on the destination equalled the
	// source's at the end (it is Partitions when the tool copied every record exactly once).
	Complete int    `json:"partitions_complete"`
	Error    string `json:"error,omitempty"`
	// SecondInstanceSeconds (offsetgate only) is, after the catch-up, from the start of a
	// second offsetgate serve in front of the same destination until it answered a
	// ListOffsets of every partition's end without an error: what consumers cutting over to
	// an instance that has not read the topic's ledgers wait for (every partition's source
	// view read first). Its process start included; 0: not measured.
	SecondInstanceSeconds float64 `json:"second_instance_list_offsets_seconds,omitempty"`
}

// PartitionsReport is the JSON of a run.
type PartitionsReport struct {
	RunHeader
	Partitions    int                `json:"partitions"`
	Records       int                `json:"records_per_partition"`
	BatchRecords  int                `json:"records_per_batch"`
	RecordBytes   int                `json:"record_bytes"`
	Parallel      int                `json:"parallel"`
	SteadyRate    float64            `json:"steady_records_per_s"`
	SteadySeconds float64            `json:"steady_seconds"`
	Settings      string             `json:"settings"`
	Results       []PartitionsResult `json:"results"`
	Error         string             `json:"error,omitempty"`
}

// Result returns the tool's result.
func (r *PartitionsReport) Result(tool string) (PartitionsResult, bool) {
	for _, x := range r.Results {
		if x.Tool == tool {
			return x, true
		}
	}
	return PartitionsResult{}, false
}

// RunPartitions runs the benchmark: the copy baseline first, then offsetgate, each on a source
// topic of its own filled the same way (created, measured and deleted in turn, so the shared
// brokers never hold more than one tool's partitions). A tool that fails is reported with its
// error and the run goes on to the next.
func RunPartitions(ctx context.Context, cfg PartitionsConfig) (*PartitionsReport, error) {
	if cfg.Source == nil || cfg.Dest == nil || cfg.OffsetgateBin == "" || cfg.Copy == nil {
		return nil, errors.New("bench: Source, Dest, OffsetgateBin and Copy are required")
	}
	if cfg.Partitions <= 0 {
		cfg.Partitions = 1000
	}
	if cfg.Records <= 0 {
		cfg.Records = 200
	}
	if cfg.RecordBytes <= 0 {
		cfg.RecordBytes = 100
	}
	if cfg.BatchRecords <= 0 {
		cfg.BatchRecords = 10
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = mirror.DefaultParallel
	}
	if cfg.SteadyRate <= 0 {
		cfg.SteadyRate = 1000
	}
	if cfg.SteadySeconds <= 0 {
		cfg.SteadySeconds = 30
	}
	if cfg.CatchUpTimeout <= 0 {
		cfg.CatchUpTimeout = 20 * time.Minute
	}
	if len(cfg.Tools) == 0 {
		cfg.Tools = []string{ToolCopy, ToolOffsetgate}
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "ogbench-kp-" + strconv.FormatInt(time.Now().Unix()%1e6, 36) + strconv.Itoa(rand.IntN(1000))
	}
	cleanup, err := tempLogDir(&cfg.LogDir, "ogbench-partitions-")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	rep := &PartitionsReport{RunHeader: newHeader("ogbench partitions", cfg.Mode, cfg.OffsetgateBin), Partitions: cfg.Partitions, Records: cfg.Records,
		BatchRecords: cfg.BatchRecords, RecordBytes: cfg.RecordBytes, Parallel: cfg.Parallel, SteadyRate: cfg.SteadyRate, SteadySeconds: cfg.SteadySeconds,
		Settings: fmt.Sprintf("source topics of %d partitions, replication factor 1, filled with %d records of %d bytes per partition "+
			"in batches of %d (franz-go, acks=all, flushed every %d records per partition); offsetgate: `offsetgate serve` (TLS listener, the mirroring client approved by its "+
			"certificate, defaults otherwise) and one following `offsetgate mirror --parallel %d --progress lines`; copy: CopyMain "+
			"(franz-go consumer, no group, from the start, default fetch sizes; franz-go producer, acks=all, idempotent, default "+
			"linger, same partition); steady: %.0f records/s round robin over the partitions for %.0f s",
			cfg.Partitions, cfg.Records, cfg.RecordBytes, cfg.BatchRecords, cfg.BatchRecords, cfg.Parallel, cfg.SteadyRate, cfg.SteadySeconds)}
	var errs []error
	for _, tool := range cfg.Tools {
		res, err := runPartitionsTool(ctx, cfg, tool)
		if err != nil {
			res.Error = err.Error()
			errs = append(errs, fmt.Errorf("%s: %w", tool, err))
		}
		rep.Results = append(rep.Results, res)
		if ctx.Err() != nil {
			break
		}
	}
	rep.Machine.LoadAvgEnd = loadAvg()
	rep.Finished = time.Now().UTC()
	err = errors.Join(errs...)
	if err != nil {
		rep.Error = err.Error()
	}
	return rep, err
}

// partitionsRun is one tool's run.
type partitionsRun struct {
	cfg   PartitionsConfig
	tool  string
	topic string
	logf  func(string, ...any)
	scl   *kgo.Client // source: producer and admin
	sadm  *kadm.Client
	dcl   *kgo.Client // destination: admin
	dadm  *kadm.Client
}

func runPartitionsTool(ctx context.Context, cfg PartitionsConfig, tool string) (res PartitionsResult, err error) {
	r := &partitionsRun{cfg: cfg, tool: tool, topic: cfg.Prefix + "-" + tool}
	r.logf = func(format string, a ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "partitions %s: "+format+"\n", append([]any{tool}, a...)...)
		}
	}
	res = PartitionsResult{Tool: tool, Topic: r.topic}
	// The producer retries as long as it takes (franz-go's default): leaders of a thousand
	// partitions created a moment ago may still be moving in.
	if r.scl, err = cfg.Source.Client(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.ProducerLinger(10*time.Millisecond), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.MetadataMinAge(100*time.Millisecond)); err != nil {
		return res, err
	}
	defer r.scl.Close()
	r.sadm = kadm.NewClient(r.scl)
	if r.dcl, err = cfg.Dest.Client(); err != nil {
		return res, err
	}
	defer r.dcl.Close()
	r.dadm = kadm.NewClient(r.dcl)
	// Whatever happens, the tool's topics leave both clusters (after its processes stopped:
	// deferred before they are started, so it runs after their stops).
	defer r.deleteTopics()

	start := time.Now()
	if err := cfg.Source.CreateTopic(ctx, r.topic, int32(cfg.Partitions), 1, nil); err != nil {
		return res, err
	}
	if err := r.fill(ctx); err != nil {
		return res, err
	}
	want, err := r.sourceEnds(ctx)
	if err != nil {
		return res, err
	}
	for _, o := range want {
		res.Records += o
	}
	res.FillSecs = time.Since(start).Seconds()
	if res.Batches, err = r.countBatches(ctx, want); err != nil {
		return res, err
	}
	r.logf("source topic %s: %d partitions, %d records in %d batches, created and filled in %.1fs", r.topic, cfg.Partitions, res.Records, res.Batches, res.FillSecs)

	var procs []watched
	var stopped <-chan struct{}
	switch tool {
	case ToolOffsetgate:
		extra := ""
		if cfg.Pprof {
			extra = "admin_pprof: true\n"
		}
		og, id, err := startMirroringServeWith(ctx, cfg.OffsetgateBin, cfg.Dest, cfg.LogDir, "offsetgate-partitions", cfg.Prefix+"-*", extra)
		if err != nil {
			return res, err
		}
		defer og.stop()
		r.logf("offsetgate serve: pid %d, admin http://%s", og.pid(), og.admin)
		metricsPort, err := ports.One()
		if err != nil {
			return res, err
		}
		metricsAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(metricsPort))
		args := append([]string{"mirror", "--source", cfg.Source.Bootstrap(), "--proxy", og.listen, "--topics", r.topic}, id.flags...)
		args = append(args, "--replication-factor", "1", "--parallel", strconv.Itoa(cfg.Parallel), "--progress", "lines",
			"--metrics", metricsAddr)
		res.Processes = "offsetgate serve + offsetgate mirror " + strings.Join(args[1:], " ")
		mlog := filepath.Join(cfg.LogDir, "partitions-mirror.log")
		cmd, st, err := startProc(cfg.OffsetgateBin, args, mlog)
		if err != nil {
			return res, err
		}
		defer stopProc(cmd, st, syscall.SIGINT, r.logf)
		stopped = st
		procs = []watched{{name: "offsetgate serve", pid: og.pid(), metrics: "http://" + og.admin + "/metrics"},
			{name: "offsetgate mirror", pid: cmd.Process.Pid, metrics: "http://" + metricsAddr + "/metrics", log: mlog}}
	case ToolCopy:
		if err := cfg.Dest.CreateTopic(ctx, r.topic, int32(cfg.Partitions), 1, nil); err != nil {
			return res, err
		}
		args := []string{"--source", cfg.Source.Bootstrap(), "--dest", cfg.Dest.Bootstrap(), "--topic", r.topic}
		if cfg.CopyLogLevel != "" {
			args = append(args, "--log-level", cfg.CopyLogLevel)
		}
		res.Processes = "copy " + strings.Join(args, " ")
		clog := filepath.Join(cfg.LogDir, "partitions-copy.log")
		cmd, st, err := startCmd(cfg.Copy(args), clog)
		if err != nil {
			return res, err
		}
		defer stopProc(cmd, st, syscall.SIGTERM, r.logf)
		stopped = st
		procs = []watched{{name: "copy", pid: cmd.Process.Pid, log: clog}}
	default:
		return res, fmt.Errorf("unknown tool %q", tool)
	}

	m := newMeter(procs, append(brokerPids(cfg.Source), brokerPids(cfg.Dest)...))
	defer m.close()
	// Catching up: from the tool's start until the destination holds every record.
	m.begin()
	cctx, cancel := context.WithTimeout(ctx, cfg.CatchUpTimeout)
	first, _, err := r.waitComplete(cctx, want, m.t0, stopped, "catching up")
	cancel()
	res.CatchUp = m.end()
	res.FirstSeconds = first.Seconds()
	if err != nil {
		res.Complete = r.complete(ctx, want)
		return res, fmt.Errorf("catching up: %w%s", err, procLogs(procs))
	}
	r.logf("caught up: %d records in %.2fs (first on the destination after %.2fs)", res.Records, res.CatchUp.Seconds, res.FirstSeconds)
	for _, p := range res.CatchUp.Processes {
		r.logf("  %-18s CPU %6.2fs, RSS peak %7.1f MiB, at the end %7.1f MiB%s", p.Process, p.CPUSeconds, kib2mib(p.PeakRSSKiB), kib2mib(p.RSSKiB), p.work())
	}

	if tool == ToolOffsetgate {
		secs, err := r.secondInstance(ctx)
		if err != nil {
			return res, fmt.Errorf("a second instance: %w", err)
		}
		res.SecondInstanceSeconds = secs
		r.logf("a second offsetgate serve answered the ends of %d partitions %.2fs after its start", cfg.Partitions, secs)
	}

	// Following: the paced producer, then until the destination holds all it wrote.
	m.begin()
	n, maxBehind, meanBehind, err := r.steady(ctx, want)
	res.Steady = m.end()
	res.SteadyRecords, res.SteadyMaxBehind, res.SteadyMeanBehind = n, maxBehind, meanBehind
	if err != nil {
		return res, fmt.Errorf("steady phase: %w", err)
	}
	last := time.Now()
	want, err = r.sourceEnds(ctx)
	if err != nil {
		return res, err
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	_, _, err = r.waitComplete(dctx, want, last, stopped, "draining")
	cancel()
	res.DrainSeconds = time.Since(last).Seconds()
	res.Complete = r.complete(ctx, want)
	if err != nil {
		return res, fmt.Errorf("after the steady phase: %w%s", err, procLogs(procs))
	}
	r.logf("steady: %d records at %.0f/s over %.1fs, at most %d behind (mean %.0f), complete %.2fs after the last", n,
		cfg.SteadyRate, res.Steady.Seconds, maxBehind, meanBehind, res.DrainSeconds)
	for _, p := range res.Steady.Processes {
		r.logf("  %-18s CPU %5.1f%%, RSS peak %7.1f MiB, at the end %7.1f MiB%s", p.Process, p.CPUPercent, kib2mib(p.PeakRSSKiB), kib2mib(p.RSSKiB), p.work())
	}
	return res, nil
}

// secondInstance starts a second offsetgate serve in front of the destination and times it
// from its start until a ListOffsets of every partition of the mirror topic through it is
// answered without an error (retried while one fails, for at most two minutes).
func (r *partitionsRun) secondInstance(ctx context.Context) (float64, error) {
	start := time.Now()
	og, id, err := startMirroringServeWith(ctx, r.cfg.OffsetgateBin, r.cfg.Dest, r.cfg.LogDir, "offsetgate-partitions-second", r.cfg.Prefix+"-*", "")
	if err != nil {
		return 0, err
	}
	defer og.stop()
	cl, err := kgo.NewClient(kgo.SeedBrokers(og.listen), kgo.DialTLSConfig(id.tls))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	lctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var last error
	for lctx.Err() == nil {
		ends, err := adm.ListEndOffsets(lctx, r.topic)
		if err == nil {
			err = ends.Error()
		}
		if err == nil {
			n := 0
			ends.Each(func(kadm.ListedOffset) { n++ })
			if n == r.cfg.Partitions {
				return time.Since(start).Seconds(), nil
			}
			err = fmt.Errorf("%d of %d partitions answered", n, r.cfg.Partitions)
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	return 0, fmt.Errorf("no complete answer in two minutes: %v", last)
}

// fill writes Records records to every partition of the source topic, BatchRecords at a
// time: each round produces that many records to every partition and flushes, so that every
// batch holds them (the producer's linger is longer than a round).
func (r *partitionsRun) fill(ctx context.Context) error {
	cl, err := r.cfg.Source.Client(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.ProducerLinger(10*time.Second), kgo.MaxBufferedRecords(1<<20), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.MetadataMinAge(100*time.Millisecond))
	if err != nil {
		return err
	}
	defer cl.Close()
	payload := make([]byte, r.cfg.RecordBytes)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}
	var (
		mu     sync.Mutex
		failed error
	)
	done := func(_ *kgo.Record, err error) {
		if err != nil {
			mu.Lock()
			failed = err
			mu.Unlock()
		}
	}
	for i := 0; i < r.cfg.Records; i += r.cfg.BatchRecords {
		for p := 0; p < r.cfg.Partitions; p++ {
			for j := i; j < min(i+r.cfg.BatchRecords, r.cfg.Records); j++ {
				cl.Produce(ctx, &kgo.Record{Topic: r.topic, Partition: int32(p), Value: payload}, done)
			}
		}
		if err := cl.Flush(ctx); err != nil {
			return err
		}
	}
	mu.Lock()
	defer mu.Unlock()
	return failed
}

// countBatches counts the record batches of the source topic below want, reading them raw.
func (r *partitionsRun) countBatches(ctx context.Context, want map[int32]int64) (int64, error) {
	var (
		n     atomic.Int64
		next  atomic.Int32
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := next.Add(1) - 1; int(p) < r.cfg.Partitions; p = next.Add(1) - 1 {
				rd := rawread.New(r.scl, r.topic, p)
				for o := int64(0); o < want[p]; {
					sets, _, err := rd.Fetch(ctx, o, 1<<20)
					if err == nil && len(sets) == 0 {
						err = fmt.Errorf("no batch at offset %d", o)
					}
					if err != nil {
						mu.Lock()
						first = fmt.Errorf("counting the batches of %s[%d]: %w", r.topic, p, err)
						mu.Unlock()
						return
					}
					for _, b := range sets {
						h, err := batch.ReadHeader(b)
						if err != nil {
							mu.Lock()
							first = err
							mu.Unlock()
							return
						}
						n.Add(1)
						o = h.LastOffset() + 1
					}
				}
			}
		}()
	}
	wg.Wait()
	return n.Load(), first
}

// sourceEnds lists the source topic's end offsets, every partition's.
func (r *partitionsRun) sourceEnds(ctx context.Context) (map[int32]int64, error) {
	ends, err := r.sadm.ListEndOffsets(ctx, r.topic)
	if err != nil {
		return nil, fmt.Errorf("source end offsets: %w", err)
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil {
			out[o.Partition] = o.Offset
		}
	})
	if len(out) != r.cfg.Partitions {
		return nil, fmt.Errorf("source end offsets: %d of %d partitions answered", len(out), r.cfg.Partitions)
	}
	return out, nil
}

// destEnds lists the destination topic's end offsets; a partition missing (the topic is not
// created yet) or answered with an error is left out.
func (r *partitionsRun) destEnds(ctx context.Context) map[int32]int64 {
	out := map[int32]int64{}
	ends, err := r.dadm.ListEndOffsets(ctx, r.topic)
	if err != nil {
		return out
	}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil {
			out[o.Partition] = o.Offset
		}
	})
	return out
}

// complete counts the partitions whose end offset on the destination equals want's.
func (r *partitionsRun) complete(ctx context.Context, want map[int32]int64) int {
	have := r.destEnds(ctx)
	n := 0
	for p, w := range want {
		if o, ok := have[p]; ok && o == w {
			n++
		}
	}
	return n
}

// waitComplete polls the destination until every partition's end offset equals want's (the
// source's), and returns when it first held a record and when it was complete, from start. A
// partition holding more than the source is an error (a record copied twice).
func (r *partitionsRun) waitComplete(ctx context.Context, want map[int32]int64, start time.Time, stopped <-chan struct{}, what string) (first, all time.Duration, err error) {
	var total int64
	for _, w := range want {
		total += w
	}
	lastLog := time.Now()
	for {
		have := r.destEnds(ctx)
		var records int64
		done := 0
		for p, w := range want {
			o := have[p]
			if o > w {
				return first, 0, fmt.Errorf("partition %d holds %d records on the destination, the source %d", p, o, w)
			}
			records += o
			if o == w {
				done++
			}
		}
		if records > 0 && first == 0 {
			first = time.Since(start)
		}
		if done == len(want) {
			return first, time.Since(start), nil
		}
		if time.Since(lastLog) >= 5*time.Second {
			lastLog = time.Now()
			r.logf("%s: %d of %d partitions complete, %d of %d records on the destination, %.0fs", what, done, len(want), records, total, time.Since(start).Seconds())
		}
		select {
		case <-ctx.Done():
			return first, 0, fmt.Errorf("%d of %d partitions complete, %d of %d records on the destination after %.0fs: %w",
				done, len(want), records, total, time.Since(start).Seconds(), ctx.Err())
		case <-stopped:
			return first, 0, errors.New("the process exited")
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// steady produces SteadyRate records a second round robin over the partitions for
// SteadySeconds, sampling once a second how many records the source holds and the destination
// does not yet.
func (r *partitionsRun) steady(ctx context.Context, base map[int32]int64) (n, maxBehind int64, meanBehind float64, err error) {
	parts := r.cfg.Partitions
	total := int(r.cfg.SteadyRate * r.cfg.SteadySeconds)
	acked := make([]atomic.Int64, parts)
	var (
		mu     sync.Mutex
		failed error
	)
	sctx, stop := context.WithCancel(ctx)
	var samples []int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-t.C:
			}
			have := r.destEnds(sctx)
			if sctx.Err() != nil {
				return
			}
			var behind int64
			for p := 0; p < parts; p++ {
				behind += max(0, base[int32(p)]+acked[p].Load()-have[int32(p)])
			}
			samples = append(samples, behind)
		}
	}()
	payload := make([]byte, r.cfg.RecordBytes)
	interval := float64(time.Second) / r.cfg.SteadyRate
	start := time.Now()
	for i := 0; i < total && ctx.Err() == nil; i++ {
		due := start.Add(time.Duration(float64(i) * interval))
		if d := time.Until(due); d > time.Millisecond {
			time.Sleep(d)
		}
		p := i % parts
		r.scl.Produce(ctx, &kgo.Record{Topic: r.topic, Partition: int32(p), Value: payload}, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				failed = err
				mu.Unlock()
				return
			}
			acked[p].Add(1)
		})
	}
	ferr := r.scl.Flush(ctx)
	stop()
	wg.Wait()
	for p := range acked {
		n += acked[p].Load()
	}
	var sum int64
	for _, s := range samples {
		maxBehind = max(maxBehind, s)
		sum += s
	}
	if len(samples) > 0 {
		meanBehind = float64(sum) / float64(len(samples))
	}
	mu.Lock()
	defer mu.Unlock()
	return n, maxBehind, meanBehind, errors.Join(ferr, failed)
}

// deleteTopics deletes the tool's topics: the source topic, the destination topic and, for a
// mirror topic, offsetgate's ledger and snapshot topics of it.
func (r *partitionsRun) deleteTopics() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var names []string
	for try := 0; try < 5 && ctx.Err() == nil; try++ {
		td, err := r.dadm.ListTopics(ctx, r.topic)
		if err != nil {
			time.Sleep(time.Second)
			continue
		}
		if t, ok := td[r.topic]; ok && t.Err == nil {
			names = append(names, r.topic)
			if r.tool == ToolOffsetgate {
				id := catalog.IDString(t.ID)
				names = append(names, ledger.Topic(id), ledger.SnapshotTopic(id))
			}
		}
		break
	}
	if len(names) > 0 {
		if _, err := r.dadm.DeleteTopics(ctx, names...); err != nil {
			r.logf("deleting %v on the destination: %v", names, err)
		}
	}
	if _, err := r.sadm.DeleteTopics(ctx, r.topic); err != nil {
		r.logf("deleting %s on the source: %v", r.topic, err)
	}
	r.logf("deleted %s on the source and %s on the destination", r.topic, strings.Join(names, ", "))
}

// watched is a process the meter follows.
type watched struct {
	name    string
	pid     int
	metrics string // its /metrics URL, or ""
	log     string
}

// procLogs is the last lines of the watched processes' logs, for an error message.
func procLogs(ps []watched) string {
	var b strings.Builder
	for _, p := range ps {
		if p.log != "" {
			fmt.Fprintf(&b, "\n%s log %s:\n%s", p.name, p.log, tailFile(p.log, 10))
		}
	}
	return b.String()
}

// meter samples the resident memory of processes every 100 ms and, per phase, their CPU and
// the machine's.
type meter struct {
	procs   []watched
	brokers []int
	stop    chan struct{}
	done    chan struct{}

	mu   sync.Mutex
	peak []int64

	t0                         time.Time
	cpu0                       []float64
	rss0                       []int64
	met0                       []map[string]float64
	kafka0, self0, busy0, stl0 float64
}

func newMeter(procs []watched, brokers []int) *meter {
	m := &meter{procs: procs, brokers: brokers, stop: make(chan struct{}), done: make(chan struct{}), peak: make([]int64, len(procs))}
	go func() {
		defer close(m.done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			m.sample()
			select {
			case <-m.stop:
				return
			case <-t.C:
			}
		}
	}()
	return m
}

func (m *meter) sample() {
	for i, p := range m.procs {
		if v, err := procStatusKiB(p.pid, "VmRSS"); err == nil {
			m.mu.Lock()
			m.peak[i] = max(m.peak[i], v)
			m.mu.Unlock()
		}
	}
}

// begin starts a phase.
func (m *meter) begin() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.t0 = time.Now()
	m.cpu0, m.rss0, m.met0 = make([]float64, len(m.procs)), make([]int64, len(m.procs)), make([]map[string]float64, len(m.procs))
	for i, p := range m.procs {
		m.met0[i] = scrape(p.metrics)
		m.cpu0[i] = cpuOf(p.pid)
		m.rss0[i], _ = procStatusKiB(p.pid, "VmRSS")
		m.peak[i] = m.rss0[i]
	}
	m.kafka0, m.self0 = cpuOf(m.brokers...), cpuOf(os.Getpid())
	m.busy0, m.stl0 = machineCPU()
}

// settle waits, up to 3 s, until offsetgate's count of writes stops moving: D shows a write's
// records before offsetgate has its answer and counts the write (after the snapshot it may
// take), so a phase that ends when D holds everything would leave its last writes to the next.
func (m *meter) settle() {
	count := func() float64 {
		var n float64
		for _, p := range m.procs {
			if p.metrics != "" {
				n += scrape(p.metrics)["offsetgate_mirror_write_seconds_count"]
			}
		}
		return n
	}
	was := count()
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); {
		time.Sleep(300 * time.Millisecond)
		now := count()
		if now == was {
			return
		}
		was = now
	}
}

// end ends a phase and returns its figures.
func (m *meter) end() PartitionsPhase {
	m.settle()
	m.sample()
	m.mu.Lock()
	defer m.mu.Unlock()
	ph := PartitionsPhase{Seconds: time.Since(m.t0).Seconds()}
	var procsCPU float64
	for i, p := range m.procs {
		f := ProcFigures{Process: p.name, CPUSeconds: cpuOf(p.pid) - m.cpu0[i], RSSStartKiB: m.rss0[i], PeakRSSKiB: m.peak[i]}
		f.RSSKiB, _ = procStatusKiB(p.pid, "VmRSS")
		f.HWMKiB, _ = procStatusKiB(p.pid, "VmHWM")
		f.CPUPercent = 100 * f.CPUSeconds / ph.Seconds
		if p.metrics != "" {
			now, was := scrape(p.metrics), m.met0[i]
			f.HeapInuseMiB, f.Goroutines = now["go_memstats_heap_inuse_bytes"]/(1<<20), int(now["go_goroutines"])
			d := func(n string) float64 { return now[n] - was[n] }
			if n := d("offsetgate_mirror_write_seconds_count"); n > 0 {
				f.Writes, f.WriteMeanSecs = int64(n), d("offsetgate_mirror_write_seconds_sum")/n
			}
			if n := d("offsetgate_mirror_partition_load_seconds_count"); n > 0 {
				f.Takeovers, f.TakeoverMeanSec = int64(n), d("offsetgate_mirror_partition_load_seconds_sum")/n
			}
		}
		procsCPU += f.CPUSeconds
		ph.Processes = append(ph.Processes, f)
	}
	ph.KafkaCPUSeconds = cpuOf(m.brokers...) - m.kafka0
	ph.HarnessCPUSeconds = cpuOf(os.Getpid()) - m.self0
	busy, steal := machineCPU()
	ph.StealCPUSeconds = steal - m.stl0
	ph.OtherCPUSeconds = max(0, busy-m.busy0-ph.KafkaCPUSeconds-ph.HarnessCPUSeconds-procsCPU)
	return ph
}

func (m *meter) close() {
	close(m.stop)
	<-m.done
}

// scrapeNames are the samples the meter reads from a process's /metrics.
var scrapeNames = []string{"go_memstats_heap_inuse_bytes", "go_goroutines",
	"offsetgate_mirror_write_seconds_sum", "offsetgate_mirror_write_seconds_count",
	"offsetgate_mirror_partition_load_seconds_sum", "offsetgate_mirror_partition_load_seconds_count"}

// scrape reads scrapeNames from a /metrics URL, each summed over its labels.
func scrape(url string) map[string]float64 {
	out := map[string]float64{}
	if url == "" {
		return out
	}
	text, err := metricsText(url)
	if err != nil {
		return out
	}
	for line := range strings.Lines(text) {
		line = strings.TrimSuffix(line, "\n")
		i := strings.LastIndexByte(line, ' ')
		if i < 0 || strings.HasPrefix(line, "#") {
			continue
		}
		name := line[:i]
		if j := strings.IndexByte(name, '{'); j >= 0 {
			name = name[:j]
		}
		for _, n := range scrapeNames {
			if name == n {
				v, _ := strconv.ParseFloat(line[i+1:], 64)
				out[n] += v
			}
		}
	}
	return out
}

// startCmd starts a prepared command with its output in a log file; stopped closes when it
// exits.
func startCmd(cmd *exec.Cmd, logPath string) (*exec.Cmd, <-chan struct{}, error) {
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, nil, err
	}
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, nil, err
	}
	stopped := make(chan struct{})
	go func() { _ = cmd.Wait(); lf.Close(); close(stopped) }()
	return cmd, stopped, nil
}

// stopProc sends sig and kills the process after 30 s.
func stopProc(cmd *exec.Cmd, stopped <-chan struct{}, sig syscall.Signal, logf func(string, ...any)) {
	_ = cmd.Process.Signal(sig)
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		logf("%s did not stop in 30s after %v: killed", filepath.Base(cmd.Path), sig)
		_ = cmd.Process.Kill()
		<-stopped
	}
}

// work describes offsetgate serve's writes and takeovers, for the progress output.
func (f ProcFigures) work() string {
	out := ""
	if f.Writes > 0 {
		out += fmt.Sprintf(", %d writes (mean %.0f ms)", f.Writes, 1000*f.WriteMeanSecs)
	}
	if f.Takeovers > 0 {
		out += fmt.Sprintf(", %d takeovers (mean %.0f ms)", f.Takeovers, 1000*f.TakeoverMeanSec)
	}
	return out
}

func kib2mib(k int64) float64 { return float64(k) / 1024 }
