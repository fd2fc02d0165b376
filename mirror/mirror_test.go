package mirror_test

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"

	"offsetgate/internal/ports"
	"offsetgate/internal/testcerts"
	"offsetgate/internal/testkafka"
	"offsetgate/mirror"
	"offsetgate/proxy"
	"offsetgate/rules"
	ogtls "offsetgate/tls"
)

func TestMain(m *testing.M) { testkafka.Main(m) }

// env is offsetgate (mTLS listener) in front of the shared destination, with a mirroring
// client identity approved for the test's topics.
type env struct {
	t      testing.TB
	pair   *testkafka.Pair
	srv    *proxy.Server
	addr   string
	certs  *testcerts.Set
	client *testcerts.KeyPair
	stop   func()
}

func newEnvB(b *testing.B, prefix string) *env { return newEnv(b, prefix, nil) }

// shifted is offsetgate without alignment (align_max -1): a mirror that starts above the
// destination's end starts with a shift, as it does past align_max. Tests of the translation
// between source and destination offsets use it: with alignment on they would be the same.
func shifted(c *proxy.Config) { c.AlignMax = -1 }

func newEnv(t testing.TB, prefix string, mutate func(*proxy.Config)) *env {
	t.Helper()
	set, err := testcerts.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	kp, err := set.Client("mirror", testcerts.SANs{URIs: []string{"spiffe://test/mirror"}})
	if err != nil {
		t.Fatal(err)
	}
	return startEnv(t, prefix, set, kp, mutate)
}

// another is a second offsetgate instance in front of the same destination, with the same
// certificates and approvals (its own listen address, so its own instance id).
func (e *env) another(prefix string, mutate func(*proxy.Config)) *env {
	e.t.Helper()
	return startEnv(e.t, prefix, e.certs, e.client, mutate)
}

func startEnv(t testing.TB, prefix string, set *testcerts.Set, kp *testcerts.KeyPair, mutate func(*proxy.Config)) *env {
	t.Helper()
	pair := testkafka.Shared(t)
	base := freeBase(t)
	cfg := proxy.Config{
		Listen:    "127.0.0.1:" + strconv.Itoa(base),
		Bootstrap: pair.Dest.Addrs(),
		TLS: proxy.TLSConfig{Listener: &ogtls.ServerConfig{CertFile: set.Server.CertFile, KeyFile: set.Server.KeyFile,
			ClientCAFile: set.CA.CertFile, ClientAuth: "request"}},
		Mirroring: rules.MirroringConfig{Clients: []rules.ClientConfig{{TLSSAN: "URI:spiffe://test/mirror", Topics: []string{prefix + "*"}}}},
		MaxFill:   1000,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	srv, err := proxy.New(cfg, zaptest.NewLogger(t, zaptestLevel(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	select {
	case <-srv.Ready():
	case err := <-done:
		cancel()
		t.Fatal(err)
	}
	e := &env{t: t, pair: pair, srv: srv, addr: srv.BootstrapAddr(), certs: set, client: kp}
	stopped := false
	e.stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	t.Cleanup(e.stop)
	return e
}

// freeBase finds a port p with p and the broker ports p+2, p+3 free on loopback.
func freeBase(t testing.TB) int {
	p, err := ports.Block(4)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (e *env) mirrorConfig(topics ...string) mirror.Config {
	return mirror.Config{Source: e.pair.Source.Addrs(), Proxy: []string{e.addr}, ProxyTLS: e.certs.ClientTLS(e.client),
		Topics: topics, MaxBytes: 64 << 10, ReplicationFactor: 2}
}

// rec is a record as a direct consumer sees it.
type rec struct {
	Offset    int64
	Key       string
	Value     string
	Headers   string
	Timestamp int64
}

func readAll(ctx context.Context, t testing.TB, c *testkafka.Cluster, topic string, partition int32, n int) []rec {
	t.Helper()
	if n == 0 {
		return nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []rec
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records of %s[%d] on %s", len(out), n, topic, partition, c.Name)
		}
		fs.EachRecord(func(r *kgo.Record) {
			var hb bytes.Buffer
			for _, h := range r.Headers {
				fmt.Fprintf(&hb, "%s=%s;", h.Key, h.Value)
			}
			out = append(out, rec{r.Offset, string(r.Key), string(r.Value), hb.String(), r.Timestamp.UnixMilli()})
		})
	}
	return out
}

func count(ctx context.Context, t testing.TB, c *testkafka.Cluster, topic string) map[int32][2]int64 {
	t.Helper()
	adm, err := c.Admin()
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32][2]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		s, _ := starts.Lookup(topic, o.Partition)
		out[o.Partition] = [2]int64{s.Offset, o.Offset}
	})
	return out
}

// caughtUp waits, up to within, until every partition of topic starts and ends on the
// destination where it does on the source.
func caughtUp(ctx context.Context, t testing.TB, e *env, topic string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for fmt.Sprint(count(ctx, t, e.pair.Source, topic)) != fmt.Sprint(count(ctx, t, e.pair.Dest, topic)) {
		if time.Now().After(deadline) {
			t.Fatalf("the mirror did not catch up: source %v, destination %v", count(ctx, t, e.pair.Source, topic), count(ctx, t, e.pair.Dest, topic))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// sameAsSource fails unless every partition of topic holds the source's records on the
// destination, record for record.
func sameAsSource(ctx context.Context, t testing.TB, e *env, topic string) {
	t.Helper()
	for p, se := range count(ctx, t, e.pair.Source, topic) {
		want := readAll(ctx, t, e.pair.Source, topic, p, int(se[1]-se[0]))
		got := readAll(ctx, t, e.pair.Dest, topic, p, int(se[1]-se[0]))
		for i := range want {
			if want[i] != got[i] {
				t.Fatalf("%s[%d] record %d: destination %+v, source %+v", topic, p, i, got[i], want[i])
			}
		}
	}
}

func produceSource(ctx context.Context, t testing.TB, c *testkafka.Cluster, topic string, n int, opts ...kgo.Opt) {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.Addrs()...), kgo.DefaultProduceTopic(topic),
		kgo.ProducerLinger(5 * time.Millisecond), kgo.ProducerBatchMaxBytes(16 << 10)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	var rs []*kgo.Record
	for i := 0; i < n; i++ {
		rs = append(rs, &kgo.Record{Key: []byte(fmt.Sprintf("k%d", i%17)), Value: bytes.Repeat([]byte{byte('a' + i%26)}, 50+i%200),
			Headers:   []kgo.RecordHeader{{Key: "h", Value: []byte(strconv.Itoa(i))}},
			Timestamp: old.Add(time.Duration(i) * time.Second)})
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// Dense topics in every codec, from idempotent and plain producers, with headers, old
// timestamps and a source leader epoch change, land on the destination at their source
// offsets; a direct consumer of D sees the same records; a second run writes nothing.
func TestMirrorDenseTopics(t *testing.T) {
	prefix := testkafka.Names(t, "d")
	e := newEnv(t, prefix, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s := e.pair.Source
	var topics []string
	for _, codec := range []struct {
		name string
		c    kgo.CompressionCodec
	}{{"none", kgo.NoCompression()}, {"gzip", kgo.GzipCompression()}, {"snappy", kgo.SnappyCompression()},
		{"lz4", kgo.Lz4Compression()}, {"zstd", kgo.ZstdCompression()}} {
		topic := prefix + "-" + codec.name
		if err := s.CreateTopic(ctx, topic, 2, 2, nil); err != nil {
			t.Fatal(err)
		}
		produceSource(ctx, t, s, topic, 300, kgo.ProducerBatchCompression(codec.c))
		topics = append(topics, topic)
	}
	plainTopic := prefix + "-plain"
	if err := s.CreateTopic(ctx, plainTopic, 1, 2, nil); err != nil {
		t.Fatal(err)
	}
	produceSource(ctx, t, s, plainTopic, 200, kgo.DisableIdempotentWrite())
	// A leader epoch change on the source in the middle of the data.
	leader, _, err := s.Leader(ctx, plainTopic, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.MoveLeader(ctx, plainTopic, 0, 3-leader); err != nil {
		t.Fatal(err)
	}
	produceSource(ctx, t, s, plainTopic, 200, kgo.DisableIdempotentWrite())
	topics = append(topics, plainTopic)

	sum, err := mirror.Once(ctx, e.mirrorConfig(topics...))
	if err != nil {
		t.Fatalf("mirror: %v", err)
	}
	for _, topic := range topics {
		sc, dc := count(ctx, t, s, topic), count(ctx, t, e.pair.Dest, topic)
		for p, se := range sc {
			if dc[p] != se {
				t.Fatalf("%s[%d]: destination holds %v, source %v", topic, p, dc[p], se)
			}
			want := readAll(ctx, t, s, topic, p, int(se[1]-se[0]))
			got := readAll(ctx, t, e.pair.Dest, topic, p, int(se[1]-se[0]))
			for i := range want {
				if want[i] != got[i] {
					t.Fatalf("%s[%d] record %d: destination %+v, source %+v", topic, p, i, got[i], want[i])
				}
			}
		}
	}
	var batches int
	for _, p := range sum.Partitions {
		batches += p.Batches
	}
	if batches < len(topics)*3 {
		t.Fatalf("only %d batches mirrored: the test data is too small to mean much", batches)
	}
	// A second run finds every partition mirrored and writes nothing.
	again, err := mirror.Once(ctx, e.mirrorConfig(topics...))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range again.Partitions {
		if p.Batches != 0 {
			t.Fatalf("second run sent %d batches for %s[%d]", p.Batches, p.Topic, p.Partition)
		}
	}
	for _, topic := range topics {
		if sc, dc := count(ctx, t, s, topic), count(ctx, t, e.pair.Dest, topic); fmt.Sprint(sc) != fmt.Sprint(dc) {
			t.Fatalf("%s after a second run: destination %v, source %v", topic, dc, sc)
		}
	}
}

// A source whose log starts high is mirrored with a recorded shift and no filler records
// (alignment off, or the log start further than align_max).
func TestMirrorHighLogStart(t *testing.T) {
	prefix := testkafka.Names(t, "h")
	e := newEnv(t, prefix, shifted)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := e.pair.Source
	topic := prefix + "-t"
	if err := s.CreateTopic(ctx, topic, 1, 2, nil); err != nil {
		t.Fatal(err)
	}
	produceSource(ctx, t, s, topic, 3000)
	adm, _ := s.Admin()
	defer adm.Close()
	if _, err := adm.DeleteRecords(ctx, kadm.Offsets{topic: {0: {Topic: topic, Partition: 0, At: 2900}}}); err != nil {
		t.Fatal(err)
	}
	produceSource(ctx, t, s, topic, 50)
	src := count(ctx, t, s, topic)[0]
	if src[0] == 0 {
		t.Fatal("the source log start did not move")
	}
	if _, err := mirror.Once(ctx, e.mirrorConfig(topic)); err != nil {
		t.Fatal(err)
	}
	dst := count(ctx, t, e.pair.Dest, topic)[0]
	// Only the records the source still has are on D (no filler storm for the offsets before
	// the log start): the shift is the source's log start rounded to its batch, and the
	// mirror's log start is then moved to the source's.
	// The first batch the source hands out is the whole batch holding its log start.
	shift := src[1] - dst[1]
	if dst[0] != src[0]-shift || shift > src[0] || shift < src[0]-1000 {
		t.Fatalf("destination holds offsets %v for source %v: fillers were written or records lost", dst, src)
	}
	want := readAll(ctx, t, s, topic, 0, int(src[1]-src[0]))
	got := readAll(ctx, t, e.pair.Dest, topic, 0, int(dst[1]-dst[0]))
	// Compare what both hold: the source's readable records from its log start.
	got = got[len(got)-len(want):]
	for i := range got {
		w := want[i]
		g := got[i]
		g.Offset += shift
		if g != w {
			t.Fatalf("record %d: destination (shifted by %d) %+v, source %+v", i, shift, g, w)
		}
	}
	// Through offsetgate the mirrored end is in source offsets.
	pcl, err := kgo.NewClient(kgo.SeedBrokers(e.addr), kgo.DialTLSConfig(e.certs.ClientTLS(e.client)))
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close()
	ends, err := kadm.NewClient(pcl).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := ends.Lookup(topic, 0); o.Offset != src[1] {
		t.Fatalf("mirrored end through offsetgate %d, source end %d", o.Offset, src[1])
	}
	// The mirroring client follows the source's log start with DeleteRecords in source
	// offsets; offsetgate moves D's log start to the shifted offset and answers in source terms.
	at := src[1] - 10
	dr, err := kadm.NewClient(pcl).DeleteRecords(ctx, kadm.Offsets{topic: {0: {Topic: topic, Partition: 0, At: at}}})
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := dr.Lookup(topic, 0); r.Err != nil || r.LowWatermark != at {
		t.Fatalf("DeleteRecords through offsetgate: low watermark %d (%v), want %d", r.LowWatermark, r.Err, at)
	}
	if d := count(ctx, t, e.pair.Dest, topic)[0]; d[0] != at-shift {
		t.Fatalf("destination log start %d, want %d (source %d minus the shift %d)", d[0], at-shift, at, shift)
	}
	starts, err := kadm.NewClient(pcl).ListStartOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := starts.Lookup(topic, 0); o.Offset != at {
		t.Fatalf("log start through offsetgate %d, want %d", o.Offset, at)
	}
}

func zaptestLevel(t testing.TB) zaptest.LoggerOption {
	if _, ok := t.(*testing.B); ok {
		return zaptest.Level(zapcore.WarnLevel)
	}
	return zaptest.Level(zapcore.InfoLevel)
}

// A following mirror keeps up with a source that is written while it runs, and stops cleanly.
func TestMirrorFollow(t *testing.T) {
	prefix := testkafka.Names(t, "f")
	e := newEnv(t, prefix, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := e.pair.Source
	topic := prefix + "-t"
	if err := s.CreateTopic(ctx, topic, 2, 2, nil); err != nil {
		t.Fatal(err)
	}
	produceSource(ctx, t, s, topic, 200)
	fctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	fcfg := e.mirrorConfig(topic)
	fcfg.GroupInterval = 300 * time.Millisecond
	go func() { _, err := mirror.Follow(fctx, fcfg); done <- err }()
	for round := 0; round < 3; round++ {
		produceSource(ctx, t, s, topic, 150)
		time.Sleep(300 * time.Millisecond)
	}
	caughtUp(ctx, t, e, topic, 60*time.Second)
	// Retention (here DeleteRecords) on the source moves the mirror's log start too.
	sadm, _ := s.Admin()
	defer sadm.Close()
	if _, err := sadm.DeleteRecords(ctx, kadm.Offsets{topic: {0: {Topic: topic, Partition: 0, At: 100}}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for count(ctx, t, e.pair.Dest, topic)[0][0] != 100 {
		if time.Now().After(deadline) {
			t.Fatalf("the destination's log start stayed at %d after the source's moved to 100", count(ctx, t, e.pair.Dest, topic)[0][0])
		}
		time.Sleep(100 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("stopping the following mirror: %v", err)
	}
	sameAsSource(ctx, t, e, topic)
}

// Moving a consumer group: it stops on the source, the mirror copies its committed offsets,
// and it starts against offsetgate, where it resumes at the next record: every record is
// processed once across the move. The copy never goes beyond the mirrored end nor backwards,
// and leaves a group with active members alone.
func TestMoveConsumerGroup(t *testing.T) {
	prefix := testkafka.Names(t, "g")
	e := newEnv(t, prefix, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := e.pair.Source
	topic := prefix + "-t"
	group := prefix + "-billing"
	if err := s.CreateTopic(ctx, topic, 2, 2, nil); err != nil {
		t.Fatal(err)
	}
	produceSource(ctx, t, s, topic, 400)
	seen := map[string]int{}
	consume := func(addrs []string, max int, opts ...kgo.Opt) int {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addrs...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.FetchMaxBytes(4000)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		n := 0
		for n < max {
			pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
			fs := cl.PollRecords(pctx, max-n)
			timedOut := pctx.Err() != nil
			pcancel()
			// A poll that ended on an error is a failure, never tried again: the group's
			// offsets through offsetgate not answered in time, or data loss reported by
			// the client's epoch validation, would both look like one.
			if !timedOut {
				for _, e := range fs.Errors() {
					t.Fatalf("poll after %d records: %s[%d]: %v", n, e.Topic, e.Partition, e.Err)
				}
			}
			if len(fs.Records()) == 0 {
				break // an empty poll: the records are all read
			}
			for _, r := range fs.Records() {
				seen[fmt.Sprintf("%d/%d", r.Partition, r.Offset)]++
			}
			n += len(fs.Records())
			if err := cl.CommitUncommittedOffsets(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return n
	}
	// Part of the way on the source, then the group stops.
	if n := consume(s.Addrs(), 150); n != 150 {
		t.Fatalf("consumed %d on the source", n)
	}
	cfg := e.mirrorConfig(topic)
	cfg.Groups = regexp.MustCompile("^" + regexp.QuoteMeta(group) + "$")
	start := time.Now()
	if _, err := mirror.Once(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	pause := time.Since(start)
	sadm, _ := s.Admin()
	defer sadm.Close()
	so, err := sadm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	dadm, _ := e.pair.Dest.Admin()
	defer dadm.Close()
	do, err := dadm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	so.Each(func(o kadm.OffsetResponse) {
		d, ok := do.Lookup(o.Topic, o.Partition)
		if !ok || d.At != o.At {
			t.Fatalf("%s[%d]: destination group offset %v, source %d", o.Topic, o.Partition, d.At, o.At)
		}
	})
	// The group starts against offsetgate and processes the rest.
	rest := consume([]string{e.addr}, 400, kgo.DialTLSConfig(e.certs.ClientTLS(e.client)))
	if rest != 250 {
		t.Fatalf("after the move the group read %d records, want 250", rest)
	}
	for k, n := range seen {
		if n != 1 {
			t.Fatalf("record %s processed %d times", k, n)
		}
	}
	if len(seen) != 400 {
		t.Fatalf("%d distinct records processed, want 400", len(seen))
	}
	t.Logf("group paused for %v (mirror pass and offset copy)", pause.Round(time.Millisecond))

	// Never backwards: a second copy with the source behind the destination changes nothing.
	if _, err := mirror.CopyGroups(ctx, e.srcClient(t), e.proxyClient(t), cfg.Groups, []string{topic}); err != nil {
		t.Fatal(err)
	}
	do2, _ := dadm.FetchOffsets(ctx, group)
	do2.Each(func(o kadm.OffsetResponse) {
		if so2, _ := so.Lookup(o.Topic, o.Partition); o.At < so2.At {
			t.Fatalf("the copy moved %s[%d] backwards to %d", o.Topic, o.Partition, o.At)
		}
	})
	// A group with active members on the destination is left alone.
	member, err := kgo.NewClient(kgo.SeedBrokers(e.addr), kgo.DialTLSConfig(e.certs.ClientTLS(e.client)),
		kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer member.Close()
	waitUntil(t, 30*time.Second, func() bool {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		member.PollFetches(pctx)
		pcancel()
		dd, err := kadm.NewClient(e.proxyClient(t)).DescribeGroups(ctx, group)
		return err == nil && len(dd[group].Members) > 0
	})
	res, err := mirror.CopyGroups(ctx, e.srcClient(t), e.proxyClient(t), cfg.Groups, []string{topic})
	if err != nil || len(res) != 1 || res[0].Skipped == "" {
		t.Fatalf("copy with an active group: %+v %v", res, err)
	}
}

func waitUntil(t testing.TB, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (e *env) srcClient(t testing.TB) *kgo.Client {
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.pair.Source.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func (e *env) proxyClient(t testing.TB) *kgo.Client {
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.addr), kgo.DialTLSConfig(e.certs.ClientTLS(e.client)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}
