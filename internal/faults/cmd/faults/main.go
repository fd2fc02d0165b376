// Command faults runs offsetgate's fault campaign (see package internal/faults and
// scripts/faults) and writes its report.
//
//	faults --bin bin/offsetgate [--seed N] [--count N] [--budget D] [--kinds a,b] [--replay S,S] [--report FILE]
//
// Exit codes: 0 every fault held, 1 a fault failed (the report says which, with the seed to
// replay it), 2 bad usage or the campaign could not start.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"offsetgate/internal/faults"
	"offsetgate/internal/testkafka"
)

func main() {
	fs := flag.NewFlagSet("faults", flag.ExitOnError)
	bin := fs.String("bin", "bin/offsetgate", "the offsetgate binary to run")
	seed := fs.Uint64("seed", 0, "the campaign's seed (0: one from the clock, printed)")
	count := fs.Int("count", 10, "faults to inject")
	budget := fs.Duration("budget", 10*time.Minute, "stop injecting faults after this long")
	kinds := fs.String("kinds", "", "comma-separated fault kinds (default: all): "+strings.Join(faults.KindNames(), ","))
	cycle := fs.Bool("cycle", false, "take the kinds in turn instead of letting each fault's seed pick one")
	replay := fs.String("replay", "", "comma-separated fault seeds to run, in order (from a report), instead of drawing faults")
	lease := fs.Duration("lease", 5*time.Second, "offsetgate's ownership_lease (stops last longer than it)")
	partitions := fs.Int("partitions", 4, "partitions of the mirrored topic")
	rate := fs.Int("rate", 200, "records written to the source per second")
	recovery := fs.Duration("recovery", 3*time.Minute, "how long a recovery may take before it counts as a failure")
	instances := fs.Int("instances", 1, "offsetgate instances and mirror processes (a mirror group when more than one; mirror i writes through instance i)")
	mirrorsAll := fs.Bool("mirrors-all", false, "give every mirror process all instances' addresses (its own first), so it goes on through another when its instance fails")
	compacted := fs.Bool("compacted", false, "add a compacted topic, cleaned every few seconds while written, checked after each fault once the mirror has recorded the cleaning")
	serveYAML := fs.String("serve-yaml", "", "more lines of offsetgate's configuration, appended to the campaign's (for instance 'ledger_acks: leader')")
	dir := fs.String("dir", "", "folder for the clusters, configurations and logs (default: a temporary one, kept when a fault failed)")
	report := fs.String("report", "", "write the markdown report here (default: standard output)")
	_ = fs.Parse(os.Args[1:])
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "faults: unexpected argument %q\n", fs.Arg(0))
		os.Exit(2)
	}
	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano())
	}
	cfg := faults.Config{Seed: *seed, Count: *count, Budget: *budget, Bin: *bin, Dir: *dir, Lease: *lease,
		Partitions: int32(*partitions), Rate: *rate, Recovery: *recovery, Log: os.Stderr, Cycle: *cycle, ServeYAML: *serveYAML, Instances: *instances,
		MirrorsAll: *mirrorsAll, Compacted: *compacted}
	if *kinds != "" {
		cfg.Kinds = strings.Split(*kinds, ",")
	}
	if *replay != "" {
		for _, s := range strings.Split(*replay, ",") {
			v, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
			if err != nil {
				fmt.Fprintf(os.Stderr, "faults: --replay %q: %v\n", s, err)
				os.Exit(2)
			}
			cfg.Replay = append(cfg.Replay, v)
		}
	}
	cfg.Command = fmt.Sprintf("scripts/faults --seed %d --count %d --budget %s --lease %s --partitions %d --rate %d",
		*seed, *count, *budget, *lease, *partitions, *rate)
	if *kinds != "" {
		cfg.Command += " --kinds " + *kinds
	}
	if *replay != "" {
		cfg.Command += " --replay " + *replay
	}
	if *cycle {
		cfg.Command += " --cycle"
	}
	if *instances > 1 {
		cfg.Command += fmt.Sprintf(" --instances %d", *instances)
	}
	if *mirrorsAll {
		cfg.Command += " --mirrors-all"
	}
	if *compacted {
		cfg.Command += " --compacted"
	}
	if *serveYAML != "" {
		cfg.Command += fmt.Sprintf(" --serve-yaml %q", *serveYAML)
	}
	if _, err := os.Stat(*bin); err != nil {
		fmt.Fprintf(os.Stderr, "faults: --bin: %v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	unlock, err := testkafka.LockOwnPair(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		os.Exit(2)
	}
	defer unlock()
	fmt.Fprintf(os.Stderr, "faults: seed %d\n", *seed)
	rep, err := faults.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		unlock()
		os.Exit(2)
	}
	if *report != "" {
		if err := rep.Write(*report); err != nil {
			fmt.Fprintln(os.Stderr, "faults: writing the report:", err)
		}
	} else {
		fmt.Print(rep.Markdown())
	}
	if rep.Failed() {
		fmt.Fprintf(os.Stderr, "faults: a fault failed; logs are in %s\n", rep.Dir)
		unlock()
		os.Exit(1)
	}
}
