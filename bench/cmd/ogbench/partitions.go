package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"offsetgate/bench"
)

// partitions runs the many-partitions benchmark (bench.RunPartitions).
func partitions(args []string) error {
	fs := flag.NewFlagSet("partitions", flag.ContinueOnError)
	clusters := fs.String("clusters", "", "state file from scripts/kafka: use its source and destination clusters")
	ogBin := fs.String("offsetgate", "bin/offsetgate", "offsetgate binary")
	parts := fs.Int("partitions", 1000, "partitions of the source topic")
	records := fs.Int("records", 200, "records per partition when the tool starts")
	size := fs.Int("size", 100, "record value size in bytes")
	batch := fs.Int("batch-records", 10, "records per source batch in the fill")
	parallel := fs.Int("parallel", 0, "offsetgate mirror --parallel (0: its default)")
	rate := fs.Float64("steady-rate", 1000, "records per second of the steady phase, round robin over the partitions")
	steadySecs := fs.Float64("steady-seconds", 30, "how long the steady phase's producer runs")
	timeout := fs.Duration("catch-up-timeout", 20*time.Minute, "a tool that has not copied every record by then failed")
	tools := fs.String("tools", "copy,offsetgate", "tools to measure, in order")
	copyLog := fs.String("copy-log-level", "", "franz-go's log level in the copy process (its log is in --log-dir)")
	pprof := fs.Bool("pprof", false, "admin_pprof on in offsetgate serve (its admin address is printed), to profile it by hand")
	prefix := fs.String("prefix", "", "topic name prefix (default: ogbench-kp-<a fresh id>)")
	out := fs.String("out", reportPath("partitions", false), "JSON report")
	keepLogs := fs.String("log-dir", "", "keep the offsetgate and copy logs in this folder (default: a temporary one, removed)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	src, dst, stopClusters, err := sourceAndDest(ctx, *clusters)
	if err != nil {
		return err
	}
	defer stopClusters()
	if *keepLogs != "" {
		if err := os.MkdirAll(*keepLogs, 0o755); err != nil {
			return err
		}
	}
	rep, runErr := bench.RunPartitions(ctx, bench.PartitionsConfig{Source: src, Dest: dst, OffsetgateBin: *ogBin,
		Copy:       func(args []string) *exec.Cmd { return exec.Command(exe, append([]string{"copy"}, args...)...) },
		Mode:       "full",
		Partitions: *parts, Records: *records, BatchRecords: *batch, RecordBytes: *size, Parallel: *parallel,
		SteadyRate: *rate, SteadySeconds: *steadySecs, CatchUpTimeout: *timeout, Prefix: *prefix,
		Tools: strings.Split(*tools, ","), CopyLogLevel: *copyLog, Pprof: *pprof,
		LogDir: *keepLogs, Progress: os.Stderr})
	if rep == nil {
		return runErr
	}
	path, err := writeReport(*out, rep, runErr != nil)
	if err != nil {
		return errors.Join(runErr, err)
	}
	printPartitions(rep)
	fmt.Printf("raw numbers: %s\n", path)
	return runErr
}

// printPartitions prints a run's table: per tool and process, catch-up then steady.
func printPartitions(rep *bench.PartitionsReport) {
	mib := func(k int64) float64 { return float64(k) / 1024 }
	fmt.Printf("\n%d partitions x %d records of %d bytes in batches of %d; mirror --parallel %d; steady %.0f records/s for %.0f s\n",
		rep.Partitions, rep.Records, rep.RecordBytes, rep.BatchRecords, rep.Parallel, rep.SteadyRate, rep.SteadySeconds)
	fmt.Printf("%-11s %-18s %9s %9s %10s %10s | %7s %10s %10s\n", "tool", "process", "catch-up", "CPU s", "peak MiB", "end MiB", "CPU %", "peak MiB", "end MiB")
	for _, r := range rep.Results {
		for i, p := range r.CatchUp.Processes {
			var s bench.ProcFigures
			if i < len(r.Steady.Processes) {
				s = r.Steady.Processes[i]
			}
			fmt.Printf("%-11s %-18s %8.1fs %9.2f %10.1f %10.1f | %6.1f%% %10.1f %10.1f\n", r.Tool, p.Process, r.CatchUp.Seconds,
				p.CPUSeconds, mib(p.PeakRSSKiB), mib(p.RSSKiB), s.CPUPercent, mib(s.PeakRSSKiB), mib(s.RSSKiB))
		}
		fmt.Printf("%-11s %d records in %d source batches; partitions complete %d of %d; steady: at most %d records behind (mean %.0f), complete %.2f s after the last\n",
			r.Tool, r.Records, r.Batches, r.Complete, rep.Partitions, r.SteadyMaxBehind, r.SteadyMeanBehind, r.DrainSeconds)
		for _, ph := range []struct {
			name string
			p    bench.PartitionsPhase
		}{{"catch-up", r.CatchUp}, {"steady", r.Steady}} {
			for _, p := range ph.p.Processes {
				if p.Writes > 0 || p.Takeovers > 0 {
					fmt.Printf("%-11s %s: %s: %d writes (mean %.0f ms), %d takeovers (mean %.0f ms), heap %.1f MiB, %d goroutines\n", r.Tool, ph.name,
						p.Process, p.Writes, 1000*p.WriteMeanSecs, p.Takeovers, 1000*p.TakeoverMeanSec, p.HeapInuseMiB, p.Goroutines)
				}
			}
		}
		if r.SecondInstanceSeconds > 0 {
			fmt.Printf("%-11s a second instance answered a ListOffsets of every partition %.2f s after its start\n", r.Tool, r.SecondInstanceSeconds)
		}
		if r.Error != "" {
			fmt.Printf("%-11s error: %s\n", r.Tool, r.Error)
		}
		for _, ph := range []struct {
			name string
			p    bench.PartitionsPhase
		}{{"catch-up", r.CatchUp}, {"steady", r.Steady}} {
			if ph.p.Seconds > 0 {
				fmt.Printf("%-11s %s: other processes %.0f%% of one CPU (steal %.0f%%), brokers %.0f%%, ogbench %.0f%%\n", r.Tool, ph.name,
					100*ph.p.OtherCPUSeconds/ph.p.Seconds, 100*ph.p.StealCPUSeconds/ph.p.Seconds,
					100*ph.p.KafkaCPUSeconds/ph.p.Seconds, 100*ph.p.HarnessCPUSeconds/ph.p.Seconds)
			}
		}
	}
}
