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

// Exit codes of `offsetgate verify`.
const (
	verifyIdentical = 0
	verifyDifferent = 1
	verifyError     = 2
)

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
		fmt.Fprintln(stderr, "Compares the source and offsetgate over the range both hold. Exit 0: identical, 1: different, 2: error")
		fmt.Fprintln(stderr, "(comparing nothing is an error).")
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
	code := verifyIdentical
	for _, r := range res {
		switch {
		case r.Err != nil:
			code = verifyError
		case r.Diff != nil && code == verifyIdentical:
			code = verifyDifferent
		}
	}
	if *asJSON {
		type line struct {
			Partition  int32  `json:"partition"`
			From       int64  `json:"from"`
			To         int64  `json:"to"`
			Batches    int64  `json:"batches"`
			Records    int64  `json:"records"`
			Bytes      int64  `json:"bytes"`
			SourceTail int64  `json:"source_tail"`
			Difference string `json:"difference,omitempty"`
			Error      string `json:"error,omitempty"`
		}
		var out []line
		for _, r := range res {
			l := line{r.Partition, r.From, r.To, r.Batches, r.Records, r.Bytes, r.Tail, "", ""}
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
