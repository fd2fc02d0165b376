package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/twmb/franz-go/pkg/kgo"

	"offsetgate/mirror"
)

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cf := newClientFlags(fs, true)
	asJSON := fs.Bool("json", false, "print JSON")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: offsetgate status --proxy HOST:PORT [--source HOST:PORT (to show the lag)] [--json] [identity flags]")
		fmt.Fprintln(stderr, "Every mirror partition: mirrored end, shift segments, source epoch and halts; with --source also the lag")
		fmt.Fprintln(stderr, "and what the destination lost at the head (LOST AT HEAD: records the source still holds below the mirror's")
		fmt.Fprintln(stderr, "log start). offsetgate lets only approved mirroring clients read the mirror marks: give the mirror's identity.")
		fmt.Fprintln(stderr, "Exit codes: 0 listed, 1 offsetgate could not be read, 2 bad usage.")
		fs.PrintDefaults()
	}
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if err := cf.resolve(); err != nil {
		fmt.Fprintln(stderr, "offsetgate status:", err)
		return 2
	}
	if cf.proxy == "" {
		fmt.Fprintln(stderr, "offsetgate status: --proxy is required")
		return 2
	}
	px, err := cf.proxyClient("offsetgate-status")
	if err != nil {
		fmt.Fprintln(stderr, "offsetgate status:", err)
		return 2
	}
	defer px.Close()
	var src *kgo.Client
	if cf.source != "" {
		if src, err = cf.sourceClient("offsetgate-status"); err != nil {
			fmt.Fprintln(stderr, "offsetgate status:", err)
			return 2
		}
		defer src.Close()
	}
	checks := []func() error{func() error {
		return mirror.CheckOffsetgate(ctx, px, cf.proxyAddrs(), cf.sourceAddrs())
	}}
	if src != nil {
		checks = append(checks, func() error { return mirror.Reachable(ctx, src, "the source cluster", cf.sourceAddrs()) })
	}
	for _, check := range checks {
		if err := check(); err != nil {
			fmt.Fprintln(stderr, "offsetgate status:", err)
			return 2
		}
	}
	st, err := mirror.Status(ctx, px, src)
	if err != nil {
		fmt.Fprintln(stderr, "offsetgate status:", err)
		return 1
	}
	if len(st) == 0 && !*asJSON {
		fmt.Fprintf(stdout, "no mirror topics through offsetgate at %s yet (offsetgate mirror creates them)\n", cf.proxy)
		return 0
	}
	if *asJSON {
		if st == nil {
			st = []mirror.PartitionStatus{} // [], not null
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(st)
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tMIRRORED END\tSEGMENTS (from:delta)\tSOURCE EPOCH\tLAG\tDIRECT\tSTATE")
	var notDirect []string
	for _, p := range st {
		var segs []string
		for _, s := range p.Shifts {
			segs = append(segs, fmt.Sprintf("%d:%d", s["from_source_offset"], s["delta"]))
		}
		state := p.State()
		lag := "-" // no --source: not asked for
		switch {
		case p.Lag != nil:
			lag = fmt.Sprint(*p.Lag)
		case src != nil:
			lag = "unknown"
			state += " (lag unknown: " + p.LagUnknown + ")"
		}
		if p.HeadUnknown != "" {
			state += " (head unknown: " + p.HeadUnknown + ")"
		}
		dir := "yes"
		if !p.Direct {
			dir = "no"
			notDirect = append(notDirect, fmt.Sprintf("  %s[%d]: %s", p.Topic, p.Partition, p.DirectNo))
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%s\t%s\t%s\n", p.Topic, p.Partition, p.End, strings.Join(segs, " "), p.Epoch, lag, dir, state)
	}
	_ = tw.Flush()
	// DIRECT: whether clients can leave offsetgate for the destination without an offset jump
	// (docs/operations.md, "Leaving offsetgate").
	if len(notDirect) > 0 {
		fmt.Fprintln(stdout, "\nNot yet for clients reading the destination directly (DIRECT no):")
		for _, l := range notDirect {
			fmt.Fprintln(stdout, l)
		}
	}
	return 0
}
