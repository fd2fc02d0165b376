// Command testkafka starts the shared source and destination Kafka clusters for a test run or a
// benchmark, writes their description to a file, and stops them on SIGINT/SIGTERM or when the
// process that started it goes away.
//
//	testkafka up --state FILE [--dir DIR]
//	testkafka env --state FILE      prints export SOURCE=... DEST=... for a shell
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"offsetgate/internal/testkafka"
)

func main() {
	if len(os.Args) >= 2 && os.Args[1] == "env" {
		os.Exit(env(os.Args[2:]))
	}
	if len(os.Args) < 2 || os.Args[1] != "up" {
		fmt.Fprintln(os.Stderr, "usage: testkafka up --state FILE [--dir DIR] | testkafka env --state FILE")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("up", flag.ExitOnError)
	state := fs.String("state", "", "file to write the clusters' description to (required)")
	dir := fs.String("dir", "", "data folder (default: a temporary folder, removed at stop)")
	_ = fs.Parse(os.Args[2:])
	if *state == "" {
		fmt.Fprintln(os.Stderr, "testkafka: --state is required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()

	start := time.Now()
	pair, err := testkafka.StartPair(ctx, *dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testkafka:", err)
		os.Exit(1)
	}
	if err := testkafka.WritePairFile(pair, *state); err != nil {
		pair.Stop()
		fmt.Fprintln(os.Stderr, "testkafka: writing state:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "testkafka: Kafka %s up in %s: source %s (cluster %s), dest %s (cluster %s)\n",
		testkafka.KafkaVersion, time.Since(start).Round(time.Millisecond),
		pair.Source.Bootstrap(), pair.Source.ClusterID, pair.Dest.Bootstrap(), pair.Dest.ClusterID)

	// Stop when told to, or when the parent (the test script) is gone.
	parent := os.Getppid()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-tick.C:
			if os.Getppid() != parent {
				break loop
			}
		}
	}
	pair.Stop()
	_ = os.Remove(*state)
	fmt.Fprintln(os.Stderr, "testkafka: stopped")
}

// env prints the clusters of a state file as shell variables: SOURCE and DEST, each a
// bootstrap list host:port[,host:port...].
func env(args []string) int {
	fs := flag.NewFlagSet("env", flag.ExitOnError)
	state := fs.String("state", "", "the file testkafka up wrote (required)")
	_ = fs.Parse(args)
	if *state == "" {
		fmt.Fprintln(os.Stderr, "testkafka: --state is required")
		return 2
	}
	b, err := os.ReadFile(*state)
	if err != nil {
		fmt.Fprintf(os.Stderr, "testkafka: %v (are the clusters up? scripts/kafka starts them)\n", err)
		return 1
	}
	var p testkafka.Pair
	if err := json.Unmarshal(b, &p); err != nil || p.Source == nil || p.Dest == nil {
		fmt.Fprintf(os.Stderr, "testkafka: %s does not describe a source and a destination cluster: %v\n", *state, err)
		return 1
	}
	fmt.Printf("export SOURCE=%s\nexport DEST=%s\n", p.Source.Bootstrap(), p.Dest.Bootstrap())
	return 0
}
