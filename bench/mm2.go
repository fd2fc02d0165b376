package bench

// The mirror benchmark against Apache Kafka's MirrorMaker 2, on the same clusters and the same
// fixed data set: how fast each copies a topic (records and bytes per second, CPU), how far
// behind a paced producer each stays (end-to-end lag), and what each preserves. MirrorMaker 2
// runs as its dedicated-mode driver (org.apache.kafka.connect.mirror.MirrorMaker) from the same
// Maven cache as the brokers, with tasks.max equal to the partition count; its configuration is
// written by mm2Properties and committed as docs/bench/mm2.properties.
//
// The copies are measured one tool after the other, but the lag is not: measured in one block
// per tool right after its copy, whichever tool came later showed less lag (the clusters had
// settled), so the order decided the result. Instead every tool's following mirror runs at the
// same time, each on a topic of its own, and the paced producer serves them in short rounds,
// one tool at a time, the order rotated by one each round: over as many rounds as there are
// tools (or a multiple), each tool is measured in each place equally often.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"offsetgate/internal/ports"
	"offsetgate/internal/testkafka"
	"offsetgate/verify"
)

// MM2Config is one run.
type MM2Config struct {
	Source, Dest  *testkafka.Cluster
	OffsetgateBin string
	// BaselineBin, when set, is a second offsetgate binary (an earlier build) measured in the
	// same run as a third tool, "offsetgate-baseline", on a data set of its own.
	BaselineBin string
	// ServeYAML and BaselineServeYAML are more lines of `offsetgate serve`'s configuration
	// for offsetgate and for the baseline (one binary with two settings can be compared).
	ServeYAML, BaselineServeYAML string
	Mode                         string
	Bytes                        int64 // record payload of the data set
	RecordBytes                  int
	Partitions                   int
	// LagRate is the paced producer's rate (bytes/s) and LagSeconds how long it runs for each
	// tool, split evenly over LagRounds rounds (0 is one).
	LagRate    float64
	LagSeconds float64
	LagRounds  int
	// ReplicationFactor of the source topics and of both tools' copies (0: 1). MirrorMaker 2's
	// own default for the topics it creates is 2; its internal topics stay at 1.
	ReplicationFactor int
	LogDir            string
	Progress          io.Writer
	// LagTrace, when set, is a file that gets one line per record of the lag rounds: tool,
	// round, partition, offset, the record's timestamp (Unix ms) and its lag (ms), to see
	// whether a tail is spread over the run or comes in bursts.
	LagTrace string
}

// MirrorResult is one tool's numbers.
type MirrorResult struct {
	Tool string `json:"tool"`
	// Seconds from the start of the tool's process until the destination held every record;
	// FirstSeconds until it held the first one (start-up).
	Seconds      float64 `json:"seconds"`
	FirstSeconds float64 `json:"first_record_seconds"`
	MBps         float64 `json:"mb_per_s"`          // payload MB over Seconds
	SteadyMBps   float64 `json:"steady_mb_per_s"`   // payload MB over Seconds - FirstSeconds
	RecordsPerS  float64 `json:"records_per_s"`     // over Seconds
	CPUSeconds   float64 `json:"cpu_s"`             // the tool's processes
	CPUPerGB     float64 `json:"cpu_s_per_gb"`      // CPUSeconds per GB of payload
	LagP50Ms     float64 `json:"lag_p50_ms"`        // paced phase: record create time to consumed on D
	LagP99Ms     float64 `json:"lag_p99_ms"`        //
	LagMaxMs     float64 `json:"lag_max_ms"`        //
	LagRecords   int     `json:"lag_records"`       //
	Verify       string  `json:"verify"`            // verify's line for the copied topic
	FirstOffset  int64   `json:"first_offset_on_d"` // D's first offset (the source's log start is SourceLogStart)
	// The lag percentiles of each round, in round order (the ones above are over every round's
	// records).
	LagRoundP50Ms []float64 `json:"lag_round_p50_ms,omitempty"`
	LagRoundP99Ms []float64 `json:"lag_round_p99_ms,omitempty"`
	// LagRoundLoad is where the machine's CPU went during each of the tool's rounds: a round
	// on a busy machine says so.
	LagRoundLoad []RoundLoad `json:"lag_round_load,omitempty"`
	// LagStages is where an offsetgate follower's writes spent their time during the lag
	// rounds, from offsetgate's own histograms (see Stage).
	LagStages map[string]Stage `json:"lag_stages,omitempty"`
}

// MM2Report is the JSON of a run.
type MM2Report struct {
	RunHeader
	Bytes          int64   `json:"bytes"`
	Records        int64   `json:"records"`
	RecordBytes    int     `json:"record_bytes"`
	Partitions     int     `json:"partitions"`
	SourceLogStart int64   `json:"source_log_start"`
	LagRateMBps    float64 `json:"lag_rate_mb_per_s"`
	LagSeconds     float64 `json:"lag_seconds"` // paced production per tool, all rounds
	LagRounds      int     `json:"lag_rounds"`
	// ReplicationFactor of the source topics and the copies: a copy waits for its replication
	// before a consumer of the destination sees it.
	ReplicationFactor int `json:"replication_factor"`
	// ServeYAML and BaselineServeYAML: the configuration lines added for each offsetgate.
	ServeYAML         string         `json:"serve_yaml,omitempty"`
	BaselineServeYAML string         `json:"baseline_serve_yaml,omitempty"`
	Results           []MirrorResult `json:"results"`
	// Ratio is offsetgate's throughput over MirrorMaker 2's (target >= 2).
	Ratio float64 `json:"offsetgate_to_mm2"`
	Error string  `json:"error,omitempty"`
}

// RunMM2 runs the comparison.
func RunMM2(ctx context.Context, cfg MM2Config) (*MM2Report, error) {
	if cfg.Source == nil || cfg.Dest == nil || cfg.OffsetgateBin == "" {
		return nil, errors.New("bench: Source, Dest and OffsetgateBin are required")
	}
	if cfg.RecordBytes <= 0 {
		cfg.RecordBytes = 1024
	}
	if cfg.Partitions <= 0 {
		cfg.Partitions = 4
	}
	if cfg.LagRate <= 0 {
		cfg.LagRate = 2e6
	}
	if cfg.LagSeconds <= 0 {
		cfg.LagSeconds = 10
	}
	if cfg.LagRounds <= 0 {
		cfg.LagRounds = 1
	}
	if cfg.ReplicationFactor <= 0 {
		cfg.ReplicationFactor = 1
	}
	cleanup, err := tempLogDir(&cfg.LogDir, "ogbench-mm2-")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	rep := &MM2Report{RunHeader: newHeader("ogbench mm2", cfg.Mode, cfg.OffsetgateBin), RecordBytes: cfg.RecordBytes, Partitions: cfg.Partitions,
		LagRateMBps: cfg.LagRate / 1e6, LagSeconds: cfg.LagSeconds, LagRounds: cfg.LagRounds, ReplicationFactor: cfg.ReplicationFactor,
		ServeYAML: cfg.ServeYAML, BaselineServeYAML: cfg.BaselineServeYAML}
	err = runMM2(ctx, cfg, rep)
	rep.Finished = time.Now().UTC()
	if err != nil {
		rep.Error = err.Error()
	}
	return rep, err
}

func runMM2(ctx context.Context, cfg MM2Config, rep *MM2Report) error {
	logf := func(format string, a ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, format+"\n", a...)
		}
	}
	id := strconv.FormatInt(time.Now().Unix()%1e6, 36) + strconv.Itoa(rand.IntN(1000))
	ogTopic, ogLag := "ogbench-og-"+id, "ogbench-og-lag-"+id
	mmTopic, mmLag := "ogbench-mm-"+id, "ogbench-mm-lag-"+id
	baseTopic, baseLag := "ogbench-og-base-"+id, "ogbench-og-base-lag-"+id
	warmTopic := "ogbench-og-warm-" + id
	filled, created := []string{ogTopic, mmTopic}, []string{ogTopic, mmTopic, ogLag, mmLag, warmTopic}
	if cfg.BaselineBin != "" {
		filled, created = append(filled, baseTopic), append(created, baseTopic, baseLag)
	}
	n := int(cfg.Bytes / int64(cfg.RecordBytes))
	payload := make([]byte, cfg.RecordBytes)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}
	// The same data set for each tool: n records, the first tenth then deleted on the source,
	// so its log starts above zero as a real source's does.
	logStart := int64(0)
	for _, topic := range created {
		if err := cfg.Source.CreateTopic(ctx, topic, int32(cfg.Partitions), int16(cfg.ReplicationFactor), nil); err != nil {
			return err
		}
	}
	scl, err := cfg.Source.Client(append(producerOpts(10*time.Millisecond), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))...)
	if err != nil {
		return err
	}
	defer scl.Close()
	sadm := kadm.NewClient(scl)
	// Warm-up: an eighth of the data set, mirrored once before anything is measured, so the
	// first tool measured does not pay for brokers that have just started or just taken the
	// data sets (without it whichever tool ran first was slower by a third and more).
	if _, err := produce(ctx, scl, warmTopic, payload, n/8, 0); err != nil {
		return err
	}
	for _, topic := range filled {
		if _, err := produce(ctx, scl, topic, payload, n, 0); err != nil {
			return err
		}
		del := kadm.Offsets{}
		per := int64(n / cfg.Partitions / 10)
		for p := 0; p < cfg.Partitions; p++ {
			del.Add(kadm.Offset{Topic: topic, Partition: int32(p), At: per})
		}
		if _, err := sadm.DeleteRecords(ctx, del); err != nil {
			return err
		}
		logStart = per
	}
	rep.SourceLogStart = logStart
	starts, err := sadm.ListStartOffsets(ctx, ogTopic)
	if err != nil {
		return err
	}
	ends, err := sadm.ListEndOffsets(ctx, ogTopic)
	if err != nil {
		return err
	}
	var records int64
	ends.Each(func(o kadm.ListedOffset) {
		s, _ := starts.Lookup(o.Topic, o.Partition)
		records += o.Offset - s.Offset
	})
	rep.Records, rep.Bytes = records, records*int64(cfg.RecordBytes)
	logf("data set: %d records of %d bytes in %d partitions (the source's log starts at %d), per tool", records, cfg.RecordBytes, cfg.Partitions, logStart)

	dcl, err := cfg.Dest.Client()
	if err != nil {
		return err
	}
	defer dcl.Close()
	dadm := kadm.NewClient(dcl)

	logf("warm-up: mirroring %d records with offsetgate, not measured", n/8)
	if err := warmUp(ctx, cfg, warmTopic, int64(n/8), dadm); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	// The copies, one tool after the other. Each tool is left running for the lag rounds; the
	// deferred stops end every process on every path, the followers (started last) first.
	og, ogSrv, err := runOffsetgateMirror(ctx, cfg, "offsetgate", "og", ogTopic, records, dadm, logf)
	if err != nil {
		return fmt.Errorf("offsetgate: %w", err)
	}
	defer ogSrv.serve.stop()
	rep.Results = append(rep.Results, *og)
	var baseSrv *ogMirror
	if cfg.BaselineBin != "" {
		bcfg := cfg
		bcfg.OffsetgateBin = cfg.BaselineBin
		bcfg.ServeYAML = cfg.BaselineServeYAML
		base, srv, err := runOffsetgateMirror(ctx, bcfg, "offsetgate-baseline", "og-base", baseTopic, records, dadm, logf)
		if err != nil {
			return fmt.Errorf("offsetgate baseline: %w", err)
		}
		baseSrv = srv
		defer baseSrv.serve.stop()
		rep.Results = append(rep.Results, *base)
	}
	mm, mmProc, err := runMirrorMaker(ctx, cfg, mmTopic, mmLag, records, dadm, logf)
	if err != nil {
		return fmt.Errorf("MirrorMaker 2: %w", err)
	}
	defer mmProc.stop()
	rep.Results = append(rep.Results, *mm)
	if mm.MBps > 0 {
		rep.Ratio = og.MBps / mm.MBps
	}

	// offsetgate's followers start only now, so that none idled beside another tool's copy.
	// MirrorMaker 2 has followed its lag topic since it started.
	ogF, err := ogSrv.follow(ogLag, "og-follow.log", logf)
	if err != nil {
		return fmt.Errorf("offsetgate: %w", err)
	}
	defer ogF.stop()
	tools := []lagTool{{result: 0, topic: ogLag, stopped: ogF.stopped, log: filepath.Join(cfg.LogDir, "og-follow.log"), metrics: []string{adminMetrics(ogSrv.serve.admin), ogF.metrics}}}
	if baseSrv != nil {
		baseF, err := baseSrv.follow(baseLag, "og-base-follow.log", logf)
		if err != nil {
			return fmt.Errorf("offsetgate baseline: %w", err)
		}
		defer baseF.stop()
		tools = append(tools, lagTool{result: 1, topic: baseLag, stopped: baseF.stopped, log: filepath.Join(cfg.LogDir, "og-base-follow.log"), metrics: []string{adminMetrics(baseSrv.serve.admin), baseF.metrics}})
	}
	tools = append(tools, lagTool{result: len(rep.Results) - 1, topic: mmLag, stopped: mmProc.stopped, log: filepath.Join(cfg.LogDir, "mm2.log")})
	return lagRounds(ctx, cfg, rep, tools, logf)
}

// RoundLoad is where the machine's CPU went during one lag round, in CPUs (CPU seconds per
// second of the round), from /proc: the brokers of both clusters, this process with every
// process below it (the mirroring tools, all of whose followers run in every round, the paced
// producer and the consumer), everything else, and the hypervisor's steal. A process that
// exited during the round is counted in Other.
type RoundLoad struct {
	Seconds float64 `json:"seconds"`
	Busy    float64 `json:"busy_cpus"`
	Kafka   float64 `json:"kafka_cpus"`
	Bench   float64 `json:"bench_cpus"`
	Other   float64 `json:"other_cpus"`
	Steal   float64 `json:"steal_cpus"`
}

// BusyOtherCPUs is the CPU of other processes above which a round counts as measured on a
// busy machine: a tenth of a CPU, a twentieth of this 2-core machine.
const BusyOtherCPUs = 0.1

// Crowded says whether the round ran on a busy machine: other processes, or the hypervisor's
// steal, above BusyOtherCPUs.
func (l RoundLoad) Crowded() bool { return l.Other > BusyOtherCPUs || l.Steal > BusyOtherCPUs }

// loadMark is the CPU counters at the start of a round.
type loadMark struct {
	at                         time.Time
	busy, steal, kafka, benchc float64
	kafkaPids                  []int
}

func markLoad(cfg MM2Config) loadMark {
	m := loadMark{at: time.Now()}
	for _, c := range []*testkafka.Cluster{cfg.Source, cfg.Dest} {
		if c != nil {
			m.kafkaPids = append(m.kafkaPids, brokerPids(c)...)
		}
	}
	m.busy, m.steal = machineCPU()
	m.kafka = cpuOf(m.kafkaPids...)
	m.benchc = cpuOf(append(descendants(os.Getpid()), os.Getpid())...)
	return m
}

// since is the load from m to now.
func (m loadMark) since() RoundLoad {
	busy, steal := machineCPU()
	secs := time.Since(m.at).Seconds()
	kafka := cpuOf(m.kafkaPids...) - m.kafka
	benchc := cpuOf(append(descendants(os.Getpid()), os.Getpid())...) - m.benchc
	l := RoundLoad{Seconds: secs, Busy: busy - m.busy, Kafka: kafka, Bench: max(benchc, 0), Steal: steal - m.steal}
	l.Other = max(l.Busy-l.Kafka-l.Bench, 0)
	if secs > 0 {
		l.Busy, l.Kafka, l.Bench, l.Other, l.Steal = l.Busy/secs, l.Kafka/secs, l.Bench/secs, l.Other/secs, l.Steal/secs
	}
	return l
}

// BusyRounds names the rounds (1-based, per tool) measured while other processes used more
// than BusyOtherCPUs CPUs or the hypervisor stole as much.
func (r MirrorResult) BusyRounds() []int {
	var out []int
	for i, l := range r.LagRoundLoad {
		if l.Crowded() {
			out = append(out, i+1)
		}
	}
	return out
}

// lagTool is one tool's following mirror in the lag rounds.
type lagTool struct {
	result  int // its index in MM2Report.Results
	topic   string
	stopped <-chan struct{} // closes if the mirror's process exits
	log     string          // the mirror's log, for errors
	metrics []string        // offsetgate's and its follower's /metrics URLs (none for MirrorMaker 2)
	lat     []time.Duration // every round's
	stages  map[string]histSample
}

// lagRounds measures the tools' lag in cfg.LagRounds rounds of LagSeconds/LagRounds each, in
// the order lagOrder gives, and fills in each tool's lag figures.
func lagRounds(ctx context.Context, cfg MM2Config, rep *MM2Report, tools []lagTool, logf func(string, ...any)) error {
	secs := cfg.LagSeconds / float64(cfg.LagRounds)
	logf("lag: %d rounds of %.1fs per tool at %.1f MB/s", cfg.LagRounds, secs, cfg.LagRate/1e6)
	var trace io.Writer
	if cfg.LagTrace != "" {
		f, err := os.Create(cfg.LagTrace)
		if err != nil {
			return fmt.Errorf("lag trace: %w", err)
		}
		defer f.Close()
		bw := bufio.NewWriter(f)
		defer bw.Flush()
		fmt.Fprintln(bw, "# tool round partition offset timestamp_ms lag_ms")
		trace = bw
	}
	for i := range tools {
		if len(tools[i].metrics) > 0 {
			var err error
			// A follower that has just started may not listen yet.
			for try := 0; try < 50; try++ {
				if tools[i].stages, err = readStages(tools[i].metrics...); err == nil {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				return fmt.Errorf("%s: reading its metrics: %w", rep.Results[tools[i].result].Tool, err)
			}
		}
	}
	for round := range cfg.LagRounds {
		for _, i := range lagOrder(round, len(tools)) {
			t := &tools[i]
			r := &rep.Results[t.result]
			var rt func(rec *kgo.Record, lag time.Duration)
			if trace != nil {
				rt = func(rec *kgo.Record, lag time.Duration) {
					fmt.Fprintf(trace, "%s %d %d %d %d %.3f\n", r.Tool, round+1, rec.Partition, rec.Offset, rec.Timestamp.UnixMilli(), float64(lag.Microseconds())/1000)
				}
			}
			mark := markLoad(cfg)
			lat, err := measureLag(ctx, cfg, t.topic, secs, t.stopped, rt)
			if err != nil {
				return fmt.Errorf("%s lag, round %d: %w; log %s:\n%s", r.Tool, round+1, err, t.log, tailFile(t.log, 20))
			}
			load := mark.since()
			t.lat = append(t.lat, lat...)
			p50, p99 := msOf(percentile(lat, 50)), msOf(percentile(lat, 99))
			r.LagRoundP50Ms = append(r.LagRoundP50Ms, p50)
			r.LagRoundP99Ms = append(r.LagRoundP99Ms, p99)
			r.LagRoundLoad = append(r.LagRoundLoad, load)
			busy := ""
			if load.Crowded() {
				busy = " (busy machine)"
			}
			logf("lag round %d/%d: %s p50 %.1f ms p99 %.1f ms; CPUs: Kafka %.2f, bench and tools %.2f, other %.2f, steal %.2f%s",
				round+1, cfg.LagRounds, r.Tool, p50, p99, load.Kafka, load.Bench, load.Other, load.Steal, busy)
		}
	}
	for _, t := range tools {
		slices.Sort(t.lat)
		r := &rep.Results[t.result]
		lagStats(r, t.lat)
		logf("%s lag at %.1f MB/s over %d rounds: p50 %.1f ms, p99 %.1f ms", r.Tool, cfg.LagRate/1e6, cfg.LagRounds, r.LagP50Ms, r.LagP99Ms)
		if len(t.metrics) == 0 {
			continue
		}
		after, err := readStages(t.metrics...)
		if err != nil {
			return fmt.Errorf("%s: reading its metrics: %w", r.Tool, err)
		}
		r.LagStages = stagesBetween(t.stages, after)
		for _, s := range stageSeries {
			if st, ok := r.LagStages[s.name]; ok {
				logf("%s lag rounds, %s: %.0f, mean %.1f ms, p50/p90/p99 within %g/%g/%g ms", r.Tool, s.name, st.Count, st.MeanMs, st.P50Ms, st.P90Ms, st.P99Ms)
			}
		}
	}
	return nil
}

// lagOrder is the order in which lag round round measures n tools: every tool once, starting
// with tool round mod n, so that over n rounds each tool takes each place once.
func lagOrder(round, n int) []int {
	o := make([]int, n)
	for i := range o {
		o[i] = (round + i) % n
	}
	return o
}

// waitCopied polls D until topic holds want records and returns when the first and the last
// arrived, measured from start.
func waitCopied(ctx context.Context, dadm *kadm.Client, topic string, want int64, start time.Time, stopped <-chan struct{}) (first, all time.Duration, err error) {
	for {
		ends, err1 := dadm.ListEndOffsets(ctx, topic)
		starts, err2 := dadm.ListStartOffsets(ctx, topic)
		if err1 == nil && err2 == nil {
			var have int64
			ends.Each(func(o kadm.ListedOffset) {
				if o.Err == nil {
					s, _ := starts.Lookup(o.Topic, o.Partition)
					have += o.Offset - max(s.Offset, 0)
				}
			})
			if have > 0 && first == 0 {
				first = time.Since(start)
			}
			if have >= want {
				return first, time.Since(start), nil
			}
		}
		select {
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		case <-stopped:
			return 0, 0, errors.New("the mirroring process exited before the copy was complete")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// warmUpValue is the value of the records measureLag sends ahead of the paced ones.
const warmUpValue = "warm-up"

// measureLag is one round on topic (the same name on both clusters): it produces to the
// source at cfg.LagRate for seconds and returns, sorted, the time from each record's creation to
// its arrival on D (each also passed to trace, when not nil, as it arrives). Later rounds measure the same topic again, so a round starts only once the
// follower has copied everything produced so far, and counts only the records made after it
// started.
func measureLag(ctx context.Context, cfg MM2Config, topic string, seconds float64, stopped <-chan struct{}, trace func(*kgo.Record, time.Duration)) ([]time.Duration, error) {
	n := max(int(cfg.LagRate*seconds/float64(cfg.RecordBytes)), 1)
	since := time.Now().Truncate(time.Millisecond) // record timestamps are in milliseconds
	pcl, err := cfg.Source.Client(append(producerOpts(5*time.Millisecond), kgo.RecordPartitioner(warmUpPartitioner{}))...)
	if err != nil {
		return nil, err
	}
	defer pcl.Close()
	// Warm-up: one record per partition, through the paced producer's client, so that neither
	// its connections nor the follower's start (loading, creating the topic on D) count as lag.
	for p := 0; p < cfg.Partitions; p++ {
		if err := pcl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: int32(p), Value: []byte(warmUpValue)}).FirstErr(); err != nil {
			return nil, err
		}
	}
	dcl, err := cfg.Dest.Client()
	if err != nil {
		return nil, err
	}
	ends, err := waitCaughtUp(ctx, kadm.NewClient(pcl), kadm.NewClient(dcl), topic, cfg.Partitions, stopped)
	dcl.Close()
	if err != nil {
		return nil, err
	}
	// The consumer starts at the warm-up records (the last before D's end), and the paced
	// producer once it has read them, so that the consumer's start does not count as lag either.
	from := make(map[int32]kgo.Offset, len(ends))
	for p, o := range ends {
		from[p] = kgo.NewOffset().At(max(o-1, 0))
	}
	cons, err := cfg.Dest.Client(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}),
		kgo.FetchMaxWait(20*time.Millisecond), kgo.MetadataMinAge(200*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer cons.Close()
	var (
		lat  []time.Duration
		warm = map[int32]bool{}
		mu   sync.Mutex
	)
	cctx, stop := context.WithCancel(ctx)
	ready, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for cctx.Err() == nil {
			fs := cons.PollFetches(cctx)
			now := time.Now()
			mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				switch {
				case r.Timestamp.Before(since):
					// An earlier round's, if the follower wrote some twice.
				case string(r.Value) == warmUpValue:
					if !warm[r.Partition] {
						warm[r.Partition] = true
						if len(warm) == cfg.Partitions {
							close(ready)
						}
					}
				default:
					lat = append(lat, now.Sub(r.Timestamp))
					if trace != nil {
						trace(r, now.Sub(r.Timestamp))
					}
				}
			})
			got := len(lat)
			mu.Unlock()
			if got >= n {
				return
			}
		}
	}()
	defer func() { stop(); <-done }()
	exited := errors.New("the mirroring process exited")
	select {
	case <-ready:
	case <-stopped:
		return nil, exited
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(30 * time.Second):
		return nil, errors.New("the consumer on the destination did not get the warm-up records in 30s")
	}
	payload := make([]byte, cfg.RecordBytes)
	if _, err := produce(ctx, pcl, topic, payload, n, cfg.LagRate); err != nil {
		return nil, err
	}
	select {
	case <-done:
	case <-stopped:
		return nil, exited
	case <-time.After(2 * time.Minute):
	}
	stop()
	<-done
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(lat) < n {
		return nil, fmt.Errorf("only %d of %d records arrived on the destination", len(lat), n)
	}
	slices.Sort(lat)
	return lat, nil
}

// waitCaughtUp polls until D holds, in every partition of topic, at least the source's end
// offset, that is until the follower has copied everything produced so far, and returns D's end
// offsets. (A tool that keeps offsets, as offsetgate does, then has exactly the source's;
// MirrorMaker 2 may write a record twice, so more is enough.)
func waitCaughtUp(ctx context.Context, sadm, dadm *kadm.Client, topic string, partitions int, stopped <-chan struct{}) (map[int32]int64, error) {
	const limit = 2 * time.Minute
	deadline := time.After(limit)
	var last string
	for {
		src, err1 := sadm.ListEndOffsets(ctx, topic)
		dst, err2 := dadm.ListEndOffsets(ctx, topic)
		if err := errors.Join(err1, err2); err != nil {
			last = err.Error()
		} else if ends, ok := caughtUp(src, dst, topic, partitions); ok {
			return ends, nil
		} else {
			last = "end offsets: source " + endsString(src, topic, partitions) + ", destination " + endsString(dst, topic, partitions)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-stopped:
			return nil, errors.New("the mirroring process exited")
		case <-deadline:
			return nil, fmt.Errorf("the follower had not caught up with the source after %v (%s)", limit, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// caughtUp says whether dst's end offset is at least src's in each of topic's partitions, and
// returns dst's when it is.
func caughtUp(src, dst kadm.ListedOffsets, topic string, partitions int) (map[int32]int64, bool) {
	ends := make(map[int32]int64, partitions)
	for p := int32(0); p < int32(partitions); p++ {
		s, ok1 := src.Lookup(topic, p)
		d, ok2 := dst.Lookup(topic, p)
		if !ok1 || !ok2 || s.Err != nil || d.Err != nil || d.Offset < s.Offset {
			return nil, false
		}
		ends[p] = d.Offset
	}
	return ends, true
}

// endsString is topic's end offsets for an error message, "-" for a partition without one.
func endsString(o kadm.ListedOffsets, topic string, partitions int) string {
	var b strings.Builder
	for p := int32(0); p < int32(partitions); p++ {
		if p > 0 {
			b.WriteByte(' ')
		}
		if l, ok := o.Lookup(topic, p); ok && l.Err == nil {
			b.WriteString(strconv.FormatInt(l.Offset, 10))
		} else {
			b.WriteByte('-')
		}
	}
	return b.String()
}

// warmUpPartitioner puts each warm-up record in the partition it names and the paced records
// round robin, so that one client produces both.
type warmUpPartitioner struct{}

func (warmUpPartitioner) ForTopic(topic string) kgo.TopicPartitioner {
	return warmUpTopicPartitioner{kgo.RoundRobinPartitioner().ForTopic(topic)}
}

type warmUpTopicPartitioner struct{ rr kgo.TopicPartitioner }

// RequiresConsistency is true for a warm-up record: Partition then chooses among all the
// topic's partitions, by number, as kgo.ManualPartitioner does.
func (p warmUpTopicPartitioner) RequiresConsistency(r *kgo.Record) bool {
	return string(r.Value) == warmUpValue
}

func (p warmUpTopicPartitioner) Partition(r *kgo.Record, n int) int {
	if string(r.Value) == warmUpValue {
		return int(r.Partition)
	}
	return p.rr.Partition(r, n)
}

// lagStats fills in r's lag figures from lat, sorted.
func lagStats(r *MirrorResult, lat []time.Duration) {
	r.LagRecords = len(lat)
	if len(lat) > 0 {
		r.LagP50Ms, r.LagP99Ms, r.LagMaxMs = msOf(percentile(lat, 50)), msOf(percentile(lat, 99)), msOf(lat[len(lat)-1])
	}
}

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func finish(r *MirrorResult, bytes, records int64, first, all time.Duration, cpu float64) {
	r.Seconds, r.FirstSeconds = all.Seconds(), first.Seconds()
	r.MBps = mbps(bytes, all)
	if all > first {
		r.SteadyMBps = mbps(bytes, all-first)
	}
	r.RecordsPerS = float64(records) / all.Seconds()
	r.CPUSeconds = cpu
	r.CPUPerGB = perGB(cpu, bytes)
}

// ogMirror is a running `offsetgate serve` and the mirroring client it approves.
type ogMirror struct {
	cfg   MM2Config
	serve *ogProc
	id    mirrorIdentity
}

// args are `offsetgate mirror`'s arguments for topic; without once the mirror follows it.
func (m *ogMirror) args(topic string, once bool) []string {
	a := append([]string{"mirror", "--source", m.cfg.Source.Bootstrap(), "--proxy", m.serve.listen, "--topics", topic}, m.id.flags...)
	a = append(a, "--replication-factor", strconv.Itoa(m.cfg.ReplicationFactor), "--parallel", strconv.Itoa(m.cfg.Partitions), "--progress", "lines")
	if once {
		a = append(a, "--once")
	}
	return a
}

// follower is a mirror left running, and how to stop it.
type follower struct {
	stopped <-chan struct{}
	stop    func()
	metrics string // its /metrics URL
}

// follow starts a mirror following topic through m, stopped with SIGINT as an operator would.
func (m *ogMirror) follow(topic, logName string, logf func(string, ...any)) (*follower, error) {
	port, err := ports.One()
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	cmd, stopped, err := startProc(m.cfg.OffsetgateBin, append(m.args(topic, false), "--metrics", addr), filepath.Join(m.cfg.LogDir, logName))
	if err != nil {
		return nil, err
	}
	return &follower{stopped: stopped, stop: func() { stopProc(cmd, stopped, syscall.SIGINT, logf) }, metrics: adminMetrics(addr)}, nil
}

// runOffsetgateMirror starts `offsetgate serve` (TLS, the mirroring identity approved) and
// measures `offsetgate mirror --once` copying topic. On success serve is left running, for the
// following mirror of the lag rounds, and the caller stops it; short prefixes the mirror's log.
func runOffsetgateMirror(ctx context.Context, cfg MM2Config, tool, short, topic string, records int64, dadm *kadm.Client, logf func(string, ...any)) (*MirrorResult, *ogMirror, error) {
	og, id, err := startMirroringServeWith(ctx, cfg.OffsetgateBin, cfg.Dest, cfg.LogDir, tool+"-mm2", "ogbench-og-*", yamlLines(cfg.ServeYAML))
	if err != nil {
		return nil, nil, err
	}
	m := &ogMirror{cfg: cfg, serve: og, id: id}
	ok := false
	defer func() {
		if !ok {
			og.stop()
		}
	}()
	r := &MirrorResult{Tool: tool}
	cpu0 := cpuOf(og.pid())
	start := time.Now()
	logPath := filepath.Join(cfg.LogDir, short+"-mirror.log")
	cmd, stopped, err := startProc(cfg.OffsetgateBin, m.args(topic, true), logPath)
	if err != nil {
		return nil, nil, err
	}
	first, all, err := waitCopied(ctx, dadm, topic, records, start, make(chan struct{}))
	if err != nil {
		stopProc(cmd, stopped, syscall.SIGINT, logf)
		return nil, nil, err
	}
	<-stopped
	cpu := cpuOf(og.pid()) - cpu0 + procTimes(cmd)
	finish(r, records*int64(cfg.RecordBytes), records, first, all, cpu)
	logf("%s: %d records in %.2fs (first after %.2fs): %.1f MB/s, CPU %.2fs", tool, records, r.Seconds, r.FirstSeconds, r.MBps, cpu)
	if exit := cmd.ProcessState.ExitCode(); exit != 0 {
		return nil, nil, fmt.Errorf("offsetgate mirror exited %d; log %s:\n%s", exit, logPath, tailFile(logPath, 20))
	}
	// What it preserved: verify through offsetgate.
	pcl, err := kgo.NewClient(kgo.SeedBrokers(og.listen), kgo.DialTLSConfig(id.tls))
	if err != nil {
		return nil, nil, err
	}
	r.Verify, r.FirstOffset = verifyLine(ctx, cfg.Source, pcl, topic)
	pcl.Close()
	ok = true
	return r, m, nil
}

// warmUp mirrors topic once with offsetgate, unmeasured.
func warmUp(ctx context.Context, cfg MM2Config, topic string, records int64, dadm *kadm.Client) error {
	og, id, err := startMirroringServe(ctx, cfg.OffsetgateBin, cfg.Dest, cfg.LogDir, "offsetgate-warm-up", "ogbench-og-*")
	if err != nil {
		return err
	}
	defer og.stop()
	args := append([]string{"mirror", "--source", cfg.Source.Bootstrap(), "--proxy", og.listen, "--topics", topic}, id.flags...)
	args = append(args, "--replication-factor", strconv.Itoa(cfg.ReplicationFactor), "--parallel", strconv.Itoa(cfg.Partitions), "--once")
	cmd, stopped, err := startProc(cfg.OffsetgateBin, args, filepath.Join(cfg.LogDir, "og-warm-up.log"))
	if err != nil {
		return err
	}
	_, _, err = waitCopied(ctx, dadm, topic, records, time.Now(), make(chan struct{}))
	if err != nil {
		stopProc(cmd, stopped, syscall.SIGINT, func(string, ...any) {})
		return err
	}
	<-stopped
	if cmd.ProcessState.ExitCode() != 0 {
		err = fmt.Errorf("offsetgate mirror exited %d", cmd.ProcessState.ExitCode())
	}
	return err
}

// mm2Properties is MirrorMaker 2's configuration: one flow, the source's topics by name, as
// many tasks as partitions, topics named as on the source (IdentityReplicationPolicy) so the
// data lands like offsetgate's, heartbeats and checkpoints off (neither tool copies groups in
// this benchmark), the copies at the run's replication factor, internal topics at 1.
func mm2Properties(src, dst string, topics []string, tasks, rf int) string {
	return fmt.Sprintf(`# MirrorMaker 2 as ogbench mm2 runs it (dedicated mode).
clusters = src, dst
src.bootstrap.servers = %s
dst.bootstrap.servers = %s
src->dst.enabled = true
dst->src.enabled = false
src->dst.topics = %s
tasks.max = %d
replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy
sync.topic.configs.enabled = false
sync.topic.acls.enabled = false
emit.heartbeats.enabled = false
emit.checkpoints.enabled = false
refresh.topics.interval.seconds = 1
replication.factor = %d
offset-syncs.topic.replication.factor = 1
heartbeats.topic.replication.factor = 1
checkpoints.topic.replication.factor = 1
config.storage.replication.factor = 1
offset.storage.replication.factor = 1
status.storage.replication.factor = 1
`, src, dst, strings.Join(topics, ","), tasks, rf)
}

// runMirrorMaker starts MirrorMaker 2 on topic and lagTopic and measures its copy of topic. On
// success it is left running, following lagTopic for the lag rounds, and the caller stops it.
func runMirrorMaker(ctx context.Context, cfg MM2Config, topic, lagTopic string, records int64, dadm *kadm.Client, logf func(string, ...any)) (*MirrorResult, *follower, error) {
	libs, err := testkafka.LibsDir()
	if err != nil {
		return nil, nil, err
	}
	if m, _ := filepath.Glob(filepath.Join(libs, "connect-mirror-[0-9]*.jar")); len(m) == 0 {
		return nil, nil, fmt.Errorf("connect-mirror is not in %s: run testenv/fetch-kafka.sh", libs)
	}
	props := filepath.Join(cfg.LogDir, "mm2.properties")
	if err := os.WriteFile(props, []byte(mm2Properties(cfg.Source.Bootstrap(), cfg.Dest.Bootstrap(), []string{topic, lagTopic}, cfg.Partitions, cfg.ReplicationFactor)), 0o644); err != nil {
		return nil, nil, err
	}
	java := "java"
	if h := os.Getenv("JAVA_HOME"); h != "" {
		java = filepath.Join(h, "bin", "java")
	}
	r := &MirrorResult{Tool: "mirrormaker2"}
	start := time.Now()
	cmd, stopped, err := startProc(java, []string{"-Xmx1g", "-cp", filepath.Join(libs, "*"), "org.apache.kafka.connect.mirror.MirrorMaker", props},
		filepath.Join(cfg.LogDir, "mm2.log"))
	if err != nil {
		return nil, nil, err
	}
	mm := &follower{stopped: stopped, stop: func() { stopProc(cmd, stopped, syscall.SIGTERM, logf) }}
	ok := false
	defer func() {
		if !ok {
			mm.stop()
		}
	}()
	first, all, err := waitCopied(ctx, dadm, topic, records, start, stopped)
	if err != nil {
		return nil, nil, fmt.Errorf("%w; log %s:\n%s", err, filepath.Join(cfg.LogDir, "mm2.log"), tailFile(filepath.Join(cfg.LogDir, "mm2.log"), 20))
	}
	cpu := cpuOf(cmd.Process.Pid)
	finish(r, records*int64(cfg.RecordBytes), records, first, all, cpu)
	logf("MirrorMaker 2: %d records in %.2fs (first after %.2fs): %.1f MB/s, CPU %.2fs", records, r.Seconds, r.FirstSeconds, r.MBps, cpu)
	dcl, err := cfg.Dest.Client()
	if err != nil {
		return nil, nil, err
	}
	r.Verify, r.FirstOffset = verifyLine(ctx, cfg.Source, dcl, topic)
	dcl.Close()
	ok = true
	return r, mm, nil
}

// verifyLine runs the prover on partition 0 (source against what a consumer of the copy sees)
// and returns its line and the copy's first offset there.
func verifyLine(ctx context.Context, src *testkafka.Cluster, copyCl *kgo.Client, topic string) (string, int64) {
	scl, err := src.Client()
	if err != nil {
		return err.Error(), -1
	}
	defer scl.Close()
	first := int64(-1)
	if st, err := kadm.NewClient(copyCl).ListStartOffsets(ctx, topic); err == nil {
		o, _ := st.Lookup(topic, 0)
		first = o.Offset
	}
	res, err := verify.Run(ctx, verify.Config{Source: scl, Proxy: copyCl, Topic: topic, Partitions: []int32{0}, CopyName: "copy"}, nil)
	if err != nil {
		return err.Error(), first
	}
	return res[0].Line(topic), first
}

// startProc starts a process with its output in a log file; stopped closes when it exits.
func startProc(bin string, args []string, logPath string) (*exec.Cmd, <-chan struct{}, error) {
	return startCmd(exec.Command(bin, args...), logPath)
}

// procTimes is an exited process's user and system CPU seconds.
func procTimes(cmd *exec.Cmd) float64 {
	if cmd.ProcessState == nil {
		return 0
	}
	return (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
}

// yamlLines ends configuration lines with a newline, so that they start on a line of their own
// and the next line does too.
func yamlLines(s string) string {
	if s != "" && !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	return s
}
