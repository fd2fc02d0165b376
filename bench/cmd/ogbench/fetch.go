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
	"time"

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
	mode := "full"
	if *quick {
		mode = "quick"
	}
	if *mib == 0 {
		*mib = 512
		if *quick {
			*mib = 32
		}
	}
	if *rounds == 0 {
		*rounds = 5
		if *quick {
			*rounds = 1
		}
	}
	date := time.Now().Format("2006-01-02")
	docs := docsBench()
	if *out == "" {
		*out = filepath.Join(docs, "fetch-"+date+".json")
		if *quick {
			*out = filepath.Join(docs, "tmp", "fetch-quick-"+date+".json")
		}
	}
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
