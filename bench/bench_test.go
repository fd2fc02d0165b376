package bench_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"offsetgate/bench"
	"offsetgate/internal/testkafka"
)

// relayEnv makes the test binary run as the relay process, copyEnv as the copy process of the
// partitions benchmark (its flags separated by newlines; see TestMain).
const (
	relayEnv = "OGBENCH_TEST_RELAY_TARGETS"
	copyEnv  = "OGBENCH_TEST_COPY_ARGS"
)

func TestMain(m *testing.M) {
	if targets := os.Getenv(relayEnv); targets != "" {
		if err := bench.RelayMain(strings.Split(targets, ","), os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "relay:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if args := os.Getenv(copyEnv); args != "" {
		if err := bench.CopyMain(strings.Split(args, "\n"), os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	testkafka.Main(m)
}

type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// The benchmark runs end to end against real Kafka on a tiny data set: every path moves every
// byte and every number is filled in. No timing is asserted: the numbers of a test run on a
// shared machine mean nothing.
func TestBenchEndToEnd(t *testing.T) {
	pair := testkafka.Shared(t)
	bin := buildOffsetgate(t)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := bench.Config{
		Dest:          pair.Dest,
		OffsetgateBin: bin,
		BaselineBin:   bin, // the same binary: the comparison's plumbing, not its numbers
		Relay: func(targets []string) *exec.Cmd {
			c := exec.Command(os.Args[0], "-test.run=^$")
			c.Env = append(os.Environ(), relayEnv+"="+strings.Join(targets, ","))
			return c
		},
		Mode:         "test",
		BytesPerCase: 2 << 20,
		RecordSizes:  []int{1024, 65536},
		Partitions:   []int{1, 4},
		Rounds:       1,
		LoadFraction: 0.5,
		Linger:       10 * time.Millisecond,
		IdleConns:    50,
		Progress:     logWriter{t},
	}
	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}

	if len(rep.Cases) != 4 {
		t.Fatalf("%d cases, want 4", len(rep.Cases))
	}
	paths := append(append([]string(nil), bench.Paths...), bench.PathBaseline)
	for _, c := range rep.Cases {
		want := int64(c.Records) * int64(c.RecordBytes)
		if c.Records != int(cfg.BytesPerCase)/c.RecordBytes {
			t.Errorf("%s: %d records per path, want %d", c.Name, c.Records, int(cfg.BytesPerCase)/c.RecordBytes)
		}
		for what, ts := range map[string][]bench.Throughput{"saturation": c.Saturation, "consume": c.Consume} {
			if len(ts) != len(paths) {
				t.Fatalf("%s %s: %d paths", c.Name, what, len(ts))
			}
			for i, tp := range ts {
				if tp.Path != paths[i] || len(tp.Samples) != 1 {
					t.Fatalf("%s %s: path %q with %d samples", c.Name, what, tp.Path, len(tp.Samples))
				}
				s := tp.Samples[0]
				// Consumers also read the few small warm-up records at the head of the topic.
				if (what == "saturation" && (s.Records != int64(c.Records) || s.Bytes != want)) ||
					(what == "consume" && (s.Records <= int64(c.Records) || s.Bytes < want)) {
					t.Errorf("%s %s %s: moved %d records, %d bytes; the data set is %d records, %d bytes",
						c.Name, what, tp.Path, s.Records, s.Bytes, c.Records, want)
				}
				if tp.MBps <= 0 || s.Seconds <= 0 || tp.RatioToDirect <= 0 {
					t.Errorf("%s %s %s: no throughput (%+v)", c.Name, what, tp.Path, tp)
				}
				if (tp.Path == bench.PathDirect) != (s.PeakRSSKiB == 0) || tp.PeakRSSKiB != s.PeakRSSKiB {
					t.Errorf("%s %s %s: peak RSS %d KiB (path %d KiB); a proxy's sample has one, direct none",
						c.Name, what, tp.Path, s.PeakRSSKiB, tp.PeakRSSKiB)
				}
				for _, m := range rep.Memory {
					if m.Process == tp.Path && m.PeakRSSKiB < s.PeakRSSKiB {
						t.Errorf("%s's run peak %d KiB is below a sample's %d KiB", m.Process, m.PeakRSSKiB, s.PeakRSSKiB)
					}
				}
			}
		}
		if c.FixedLoad == nil || c.FixedLoad.OfferedMBps <= 0 || len(c.FixedLoad.Paths) != len(paths) {
			t.Fatalf("%s: fixed load missing: %+v", c.Name, c.FixedLoad)
		}
		for _, l := range c.FixedLoad.Paths {
			s := l.Samples[0]
			if s.Records != int64(c.Records) || s.Bytes != want || s.Latencies != c.Records {
				t.Errorf("%s fixed load %s: %d records, %d bytes, %d latencies; want %d records, %d bytes",
					c.Name, l.Path, s.Records, s.Bytes, s.Latencies, c.Records, want)
			}
			if l.AchievedMBps <= 0 || l.P50Ms <= 0 || l.P99Ms < l.P50Ms || l.MaxMs < l.P99Ms {
				t.Errorf("%s fixed load %s: latencies not recorded: %+v", c.Name, l.Path, l)
			}
		}
	}
	id := rep.Idle
	if id == nil || id.Opened != cfg.IdleConns || int(id.SessionsOpen) != cfg.IdleConns || id.RSSAfterKiB <= 0 || id.Error != "" {
		t.Fatalf("idle connections: %+v", id)
	}
	if id.FDsAfter < id.FDsBefore+2*cfg.IdleConns {
		t.Errorf("offsetgate holds %d descriptors with %d idle connections, %d before: the upstream connections are missing",
			id.FDsAfter, cfg.IdleConns, id.FDsBefore)
	}
	if len(rep.Targets) != 2*len(rep.Cases)+1 {
		t.Errorf("%d targets evaluated", len(rep.Targets))
	}
	if !strings.Contains(rep.Settings.Baseline, bin) {
		t.Errorf("the report does not name the baseline binary: %q", rep.Settings.Baseline)
	}
	if rep.Machine.Nproc <= 0 || rep.Versions.Go == "" || rep.Versions.Kafka == "" || rep.Versions.Offsetgate == "" {
		t.Errorf("machine or versions missing: %+v %+v", rep.Machine, rep.Versions)
	}

	// The outputs: JSON that reads back, the chart drawn from it, the table.
	dir := t.TempDir()
	path := filepath.Join(dir, "r.json")
	if err := bench.WriteJSON(path, rep); err != nil {
		t.Fatal(err)
	}
	back, err := bench.ReadJSON(path)
	if err != nil {
		t.Fatal(err)
	}
	var svg, table bytes.Buffer
	if err := bench.WriteSVG(&svg, back); err != nil {
		t.Fatal(err)
	}
	if s := svg.String(); !strings.HasPrefix(s, "<svg") || !strings.Contains(s, "offsetgate") || strings.Count(s, "<rect") < 3*4*3 {
		t.Errorf("chart: %.200s", s)
	}
	bench.WriteTable(&table, back)
	for _, want := range []string{"Produce saturation", "fixed load", "Consume", "against the baseline binary", "Idle connections", "Targets",
		"Peak RSS during each measurement", "64KiB x 4p consume"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	t.Logf("\n%s", table.String())
}

// The fetch benchmark runs end to end on a tiny data set: the mirror topic is written through
// an approved client, every path reads every record, every number is filled in. No timing is
// asserted.
func TestFetchBenchEndToEnd(t *testing.T) {
	pair := testkafka.Shared(t)
	bin := buildOffsetgate(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := bench.RunFetch(ctx, bench.FetchConfig{Source: pair.Source, Dest: pair.Dest, OffsetgateBin: bin, Mode: "test",
		Bytes: 4 << 20, RecordBytes: 1024, Partitions: 2, Rounds: 1, Progress: logWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Paths) != 3 {
		t.Fatalf("%d paths reported, want direct, passthrough and mirror", len(rep.Paths))
	}
	// CPU time comes in 10 ms ticks, and one path's 4 MB may take less than one: each
	// path's figure is at least 0, and offsetgate's CPU over both of its paths is measured.
	var proxyCPU float64
	for _, p := range rep.Paths {
		if len(p.Samples) != 1 || p.Samples[0].Bytes != 4<<20 || p.MBps <= 0 {
			t.Fatalf("path %s: %+v", p.Path, p)
		}
		if p.ProxyCPUPerGB < 0 {
			t.Fatalf("path %s: offsetgate CPU %v", p.Path, p.ProxyCPUPerGB)
		}
		if p.Path != "direct" {
			proxyCPU += p.ProxyCPUPerGB
		}
	}
	if proxyCPU <= 0 {
		t.Fatal("no offsetgate CPU measured on either of its paths")
	}
	if rep.MirrorToPassthrough <= 0 {
		t.Fatal("no mirror/passthrough ratio")
	}
}

// The MirrorMaker 2 comparison runs end to end on a tiny data set: both tools copy every
// record, both lag measurements complete, and the prover tells them apart (offsetgate's copy is
// identical to the source, MirrorMaker 2's is not). No timing is asserted.
func TestMM2BenchEndToEnd(t *testing.T) {
	pair := testkafka.Shared(t)
	bin := buildOffsetgate(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := bench.RunMM2(ctx, bench.MM2Config{Source: pair.Source, Dest: pair.Dest, OffsetgateBin: bin, Mode: "test",
		Bytes: 4 << 20, RecordBytes: 1024, Partitions: 2, LagRate: 1e6, LagSeconds: 2, ReplicationFactor: 2, Progress: logWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 2 {
		t.Fatalf("%d results, want offsetgate and mirrormaker2", len(rep.Results))
	}
	for _, r := range rep.Results {
		if r.MBps <= 0 || r.CPUSeconds <= 0 || r.LagRecords == 0 {
			t.Fatalf("%s: %+v", r.Tool, r)
		}
	}
	if !strings.HasSuffix(rep.Results[0].Verify, "identical") || strings.HasSuffix(rep.Results[1].Verify, "identical") {
		t.Fatalf("verify: offsetgate %q, MirrorMaker 2 %q", rep.Results[0].Verify, rep.Results[1].Verify)
	}
	// offsetgate's follower wrote during the lag rounds, each write with its ledger append;
	// MirrorMaker 2 has no such metrics.
	st := rep.Results[0].LagStages
	if st["write"].Count == 0 || st["ledger_append"].Count == 0 || st["land_wait"].Count == 0 || st["write"].MeanMs <= 0 {
		t.Errorf("offsetgate's lag stages: %+v", st)
	}
	if rep.Results[1].LagStages != nil || rep.ReplicationFactor != 2 {
		t.Errorf("MirrorMaker 2's lag stages %+v, replication factor %d", rep.Results[1].LagStages, rep.ReplicationFactor)
	}
}

// The slow-reader attack runs end to end on a small topic: every answer arrives, in order, and
// the memory numbers are filled in. No size is asserted here (proxy's TestHeldBytesBudget
// asserts the budget).
func TestSlowReaderBenchEndToEnd(t *testing.T) {
	pair := testkafka.Shared(t)
	bin := buildOffsetgate(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := bench.RunSlowReader(ctx, bench.SlowReaderConfig{Dest: pair.Dest, Binaries: []bench.Binary{{Name: "offsetgate", Path: bin}},
		Transports: []string{"gnet", "goroutine"}, Requests: 16, TopicBytes: 1 << 20, Hold: time.Second, Progress: logWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 2 {
		t.Fatalf("%d runs, want one per transport", len(rep.Runs))
	}
	for _, r := range rep.Runs {
		if r.Answers != 16 || r.RSSBeforeKiB <= 0 || r.RSSPeakKiB <= 0 || r.HWMEndKiB <= 0 || r.HeldHighWater <= 0 {
			t.Fatalf("%s: %+v", r.Transport, r)
		}
	}
}

// buildOffsetgate builds the offsetgate binary the benchmarks run.
func buildOffsetgate(t *testing.T) string {
	t.Helper()
	root, err := testkafka.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "offsetgate")
	build := exec.Command("go", "build", "-o", bin, "./cmd/offsetgate")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building offsetgate: %v\n%s", err, out)
	}
	return bin
}

// The takeover benchmark end to end on a small ledger (past one snapshot interval): the first
// writer replays the whole ledger, the second starts from the snapshot the first one stored.
func TestTakeoverEndToEnd(t *testing.T) {
	pair := testkafka.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := bench.RunTakeover(ctx, bench.TakeoverConfig{Dest: pair.Dest, Entries: 12000,
		Topic: testkafka.Names(t, "tko") + "-t", Progress: logWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 2 || rep.Runs[0].FromSnapshot || !rep.Runs[1].FromSnapshot {
		t.Fatalf("runs %+v: want the whole ledger first, then a snapshot", rep.Runs)
	}
	// The views: every entry found (RunTakeover checks each); the unbounded one never reads a
	// page back, the bounded ones fit this ledger (12,000 entries, about 1.4 MiB) whole.
	if len(rep.Views) != 3 || rep.Views[0].PagesRead != 0 {
		t.Fatalf("views %+v", rep.Views)
	}
}

// The partitions benchmark end to end on a small topic: both tools copy every record of every
// partition, before and after the steady phase, and every process's numbers are filled in. No
// timing or size is asserted.
func TestPartitionsBenchEndToEnd(t *testing.T) {
	pair := testkafka.Shared(t)
	bin := buildOffsetgate(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const parts, records = 16, 20
	rep, err := bench.RunPartitions(ctx, bench.PartitionsConfig{Source: pair.Source, Dest: pair.Dest, OffsetgateBin: bin,
		Copy: func(args []string) *exec.Cmd {
			c := exec.Command(os.Args[0], "-test.run=^$")
			c.Env = append(os.Environ(), copyEnv+"="+strings.Join(args, "\n"))
			return c
		},
		Mode: "test", Partitions: parts, Records: records, BatchRecords: 5, SteadyRate: 64, SteadySeconds: 2, CatchUpTimeout: 2 * time.Minute,
		Prefix: testkafka.Names(t, "kp"), Progress: logWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{bench.ToolCopy, bench.ToolOffsetgate} {
		r, ok := rep.Result(tool)
		if !ok {
			t.Fatalf("no result for %s", tool)
		}
		// The source holds a batch per 5 records, now and then a few more: 65 once in many runs,
		// where the producer closed a batch early (most likely as the new topic's metadata
		// arrived in the middle of a round). The count is read from the source itself, so it is
		// the batches both tools copied either way.
		if batches := r.Batches; r.Records != parts*records || batches < parts*records/5 || batches > parts*records/5+parts ||
			r.Complete != parts || r.SteadyRecords != 128 || r.CatchUp.Seconds <= 0 || r.Steady.Seconds <= 0 {
			t.Fatalf("%s: %+v", tool, r)
		}
		want := 1
		if tool == bench.ToolOffsetgate {
			want = 2 // serve and mirror
		}
		if len(r.CatchUp.Processes) != want || len(r.Steady.Processes) != want {
			t.Fatalf("%s: processes %+v / %+v", tool, r.CatchUp.Processes, r.Steady.Processes)
		}
		for _, p := range append(r.CatchUp.Processes, r.Steady.Processes...) {
			if p.PeakRSSKiB <= 0 || p.RSSKiB <= 0 || p.HWMKiB <= 0 || p.CPUSeconds < 0 {
				t.Fatalf("%s %s: %+v", tool, p.Process, p)
			}
		}
	}
	og, _ := rep.Result(bench.ToolOffsetgate)
	if og.CatchUp.Processes[1].Goroutines == 0 || og.CatchUp.Processes[1].HeapInuseMiB <= 0 {
		t.Fatalf("offsetgate mirror's metrics: %+v", og.CatchUp.Processes[1])
	}
	// Every partition was taken over once, and written, while catching up.
	if s := og.CatchUp.Processes[0]; s.Takeovers != parts || s.Writes < parts {
		t.Fatalf("offsetgate serve's writes: %+v", s)
	}
	// A second instance answered the ends of every partition (through source views it read).
	if og.SecondInstanceSeconds <= 0 {
		t.Fatalf("second instance not measured: %+v", og)
	}
}
