package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"offsetgate/bench"
)

// slowReader runs the slow-reader attack (bench.RunSlowReader).
func slowReader(args []string) error {
	fs := flag.NewFlagSet("slowreader", flag.ContinueOnError)
	clusters := fs.String("clusters", "", "state file from scripts/kafka: use its destination cluster")
	ogBin := fs.String("offsetgate", "bin/offsetgate", "offsetgate binary")
	baseline := fs.String("baseline", "", "an earlier offsetgate binary measured in the same run")
	transports := fs.String("transports", "gnet,goroutine", "transports, comma separated")
	requests := fs.Int("requests", 256, "Fetches the client pipelines and does not read")
	mib := fs.Int("topic-mib", 8, "MiB of records in the topic; every Fetch may answer all of it")
	hold := fs.Duration("hold", 10*time.Second, "how long the client does not read")
	out := fs.String("out", reportPath("slowreader", false), "JSON report")
	logDir := fs.String("log-dir", "", "folder for the offsetgate logs (default: a temporary folder)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	bins := []bench.Binary{{Name: "offsetgate", Path: *ogBin}}
	if *baseline != "" {
		bins = append([]bench.Binary{{Name: "baseline", Path: *baseline}}, bins...)
	}
	for _, b := range bins {
		if _, err := os.Stat(b.Path); err != nil {
			return fmt.Errorf("%s binary: %w", b.Name, err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	_, dst, stopClusters, err := sourceAndDest(ctx, *clusters)
	if err != nil {
		return err
	}
	defer stopClusters()
	rep, runErr := bench.RunSlowReader(ctx, bench.SlowReaderConfig{Dest: dst, Binaries: bins, Transports: strings.Split(*transports, ","),
		Requests: *requests, TopicBytes: *mib << 20, Hold: *hold, LogDir: *logDir, Progress: os.Stderr})
	if rep == nil {
		return runErr
	}
	if *out, err = writeReport(*out, rep, runErr != nil); err != nil {
		return errors.Join(runErr, err)
	}
	fmt.Printf("\nMiB; peak: while the client does not read; whole run: VmHWM after it read everything\n")
	fmt.Printf("%-11s %-10s %11s %9s %9s %15s %15s %9s\n", "binary", "transport", "RSS before", "RSS peak", "held", "RSS after read", "peak whole run", "answers")
	for _, r := range rep.Runs {
		held := "-"
		if r.HeldHighWater >= 0 {
			held = fmt.Sprintf("%.1f", r.HeldHighWater/(1<<20))
		}
		fmt.Printf("%-11s %-10s %11d %9d %9s %15d %15d %9d\n", r.Binary, r.Transport, r.RSSBeforeKiB>>10, r.RSSPeakKiB>>10, held,
			r.RSSAfterReadKiB>>10, r.HWMEndKiB>>10, r.Answers)
	}
	fmt.Printf("raw numbers: %s\n", *out)
	return runErr
}
