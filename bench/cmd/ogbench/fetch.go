package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"offsetgate/bench"
)

// fetch runs the source-view fetch benchmark (bench.RunFetch).
func fetch(args []string) error {
	fs := flag.NewFlagSet("fetch", flag.ContinueOnError)
	quick := fs.Bool("quick", false, "short run for CI: 32 MiB, 1 round")
	clusters := fs.String("clusters", "", "state file from scripts/kafka: use its source and destination clusters")
	ogBin := fs.String("offsetgate", "bin/offsetgate", "offsetgate binary")
	mib := fs.Int("mib", 0, "MiB of record payload per topic (default 512, quick 32)")
	size := fs.Int("size", 1024, "record size in bytes")
	parts := fs.Int("partitions", 4, "partitions")
	rounds := fs.Int("rounds", 0, "rounds, medians reported (default 5, quick 1)")
	out := fs.String("out", "", "JSON report (default docs/bench/fetch-DATE.json, quick docs/bench/tmp/fetch-quick-DATE.json)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	mode := modeName(*quick)
	quickDefault(mib, 0, *quick, 512, 32)
	quickDefault(rounds, 0, *quick, 5, 1)
	quickDefault(out, "", *quick, reportPath("fetch", false), reportPath("fetch", true))
	if _, err := os.Stat(*ogBin); err != nil {
		return fmt.Errorf("offsetgate binary: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	src, dst, stopClusters, err := sourceAndDest(ctx, *clusters)
	if err != nil {
		return err
	}
	defer stopClusters()
	rep, runErr := bench.RunFetch(ctx, bench.FetchConfig{Source: src, Dest: dst, OffsetgateBin: *ogBin, Mode: mode,
		Bytes: int64(*mib) << 20, RecordBytes: *size, Partitions: *parts, Rounds: *rounds, Progress: os.Stderr})
	if rep == nil {
		return runErr
	}
	if *out, err = writeReport(*out, rep, runErr != nil); err != nil {
		return errors.Join(runErr, err)
	}
	fmt.Printf("\n%-12s %10s %10s %18s\n", "path", "MB/s", "ratio", "offsetgate CPU s/GB")
	for _, p := range rep.Paths {
		fmt.Printf("%-12s %10.1f %10.2f %18.2f\n", p.Path, p.MBps, p.RatioToDirect, p.ProxyCPUPerGB)
	}
	fmt.Printf("mirror topic through offsetgate / ordinary topic through offsetgate: %.2f (target >= 0.90)\nraw numbers: %s\n", rep.MirrorToPassthrough, *out)
	return runErr
}
