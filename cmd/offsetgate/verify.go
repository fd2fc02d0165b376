package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"offsetgate/mirror"
	"offsetgate/verify"
)

// Exit codes of `offsetgate verify`. Over several partitions the worst wins: an error, then a
// difference, then a loss at the head.
const (
	verifyIdentical = 0 // identical over the range both hold, and nothing lost at the head
	verifyDifferent = 1 // a batch or record differs (the line names the first difference)
	verifyError     = 2 // unreachable cluster, missing topic, nothing to compare, bad usage
	verifyLost      = 3 // the destination lacks records at the head that the source still holds
)

// verifyExit is the exit code for a run's results.
func verifyExit(res []verify.Result) int {
	rank := map[int]int{verifyIdentical: 0, verifyLost: 1, verifyDifferent: 2, verifyError: 3}
	code := verifyIdentical
	for _, r := range res {
		c := verifyIdentical
		switch {
		case r.Err != nil:
			c = verifyError
		case r.Diff != nil:
			c = verifyDifferent
		case r.HeadLost > 0:
			c = verifyLost
		}
		if rank[c] > rank[code] {
			code = c
		}
	}
	return code
}

func runVerify(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cf := newClientFlags(fs, true)
	topic := fs.String("topic", "", "topic to compare (required)")
	partition := fs.Int("partition", -1, "one partition (default: all)")
	level := fs.String("level", "bytes", "bytes: every batch header field and the record bytes; records: record by record")
	asJSON := fs.Bool("json", false, "print JSON instead of one line per partition")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: offsetgate verify --source HOST:PORT --proxy HOST:PORT --topic T [--partition N] [--level bytes|records]")
		fmt.Fprintln(stderr, "Compares the source and offsetgate over the range both hold, and reports what lies outside it: the")
		fmt.Fprintln(stderr, "source's tail not mirrored yet, and the source's head lost (records the source still holds below the")
		fmt.Fprintln(stderr, "copy's log start: the mirror never moves the copy's log start above the source's, so these were lost).")
		fmt.Fprintln(stderr, "Exit codes (over several partitions the first that applies: 2, 1, 3, 0):")
		fmt.Fprintln(stderr, "  0  identical over the range both hold, nothing lost at the head (a tail not mirrored yet is not a failure)")
		fmt.Fprintln(stderr, "  1  different: a batch or record differs (the line names the first difference)")
		fmt.Fprintln(stderr, "  2  error: bad usage, unreachable cluster, missing topic or partition, or nothing to compare")
		fmt.Fprintln(stderr, "  3  lost: the destination lacks records at the head that the source still holds")
		fs.PrintDefaults()
	}
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if err := cf.resolve(); err != nil {
		fmt.Fprintln(stderr, "offsetgate verify:", err)
		return verifyError
	}
	if cf.source == "" || cf.proxy == "" || *topic == "" {
		fmt.Fprintln(stderr, "offsetgate verify: --source, --proxy and --topic are required")
		return verifyError
	}
	if *level != string(verify.Bytes) && *level != string(verify.Records) {
		fmt.Fprintf(stderr, "offsetgate verify: --level %q: bytes or records\n", *level)
		return verifyError
	}
	px, err := cf.proxyClient("offsetgate-verify")
	if err != nil {
		fmt.Fprintln(stderr, "offsetgate verify:", err)
		return verifyError
	}
	defer px.Close()
	src, err := cf.sourceClient("offsetgate-verify")
	if err != nil {
		fmt.Fprintln(stderr, "offsetgate verify:", err)
		return verifyError
	}
	defer src.Close()
	// A wrong address, a topic that is not mirrored (yet) or not a mirror topic are said as
	// such, not as a difference or an offset lookup that failed.
	pxAddrs, srcAddrs := cf.proxyAddrs(), cf.sourceAddrs()
	for _, check := range []func() error{
		func() error { return mirror.Reachable(ctx, src, "the source cluster", srcAddrs) },
		func() error { return mirror.CheckOffsetgate(ctx, px, pxAddrs, srcAddrs) },
		func() error { return mirrorTopic(ctx, src, px, *topic) },
	} {
		if err := check(); err != nil {
			fmt.Fprintln(stderr, "offsetgate verify:", err)
			return verifyError
		}
	}
	cfg := verify.Config{Source: src, Proxy: px, Topic: *topic, Level: verify.Level(*level)}
	if *partition >= 0 {
		cfg.Partitions = []int32{int32(*partition)}
	}
	report := func(r verify.Result) {
		if !*asJSON {
			fmt.Fprintln(stdout, r.Line(*topic))
		}
	}
	res, err := verify.Run(ctx, cfg, report)
	if err != nil {
		fmt.Fprintln(stderr, "offsetgate verify:", err)
		return verifyError
	}
	code := verifyExit(res)
	if *asJSON {
		type line struct {
			Partition      int32  `json:"partition"`
			From           int64  `json:"from"`
			To             int64  `json:"to"`
			Batches        int64  `json:"batches"`
			Records        int64  `json:"records"`
			Bytes          int64  `json:"bytes"`
			SourceTail     int64  `json:"source_tail"`
			SourceHeadLost int64  `json:"source_head_lost"`
			SourceLogStart int64  `json:"source_log_start"`
			LogStart       int64  `json:"log_start"`
			Lost           string `json:"lost,omitempty"`
			Difference     string `json:"difference,omitempty"`
			Error          string `json:"error,omitempty"`
		}
		var out []line
		for _, r := range res {
			l := line{Partition: r.Partition, From: r.From, To: r.To, Batches: r.Batches, Records: r.Records, Bytes: r.Bytes,
				SourceTail: r.Tail, SourceHeadLost: r.HeadLost, SourceLogStart: r.SourceStart, LogStart: r.CopyStart, Lost: r.LostString()}
			if r.Diff != nil {
				l.Difference = r.Diff.String()
			}
			if r.Err != nil {
				l.Error = r.Err.Error()
			}
			out = append(out, l)
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(out)
	}
	return code
}
