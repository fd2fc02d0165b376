package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"offsetgate/mirror"
)

// Exit codes of offsetgate mirror.
const (
	exitOK       = 0
	exitMirror   = 1 // a partition could not be mirrored (the message says which and why)
	exitUsage    = 2 // bad flags or input (nothing was written)
	exitInternal = 3
)

func runMirror(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mirror", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cf := newClientFlags(fs, true)
	topics := fs.String("topic", "", "topics to mirror, comma-separated")
	fs.StringVar(topics, "topics", "", "same as --topic")
	topicRegex := fs.String("topic-regex", "", "also mirror every source topic whose name matches this regular expression (a following run picks up new ones every --group-interval)")
	metricsAddr := fs.String("metrics", "", "serve Prometheus metrics of this run on HOST:PORT (/metrics)")
	progress := fs.String("progress", "auto", "auto: a live table on a terminal, log lines otherwise; live; lines")
	once := fs.Bool("once", false, "mirror up to the source's end at start, then exit (default: keep mirroring until interrupted)")
	maxBytes := fs.Int("max-bytes", 1<<20, "bytes per source fetch and per produce-at-offset request")
	parallel := fs.Int("parallel", mirror.DefaultParallel, "produce-at-offset writes in flight at once (and connections to each offsetgate broker); every partition is mirrored whatever its value")
	depth := fs.Int("depth", 2, "produce-at-offset requests of one partition in flight at once (1 to 4), pipelined on a writer's connection while no other partition waits for a writer; 1: each waits for the answer to the one before")
	groups := fs.String("groups", "", "copy the committed offsets of source consumer groups matching this regular expression")
	groupInterval := fs.Duration("group-interval", 5*time.Second, "how often group offsets are copied, the source's log start is followed and --topic-regex is looked at again, while following")
	resync := fs.Duration("resync", 5*time.Minute, "how often a following run sends compacted topics again from the source's log start, so offsetgate records what the source's cleaner removed since (at most 30m: the destination compacts an hour after the source must have)")
	mirrorGroup := fs.String("mirror-group", "", "share the partitions with the other following runs started with this name: Kafka's consumer-group protocol on the source assigns them and moves a stopped process's partitions to the others")
	groupSession := fs.Duration("mirror-group-session", mirror.DefaultGroupSessionTimeout, "how long the mirror group waits for a silent process before its partitions move to the others (the brokers allow 6s to 30m by default)")
	rf := fs.Int("replication-factor", -1, "replication factor of mirror topics this run creates (-1: the destination's default)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: offsetgate mirror --source HOST:PORT --proxy HOST:PORT (--topics T[,T...] | --topic-regex R) [--groups REGEX] [--once] [identity flags]")
		fmt.Fprintln(stderr, "Exit codes: 0 mirrored, 1 a partition stopped (see the message), 2 bad usage or input (nothing written), 3 internal error.")
		fmt.Fprintln(stderr, "Every partition of every topic named or matched is mirrored, whatever --parallel says: one fetch per source")
		fmt.Fprintln(stderr, "broker reads all the partitions it leads, and --parallel writers send what was read through offsetgate.")
		fmt.Fprintln(stderr, "To scale out, start several following runs with the same --mirror-group: they share the partitions.")
		fs.PrintDefaults()
	}
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if err := cf.resolve(); err != nil {
		fmt.Fprintln(stderr, "offsetgate mirror:", err)
		return exitUsage
	}
	if *parallel < 1 {
		fmt.Fprintln(stderr, "offsetgate mirror: --parallel must be at least 1")
		return exitUsage
	}
	if *depth < 1 || *depth > 4 {
		fmt.Fprintln(stderr, "offsetgate mirror: --depth must be 1 to 4 (offsetgate takes at most 4 requests of a partition at once)")
		return exitUsage
	}
	if *resync <= 0 || *resync > 30*time.Minute {
		fmt.Fprintln(stderr, "offsetgate mirror: --resync must be more than 0 and at most 30m")
		return exitUsage
	}
	if cf.source == "" || cf.proxy == "" || (*topics == "" && *topicRegex == "") {
		fmt.Fprintln(stderr, "offsetgate mirror: --source, --proxy and --topics or --topic-regex are required")
		return exitUsage
	}
	if *mirrorGroup != "" && *once {
		fmt.Fprintln(stderr, "offsetgate mirror: --mirror-group shares partitions between following runs: it cannot be used with --once")
		return exitUsage
	}
	if *groupSession < time.Second {
		fmt.Fprintln(stderr, "offsetgate mirror: --mirror-group-session must be at least 1s")
		return exitUsage
	}
	cfg := mirror.Config{Source: cf.sourceAddrs(), Proxy: cf.proxyAddrs(),
		MaxBytes: int32(*maxBytes), Parallel: *parallel, Depth: *depth, Resync: *resync,
		ReplicationFactor: int16(*rf), Progress: stdout,
		MirrorGroup: *mirrorGroup, GroupSessionTimeout: *groupSession}
	if *topics != "" {
		cfg.Topics = strings.Split(*topics, ",")
	}
	if *topicRegex != "" {
		re, err := regexp.Compile(*topicRegex)
		if err != nil {
			fmt.Fprintln(stderr, "offsetgate mirror: --topic-regex:", err)
			return exitUsage
		}
		cfg.TopicRegex = re
	}
	switch *progress {
	case "auto":
		cfg.Live = isTerminal(stdout)
	case "live":
		cfg.Live = true
	case "lines":
	default:
		fmt.Fprintf(stderr, "offsetgate mirror: --progress %q: auto, live or lines\n", *progress)
		return exitUsage
	}
	if *metricsAddr != "" {
		reg := prometheus.NewRegistry()
		// The process's own gauges too (goroutines, open descriptors), as offsetgate serve has.
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		cfg.Metrics = reg
		ln, err := net.Listen("tcp", *metricsAddr)
		if err != nil {
			fmt.Fprintln(stderr, "offsetgate mirror: --metrics:", err)
			return exitUsage
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = hs.Serve(ln) }()
		defer hs.Close()
	}
	if *groups != "" {
		re, err := regexp.Compile(*groups)
		if err != nil {
			fmt.Fprintln(stderr, "offsetgate mirror: --groups:", err)
			return exitUsage
		}
		cfg.Groups, cfg.GroupInterval = re, *groupInterval
	}
	var err error
	if cfg.ProxyTLS, err = cf.tls(); err == nil {
		cfg.ProxySASL, err = cf.sasl()
	}
	if err != nil {
		fmt.Fprintln(stderr, "offsetgate mirror:", err)
		return exitUsage
	}
	run := mirror.Follow
	if *once {
		run = mirror.Once
	}
	sum, err := run(ctx, cfg)
	var ie *mirror.InputError
	if errors.As(err, &ie) {
		// Refused before anything started: there is no summary to show.
		fmt.Fprintln(stderr, "offsetgate mirror:", err)
		fmt.Fprintln(stderr, "offsetgate mirror: nothing was written")
		return exitUsage
	}
	mirror.SortSummary(&sum)
	var batches, records, bytes int64
	for _, p := range sum.Partitions {
		batches += int64(p.Batches)
		records += p.Records
		bytes += p.Bytes
	}
	fmt.Fprintf(stdout, "mirrored %d partitions: %d batches, %d records, %d bytes in %s\n",
		len(sum.Partitions), batches, records, bytes, sum.Elapsed.Round(time.Millisecond))
	if err != nil {
		fmt.Fprintln(stderr, "offsetgate mirror:", err)
		return exitMirror
	}
	return exitOK
}

func clientTLS(ca, cert, key string) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		b, err := os.ReadFile(ca)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("no certificate in %s", ca)
		}
		tc.RootCAs = pool
	}
	if cert != "" {
		kp, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, err
		}
		tc.Certificates = []tls.Certificate{kp}
	}
	return tc, nil
}

func saslMechanism(name, user, passFile, pass string) (sasl.Mechanism, error) {
	if passFile != "" {
		b, err := os.ReadFile(passFile)
		if err != nil {
			return nil, err
		}
		pass = strings.TrimRight(string(b), "\r\n")
	}
	switch strings.ToUpper(name) {
	case "PLAIN":
		return plain.Auth{User: user, Pass: pass}.AsMechanism(), nil
	case "SCRAM-SHA-256":
		return scram.Auth{User: user, Pass: pass}.AsSha256Mechanism(), nil
	case "SCRAM-SHA-512":
		return scram.Auth{User: user, Pass: pass}.AsSha512Mechanism(), nil
	}
	return nil, fmt.Errorf("unknown SASL mechanism %q", name)
}

var _ = exitInternal

// isTerminal reports whether w is a character device (a terminal), where a live table can be
// redrawn in place.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
