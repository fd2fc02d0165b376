package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"offsetgate/bench"
	"offsetgate/internal/testkafka"
)

// takeover runs the takeover benchmark (bench.RunTakeover) for one or more ledger sizes.
func takeover(args []string) error {
	fs := flag.NewFlagSet("takeover", flag.ContinueOnError)
	clusters := fs.String("clusters", "", "state file from scripts/kafka: use its destination cluster")
	entries := fs.String("entries", "100000,1000000", "ledger entries of the mirror partition, comma separated")
	out := fs.String("out", reportPath("takeover", false), "JSON report")
	_ = fs.String("offsetgate", "", "ignored (the writers run in this process)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run (generation, takeovers, views) to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	var sizes []int
	for _, s := range strings.Split(*entries, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("--entries: %q is not a positive count", s)
		}
		sizes = append(sizes, n)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var dst *testkafka.Cluster
	if *clusters != "" {
		pair, err := testkafka.Load(ctx, *clusters)
		if err != nil {
			return err
		}
		dst = pair.Dest
	} else {
		opts := testkafka.Options{Name: "bench-dest", Brokers: 1, HeapMB: 1024}
		if d, ok := tmpfsDir(); ok {
			opts.Dir = d
			defer os.RemoveAll(d)
		}
		c, err := testkafka.Start(ctx, opts)
		if err != nil {
			return err
		}
		defer c.Stop()
		dst = c
	}
	var reps []*bench.TakeoverReport
	var runErr error
	for _, n := range sizes {
		rep, err := bench.RunTakeover(ctx, bench.TakeoverConfig{Dest: dst, Entries: n,
			Topic: fmt.Sprintf("ogbench-takeover-%d-%d", n, time.Now().UnixNano()), Progress: os.Stderr})
		if rep != nil {
			reps = append(reps, rep)
		}
		if err != nil {
			runErr = err
			break
		}
	}
	path, err := writeReport(*out, reps, runErr != nil)
	if err != nil {
		return errors.Join(runErr, err)
	}
	fmt.Printf("\n%-10s %-13s %9s %15s %15s %9s\n", "entries", "takeover", "seconds", "peak heap MiB", "after heap MiB", "snapshot")
	for _, r := range reps {
		for _, run := range r.Runs {
			fmt.Printf("%-10d %-13s %9.2f %15.1f %15.1f %9v\n", r.Entries, run.Name, run.Seconds, run.PeakHeapMiB, run.AfterHeapMiB, run.FromSnapshot)
		}
		if len(r.Runs) == 2 && r.Runs[1].Seconds > 0 {
			fmt.Printf("%-10d %-13s %8.1fx %14.1fx\n", r.Entries, "ratio", r.Runs[0].Seconds/r.Runs[1].Seconds, r.Runs[0].PeakHeapMiB/max(r.Runs[1].PeakHeapMiB, 0.1))
		}
	}
	fmt.Printf("\n%-10s %-10s %10s %9s %9s %15s %15s %11s\n", "entries", "view", "budget MiB", "load s", "walk s", "peak heap MiB", "after heap MiB", "pages read")
	for _, r := range reps {
		for _, v := range r.Views {
			budget := "-"
			if v.BudgetMiB > 0 {
				budget = fmt.Sprintf("%.0f", v.BudgetMiB)
			}
			fmt.Printf("%-10d %-10s %10s %9.2f %9.2f %15.1f %15.1f %11d\n", r.Entries, v.Name, budget, v.LoadSeconds, v.WalkSeconds, v.PeakHeapMiB, v.AfterHeapMiB, v.PagesRead)
		}
	}
	fmt.Printf("raw numbers: %s\n", path)
	return runErr
}
