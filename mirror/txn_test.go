package mirror_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"offsetgate/batch"
	"offsetgate/internal/realclients"
	"offsetgate/internal/testkafka"
	"offsetgate/mirror"
	"offsetgate/verify"
)

// txnRec is a consumed record as the transaction tests compare it.
type txnRec struct {
	Partition int32
	Offset    int64
	Key       string
	Value     string
	Headers   string
}

// consumeLevel reads every partition of topic from the start at an isolation level until no
// record came for a while.
func consumeLevel(ctx context.Context, t testing.TB, opts []kgo.Opt, topic string, committed bool) []txnRec {
	t.Helper()
	level := kgo.ReadUncommitted()
	if committed {
		level = kgo.ReadCommitted()
	}
	cl, err := kgo.NewClient(append(opts, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(level), kgo.FetchMaxWait(200*time.Millisecond))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []txnRec
	idle := 0
	for idle < 8 {
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		fs := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			t.Fatal("consuming: the test's time ran out")
		}
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			var hb bytes.Buffer
			for _, h := range r.Headers {
				fmt.Fprintf(&hb, "%s=%s;", h.Key, h.Value)
			}
			out = append(out, txnRec{r.Partition, r.Offset, string(r.Key), string(r.Value), hb.String()})
			n++
		})
		if n == 0 {
			idle++
		} else {
			idle = 0
		}
	}
	sortRecs(out)
	return out
}

func sortRecs(rs []txnRec) {
	for i := 1; i < len(rs); i++ {
		for j := i; j > 0 && (rs[j].Partition < rs[j-1].Partition || rs[j].Partition == rs[j-1].Partition && rs[j].Offset < rs[j-1].Offset); j-- {
			rs[j], rs[j-1] = rs[j-1], rs[j]
		}
	}
}

func sameRecs(t testing.TB, what string, got, want []txnRec) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d records, the source's view has %d", what, len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%s: record %d is %+v, the source's is %+v", what, i, got[i], want[i])
		}
	}
}

// lastStable is each partition's latest offset at read_committed (the last stable offset).
func lastStable(ctx context.Context, t testing.TB, cl *kgo.Client, topic string) map[int32]int64 {
	t.Helper()
	offs, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	offs.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

// Transactional topics mirror exactly: two transactional producers (gzip and zstd) committing
// and aborting across three partitions, an idempotent producer between them, and a transaction
// left open while the mirror runs. Through offsetgate every batch is the source's (verify),
// franz-go and the Java consumer read the same records as on the source at both isolation
// levels, the open transaction stays invisible to read_committed until its marker is mirrored,
// and ListOffsets at read_committed answers the source's last stable offset.
func TestMirrorTransactions(t *testing.T) {
	prefix := testkafka.Names(t, "tx")
	e := newEnv(t, prefix, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := e.pair.Source
	topic := prefix + "-t"
	if err := s.CreateTopic(ctx, topic, 3, 2, nil); err != nil {
		t.Fatal(err)
	}
	producer := func(txnID string, codec kgo.CompressionCodec) *kgo.Client {
		opts := []kgo.Opt{kgo.SeedBrokers(s.Addrs()...), kgo.ProducerBatchCompression(codec), kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.ProducerLinger(0)}
		if txnID != "" {
			opts = append(opts, kgo.TransactionalID(txnID))
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	a, b := producer(prefix+"-a", kgo.GzipCompression()), producer(prefix+"-b", kgo.ZstdCompression())
	idem := producer("", kgo.NoCompression())
	produce := func(cl *kgo.Client, who string, round int) {
		for p := int32(0); p < 3; p++ {
			for i := 0; i < 3; i++ {
				r := &kgo.Record{Topic: topic, Partition: p, Key: []byte(fmt.Sprintf("%s-%d-%d", who, round, i)),
					Value: []byte(fmt.Sprintf("%s.round%d.record%d", who, round, i)),
					Headers: []kgo.RecordHeader{{Key: "who", Value: []byte(who)}}}
				if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for round := 0; round < 4; round++ {
		if err := a.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		produce(a, "a", round)
		if err := b.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		produce(b, "b", round)
		produce(idem, "idem", round)
		if err := a.EndTransaction(ctx, kgo.TransactionEndTry(round%2 == 0)); err != nil {
			t.Fatal(err)
		}
		produce(b, "b2", round)
		if err := b.EndTransaction(ctx, kgo.TransactionEndTry(round%3 != 0)); err != nil {
			t.Fatal(err)
		}
	}
	// A transaction left open while the mirror runs.
	if err := a.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produce(a, "open", 9)
	produce(idem, "idem", 9)

	src := e.srcClient(t)
	px := e.proxyClient(t)
	compare := func(stage string) {
		t.Helper()
		if _, err := mirror.Once(ctx, e.mirrorConfig(topic)); err != nil {
			t.Fatalf("%s: mirror: %v", stage, err)
		}
		res, err := verify.Run(ctx, verify.Config{Source: src, Proxy: px, Topic: topic}, nil)
		if err != nil {
			t.Fatalf("%s: verify: %v", stage, err)
		}
		for _, r := range res {
			if r.Err != nil || r.Diff != nil || r.Tail != 0 {
				t.Fatalf("%s: verify: %s", stage, r.Line(topic))
			}
		}
		sopts := []kgo.Opt{kgo.SeedBrokers(s.Addrs()...)}
		popts := []kgo.Opt{kgo.SeedBrokers(e.addr), kgo.DialTLSConfig(e.certs.ClientTLS(e.client))}
		for _, committed := range []bool{false, true} {
			want := consumeLevel(ctx, t, sopts, topic, committed)
			got := consumeLevel(ctx, t, popts, topic, committed)
			sameRecs(t, fmt.Sprintf("%s: franz-go through offsetgate, read_committed=%v", stage, committed), got, want)
		}
		if sl, pl := lastStable(ctx, t, src, topic), lastStable(ctx, t, px, topic); fmt.Sprint(sl) != fmt.Sprint(pl) {
			t.Fatalf("%s: last stable offsets through offsetgate %v, source %v", stage, pl, sl)
		}
	}
	compare("with a transaction open")

	// The open transaction's records are invisible to read_committed until its marker is
	// mirrored; then they appear, as on the source.
	if err := a.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	compare("after the open transaction committed")

	// The Java consumer, at both isolation levels, through a second (plaintext) offsetgate.
	consumers := e.plain(t)
	for _, level := range []string{"read_committed", "read_uncommitted"} {
		want := consumeLevel(ctx, t, []kgo.Opt{kgo.SeedBrokers(s.Addrs()...)}, topic, level == "read_committed")
		got, err := realclients.JavaConsumeAt(ctx, consumers, topic, len(want), 60000, level)
		if err != nil {
			t.Fatalf("Java consumer at %s: %v", level, err)
		}
		byPart := map[string]bool{}
		for _, r := range want {
			byPart[fmt.Sprintf("%d/%d/%s", r.Partition, r.Offset, r.Key)] = true
		}
		for _, r := range got {
			if !byPart[fmt.Sprintf("%d/%d/%s", r.Partition, r.Offset, r.Key)] {
				t.Fatalf("Java at %s read %+v, which the source's view does not hold", level, r)
			}
		}
		if len(got) != len(want) {
			t.Fatalf("Java at %s read %d records, want %d", level, len(got), len(want))
		}
	}

	// What a consumer of D itself sees (docs/DESIGN.md): every data record, aborted ones too
	// (D holds them as plain batches), and filler records where the markers are.
	direct := consumeLevel(ctx, t, []kgo.Opt{kgo.SeedBrokers(e.pair.Dest.Addrs()...)}, topic, true)
	all := consumeLevel(ctx, t, []kgo.Opt{kgo.SeedBrokers(s.Addrs()...)}, topic, false)
	fillers, aborted := 0, 0
	for _, r := range direct {
		switch {
		case r.Headers == batch.FillerHeader+"=\x01;":
			fillers++
		case r.Key != "" && r.Key[0] == 'a' && r.Key[2] == '1': // round 1 of producer a aborted
			aborted++
		}
	}
	if len(direct)-fillers != len(all) || fillers == 0 || aborted == 0 {
		t.Fatalf("direct read_committed consumer of D: %d records (%d fillers, %d of an aborted transaction); the source holds %d data records",
			len(direct), fillers, aborted, len(all))
	}
}
