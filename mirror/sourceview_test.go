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
	base := freeBase(t)
	cfg := proxy.Config{Listen: "127.0.0.1:" + strconv.Itoa(base), Bootstrap: e.pair.Dest.Addrs(), InstanceID: "consumers"}
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
	return cfg.Listen
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
	e := newEnv(t, prefix, nil)
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
