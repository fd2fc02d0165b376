package bench

// The mirror benchmark against Apache Kafka's MirrorMaker 2, on the same clusters and the same
// fixed data set: how fast each copies a topic (records and bytes per second, CPU), how far
// behind a paced producer each stays (end-to-end lag), and what each preserves. MirrorMaker 2
// runs as its dedicated-mode driver (org.apache.kafka.connect.mirror.MirrorMaker) from the same
// Maven cache as the brokers, with tasks.max equal to the partition count; its configuration is
// written by mm2Properties and committed as docs/bench/mm2.properties.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
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
	Mode        string
	Bytes       int64 // record payload of the data set
	RecordBytes int
	Partitions  int
	// LagRate is the paced producer's rate (bytes/s) and LagSeconds how long it runs.
	LagRate    float64
	LagSeconds float64
	LogDir     string
	Progress   io.Writer
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
}

// MM2Report is the JSON of a run.
type MM2Report struct {
	Tool           string         `json:"tool"`
	Mode           string         `json:"mode"`
	Started        time.Time      `json:"started"`
	Finished       time.Time      `json:"finished"`
	Machine        Machine        `json:"machine"`
	Versions       Versions       `json:"versions"`
	Bytes          int64          `json:"bytes"`
	Records        int64          `json:"records"`
	RecordBytes    int            `json:"record_bytes"`
	Partitions     int            `json:"partitions"`
	SourceLogStart int64          `json:"source_log_start"`
	LagRateMBps    float64        `json:"lag_rate_mb_per_s"`
	Results        []MirrorResult `json:"results"`
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
	cleanup, err := tempLogDir(&cfg.LogDir, "ogbench-mm2-")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	rep := &MM2Report{Tool: "ogbench mm2", Mode: cfg.Mode, Started: time.Now().UTC(), Machine: machineInfo(),
		Versions: versions(testkafka.KafkaVersion, cfg.OffsetgateBin), RecordBytes: cfg.RecordBytes, Partitions: cfg.Partitions,
		LagRateMBps: cfg.LagRate / 1e6}
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
		if err := cfg.Source.CreateTopic(ctx, topic, int32(cfg.Partitions), 1, nil); err != nil {
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
	og, err := runOffsetgateMirror(ctx, cfg, ogTopic, ogLag, records, dadm, logf)
	if err != nil {
		return fmt.Errorf("offsetgate: %w", err)
	}
	rep.Results = append(rep.Results, *og)
	if cfg.BaselineBin != "" {
		bcfg := cfg
		bcfg.OffsetgateBin = cfg.BaselineBin
		base, err := runOffsetgateMirror(ctx, bcfg, baseTopic, baseLag, records, dadm, logf)
		if err != nil {
			return fmt.Errorf("offsetgate baseline: %w", err)
		}
		base.Tool = "offsetgate-baseline"
		rep.Results = append(rep.Results, *base)
	}
	mm, err := runMirrorMaker(ctx, cfg, mmTopic, mmLag, records, dadm, logf)
	if err != nil {
		return fmt.Errorf("MirrorMaker 2: %w", err)
	}
	rep.Results = append(rep.Results, *mm)
	if mm.MBps > 0 {
		rep.Ratio = og.MBps / mm.MBps
	}
	return nil
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

// measureLag produces at the paced rate to the source topic and reads the destination topic,
// recording for each record the time from its creation to its arrival on D.
func measureLag(ctx context.Context, cfg MM2Config, srcTopic, dstTopic string) ([]time.Duration, error) {
	n := int(cfg.LagRate * cfg.LagSeconds / float64(cfg.RecordBytes))
	// Warm-up: one record per partition goes through first, so that the tool's start (topic
	// creation, loading) is not counted as lag.
	wcl, err := cfg.Source.Client(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return nil, err
	}
	for p := 0; p < cfg.Partitions; p++ {
		if err := wcl.ProduceSync(ctx, &kgo.Record{Topic: srcTopic, Partition: int32(p), Value: []byte("warm-up")}).FirstErr(); err != nil {
			wcl.Close()
			return nil, err
		}
	}
	wcl.Close()
	dcl, err := cfg.Dest.Client()
	if err != nil {
		return nil, err
	}
	_, _, err = waitCopied(ctx, kadm.NewClient(dcl), dstTopic, int64(cfg.Partitions), time.Now(), make(chan struct{}))
	dcl.Close()
	if err != nil {
		return nil, err
	}
	cons, err := cfg.Dest.Client(kgo.ConsumeTopics(dstTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(20*time.Millisecond), kgo.MetadataMinAge(200*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer cons.Close()
	var lat []time.Duration
	var mu sync.Mutex
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for cctx.Err() == nil {
			fs := cons.PollFetches(cctx)
			now := time.Now()
			fs.EachRecord(func(r *kgo.Record) {
				if string(r.Value) == "warm-up" {
					return
				}
				mu.Lock()
				lat = append(lat, now.Sub(r.Timestamp))
				mu.Unlock()
			})
			mu.Lock()
			got := len(lat)
			mu.Unlock()
			if got >= n {
				return
			}
		}
	}()
	pcl, err := cfg.Source.Client(append(producerOpts(5*time.Millisecond), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))...)
	if err != nil {
		return nil, err
	}
	payload := make([]byte, cfg.RecordBytes)
	_, perr := produce(ctx, pcl, srcTopic, payload, n, cfg.LagRate)
	pcl.Close()
	if perr != nil {
		return nil, perr
	}
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		stop()
		<-done
		return nil, fmt.Errorf("only %d of %d records arrived on the destination", len(lat), n)
	}
	slices.Sort(lat)
	return lat, nil
}

func lagStats(r *MirrorResult, lat []time.Duration) {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	r.LagRecords = len(lat)
	if len(lat) > 0 {
		r.LagP50Ms, r.LagP99Ms, r.LagMaxMs = ms(percentile(lat, 50)), ms(percentile(lat, 99)), ms(lat[len(lat)-1])
	}
}

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

// runOffsetgateMirror runs `offsetgate serve` (TLS, the mirroring identity approved) and
// `offsetgate mirror --once`, then a following mirror under the paced producer.
func runOffsetgateMirror(ctx context.Context, cfg MM2Config, topic, lagTopic string, records int64, dadm *kadm.Client, logf func(string, ...any)) (*MirrorResult, error) {
	og, id, err := startMirroringServe(ctx, cfg.OffsetgateBin, cfg.Dest, cfg.LogDir, "offsetgate-mm2", "ogbench-og-*")
	if err != nil {
		return nil, err
	}
	defer og.stop()
	mirrorArgs := func(topic string, once bool) []string {
		a := append([]string{"mirror", "--source", cfg.Source.Bootstrap(), "--proxy", og.listen, "--topics", topic}, id.flags...)
		a = append(a, "--replication-factor", "1", "--parallel", strconv.Itoa(cfg.Partitions), "--progress", "lines")
		if once {
			a = append(a, "--once")
		}
		return a
	}
	r := &MirrorResult{Tool: "offsetgate"}
	cpu0 := cpuOf(og.pid())
	start := time.Now()
	cmd, stopped, err := startProc(cfg.OffsetgateBin, mirrorArgs(topic, true), filepath.Join(cfg.LogDir, "og-mirror.log"))
	if err != nil {
		return nil, err
	}
	first, all, err := waitCopied(ctx, dadm, topic, records, start, make(chan struct{}))
	if err != nil {
		return nil, err
	}
	<-stopped
	cpu := cpuOf(og.pid()) - cpu0 + procTimes(cmd)
	finish(r, records*int64(cfg.RecordBytes), records, first, all, cpu)
	logf("offsetgate: %d records in %.2fs (first after %.2fs): %.1f MB/s, CPU %.2fs", records, r.Seconds, r.FirstSeconds, r.MBps, cpu)
	if exit := cmd.ProcessState.ExitCode(); exit != 0 {
		return nil, fmt.Errorf("offsetgate mirror exited %d; log %s:\n%s", exit, filepath.Join(cfg.LogDir, "og-mirror.log"), tailFile(filepath.Join(cfg.LogDir, "og-mirror.log"), 20))
	}
	// What it preserved: verify through offsetgate.
	pcl, err := kgo.NewClient(kgo.SeedBrokers(og.listen), kgo.DialTLSConfig(id.tls))
	if err != nil {
		return nil, err
	}
	r.Verify, r.FirstOffset = verifyLine(ctx, cfg.Source, pcl, topic)
	pcl.Close()

	// The paced phase: a following mirror.
	fcmd, fstopped, err := startProc(cfg.OffsetgateBin, mirrorArgs(lagTopic, false), filepath.Join(cfg.LogDir, "og-follow.log"))
	if err != nil {
		return nil, err
	}
	lat, err := measureLag(ctx, cfg, lagTopic, lagTopic)
	_ = fcmd.Process.Signal(syscall.SIGINT)
	<-fstopped
	if err != nil {
		return nil, err
	}
	lagStats(r, lat)
	logf("offsetgate lag at %.1f MB/s: p50 %.1f ms, p99 %.1f ms", cfg.LagRate/1e6, r.LagP50Ms, r.LagP99Ms)
	return r, nil
}

// warmUp mirrors topic once with offsetgate, unmeasured.
func warmUp(ctx context.Context, cfg MM2Config, topic string, records int64, dadm *kadm.Client) error {
	og, id, err := startMirroringServe(ctx, cfg.OffsetgateBin, cfg.Dest, cfg.LogDir, "offsetgate-warm-up", "ogbench-og-*")
	if err != nil {
		return err
	}
	defer og.stop()
	args := append([]string{"mirror", "--source", cfg.Source.Bootstrap(), "--proxy", og.listen, "--topics", topic}, id.flags...)
	args = append(args, "--replication-factor", "1", "--parallel", strconv.Itoa(cfg.Partitions), "--once")
	cmd, stopped, err := startProc(cfg.OffsetgateBin, args, filepath.Join(cfg.LogDir, "og-warm-up.log"))
	if err != nil {
		return err
	}
	_, _, err = waitCopied(ctx, dadm, topic, records, time.Now(), make(chan struct{}))
	<-stopped
	if err == nil && cmd.ProcessState.ExitCode() != 0 {
		err = fmt.Errorf("offsetgate mirror exited %d", cmd.ProcessState.ExitCode())
	}
	return err
}

// mm2Properties is MirrorMaker 2's configuration: one flow, the source's topics by name, as
// many tasks as partitions, topics named as on the source (IdentityReplicationPolicy) so the
// data lands like offsetgate's, heartbeats and checkpoints off (neither tool copies groups in
// this benchmark), internal topics at replication factor 1 (the destination has two brokers).
func mm2Properties(src, dst string, topics []string, tasks int) string {
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
replication.factor = 1
offset-syncs.topic.replication.factor = 1
heartbeats.topic.replication.factor = 1
checkpoints.topic.replication.factor = 1
config.storage.replication.factor = 1
offset.storage.replication.factor = 1
status.storage.replication.factor = 1
`, src, dst, strings.Join(topics, ","), tasks)
}

func runMirrorMaker(ctx context.Context, cfg MM2Config, topic, lagTopic string, records int64, dadm *kadm.Client, logf func(string, ...any)) (*MirrorResult, error) {
	libs, err := testkafka.LibsDir()
	if err != nil {
		return nil, err
	}
	if m, _ := filepath.Glob(filepath.Join(libs, "connect-mirror-[0-9]*.jar")); len(m) == 0 {
		return nil, fmt.Errorf("connect-mirror is not in %s: run testenv/fetch-kafka.sh", libs)
	}
	props := filepath.Join(cfg.LogDir, "mm2.properties")
	if err := os.WriteFile(props, []byte(mm2Properties(cfg.Source.Bootstrap(), cfg.Dest.Bootstrap(), []string{topic, lagTopic}, cfg.Partitions)), 0o644); err != nil {
		return nil, err
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
		return nil, err
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-stopped:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-stopped
		}
	}()
	first, all, err := waitCopied(ctx, dadm, topic, records, start, stopped)
	if err != nil {
		return nil, fmt.Errorf("%w; log %s:\n%s", err, filepath.Join(cfg.LogDir, "mm2.log"), tailFile(filepath.Join(cfg.LogDir, "mm2.log"), 20))
	}
	cpu := cpuOf(cmd.Process.Pid)
	finish(r, records*int64(cfg.RecordBytes), records, first, all, cpu)
	logf("MirrorMaker 2: %d records in %.2fs (first after %.2fs): %.1f MB/s, CPU %.2fs", records, r.Seconds, r.FirstSeconds, r.MBps, cpu)
	dcl, err := cfg.Dest.Client()
	if err != nil {
		return nil, err
	}
	r.Verify, r.FirstOffset = verifyLine(ctx, cfg.Source, dcl, topic)
	dcl.Close()
	lat, err := measureLag(ctx, cfg, lagTopic, lagTopic)
	if err != nil {
		return nil, err
	}
	lagStats(r, lat)
	logf("MirrorMaker 2 lag at %.1f MB/s: p50 %.1f ms, p99 %.1f ms", cfg.LagRate/1e6, r.LagP50Ms, r.LagP99Ms)
	return r, nil
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
