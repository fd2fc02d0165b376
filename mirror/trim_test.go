package mirror_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"offsetgate/catalog"
	"offsetgate/internal/testkafka"
	"offsetgate/ledger"
	"offsetgate/mirror"
	"offsetgate/proxy"
)

// The ledger of a mirror partition is trimmed behind the destination's retention: once D's
// log start moved past the first 2,000 offsets, the snapshots that follow let offsetgate delete
// the ledger entries below them that no reader of D can reach. A fresh consumers' instance
// builds its view from the trimmed ledger and serves [2000, end) exactly; another writer
// instance takes the partition over from the snapshot and goes on; an instance without
// snapshots refuses to plan on the trimmed history instead of guessing.
func TestLedgerTrimmedBehindRetention(t *testing.T) {
	prefix := testkafka.Names(t, "lt")
	cfg := func(c *proxy.Config) { c.SnapshotEvery = 100; c.OwnershipLease = 2 * time.Second }
	a := newEnv(t, prefix, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, d := a.pair.Source, a.pair.Dest
	topic := prefix + "-t"
	if err := s.CreateTopic(ctx, topic, 1, 2, nil); err != nil {
		t.Fatal(err)
	}
	small := []kgo.Opt{kgo.ProducerBatchMaxBytes(512), kgo.ProducerLinger(0)}
	produceSource(ctx, t, s, topic, 3000, small...)
	if _, err := mirror.Once(ctx, a.mirrorConfig(topic)); err != nil {
		t.Fatal(err)
	}
	dadm, err := d.Admin()
	if err != nil {
		t.Fatal(err)
	}
	defer dadm.Close()
	td, err := dadm.ListTopics(ctx, topic)
	if err != nil || td[topic].Err != nil {
		t.Fatal(err, td[topic].Err)
	}
	lt := ledger.Topic(catalog.IDString(td[topic].ID))
	ledgerStart := func() int64 {
		t.Helper()
		so, err := dadm.ListStartOffsets(ctx, lt)
		if err != nil {
			t.Fatal(err)
		}
		o, _ := so.Lookup(lt, 0)
		return o.Offset
	}
	before := ledgerStart()
	// D's retention (here DeleteRecords) removes the first 2,000 offsets; more is mirrored.
	if _, err := dadm.DeleteRecords(ctx, kadm.Offsets{topic: {0: {Topic: topic, Partition: 0, At: 2000}}}); err != nil {
		t.Fatal(err)
	}
	produceSource(ctx, t, s, topic, 1000, small...)
	if _, err := mirror.Once(ctx, a.mirrorConfig(topic)); err != nil {
		t.Fatal(err)
	}
	ends, err := dadm.ListEndOffsets(ctx, lt)
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup(lt, 0)
	// Snapshots are stored, and the ledger trimmed after them, in the background: the trim
	// may come a moment after the last write was answered.
	after := ledgerStart()
	for deadline := time.Now().Add(15 * time.Second); (after <= before || after < end.Offset/3) && time.Now().Before(deadline); after = ledgerStart() {
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("ledger start %d before, %d after; ledger end %d", before, after, end.Offset)
	if after <= before || after < end.Offset/3 {
		t.Fatalf("ledger start %d (end %d) after D's log start moved to 2000: not trimmed", after, end.Offset)
	}

	// A fresh view, from the trimmed ledger.
	want := consume(ctx, t, s.Addrs(), topic, 0, kgo.NewOffset().At(2000), 2000)
	px := a.plain(t)
	got := consume(ctx, t, []string{px}, topic, 0, kgo.NewOffset().AtStart(), 2000)
	sameRecords(t, "through a fresh instance after the trim", got, want)

	// A takeover from the snapshot, by another writer instance once A's lease ran out.
	a.stop()
	b := a.another(prefix, cfg)
	produceSource(ctx, t, s, topic, 300, small...)
	time.Sleep(2 * time.Second)
	if _, err := mirror.Once(ctx, b.mirrorConfig(topic)); err != nil {
		t.Fatalf("mirror through B after the trim: %v", err)
	}
	want = consume(ctx, t, s.Addrs(), topic, 0, kgo.NewOffset().At(2000), 2300)
	got = consume(ctx, t, []string{b.plain(t)}, topic, 0, kgo.NewOffset().AtStart(), 2300)
	sameRecords(t, "through B after its takeover", got, want)

	// Without snapshots the trimmed ledger cannot be replayed: refused, nothing written.
	b.stop()
	c := a.another(prefix, func(c *proxy.Config) { c.SnapshotEvery = -1; c.OwnershipLease = 2 * time.Second })
	produceSource(ctx, t, s, topic, 10, small...)
	time.Sleep(2 * time.Second)
	mctx, mcancel := context.WithTimeout(ctx, 20*time.Second)
	defer mcancel()
	_, err = mirror.Once(mctx, c.mirrorConfig(topic))
	if err == nil || !strings.Contains(err.Error(), "trimmed") {
		t.Fatalf("mirror through an instance without snapshots: %v; want a refusal naming the trimmed ledger", err)
	}
	if n := count(ctx, t, d, topic)[0]; n[1] != 4300 {
		t.Fatalf("D ends at %d after the refused mirror, want 4300", n[1])
	}
}
