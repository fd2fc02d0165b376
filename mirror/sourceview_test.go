package mirror_test

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
	"go.uber.org/zap/zaptest"

	"offsetgate/internal/realclients"
	"offsetgate/internal/testkafka"
	"offsetgate/mirror"
	"offsetgate/proxy"
	"offsetgate/verify"
)

// plain starts a second offsetgate, plaintext on gnet, in front of the same destination: the
// consumers' instance. It has never written the mirror partitions, so its source views come
// from the ledger alone (and follow it when the writer instance adds to it).
func (e *env) plain(t testing.TB) string {
	t.Helper()
	addr, _ := e.plainServer(t)
	return addr
}

// plainServer is plain, with the server (for its metrics).
func (e *env) plainServer(t testing.TB) (string, *proxy.Server) {
	return e.plainServerWith(t, nil)
}

// plainServerWith is plainServer with a configuration changed by mutate (when not nil).
func (e *env) plainServerWith(t testing.TB, mutate func(*proxy.Config)) (string, *proxy.Server) {
	t.Helper()
	base := freeBase(t)
	cfg := proxy.Config{Listen: "127.0.0.1:" + strconv.Itoa(base), Bootstrap: e.pair.Dest.Addrs(), InstanceID: "consumers"}
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
	t.Cleanup(func() { cancel(); <-done })
	return cfg.Listen, srv
}

// srec is a record as a consumer sees it, epoch included.
type srec struct {
	Offset    int64
	Epoch     int32
	Key       string
	Value     string
	Headers   string
	Timestamp int64
}

// consume reads n records of a partition from offset from with franz-go.
func consume(ctx context.Context, t testing.TB, addrs []string, topic string, partition int32, from kgo.Offset, n int, opts ...kgo.Opt) []srec {
	t.Helper()
	if n == 0 {
		return nil
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addrs...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: from}})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []srec
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records of %s[%d] from %v", len(out), n, topic, partition, addrs)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Logf("fetch error from %v: %v", addrs, err) })
		fs.EachRecord(func(r *kgo.Record) {
			var hb bytes.Buffer
			for _, h := range r.Headers {
				fmt.Fprintf(&hb, "%s=%s;", h.Key, h.Value)
			}
			out = append(out, srec{r.Offset, r.LeaderEpoch, string(r.Key), string(r.Value), hb.String(), r.Timestamp.UnixMilli()})
		})
	}
	return out
}

func sameRecords(t testing.TB, what string, got, want []srec) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d records, want %d", what, len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%s: record %d is %+v, the source's is %+v", what, i, got[i], want[i])
		}
	}
}

// Consumers of dense mirror topics (every codec, idempotent and plain producers, a source
// leader epoch change, a non-zero shift) see through offsetgate what they saw on the source:
// offsets, epochs, keys, values, headers, timestamps (franz-go), offsets, epochs, keys and
// values (the Java client, librdkafka); the log bounds are the source's; verify finds the
// batches byte-identical.
func TestSourceViewDense(t *testing.T) {
	prefix := testkafka.Names(t, "sv")
	e := newEnv(t, prefix, shifted)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	s := e.pair.Source
	var topics []string
	for _, codec := range []struct {
		name string
		c    kgo.CompressionCodec
	}{{"none", kgo.NoCompression()}, {"gzip", kgo.GzipCompression()}, {"snappy", kgo.SnappyCompression()},
		{"lz4", kgo.Lz4Compression()}, {"zstd", kgo.ZstdCompression()}} {
		topic := prefix + "-" + codec.name
		if err := s.CreateTopic(ctx, topic, 1, 2, nil); err != nil {
			t.Fatal(err)
		}
		produceSource(ctx, t, s, topic, 200, kgo.ProducerBatchCompression(codec.c))
		topics = append(topics, topic)
	}
	// Plain producer, a source leader epoch change in the middle, and a shift: the source's log
	// start moved before the mirror started.
	shifted := prefix + "-shift"
	if err := s.CreateTopic(ctx, shifted, 1, 2, nil); err != nil {
		t.Fatal(err)
	}
	produceSource(ctx, t, s, shifted, 300, kgo.DisableIdempotentWrite())
	sadm, _ := s.Admin()
	defer sadm.Close()
	if _, err := sadm.DeleteRecords(ctx, kadm.Offsets{shifted: {0: {Topic: shifted, Partition: 0, At: 250}}}); err != nil {
		t.Fatal(err)
	}
	leader, _, err := s.Leader(ctx, shifted, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.MoveLeader(ctx, shifted, 0, 3-leader); err != nil {
		t.Fatal(err)
	}
	produceSource(ctx, t, s, shifted, 200, kgo.DisableIdempotentWrite())
	topics = append(topics, shifted)

	if _, err := mirror.Once(ctx, e.mirrorConfig(topics...)); err != nil {
		t.Fatalf("mirror: %v", err)
	}
	if d := count(ctx, t, e.pair.Dest, shifted)[0]; d[1] >= count(ctx, t, s, shifted)[0][1] {
		t.Fatalf("the shifted topic holds %v on D: the test needs a non-zero shift", d)
	}
	px := e.plain(t)
	pcl, err := kgo.NewClient(kgo.SeedBrokers(px))
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close()
	padm := kadm.NewClient(pcl)

	for _, topic := range topics {
		b := count(ctx, t, s, topic)[0]
		n := int(b[1] - b[0])
		want := consume(ctx, t, s.Addrs(), topic, 0, kgo.NewOffset().AtStart(), n)
		got := consume(ctx, t, []string{px}, topic, 0, kgo.NewOffset().AtStart(), n, kgo.FetchMaxBytes(8<<10))
		sameRecords(t, topic+" through offsetgate (franz-go)", got, want)
		if topic == shifted && want[len(want)-1].Epoch == want[0].Epoch {
			t.Fatalf("the source leader epoch did not change in %s", topic)
		}
		// A direct consumer that seeks to a source offset resumes at that record.
		mid := want[n/2].Offset
		if r := consume(ctx, t, []string{px}, topic, 0, kgo.NewOffset().At(mid), 1); r[0] != want[n/2] {
			t.Fatalf("%s: seek to %d gave %+v, want %+v", topic, mid, r[0], want[n/2])
		}
		// Log bounds in source offsets.
		starts, err1 := padm.ListStartOffsets(ctx, topic)
		ends, err2 := padm.ListEndOffsets(ctx, topic)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		st, _ := starts.Lookup(topic, 0)
		en, _ := ends.Lookup(topic, 0)
		if st.Offset != b[0] {
			t.Fatalf("%s: log start through offsetgate %d, source %d", topic, st.Offset, b[0])
		}
		if en.Offset != b[1] {
			t.Fatalf("%s: end through offsetgate %d, source %d", topic, en.Offset, b[1])
		}
		// The prover finds the batches identical, byte for byte.
		scl, _ := kgo.NewClient(kgo.SeedBrokers(s.Addrs()...))
		res, err := verify.Run(ctx, verify.Config{Source: scl, Proxy: pcl, Topic: topic}, nil)
		scl.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil || r.Diff != nil || r.Batches == 0 {
				t.Fatalf("verify %s: %s", topic, r.Line(topic))
			}
			t.Log(r.Line(topic))
		}
	}

	// The Java client and librdkafka read the shifted topic through offsetgate as the source.
	b := count(ctx, t, s, shifted)[0]
	n := int(b[1] - b[0])
	want := consume(ctx, t, s.Addrs(), shifted, 0, kgo.NewOffset().AtStart(), n)
	java, err := realclients.JavaConsume(ctx, px, shifted, n, 60000, "")
	if err != nil {
		t.Fatalf("Java consumer through offsetgate: %v", err)
	}
	kc, err := realclients.KcatConsume(ctx, px, shifted, n)
	if err != nil {
		t.Fatalf("kcat through offsetgate: %v", err)
	}
	for name, got := range map[string][]realclients.Record{"java": java, "kcat": kc} {
		if len(got) != n {
			t.Fatalf("%s read %d records, want %d", name, len(got), n)
		}
		for i, r := range got {
			w := want[i]
			epoch := w.Epoch
			if name == "kcat" {
				epoch = -1 // kcat does not print epochs
			}
			if r.Offset != w.Offset || r.Epoch != epoch || r.Key != w.Key || r.Value != w.Value {
				t.Fatalf("%s record %d: %+v, the source's %+v", name, i, r, w)
			}
		}
	}
}

// Hand-built source batches with a filled hole, a large filled hole and an unfilled one (a
// new segment): consumers through offsetgate see exactly the source's offsets and epochs and
// never a filler, even with fetches so small that D's answer could hold fillers only; time
// lookups, OffsetForLeaderEpoch and commits answer in source terms.
func TestSourceViewHoles(t *testing.T) {
	prefix := testkafka.Names(t, "sh")
	e := newEnv(t, prefix, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	topic := prefix + "-t"
	e.createMirrorTopic(ctx, topic, 1)
	h := e.hand(topic)
	ts := time.Date(2021, 5, 6, 7, 8, 9, 0, time.UTC).UnixMilli()
	type sb struct {
		base  int64
		n     int
		epoch int32
		ts    int64
	}
	src := []sb{{0, 10, 3, ts}, {12, 10, 3, ts + 100}, {22, 5, 4, ts + 200}, {900, 5, 4, ts + 300}, {100000, 5, 5, ts + 400}}
	for _, b := range src {
		if p := h.send(ctx, 0, srcBatch(b.base, b.n, b.epoch, 0, b.ts)); p.ErrorCode != 0 {
			t.Fatalf("batch at %d: %d %s", b.base, p.ErrorCode, msg(p))
		}
	}
	var want []srec
	for _, b := range src {
		for i := 0; i < b.n; i++ {
			o := b.base + int64(i)
			want = append(want, srec{Offset: o, Epoch: b.epoch, Key: fmt.Sprintf("k%d", o), Value: fmt.Sprintf("v%d", o), Timestamp: b.ts + int64(i)})
		}
	}
	px := e.plain(t)
	// Fetches of a few hundred bytes: D's answers would often be fillers only.
	got := consume(ctx, t, []string{px}, topic, 0, kgo.NewOffset().AtStart(), len(want), kgo.FetchMaxBytes(300), kgo.FetchMaxPartitionBytes(300))
	sameRecords(t, "franz-go through offsetgate", got, want)
	// Older Fetch versions (names instead of topic ids, no KIP-951) give the same records.
	for _, v := range []*kversion.Versions{kversion.V1_0_0(), kversion.V2_4_0(), kversion.V3_0_0()} {
		old := consume(ctx, t, []string{px}, topic, 0, kgo.NewOffset().AtStart(), len(want), kgo.MaxVersions(v), kgo.FetchMaxBytes(300), kgo.FetchMaxPartitionBytes(300))
		sameRecords(t, "franz-go with Fetch v"+strconv.Itoa(int(must(v.LookupMaxKeyVersion(1))))+" through offsetgate", old, want)
	}
	kc, err := realclients.KcatConsume(ctx, px, topic, len(want))
	if err != nil {
		t.Fatalf("kcat through offsetgate: %v", err)
	}
	for i, r := range kc {
		if i >= len(want) || r.Offset != want[i].Offset || r.Key != want[i].Key || r.Value != want[i].Value {
			t.Fatalf("kcat record %d: %+v", i, r)
		}
	}
	// From an offset inside the large filled hole: the next record is the source's next one.
	if r := consume(ctx, t, []string{px}, topic, 0, kgo.NewOffset().At(500), 1); r[0].Offset != 900 {
		t.Fatalf("from offset 500 (a filled hole) the first record is %d, want 900", r[0].Offset)
	}
	java, err := realclients.JavaConsume(ctx, px, topic, len(want), 60000, "")
	if err != nil {
		t.Fatalf("Java consumer through offsetgate: %v", err)
	}
	if len(java) != len(want) {
		t.Fatalf("Java read %d records, want %d", len(java), len(want))
	}
	for i, r := range java {
		if r.Offset != want[i].Offset || r.Epoch != want[i].Epoch || r.Key != want[i].Key {
			t.Fatalf("Java record %d: %+v, want %+v", i, r, want[i])
		}
	}

	pcl, err := kgo.NewClient(kgo.SeedBrokers(px))
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close()
	padm := kadm.NewClient(pcl)
	// A time lookup that lands on the fillers in front of 900 answers 900.
	lo, err := padm.ListOffsetsAfterMilli(ctx, ts+300, topic)
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := lo.Lookup(topic, 0); o.Offset != 900 || o.LeaderEpoch != 4 {
		t.Fatalf("offset for timestamp %d: %d (epoch %d), want 900 (epoch 4)", ts+300, o.Offset, o.LeaderEpoch)
	}
	// The record with the largest timestamp, in source terms.
	mt, err := padm.ListMaxTimestampOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := mt.Lookup(topic, 0); o.Offset != 100004 || o.Timestamp != ts+404 || o.LeaderEpoch != 5 {
		t.Fatalf("max timestamp: offset %d, timestamp %d, epoch %d; want 100004, %d, 5", o.Offset, o.Timestamp, o.LeaderEpoch, ts+404)
	}
	// OffsetForLeaderEpoch in source epochs and offsets.
	for _, c := range []struct {
		epoch, wantEpoch int32
		end              int64
	}{{3, 3, 22}, {4, 4, 100000}, {5, 5, 100005}} {
		r, err := padm.OffsetForLeaderEpoch(ctx, kadm.OffsetForLeaderEpochRequest{topic: {0: c.epoch}})
		if err != nil {
			t.Fatal(err)
		}
		got := r[topic][0]
		if got.Err != nil || got.LeaderEpoch != c.wantEpoch || got.EndOffset != c.end {
			t.Fatalf("OffsetForLeaderEpoch(%d) = (%d, %d, %v), want (%d, %d)", c.epoch, got.LeaderEpoch, got.EndOffset, got.Err, c.wantEpoch, c.end)
		}
	}
	// Metadata presents an epoch no lower than any batch epoch served.
	md, err := padm.Metadata(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if le := md.Topics[topic].Partitions[0].LeaderEpoch; le < 5 {
		t.Fatalf("metadata leader epoch %d through offsetgate is below the source epoch 5 already served", le)
	}
	// Epochs a client sends back are judged in the presented space: the current one passes, an
	// older one is fenced, a newer one is unknown (D judges them, translated to its own).
	le := md.Topics[topic].Partitions[0].LeaderEpoch
	// Admin clients' DescribeTopicPartitions presents the same epoch.
	dtp := kmsg.NewPtrDescribeTopicPartitionsRequest()
	dt := kmsg.NewDescribeTopicPartitionsRequestTopic()
	dt.Topic = topic
	dtp.Topics = append(dtp.Topics, dt)
	dtp.ResponsePartitionLimit = 100
	dresp, err := dtp.RequestWith(ctx, pcl)
	if err != nil {
		t.Fatal(err)
	}
	if got := dresp.Topics[0].Partitions[0].LeaderEpoch; got != le {
		t.Fatalf("DescribeTopicPartitions leader epoch %d through offsetgate, Metadata %d", got, le)
	}
	for _, c := range []struct {
		epoch int32
		code  int16
	}{{le, 0}, {le - 1, 74}, {0, 74}, {le + 1, 75}, {-1, 0}} {
		req := kmsg.NewPtrListOffsetsRequest()
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = 0, -1, c.epoch
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		shards := pcl.RequestSharded(ctx, req)
		if len(shards) != 1 || shards[0].Err != nil {
			t.Fatalf("ListOffsets with current epoch %d: %+v", c.epoch, shards)
		}
		got := shards[0].Resp.(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]
		if got.ErrorCode != c.code {
			t.Fatalf("ListOffsets with current leader epoch %d (presented %d): error %d, want %d", c.epoch, le, got.ErrorCode, c.code)
		}
		if c.code == 0 && (got.Offset != 100005 || got.LeaderEpoch != le) {
			t.Fatalf("ListOffsets latest: offset %d epoch %d, want 100005 and %d", got.Offset, got.LeaderEpoch, le)
		}
	}
	// Commits: source offsets for the client, D offsets on D; an offset in the unfilled hole
	// comes back as the first offset after it.
	group := prefix + "-g"
	dadm, _ := e.pair.Dest.Admin()
	defer dadm.Close()
	for _, c := range []struct{ commit, back, onD int64 }{{50, 50, 50}, {5000, 100000, 905}, {100003, 100003, 908}} {
		os := kadm.Offsets{}
		os.Add(kadm.Offset{Topic: topic, Partition: 0, At: c.commit, LeaderEpoch: -1})
		if _, err := padm.CommitOffsets(ctx, group, os); err != nil {
			t.Fatal(err)
		}
		fo, err := padm.FetchOffsets(ctx, group)
		if err != nil {
			t.Fatal(err)
		}
		r, _ := fo.Lookup(topic, 0)
		if r.At != c.back {
			t.Fatalf("committed %d, read back %d through offsetgate, want %d", c.commit, r.At, c.back)
		}
		do, err := dadm.FetchOffsets(ctx, group)
		if err != nil {
			t.Fatal(err)
		}
		if r, _ := do.Lookup(topic, 0); r.At != c.onD {
			t.Fatalf("committed %d: D holds %d, want %d", c.commit, r.At, c.onD)
		}
	}
}

// A consumer group moved to offsetgate commits source offsets and resumes exactly where it
// stopped (franz-go, then the Java client, on a topic with a non-zero shift); D holds the
// destination offsets; a transactional consume-process-produce loop (TxnOffsetCommit with its
// KIP-447 fields) commits through offsetgate the same way.
func TestSourceViewGroups(t *testing.T) {
	prefix := testkafka.Names(t, "sg")
	e := newEnv(t, prefix, shifted)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := e.pair.Source
	topic := prefix + "-t"
	if err := s.CreateTopic(ctx, topic, 1, 2, nil); err != nil {
		t.Fatal(err)
	}
	produceSource(ctx, t, s, topic, 700)
	sadm, _ := s.Admin()
	defer sadm.Close()
	if _, err := sadm.DeleteRecords(ctx, kadm.Offsets{topic: {0: {Topic: topic, Partition: 0, At: 200}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := mirror.Once(ctx, e.mirrorConfig(topic)); err != nil {
		t.Fatal(err)
	}
	b := count(ctx, t, s, topic)[0]
	shift := b[1] - count(ctx, t, e.pair.Dest, topic)[0][1]
	if shift == 0 {
		t.Fatal("the test needs a non-zero shift")
	}
	n := int(b[1] - b[0])
	want := consume(ctx, t, s.Addrs(), topic, 0, kgo.NewOffset().AtStart(), n)
	px := e.plain(t)
	dadm, _ := e.pair.Dest.Admin()
	defer dadm.Close()

	// franz-go: 120 records, commit, stop; then the rest.
	group := prefix + "-franz"
	var got []srec
	read := func(max int) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(px), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.FetchMaxBytes(4000))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		for len(got) < max {
			fs := cl.PollRecords(ctx, max-len(got))
			if ctx.Err() != nil {
				t.Fatal(ctx.Err())
			}
			for _, r := range fs.Records() {
				got = append(got, srec{r.Offset, r.LeaderEpoch, string(r.Key), string(r.Value), "", 0})
			}
			if err := cl.CommitUncommittedOffsets(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	read(120)
	do, err := dadm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := do.Lookup(topic, 0); r.At != got[len(got)-1].Offset+1-shift {
		t.Fatalf("D holds committed offset %d, want the destination offset %d", r.At, got[len(got)-1].Offset+1-shift)
	}
	read(n)
	for i := range want {
		if got[i].Offset != want[i].Offset || got[i].Epoch != want[i].Epoch || got[i].Key != want[i].Key {
			t.Fatalf("franz-go group record %d: %+v, want %+v", i, got[i], want[i])
		}
	}

	// The Java client: a first run commits what it read, a second one resumes after it.
	jgroup := prefix + "-java"
	first, err := realclients.JavaConsumeSlow(ctx, px, topic, 100, 60000, jgroup, 50, 0)
	if err != nil {
		t.Fatal(err)
	}
	rest, err := realclients.JavaConsume(ctx, px, topic, n-len(first), 60000, jgroup)
	if err != nil {
		t.Fatal(err)
	}
	all := append(first, rest...)
	if len(all) != n {
		t.Fatalf("the Java group read %d records in two runs, want %d exactly once", len(all), n)
	}
	for i, r := range all {
		if r.Offset != want[i].Offset || r.Epoch != want[i].Epoch || r.Key != want[i].Key {
			t.Fatalf("Java group record %d: %+v, want %+v", i, r, want[i])
		}
	}

	// Consume-process-produce in transactions: offsets committed with TxnOffsetCommit.
	out := prefix + "-out"
	if err := e.pair.Dest.CreateTopic(ctx, out, 1, 2, nil); err != nil {
		t.Fatal(err)
	}
	tgroup := prefix + "-txn"
	sess, err := kgo.NewGroupTransactSession(kgo.SeedBrokers(px), kgo.ConsumerGroup(tgroup), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.TransactionalID(prefix+"-tx"), kgo.DefaultProduceTopic(out),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	done := 0
	for done < 150 {
		fs := sess.PollRecords(ctx, 150-done)
		if ctx.Err() != nil {
			t.Fatal(ctx.Err())
		}
		if err := sess.Begin(); err != nil {
			t.Fatal(err)
		}
		for _, r := range fs.Records() {
			sess.Produce(ctx, &kgo.Record{Value: r.Value}, nil)
		}
		done += len(fs.Records())
		if _, err := sess.End(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
	}
	pcl, _ := kgo.NewClient(kgo.SeedBrokers(px))
	defer pcl.Close()
	// The group coordinator applies transactional offsets once the commit marker is written:
	// wait for them.
	var r kadm.OffsetResponse
	waitUntil(t, 20*time.Second, func() bool {
		fo, err := kadm.NewClient(pcl).FetchOffsets(ctx, tgroup)
		if err != nil {
			return false
		}
		var ok bool
		r, ok = fo.Lookup(topic, 0)
		return ok && r.At > 0
	})
	if r.At != want[done-1].Offset+1 || r.LeaderEpoch != want[done-1].Epoch {
		t.Fatalf("transactional group committed %d (epoch %d) through offsetgate, want %d (epoch %d)", r.At, r.LeaderEpoch, want[done-1].Offset+1, want[done-1].Epoch)
	}
	do, err = dadm.FetchOffsets(ctx, tgroup)
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := do.Lookup(topic, 0); r.At != want[done-1].Offset+1-shift {
		t.Fatalf("transactional group: D holds %d, want %d", r.At, want[done-1].Offset+1-shift)
	}
}

// The Java consumer keeps consuming exactly across a leader move on D: the presented epoch
// rises, its OffsetForLeaderEpoch validation passes, and it neither skips nor repeats.
func TestSourceViewLeaderMoveOnD(t *testing.T) {
	prefix := testkafka.Names(t, "sl")
	e := newEnv(t, prefix, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s := e.pair.Source
	topic := prefix + "-t"
	if err := s.CreateTopic(ctx, topic, 1, 2, nil); err != nil {
		t.Fatal(err)
	}
	produceSource(ctx, t, s, topic, 400)
	if _, err := mirror.Once(ctx, e.mirrorConfig(topic)); err != nil {
		t.Fatal(err)
	}
	px, pxs := e.plainServer(t)
	pcl, _ := kgo.NewClient(kgo.SeedBrokers(px))
	defer pcl.Close()
	epochOf := func() int32 {
		md, err := kadm.NewClient(pcl).Metadata(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		return md.Topics[topic].Partitions[0].LeaderEpoch
	}
	before := epochOf()
	total := 600
	type result struct {
		recs []realclients.Record
		err  error
	}
	res := make(chan result, 1)
	go func() {
		r, err := realclients.JavaConsumeSlow(ctx, px, topic, total, 120000, "", 10, 150)
		res <- result{r, err}
	}()
	// The leader moves once the Java consumer is reading (its JVM takes seconds to start).
	waitUntil(t, 60*time.Second, func() bool { return fetches(t, pxs) > 0 })
	leader, _, err := e.pair.Dest.Leader(ctx, topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.pair.Dest.MoveLeader(ctx, topic, 0, 3-leader); err != nil {
		t.Fatal(err)
	}
	produceSource(ctx, t, s, topic, total-400)
	if _, err := mirror.Once(ctx, e.mirrorConfig(topic)); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-res:
	case <-ctx.Done():
		t.Fatal("the Java consumer did not finish")
	}
	if r.err != nil {
		t.Fatalf("Java consumer across a leader move on D: %v", r.err)
	}
	if after := epochOf(); after <= before {
		t.Fatalf("presented leader epoch %d after D's leader moved, %d before: it must rise", after, before)
	}
	want := consume(ctx, t, s.Addrs(), topic, 0, kgo.NewOffset().AtStart(), total)
	if len(r.recs) != total {
		t.Fatalf("Java read %d records, want %d", len(r.recs), total)
	}
	for i, rec := range r.recs {
		if rec.Offset != want[i].Offset || rec.Epoch != want[i].Epoch || rec.Key != want[i].Key {
			t.Fatalf("Java record %d: %+v, want %+v", i, rec, want[i])
		}
	}
}

// fetches is how many Fetch requests a server has taken.
func fetches(t testing.TB, srv *proxy.Server) float64 {
	mfs, err := srv.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "offsetgate_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "api" && l.GetValue() == "Fetch" {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func must[T any](v T, ok bool) T {
	if !ok {
		panic("missing value")
	}
	return v
}
