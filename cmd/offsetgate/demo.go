package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"regexp"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"offsetgate/internal/ports"
	"offsetgate/internal/testcerts"
	"offsetgate/mirror"
	"offsetgate/proxy"
	"offsetgate/rules"
	ogtls "offsetgate/tls"
	"offsetgate/verify"
)

// runDemo runs the whole journey on embedded clusters (kfake, in process): a producer writes
// to the source, offsetgate fronts the destination, the mirror copies the topic offsets
// included, a consumer group moves from the source to the destination through offsetgate
// mid-stream, and the end compares source and destination record by record.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	phase := fs.Duration("phase", 3*time.Second, "how long each phase of the demo runs")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: offsetgate demo [--phase DURATION]")
		fmt.Fprintln(stderr, "Runs the whole journey in one process, on two embedded clusters (franz-go's kfake; nothing to install):")
		fmt.Fprintln(stderr, "  1. a producer writes to topic demo-orders on the source for the whole demo;")
		fmt.Fprintln(stderr, "  2. the billing consumer group reads it on the source for one phase, commits, and stops;")
		fmt.Fprintln(stderr, "  3. offsetgate (TLS) fronts the destination; offsetgate mirror follows the source with a client")
		fmt.Fprintln(stderr, "     certificate, offsets included, and copies the group's committed offsets;")
		fmt.Fprintln(stderr, "  4. the group starts again through offsetgate exactly where it stopped, for another phase;")
		fmt.Fprintln(stderr, "  5. the producer stops, the group reads to the end, the mirror catches up, and both clusters are")
		fmt.Fprintln(stderr, "     compared record by record and with offsetgate verify's prover.")
		fmt.Fprintln(stderr, "Lines start with [demo] (the story) or [mirror] (offsetgate mirror's own output). Exit 0 when every")
		fmt.Fprintln(stderr, "record is where it should be, 1 otherwise.")
		fs.PrintDefaults()
	}
	if code, done := parseFlags(fs, args); done {
		return code
	}
	stdout = &mirror.LockedWriter{W: stdout} // the demo and the mirror's partitions all report
	say := func(format string, a ...any) { fmt.Fprintf(stdout, "[demo] "+format+"\n", a...) }
	fail := func(what string, err error) int {
		fmt.Fprintf(stderr, "offsetgate demo: %s: %v\n", what, err)
		return 1
	}
	const topic, group = "demo-orders", "demo-billing"

	src, err := kfake.NewCluster(kfake.NumBrokers(2), kfake.SeedTopics(3, topic))
	if err != nil {
		return fail("starting the embedded source cluster", err)
	}
	defer src.Close()
	dst, err := kfake.NewCluster(kfake.NumBrokers(2))
	if err != nil {
		return fail("starting the embedded destination cluster", err)
	}
	defer dst.Close()
	say("source cluster %v (topic %s, 3 partitions), destination cluster %v", src.ListenAddrs(), topic, dst.ListenAddrs())

	dir, err := os.MkdirTemp("", "offsetgate-demo-")
	if err != nil {
		return fail("temporary folder", err)
	}
	defer os.RemoveAll(dir)
	certs, err := testcerts.New(dir)
	if err != nil {
		return fail("certificates", err)
	}
	mirrorID, err := certs.Client("demo-mirror", testcerts.SANs{URIs: []string{"spiffe://demo/mirror"}})
	if err != nil {
		return fail("certificates", err)
	}
	port, err := ports.Block(len(dst.ListenAddrs()) + 2)
	if err != nil {
		return fail("ports", err)
	}
	ogAddr := "127.0.0.1:" + strconv.Itoa(port)
	cfg := proxy.Config{
		Listen:    ogAddr,
		Bootstrap: dst.ListenAddrs(),
		TLS: proxy.TLSConfig{Listener: &ogtls.ServerConfig{CertFile: certs.Server.CertFile, KeyFile: certs.Server.KeyFile,
			ClientCAFile: certs.CA.CertFile, ClientAuth: "request"}},
		Mirroring: rules.MirroringConfig{Clients: []rules.ClientConfig{{Name: "demo-mirror", TLSSAN: "URI:spiffe://demo/mirror", Topics: []string{"demo-*"}}}},
	}
	srv, err := proxy.New(cfg, zap.NewNop())
	if err != nil {
		return fail("offsetgate", err)
	}
	sctx, stopServer := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Run(sctx) }()
	defer func() { stopServer(); <-served }()
	select {
	case <-srv.Ready():
	case err := <-served:
		return fail("offsetgate", err)
	}
	say("offsetgate listening on %s in front of the destination (TLS; the mirror proves its identity with a client certificate)", ogAddr)
	tlsFor := func(kp *testcerts.KeyPair) kgo.Opt { return kgo.DialTLSConfig(certs.ClientTLS(kp)) }

	// A producer writes to the source all along. It is stopped by ending its loop, never by
	// cancelling records it handed over: every record it produced is acknowledged and counted.
	var produced atomic.Int64
	var producing atomic.Bool
	producing.Store(true)
	defer producing.Store(false)
	prod, err := kgo.NewClient(kgo.SeedBrokers(src.ListenAddrs()...), kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(20*time.Millisecond))
	if err != nil {
		return fail("producer", err)
	}
	defer prod.Close()
	var produceErr atomic.Value
	var pwg sync.WaitGroup
	pwg.Add(1)
	go func() {
		defer pwg.Done()
		for i := 0; producing.Load() && ctx.Err() == nil; i++ {
			r := &kgo.Record{Key: []byte("order-" + strconv.Itoa(rand.IntN(50))), Value: []byte(fmt.Sprintf(`{"order":%d}`, i))}
			prod.Produce(context.Background(), r, func(_ *kgo.Record, err error) {
				if err != nil {
					produceErr.Store(err)
					return
				}
				produced.Add(1)
			})
			time.Sleep(2 * time.Millisecond)
		}
	}()

	// The billing consumer group starts on the source. Every record it reads is counted by
	// partition and offset, so that the end can tell distinct records from repeats.
	seen := map[string]int{}
	var seenMu sync.Mutex
	// consume runs the group until cctx ends or, once ends is set, until it has read every
	// partition up to its end (drained).
	type progress struct {
		mu   sync.Mutex
		next map[int32]int64 // next offset to read, by partition
	}
	consume := func(cctx context.Context, where string, pr *progress, opts ...kgo.Opt) (int, map[int32]int64, error) {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit()}, opts...)...)
		if err != nil {
			return 0, nil, err
		}
		defer cl.Close()
		n := 0
		first := map[int32]int64{}
		for cctx.Err() == nil {
			fs := cl.PollFetches(cctx)
			for _, r := range fs.Records() {
				k := fmt.Sprintf("%d/%d", r.Partition, r.Offset)
				seenMu.Lock()
				seen[k]++
				seenMu.Unlock()
				if _, ok := first[r.Partition]; !ok {
					first[r.Partition] = r.Offset
				}
				if pr != nil {
					pr.mu.Lock()
					pr.next[r.Partition] = r.Offset + 1
					pr.mu.Unlock()
				}
				n++
			}
			if err := cl.CommitUncommittedOffsets(ctx); err != nil {
				return n, first, fmt.Errorf("commit on %s: %w", where, err)
			}
		}
		return n, first, nil
	}
	cctx, stopConsumer := context.WithTimeout(ctx, *phase)
	onSource, _, err := consume(cctx, "source", nil, kgo.SeedBrokers(src.ListenAddrs()...))
	stopConsumer()
	if err != nil {
		return fail("billing group on the source", err)
	}
	say("billing group consumed %d records on the source, committed, and stopped", onSource)

	// The mirror follows the source and copies the group's offsets.
	mctx, stopMirror := context.WithCancel(ctx)
	defer stopMirror()
	mdone := make(chan error, 1)
	go func() {
		_, err := mirror.Follow(mctx, mirror.Config{Source: src.ListenAddrs(), Proxy: []string{ogAddr}, ProxyTLS: certs.ClientTLS(mirrorID),
			Topics: []string{topic}, ReplicationFactor: 2, Groups: regexp.MustCompile("^" + group + "$"), GroupInterval: 500 * time.Millisecond,
			Progress: &prefixed{w: stdout, prefix: "[mirror] "}, ProgressEvery: *phase})
		mdone <- err
	}()
	sadm := kadm.NewClient(clientOrNil(src.ListenAddrs()))
	dadm := kadm.NewClient(clientOrNil(dst.ListenAddrs()))
	defer sadm.Close()
	defer dadm.Close()
	moveStart := time.Now()
	var committed kadm.OffsetResponses
	for {
		so, err1 := sadm.FetchOffsets(ctx, group)
		do, err2 := dadm.FetchOffsets(ctx, group)
		if err1 == nil && err2 == nil && len(so) > 0 && fmt.Sprint(offsetsOf(so)) == fmt.Sprint(offsetsOf(do)) {
			committed = so
			break
		}
		if ctx.Err() != nil || time.Since(moveStart) > time.Minute {
			stopMirror()
			return fail("copying the group's offsets", fmt.Errorf("not copied after %v", time.Since(moveStart)))
		}
		time.Sleep(100 * time.Millisecond)
	}
	say("the mirror copied the group's committed offsets to the destination in %v: %v", time.Since(moveStart).Round(time.Millisecond), offsetsOf(committed))

	// The group starts again, against offsetgate, and carries on for a phase; then the
	// producer stops and the group reads on to the end, so that it processes every record.
	pr := &progress{next: map[int32]int64{}}
	committed.Each(func(o kadm.OffsetResponse) { pr.next[o.Partition] = o.At }) // where it resumes
	cctx, stopConsumer = context.WithCancel(ctx)
	defer stopConsumer()
	type consumed struct {
		n     int
		first map[int32]int64
		err   error
	}
	cdone := make(chan consumed, 1)
	go func() {
		n, first, err := consume(cctx, "offsetgate", pr, kgo.SeedBrokers(ogAddr), tlsFor(nil))
		cdone <- consumed{n, first, err}
	}()
	select {
	case <-time.After(*phase):
	case <-ctx.Done():
	}
	producing.Store(false)
	pwg.Wait()
	if err := prod.Flush(ctx); err != nil {
		return fail("producer", err)
	}
	if err, _ := produceErr.Load().(error); err != nil {
		return fail("producer", err)
	}
	ends, err := sadm.ListEndOffsets(ctx, topic)
	if err != nil {
		return fail("source end offsets", err)
	}
	say("the producer stopped after %d records; the billing group reads on through offsetgate to the end of every partition", produced.Load())
	deadline := time.Now().Add(time.Minute)
	for drained := false; !drained; {
		drained = true
		pr.mu.Lock()
		ends.Each(func(o kadm.ListedOffset) { drained = drained && pr.next[o.Partition] >= o.Offset })
		pr.mu.Unlock()
		if !drained && time.Now().After(deadline) {
			stopConsumer()
			return fail("billing group through offsetgate", fmt.Errorf("read up to %v of %v after a minute", pr.next, endsOf(ends)))
		}
		time.Sleep(50 * time.Millisecond)
	}
	stopConsumer()
	c := <-cdone
	if c.err != nil {
		return fail("billing group through offsetgate", c.err)
	}
	throughOG := c.n
	say("billing group consumed %d records through offsetgate, up to the end; first offsets read %v", throughOG, c.first)
	exact := true
	committed.Each(func(o kadm.OffsetResponse) {
		if f, ok := c.first[o.Partition]; ok && f != o.At {
			exact = false
			say("partition %d resumed at %d, committed %d", o.Partition, f, o.At)
		}
	})
	if exact {
		say("every partition resumed exactly at its committed offset: nothing skipped, nothing repeated")
	}

	// The mirror catches up; then both clusters are compared.
	for {
		se, _ := sadm.ListEndOffsets(ctx, topic)
		de, _ := dadm.ListEndOffsets(ctx, topic)
		if fmt.Sprint(endsOf(se)) == fmt.Sprint(endsOf(de)) {
			break
		}
		if time.Now().After(deadline) {
			stopMirror()
			return fail("catching up", fmt.Errorf("source %v, destination %v", endsOf(se), endsOf(de)))
		}
		time.Sleep(100 * time.Millisecond)
	}
	stopMirror()
	if err := <-mdone; err != nil {
		return fail("mirror", err)
	}
	diff, total, err := compare(ctx, src.ListenAddrs(), dst.ListenAddrs(), topic)
	if err != nil {
		return fail("comparing", err)
	}
	if diff != "" {
		say("MISMATCH: %s", diff)
		return 1
	}
	// The prover, as `offsetgate verify` runs it: raw batches from the source and through
	// offsetgate, every header field and the records.
	vsrc, err := kgo.NewClient(kgo.SeedBrokers(src.ListenAddrs()...))
	if err != nil {
		return fail("verify", err)
	}
	defer vsrc.Close()
	vpx, err := kgo.NewClient(kgo.SeedBrokers(ogAddr), tlsFor(nil))
	if err != nil {
		return fail("verify", err)
	}
	defer vpx.Close()
	vres, err := verify.Run(ctx, verify.Config{Source: vsrc, Proxy: vpx, Topic: topic}, func(r verify.Result) { say("verify: %s", r.Line(topic)) })
	if err != nil {
		return fail("verify", err)
	}
	for _, r := range vres {
		if r.Err != nil || r.Diff != nil {
			say("VERIFY FAILED for partition %d", r.Partition)
			return 1
		}
	}
	repeated, reads := 0, 0
	for _, n := range seen {
		reads += n
		if n > 1 {
			repeated++
		}
	}
	say("verified: %d records are at the same offsets with the same keys and values on source and destination", total)
	// The numbers add up: what the group read in both places is every record produced, each
	// once; anything else is said, with what it means.
	say("billing: %d records read on the source + %d through offsetgate = %d; %d distinct records, %d read more than once; the producer wrote %d",
		onSource, throughOG, onSource+throughOG, len(seen), repeated, produced.Load())
	switch {
	case int64(len(seen)) == produced.Load() && repeated == 0 && int64(total) == produced.Load():
		say("every record produced was mirrored and processed exactly once")
		return 0
	case repeated > 0:
		say("MISMATCH: %d records were processed twice (%d reads of %d distinct records)", repeated, reads, len(seen))
	default:
		say("MISMATCH: %d records produced, %d on the destination, %d processed", produced.Load(), total, len(seen))
	}
	return 1
}

// prefixed starts every line written through it with prefix (a write may hold several
// lines, as the mirror's progress does).
type prefixed struct {
	w      io.Writer
	prefix string
	mu     sync.Mutex
	mid    bool // the last write ended inside a line
}

func (p *prefixed) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []byte
	for rest := b; len(rest) > 0; {
		if !p.mid {
			out = append(out, p.prefix...)
		}
		line, after, nl := bytes.Cut(rest, []byte("\n"))
		out = append(out, line...)
		if nl {
			out = append(out, '\n')
		}
		p.mid, rest = !nl, after
	}
	if _, err := p.w.Write(out); err != nil {
		return 0, err
	}
	return len(b), nil
}

func clientOrNil(addrs []string) *kgo.Client {
	cl, _ := kgo.NewClient(kgo.SeedBrokers(addrs...))
	return cl
}

func offsetsOf(o kadm.OffsetResponses) map[int32]int64 {
	out := map[int32]int64{}
	o.Each(func(r kadm.OffsetResponse) { out[r.Partition] = r.At })
	return out
}

func endsOf(o kadm.ListedOffsets) map[int32]int64 {
	out := map[int32]int64{}
	o.Each(func(r kadm.ListedOffset) { out[r.Partition] = r.Offset })
	return out
}

// compare reads a topic from both clusters and reports the first difference.
func compare(ctx context.Context, a, b []string, topic string) (string, int, error) {
	read := func(addrs []string) (map[int32][]*kgo.Record, error) {
		adm := kadm.NewClient(clientOrNil(addrs))
		defer adm.Close()
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			return nil, err
		}
		want := 0
		ends.Each(func(o kadm.ListedOffset) { want += int(o.Offset) })
		cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			return nil, err
		}
		defer cl.Close()
		out := map[int32][]*kgo.Record{}
		got := 0
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		for got < want && rctx.Err() == nil {
			for _, r := range cl.PollFetches(rctx).Records() {
				out[r.Partition] = append(out[r.Partition], r)
				got++
			}
		}
		return out, rctx.Err()
	}
	sa, err := read(a)
	if err != nil {
		return "", 0, err
	}
	sb, err := read(b)
	if err != nil {
		return "", 0, err
	}
	total := 0
	parts := make([]int32, 0, len(sa))
	for p := range sa {
		parts = append(parts, p)
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
	for _, p := range parts {
		ra, rb := sa[p], sb[p]
		if len(ra) != len(rb) {
			return fmt.Sprintf("partition %d: %d records on the source, %d on the destination", p, len(ra), len(rb)), total, nil
		}
		for i := range ra {
			if ra[i].Offset != rb[i].Offset || string(ra[i].Key) != string(rb[i].Key) || string(ra[i].Value) != string(rb[i].Value) {
				return fmt.Sprintf("partition %d record %d: source offset %d, destination offset %d", p, i, ra[i].Offset, rb[i].Offset), total, nil
			}
			total++
		}
	}
	return "", total, nil
}
