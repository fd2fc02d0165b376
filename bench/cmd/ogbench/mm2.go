package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"offsetgate/bench"
)

// mm2 runs the comparison with MirrorMaker 2 (bench.RunMM2).
func mm2(args []string) error {
	fs := flag.NewFlagSet("mm2", flag.ContinueOnError)
	quick := fs.Bool("quick", false, "short run for CI: 16 MiB, 3 s of paced production per tool")
	clusters := fs.String("clusters", "", "state file from scripts/kafka: use its source and destination clusters")
	ogBin := fs.String("offsetgate", "bin/offsetgate", "offsetgate binary")
	baseline := fs.String("baseline", "", "a second offsetgate binary (an earlier build) measured in the same run as offsetgate-baseline")
	serveYAML := fs.String("serve-yaml", "", "more lines of offsetgate serve's configuration for offsetgate, e.g. 'data_lanes: 4'")
	baseYAML := fs.String("baseline-serve-yaml", "", "the same for the baseline (--baseline may then be the same binary)")
	mib := fs.Int("mib", 0, "MiB of record payload in the data set (default 256, quick 16)")
	size := fs.Int("size", 1024, "record size in bytes")
	parts := fs.Int("partitions", 4, "partitions (MirrorMaker 2's tasks.max)")
	lagRate := fs.Float64("lag-mbps", 2, "paced producer rate for the lag measurement, MB/s")
	lagSecs := fs.Float64("lag-seconds", 0, "how long the paced producer runs for each tool, over all lag rounds (default 15, quick 3)")
	lagTrace := fs.String("lag-trace", "", "write every lag record (tool, round, partition, offset, timestamp, lag) to this file")
	lagRounds := fs.Int("lag-rounds", 0, "lag rounds: the tools' lag is measured in turns, this many, the order rotated each round (default 4)")
	rf := fs.Int("replication-factor", 1, "replication factor of the source topics and both tools' copies (MirrorMaker 2's own default is 2)")
	out := fs.String("out", "", "JSON report (default docs/bench/mm2-DATE.json, quick docs/bench/tmp/mm2-quick-DATE.json)")
	svg := fs.String("svg", "", "SVG chart (default docs/bench/mm2.svg; quick: none)")
	keepLogs := fs.String("log-dir", "", "keep the offsetgate and MirrorMaker 2 logs in this folder (default: a temporary one, removed)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	mode := modeName(*quick)
	quickDefault(mib, 0, *quick, 256, 16)
	quickDefault(lagSecs, 0, *quick, 15, 3)
	quickDefault(lagRounds, 0, *quick, 4, 4)
	quickDefault(out, "", *quick, reportPath("mm2", false), reportPath("mm2", true))
	if *baseline != "" {
		*svg = "-" // the chart compares the two tools; a baseline run is read from the table
	}
	if *svg == "" && !*quick {
		*svg = filepath.Join(docsBench(), "mm2.svg")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	src, dst, stopClusters, err := sourceAndDest(ctx, *clusters)
	if err != nil {
		return err
	}
	defer stopClusters()
	logDir := *keepLogs
	if logDir == "" {
		if logDir, err = os.MkdirTemp("", "ogbench-mm2-"); err != nil {
			return err
		}
		defer os.RemoveAll(logDir)
	} else if err := os.MkdirAll(logDir, 0o755); err != nil {
		return err
	}
	rep, runErr := bench.RunMM2(ctx, bench.MM2Config{Source: src, Dest: dst, OffsetgateBin: *ogBin, BaselineBin: *baseline, Mode: mode,
		Bytes: int64(*mib) << 20, RecordBytes: *size, Partitions: *parts, LagRate: *lagRate * 1e6, LagSeconds: *lagSecs, LagRounds: *lagRounds, LagTrace: *lagTrace,
		ReplicationFactor: *rf, ServeYAML: *serveYAML, BaselineServeYAML: *baseYAML,
		LogDir: logDir, Progress: os.Stderr})
	if rep == nil {
		return runErr
	}
	if runErr != nil {
		*svg = ""
	}
	if *out, err = writeReport(*out, rep, runErr != nil); err != nil {
		return errors.Join(runErr, err)
	}
	if props, err := os.ReadFile(filepath.Join(logDir, "mm2.properties")); err == nil && !*quick {
		_ = os.WriteFile(filepath.Join(docsBench(), "mm2.properties"), props, 0o644)
	}
	if *svg != "" && *svg != "-" {
		if err := bench.WriteMM2SVG(*svg, rep); err != nil {
			return errors.Join(runErr, err)
		}
	}
	fmt.Printf("\n%-14s %10s %12s %12s %10s %10s %10s\n", "tool", "MB/s", "records/s", "CPU s/GB", "lag p50", "lag p99", "start s")
	for _, r := range rep.Results {
		fmt.Printf("%-14s %10.1f %12.0f %12.2f %8.0fms %8.0fms %10.2f\n", r.Tool, r.MBps, r.RecordsPerS, r.CPUPerGB, r.LagP50Ms, r.LagP99Ms, r.FirstSeconds)
	}
	if rep.LagRounds > 1 {
		// The spread between rounds tells whether the lag figures differ by more than noise.
		line := "lag p50 by round, ms:"
		for i, r := range rep.Results {
			if i > 0 {
				line += ";"
			}
			line += " " + r.Tool
			for _, p := range r.LagRoundP50Ms {
				line += fmt.Sprintf(" %.0f", p)
			}
		}
		fmt.Println(line)
	}
	for _, r := range rep.Results {
		if busy := r.BusyRounds(); len(busy) > 0 {
			fmt.Printf("%s: lag rounds %v ran on a busy machine (other processes or steal above %.1f CPU; lag_round_load in the raw numbers)\n", r.Tool, busy, bench.BusyOtherCPUs)
		}
	}
	for _, r := range rep.Results {
		fmt.Printf("%s verify: %s\n", r.Tool, r.Verify)
	}
	fmt.Printf("offsetgate / MirrorMaker 2 throughput: %.2f (target >= 2)\nraw numbers: %s\n", rep.Ratio, *out)
	return runErr
}
