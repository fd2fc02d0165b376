package mirror_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"offsetgate/internal/testkafka"
	"offsetgate/mirror"
)

// The way out: a source whose log starts at 100,000 is mirrored aligned (fillers up to the
// first batch, then deleted from D), so D holds every record at its source offset, from the
// source's log start, with nothing before it. offsetgate status says clients may go direct;
// a group that committed through offsetgate then reads D directly and resumes at the very
// record it would have read next, without an offset jump.
func TestMirrorAlignedLeavesOffsetgate(t *testing.T) {
	prefix := testkafka.Names(t, "al")
	e := newEnv(t, prefix, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s := e.pair.Source
	topic := prefix + "-t"
	if err := s.CreateTopic(ctx, topic, 1, 2, nil); err != nil {
		t.Fatal(err)
	}
	const start, total = 100_000, 100_500
	produceSource(ctx, t, s, topic, total, kgo.ProducerBatchMaxBytes(1<<20))
	sadm, _ := s.Admin()
	defer sadm.Close()
	if _, err := sadm.DeleteRecords(ctx, kadm.Offsets{topic: {0: {Topic: topic, Partition: 0, At: start}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := mirror.Once(ctx, e.mirrorConfig(topic)); err != nil {
		t.Fatal(err)
	}
	src, dst := count(ctx, t, s, topic)[0], count(ctx, t, e.pair.Dest, topic)[0]
	if src != [2]int64{start, total} || dst != src {
		t.Fatalf("destination holds offsets %v, source %v: want the same range, fillers deleted", dst, src)
	}
	// Read directly, D holds the source's records at the source's offsets (leader epochs
	// are D's own).
	direct := func(rs []srec) []srec {
		for i := range rs {
			rs[i].Epoch = 0
		}
		return rs
	}
	want := direct(consume(ctx, t, s.Addrs(), topic, 0, kgo.NewOffset().AtStart(), total-start))
	got := direct(consume(ctx, t, e.pair.Dest.Addrs(), topic, 0, kgo.NewOffset().AtStart(), total-start))
	sameRecords(t, "the destination read directly", got, want)

	// status: aligned, direct.
	pcl, err := kgo.NewClient(kgo.SeedBrokers(e.addr), kgo.DialTLSConfig(e.certs.ClientTLS(e.client)))
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close()
	scl, err := kgo.NewClient(kgo.SeedBrokers(s.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer scl.Close()
	st, err := mirror.Status(ctx, pcl, scl)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range st {
		if p.Topic != topic {
			continue
		}
		found = true
		if !p.Direct || p.Aligned == 0 || p.Aligned > start || len(p.Shifts) != 1 || p.Shifts[0]["delta"] != 0 {
			t.Fatalf("status of the aligned partition: direct %v (%s), %d aligned fillers, segments %v", p.Direct, p.DirectNo, p.Aligned, p.Shifts)
		}
	}
	if !found {
		t.Fatalf("status does not show %s: %+v", topic, st)
	}

	// A group reads 200 records through offsetgate and commits, then leaves offsetgate: the
	// same group on D directly goes on at the next record.
	group := prefix + "-g"
	px := e.plain(t)
	read := func(addrs []string, n int) []*kgo.Record {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.FetchMaxBytes(4000))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		var out []*kgo.Record
		for len(out) < n {
			fs := cl.PollRecords(ctx, n-len(out))
			if ctx.Err() != nil {
				t.Fatal(ctx.Err())
			}
			out = append(out, fs.Records()...)
		}
		if err := cl.CommitRecords(ctx, out...); err != nil {
			t.Fatal(err)
		}
		return out
	}
	through := read([]string{px}, 200)
	if through[0].Offset != start || through[199].Offset != start+199 {
		t.Fatalf("through offsetgate the group read offsets %d..%d", through[0].Offset, through[199].Offset)
	}
	after := read(e.pair.Dest.Addrs(), 1)
	if after[0].Offset != start+200 || string(after[0].Value) != want[200].Value || string(after[0].Key) != want[200].Key {
		t.Fatalf("on the destination directly the group resumed at offset %d (%q), want %d (%q)",
			after[0].Offset, after[0].Value, int64(start+200), want[200].Value)
	}
}
