package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
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

// runDemo runs the whole journey on embedded clusters (kfake, in process): offsetgate fronts
// both clusters, a producer writes to the source through it, the mirror copies the topic
// offsets included, a consumer group moves from the source to the destination live (never
// restarted), and the end compares source and destination record by record.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	phase := fs.Duration("phase", 3*time.Second, "how long each phase of the demo runs")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: offsetgate demo [--phase DURATION]")
		fmt.Fprintln(stderr, "Runs the whole journey in one process, on two embedded clusters (franz-go's kfake; nothing to install):")
		fmt.Fprintln(stderr, "  1. offsetgate fronts both clusters: a TLS listener in front of the destination for the mirror, and")
		fmt.Fprintln(stderr, "     the applications' listener in front of the source (source mode);")
		fmt.Fprintln(stderr, "  2. a producer writes to topic demo-orders through the applications' listener for the whole demo, and")
		fmt.Fprintln(stderr, "     offsetgate mirror follows the source with a client certificate, offsets included;")
		fmt.Fprintln(stderr, "  3. the billing consumer group, one process never restarted, consumes through the same listener;")
		fmt.Fprintln(stderr, "  4. after a phase, offsetgate cutover moves the group to the destination live: it drains, its")
		fmt.Fprintln(stderr, "     commits are copied once mirrored, and it goes on with the destination's coordinator;")
		fmt.Fprintln(stderr, "  5. offsetgate verify's prover compares both clusters batch by batch while the mirror follows;")
		fmt.Fprintln(stderr, "  6. offsetgate promote retires the source while the producer writes: the topic is sealed, the mirror")
		fmt.Fprintln(stderr, "     reaches the source's end, the mark is removed, and the producer and the group, never restarted,")
		fmt.Fprintln(stderr, "     go on with the destination through the same listener;")
		fmt.Fprintln(stderr, "  7. the producer stops, the group reads to the end, and both clusters are compared record by record.")
		fmt.Fprintln(stderr, "Lines start with [demo] (the story) or [mirror] (offsetgate mirror's own output). Exit 0 when every")
		fmt.Fprintln(stderr, "record is where it should be and was processed once, 1 otherwise. OFFSETGATE_DEMO_DEBUG=1 in the")
		fmt.Fprintln(stderr, "environment also prints offsetgate's and the consumer's logs (stderr).")
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
	// Two listeners: the mirror's (TLS, in front of the destination) and the applications'
	// (plain, in front of the source until their group moves; the source's brokers are
	// presented at node ids raised by 100).
	const shift = 100
	port, err := ports.Block(2 * (len(dst.ListenAddrs()) + len(src.ListenAddrs()) + 1))
	if err != nil {
		return fail("ports", err)
	}
	ogAddr := "127.0.0.1:" + strconv.Itoa(port)
	appsAddr := "127.0.0.1:" + strconv.Itoa(port+1)
	mirrorPorts, appsPorts := map[int32]int{}, map[int32]int{}
	next := port + 2
	for i := range dst.ListenAddrs() {
		mirrorPorts[int32(i)], appsPorts[int32(i)] = next, next+1
		next += 2
	}
	for i := range src.ListenAddrs() {
		appsPorts[int32(i)+shift] = next
		next++
	}
	cfg := proxy.Config{
		Bootstrap: dst.ListenAddrs(),
		Listeners: []proxy.ListenerConfig{
			{Name: "mirror", Listen: ogAddr, BrokerPorts: mirrorPorts, TLS: &ogtls.ServerConfig{CertFile: certs.Server.CertFile, KeyFile: certs.Server.KeyFile,
				ClientCAFile: certs.CA.CertFile, ClientAuth: "request"}},
			{Name: "apps", Listen: appsAddr, BrokerPorts: appsPorts, Upstream: proxy.UpstreamSource},
		},
		Source:    &proxy.SourceConfig{Bootstrap: src.ListenAddrs(), NodeIDOffset: shift},
		Mirroring: rules.MirroringConfig{Clients: []rules.ClientConfig{{Name: "demo-mirror", TLSSAN: "URI:spiffe://demo/mirror", Topics: []string{"demo-*"}}}},
	}
	demoLog := zap.NewNop()
	if os.Getenv("OFFSETGATE_DEMO_DEBUG") != "" {
		demoLog, _ = zap.NewDevelopment()
	}
	srv, err := proxy.New(cfg, demoLog)
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
	say("offsetgate: the mirror's listener %s in front of the destination (TLS; the mirror proves its identity with a client certificate),", ogAddr)
	say("the applications' listener %s in front of the source (source mode): the applications use it from the start", appsAddr)
	tlsFor := func(kp *testcerts.KeyPair) kgo.Opt { return kgo.DialTLSConfig(certs.ClientTLS(kp)) }

	// A producer writes to the source through offsetgate all along. It is stopped by ending its
	// loop, never by cancelling records it handed over: every record it produced is
	// acknowledged and counted.
	var produced atomic.Int64
	var ackMu sync.Mutex
	var acks []time.Time // when each record was acknowledged
	var producing atomic.Bool
	producing.Store(true)
	defer producing.Store(false)
	prod, err := kgo.NewClient(kgo.SeedBrokers(appsAddr), kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(20*time.Millisecond))
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
				ackMu.Lock()
				acks = append(acks, time.Now())
				ackMu.Unlock()
			})
			time.Sleep(2 * time.Millisecond)
		}
	}()

	// The mirror follows the source.
	mctx, stopMirror := context.WithCancel(ctx)
	defer stopMirror()
	mdone := make(chan error, 1)
	go func() {
		_, err := mirror.Follow(mctx, mirror.Config{Source: src.ListenAddrs(), Proxy: []string{ogAddr}, ProxyTLS: certs.ClientTLS(mirrorID),
			Topics: []string{topic}, ReplicationFactor: 2, Progress: &prefixed{w: stdout, prefix: "[mirror] "}, ProgressEvery: *phase})
		mdone <- err
	}()
	sadm := kadm.NewClient(clientOrNil(src.ListenAddrs()))
	dadm := kadm.NewClient(clientOrNil(dst.ListenAddrs()))
	defer sadm.Close()
	defer dadm.Close()

	// The billing consumer group: one process for the whole demo, never restarted. It
	// processes what a poll returns, commits it, and only then lets a rebalance go on, so each
	// record is processed once. Every record is counted by partition and offset, with when.
	seen := map[string]int{}
	var times []time.Time
	var seenMu sync.Mutex
	var moved atomic.Int64 // when the group moved (UnixNano), 0 before
	var beforeMove, afterMove atomic.Int64
	pr := map[int32]int64{} // next offset to read, by partition
	cl, err := kgo.NewClient(kgo.SeedBrokers(appsAddr), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(), kgo.WithLogger(kgo.BasicLogger(os.Stderr, demoKgoLevel(), nil)))
	if err != nil {
		return fail("billing group", err)
	}
	defer cl.CloseAllowingRebalance() // it blocks rebalances on poll
	cctx, stopConsumer := context.WithCancel(ctx)
	defer stopConsumer()
	cdone := make(chan error, 1)
	go func() {
		for cctx.Err() == nil {
			fctx, cancel := context.WithTimeout(cctx, 500*time.Millisecond)
			fs := cl.PollFetches(fctx)
			cancel()
			seenMu.Lock()
			for _, r := range fs.Records() {
				seen[fmt.Sprintf("%d/%d", r.Partition, r.Offset)]++
				times = append(times, time.Now())
				pr[r.Partition] = r.Offset + 1
				if moved.Load() == 0 {
					beforeMove.Add(1)
				} else {
					afterMove.Add(1)
				}
			}
			seenMu.Unlock()
			if err := cl.CommitUncommittedOffsets(cctx); err != nil && cctx.Err() == nil {
				cdone <- fmt.Errorf("commit: %w", err)
				return
			}
			cl.AllowRebalance()
		}
		cdone <- nil
	}()
	select {
	case <-time.After(*phase):
	case <-ctx.Done():
	}
	say("billing group processed %d records through the applications' listener, its coordinator the source's", beforeMove.Load())

	// The move, as an operator starts it: offsetgate cutover.
	say("offsetgate cutover --group %s --wait: the group moves to the destination while it consumes", group)
	moveStart := time.Now()
	cut := &prefixed{w: stdout, prefix: "[demo] cutover: "}
	if code := runCutover(ctx, []string{"--destination", strings.Join(dst.ListenAddrs(), ","), "--group", group, "--wait", "--timeout", "1m"}, cut, cut); code != 0 {
		return fail("cutover", fmt.Errorf("exit %d", code))
	}
	moved.Store(time.Now().UnixNano())
	say("the group moved in %v; the billing consumer goes on in the same process, its coordinator now the destination's", time.Since(moveStart).Round(time.Millisecond))
	select {
	case <-time.After(*phase):
	case <-ctx.Done():
	}

	// The prover, as `offsetgate verify` runs it while the mirror follows: raw batches from the
	// source and through offsetgate, every header field and the records, over what both hold.
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

	// The promotion, as an operator runs it (offsetgate promote --source --wait), while the
	// producer and the group go on: sealed, the mirror reaches the source's end, promoted.
	say("offsetgate promote --topic %s --source ... --wait 1m: the source is retired while the producer writes", topic)
	pcl, err := kgo.NewClient(kgo.SeedBrokers(ogAddr), tlsFor(mirrorID))
	if err != nil {
		return fail("promote", err)
	}
	defer pcl.Close()
	promoteStart := time.Now()
	pres, err := mirror.Promote(ctx, pcl, topic, mirror.PromoteOptions{Source: vsrc, Wait: time.Minute,
		Progress: func(msg string) { say("promote: %s", msg) }})
	if err != nil {
		return fail("promote", err)
	}
	if pres.Late > 0 {
		return fail("promote", fmt.Errorf("the source took %d records after the promotion", pres.Late))
	}
	promotedAt, promoteDone := produced.Load(), time.Now()
	say("%s promoted in %v; the producer and the billing consumer go on in the same processes, their requests for it now carried to the destination",
		topic, time.Since(promoteStart).Round(time.Millisecond))
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
	// The topic's end is the destination's now (its offsets are the source's: the mirror
	// started at 0 on both).
	ends, err := dadm.ListEndOffsets(ctx, topic)
	if err != nil {
		return fail("destination end offsets", err)
	}
	say("the producer stopped after %d records, %d of them after the promotion; the billing group reads on to the end of every partition",
		produced.Load(), produced.Load()-promotedAt)
	deadline := time.Now().Add(time.Minute)
	for drained := false; !drained; {
		drained = true
		seenMu.Lock()
		ends.Each(func(o kadm.ListedOffset) { drained = drained && pr[o.Partition] >= o.Offset })
		seenMu.Unlock()
		if !drained && time.Now().After(deadline) {
			stopConsumer()
			return fail("billing group", fmt.Errorf("read up to %v of %v after a minute", pr, endsOf(ends)))
		}
		time.Sleep(50 * time.Millisecond)
	}
	stopConsumer()
	if err := <-cdone; err != nil {
		return fail("billing group", err)
	}
	seenMu.Lock()
	sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
	// The longest gap between two processed records from a step's start until shortly after
	// it ended (the move's window stops where the promotion starts).
	longest := func(from, to time.Time) time.Duration {
		var gap time.Duration
		for i := 1; i < len(times); i++ {
			if times[i].After(from) && times[i-1].Before(to) {
				gap = max(gap, times[i].Sub(times[i-1]))
			}
		}
		return gap
	}
	moveEnd := time.Unix(0, moved.Load()).Add(5 * time.Second)
	if moveEnd.After(promoteStart) {
		moveEnd = promoteStart
	}
	pause := longest(moveStart, moveEnd)
	promotePause := longest(promoteStart, promoteDone.Add(5*time.Second))
	seenMu.Unlock()
	ackMu.Lock()
	sort.Slice(acks, func(i, j int) bool { return acks[i].Before(acks[j]) })
	var held time.Duration
	for i := 1; i < len(acks); i++ {
		if acks[i].After(promoteStart) && acks[i-1].Before(promoteDone.Add(5*time.Second)) {
			held = max(held, acks[i].Sub(acks[i-1]))
		}
	}
	ackMu.Unlock()
	say("the billing consumer was never restarted; its longest pause around the move: %v, around the promotion: %v (a fetch waiting at the source when the seal began waits on there, at most source.fetch_max_wait: 1 s); the producer's around the promotion: %v (the seal holds its writes until the promotion carries them to the destination)",
		pause.Round(time.Millisecond), promotePause.Round(time.Millisecond), held.Round(time.Millisecond))
	// The group's commits are on the destination, read back through offsetgate in source terms.
	dcommits, err := dadm.FetchOffsets(ctx, group)
	if err != nil || dcommits.Error() != nil {
		return fail("the group on the destination", fmt.Errorf("%v %v", err, dcommits.Error()))
	}
	say("the group's commits on the destination (destination offsets, which offsetgate serves as the source's): %v", offsetsOf(dcommits))

	// The mirror has nothing more to copy since the seal; both clusters are compared: the
	// source's records are on the destination at the same offsets, and after them the
	// records written since the promotion.
	stopMirror()
	if err := <-mdone; err != nil {
		return fail("mirror", err)
	}
	diff, total, after, err := compare(ctx, src.ListenAddrs(), dst.ListenAddrs(), topic)
	if err != nil {
		return fail("comparing", err)
	}
	if diff != "" {
		say("MISMATCH: %s", diff)
		return 1
	}
	repeated, reads := 0, 0
	for _, n := range seen {
		reads += n
		if n > 1 {
			repeated++
		}
	}
	say("verified: %d records are at the same offsets with the same keys and values on source and destination", total)
	say("promoted: %d records written after the promotion are on the destination only, right after them", after)
	// The numbers add up: what the group read in both places is every record produced, each
	// once; anything else is said, with what it means.
	say("billing: %d records processed before the move + %d after = %d; %d distinct records, %d read more than once; the producer wrote %d",
		beforeMove.Load(), afterMove.Load(), beforeMove.Load()+afterMove.Load(), len(seen), repeated, produced.Load())
	switch {
	case int64(len(seen)) == produced.Load() && repeated == 0 && int64(total+after) == produced.Load():
		say("every record produced was mirrored or carried, and processed exactly once")
		return 0
	case repeated > 0:
		say("MISMATCH: %d records were processed twice (%d reads of %d distinct records)", repeated, reads, len(seen))
	default:
		say("MISMATCH: %d records produced, %d on the destination, %d processed", produced.Load(), total+after, len(seen))
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
// compare reads a topic on the source (a) and the destination (b) and checks that every
// record of the source is on the destination at the same offset with the same key and value;
// it returns a difference, if any, how many records matched, and how many the destination
// holds after them (written there after a promotion).
func compare(ctx context.Context, a, b []string, topic string) (string, int, int, error) {
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
		return "", 0, 0, err
	}
	sb, err := read(b)
	if err != nil {
		return "", 0, 0, err
	}
	total, after := 0, 0
	parts := make([]int32, 0, len(sa))
	for p := range sa {
		parts = append(parts, p)
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
	for _, p := range parts {
		ra, rb := sa[p], sb[p]
		if len(ra) > len(rb) {
			return fmt.Sprintf("partition %d: %d records on the source, %d on the destination", p, len(ra), len(rb)), total, after, nil
		}
		for i, r := range rb[len(ra):] {
			if want := int64(len(ra) + i); len(ra) > 0 && r.Offset != ra[0].Offset+want {
				return fmt.Sprintf("partition %d: a record after the promotion at %d, want %d", p, r.Offset, ra[0].Offset+want), total, after, nil
			}
			after++
		}
		for i := range ra {
			if ra[i].Offset != rb[i].Offset || string(ra[i].Key) != string(rb[i].Key) || string(ra[i].Value) != string(rb[i].Value) {
				return fmt.Sprintf("partition %d record %d: source offset %d, destination offset %d", p, i, ra[i].Offset, rb[i].Offset), total, after, nil
			}
			total++
		}
	}
	return "", total, after, nil
}

func demoKgoLevel() kgo.LogLevel {
	if os.Getenv("OFFSETGATE_DEMO_DEBUG") != "" {
		return kgo.LogLevelInfo
	}
	return kgo.LogLevelNone
}
