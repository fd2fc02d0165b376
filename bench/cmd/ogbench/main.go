// Command ogbench benchmarks offsetgate's pass-through against a real Kafka cluster: direct
// to the brokers, through a minimal TCP relay, and through offsetgate, in one run. See
// docs/benchmarks.md; scripts/bench builds it and offsetgate and runs it.
//
//	ogbench run [--quick] [--clusters FILE] [--offsetgate BIN] [--baseline BIN] [--out FILE] [--svg FILE] ...
//	ogbench chart --in FILE [--svg FILE]     redraw the chart (and print the table) from a JSON report
//	ogbench slowreader [--offsetgate BIN] [--baseline BIN] [--clusters FILE]   RSS under a client that never reads
//	ogbench partitions [--partitions N] [--clusters FILE]   one mirror process on a topic of N partitions, against a copy loop
//	ogbench relay HOST:PORT...               the relay process (started by run)
//	ogbench copy --source ... --dest ... --topic T   the copy loop process (started by partitions)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"offsetgate/bench"
	"offsetgate/internal/testkafka"
)

func main() {
	args := os.Args[1:]
	if len(args) == 0 {
		// A bare ogbench used to start a full run (its own Kafka brokers, ten minutes and
		// more): whoever types it wants to know what it does.
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	cmd := "run"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "run":
		err = run(args)
	case "chart":
		err = chart(args)
	case "fetch":
		err = fetch(args)
	case "mm2":
		err = mm2(args)
	case "slowreader":
		err = slowReader(args)
	case "takeover":
		err = takeover(args)
	case "partitions":
		err = partitions(args)
	case "copy":
		err = bench.CopyMain(args, os.Stderr)
	case "relay":
		err = bench.RelayMain(args, os.Stdout)
	case "splicecost":
		err = bench.SpliceCostMain(args, os.Stdout)
	case "help":
		fmt.Println(usage)
	default:
		err = fmt.Errorf("unknown command %q (run, chart, fetch, mm2, slowreader, takeover, partitions, relay, copy, splicecost)", cmd)
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "ogbench:", err)
		os.Exit(1)
	}
}

const usage = "usage: ogbench run [flags] | ogbench chart --in FILE [--svg FILE] | ogbench fetch [flags] | ogbench mm2 [flags] | ogbench slowreader [flags] | ogbench takeover [flags] | ogbench partitions [flags] | ogbench relay HOST:PORT... | ogbench copy [flags] | ogbench splicecost [flags]\n(flags alone mean run; a run starts Kafka brokers of its own unless --clusters names some)\nRun `ogbench run --help` for the flags."

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a list of positive integers", s)
		}
		out = append(out, n)
	}
	return out, nil
}

func run(args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	quick := fs.Bool("quick", false, "short run for CI: 32 MiB per case, 1 round, 1000 idle connections")
	clusters := fs.String("clusters", "", "state file from scripts/kafka: use its destination cluster instead of starting one")
	ogBin := fs.String("offsetgate", "bin/offsetgate", "offsetgate binary")
	baseline := fs.String("baseline", "", "a second offsetgate binary (an earlier build) measured as path \"baseline\" in the same run (default outputs: docs/bench/baseline-DATE.json, no chart)")
	peer := fs.String("peer", "", "a grepplabs/kafka-proxy binary ("+bench.PeerVersion+") measured as path \"kafka-proxy\" in the same run (scripts/bench installs one into .cache when the module proxy serves it)")
	mib := fs.Int("mib", 0, "MiB of record payload per case and path (default 512, quick 32)")
	sizes := fs.String("sizes", "1024,65536", "record sizes in bytes, comma separated")
	parts := fs.String("partitions", "1,16", "partition counts, comma separated")
	rounds := fs.Int("rounds", 0, "rounds of every measurement, medians reported (default 5, quick 1)")
	load := fs.Float64("load", 0.5, "fixed offered load as a fraction of the direct saturation rate")
	linger := fs.Duration("linger", 10*time.Millisecond, "producer linger (franz-go's default is 10ms)")
	idle := fs.Int("idle", -1, "idle connections to open to offsetgate (default 10000, quick 1000; 0 skips)")
	out := fs.String("out", "", "JSON report (default docs/bench/passthrough-DATE.json, quick docs/bench/tmp/quick-DATE.json)")
	svg := fs.String("svg", "", "SVG chart (default docs/bench/passthrough.svg, quick docs/bench/tmp/quick.svg); \"-\" skips")
	onDisk := fs.Bool("kafka-on-disk", false, "keep the started brokers' data on disk (default: tmpfs /dev/shm when it has room)")
	logDir := fs.String("log-dir", "", "folder for the offsetgate and relay logs (default: a temporary folder)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	mode := modeName(*quick)
	quickDefault(mib, 0, *quick, 512, 32)
	quickDefault(rounds, 0, *quick, 5, 1)
	quickDefault(idle, -1, *quick, 10000, 1000)
	// Default outputs go under the repository's docs/bench (docs/bench/tmp for quick runs).
	date := time.Now().Format("2006-01-02")
	docs := docsBench()
	if *out == "" {
		switch {
		case *quick:
			*out = filepath.Join(docs, "tmp", "quick-"+date+".json")
		case *baseline != "":
			*out = filepath.Join(docs, "baseline-"+date+".json")
		default:
			*out = filepath.Join(docs, "passthrough-"+date+".json")
		}
	}
	if *svg == "" {
		switch {
		case *quick:
			*svg = filepath.Join(docs, "tmp", "quick.svg")
		case *baseline != "":
			*svg = "-" // the chart draws the three paths; the comparison is the table
		default:
			*svg = filepath.Join(docs, "passthrough.svg")
		}
	}
	sz, err := ints(*sizes)
	if err != nil {
		return err
	}
	ps, err := ints(*parts)
	if err != nil {
		return err
	}
	if _, err := os.Stat(*ogBin); err != nil {
		return fmt.Errorf("offsetgate binary: %w (build it with go build -o bin/offsetgate ./cmd/offsetgate, or run scripts/bench)", err)
	}
	if *baseline != "" {
		if _, err := os.Stat(*baseline); err != nil {
			return fmt.Errorf("baseline binary: %w", err)
		}
	}
	if *peer != "" {
		if _, err := os.Stat(*peer); err != nil {
			return fmt.Errorf("kafka-proxy binary: %w", err)
		}
	} else {
		fmt.Fprintln(os.Stderr, "ogbench: no kafka-proxy binary (--peer): the peer proxy is not measured in this run")
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	var dest *testkafka.Cluster
	kafkaData := "disk"
	if *clusters != "" {
		kafkaData = "as started by " + *clusters
		pair, err := testkafka.Load(ctx, *clusters)
		if err != nil {
			return err
		}
		dest = pair.Dest
		fmt.Fprintf(os.Stderr, "ogbench: using the destination cluster of %s: %s\n", *clusters, dest.Bootstrap())
	} else {
		start := time.Now()
		opts := testkafka.Options{Name: "bench", Brokers: 2, ExtraConfig: map[string]string{
			// Deleted topics leave the disk (or memory) a second later, not a minute.
			"log.segment.delete.delay.ms": "1000",
		}}
		// The brokers' data goes to memory when it can: the benchmark measures the network
		// path, and the page cache writing tens of GB back to a virtual disk stalls the
		// brokers at random.
		if d, ok := tmpfsDir(); ok && !*onDisk {
			opts.Dir = d
			defer os.RemoveAll(d)
			kafkaData = "tmpfs (" + filepath.Dir(d) + ")"
		}
		fmt.Fprintf(os.Stderr, "ogbench: starting Kafka %s (2 brokers, data on %s)\n", testkafka.KafkaVersion, kafkaData)
		c, err := testkafka.Start(ctx, opts)
		if err != nil {
			return err
		}
		defer c.Stop()
		dest = c
		fmt.Fprintf(os.Stderr, "ogbench: Kafka up in %s: %s\n", time.Since(start).Round(time.Millisecond), dest.Bootstrap())
	}

	cfg := bench.Config{
		Dest:          dest,
		OffsetgateBin: *ogBin,
		BaselineBin:   *baseline,
		PeerBin:       *peer,
		Relay: func(targets []string) *exec.Cmd {
			return exec.Command(exe, append([]string{"relay"}, targets...)...)
		},
		Mode:         mode,
		BytesPerCase: int64(*mib) << 20,
		RecordSizes:  sz,
		Partitions:   ps,
		Rounds:       *rounds,
		LoadFraction: *load,
		Linger:       *linger,
		KafkaData:    kafkaData,
		IdleConns:    *idle,
		LogDir:       *logDir,
		Progress:     os.Stderr,
	}
	rep, runErr := bench.Run(ctx, cfg)
	if rep == nil {
		return runErr
	}
	// A run that failed or was stopped keeps what it measured without replacing the report
	// and chart of a complete run.
	if runErr != nil {
		*out = strings.TrimSuffix(*out, ".json") + "-failed.json"
		*svg = "-"
	}
	if err := bench.WriteJSON(*out, rep); err != nil {
		return errors.Join(runErr, err)
	}
	if *svg != "-" {
		if err := bench.WriteSVGFile(*svg, rep); err != nil {
			return errors.Join(runErr, err)
		}
	}
	fmt.Println()
	bench.WriteTable(os.Stdout, rep)
	fmt.Printf("\nraw numbers: %s", *out)
	if *svg != "-" {
		fmt.Printf(", chart: %s", *svg)
	}
	fmt.Println()
	return runErr
}

// tmpfsDir makes a folder on /dev/shm when it is a tmpfs with at least 8 GiB free.
func tmpfsDir() (string, bool) {
	var st syscall.Statfs_t
	const tmpfsMagic = 0x01021994
	if err := syscall.Statfs("/dev/shm", &st); err != nil || st.Type != tmpfsMagic || st.Bavail*uint64(st.Bsize) < 8<<30 {
		return "", false
	}
	d, err := os.MkdirTemp("/dev/shm", "ogbench-kafka-")
	if err != nil {
		return "", false
	}
	return d, true
}

func chart(args []string) error {
	fs := flag.NewFlagSet("chart", flag.ContinueOnError)
	in := fs.String("in", "", "JSON report written by ogbench run or ogbench mm2 (required)")
	svg := fs.String("svg", "", "SVG file to write (default and \"-\": none, only the table)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *in == "" {
		return errors.New("chart: --in is required")
	}
	// A mirroring run's report (ogbench mm2) has a chart of its own.
	if mrep, ok, err := bench.ReadMM2JSON(*in); err != nil {
		return err
	} else if ok {
		if *svg == "" || *svg == "-" {
			return errors.New("chart: a mirroring run's report is drawn only as a chart: give --svg")
		}
		return bench.WriteMM2SVG(*svg, mrep)
	}
	rep, err := bench.ReadJSON(*in)
	if err != nil {
		return err
	}
	if *svg != "" && *svg != "-" {
		if err := bench.WriteSVGFile(*svg, rep); err != nil {
			return err
		}
	}
	bench.WriteTable(os.Stdout, rep)
	return nil
}
