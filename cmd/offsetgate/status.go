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
	proxyAddr := fs.String("proxy", "", "offsetgate bootstrap address, host:port[,...] (required)")
	source := fs.String("source", "", "source cluster, to show the lag (optional)")
	asJSON := fs.Bool("json", false, "print JSON")
	caFile := fs.String("tls-ca", "", "CA bundle to verify offsetgate's certificate (turns TLS on)")
	certFile := fs.String("tls-cert", "", "client certificate for offsetgate")
	keyFile := fs.String("tls-key", "", "client key for offsetgate")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: offsetgate status --proxy HOST:PORT [--source HOST:PORT] [--json]")
		fmt.Fprintln(stderr, "Every mirror partition: mirrored end, shift segments, source epoch and halts; with --source also the lag")
		fmt.Fprintln(stderr, "and what the destination lost at the head (LOST AT HEAD: records the source still holds below the mirror's")
		fmt.Fprintln(stderr, "log start). Exit codes: 0 listed, 1 offsetgate could not be read, 2 bad usage.")
		fs.PrintDefaults()
	}
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if *proxyAddr == "" {
		fmt.Fprintln(stderr, "offsetgate status: --proxy is required")
		return 2
	}
	opts := []kgo.Opt{kgo.SeedBrokers(strings.Split(*proxyAddr, ",")...), kgo.ClientID("offsetgate-status")}
	if *caFile != "" || *certFile != "" {
		tc, err := clientTLS(*caFile, *certFile, *keyFile)
		if err != nil {
			fmt.Fprintln(stderr, "offsetgate status:", err)
			return 2
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	px, err := kgo.NewClient(opts...)
	if err != nil {
		fmt.Fprintln(stderr, "offsetgate status:", err)
		return 2
	}
	defer px.Close()
	var src *kgo.Client
	if *source != "" {
		if src, err = kgo.NewClient(kgo.SeedBrokers(strings.Split(*source, ",")...)); err != nil {
			fmt.Fprintln(stderr, "offsetgate status:", err)
			return 2
		}
		defer src.Close()
	}
	st, err := mirror.Status(ctx, px, src)
	if err != nil {
		fmt.Fprintln(stderr, "offsetgate status:", err)
		return 1
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(st)
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tMIRRORED END\tSEGMENTS (from:delta)\tSOURCE EPOCH\tLAG\tSTATE")
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
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%s\t%s\n", p.Topic, p.Partition, p.End, strings.Join(segs, " "), p.Epoch, lag, state)
	}
	_ = tw.Flush()
	return 0
}
