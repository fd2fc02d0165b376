package mirror_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"offsetgate/internal/realclients"
	"offsetgate/internal/testkafka"
	"offsetgate/mirror"
	"offsetgate/rules"
)

// Promotion with producers moved: producers write to the source while the mirror follows and
// consumers read through offsetgate; the producers stop, the mirror catches up and stops, the
// topic is promoted through offsetgate, the producers start again against offsetgate. The
// consumers (franz-go and the Java client), which never stopped, read every record once with no
// jump in offsets, also with a shift (the source's log start moved before the mirror began)
// and a source leader epoch above zero.
func TestPromotionMovesProducers(t *testing.T) {
	prefix := testkafka.Names(t, "pm")
	e := newEnv(t, prefix, shifted)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s := e.pair.Source
	topic := prefix + "-t"
	if err := s.CreateTopic(ctx, topic, 1, 2, nil); err != nil {
		t.Fatal(err)
	}
	px := e.plain(t)
	produceTo := func(addrs []string, from, n int) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic(topic), kgo.RecordRetries(20))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		for i := from; i < from+n; i++ {
			rec, err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(fmt.Sprintf("m%d", i))}).First()
			if err != nil {
				t.Fatalf("producing m%d to %v: %v", i, addrs, err)
			}
			// The producer is told the offset its consumers will read the record at, through
			// offsetgate after the promotion too (the destination's differs by the shift).
			if rec.Offset != int64(i) {
				t.Fatalf("m%d produced to %v at offset %d", i, addrs, rec.Offset)
			}
		}
	}
	// The consumer reads through offsetgate the whole time.
	var mu sync.Mutex
	var got []srec
	cctx, stopConsumer := context.WithCancel(ctx)
	cdone := make(chan struct{})
	go func() {
		defer close(cdone)
		cl, err := kgo.NewClient(kgo.SeedBrokers(px), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
		if err != nil {
			t.Error(err)
			return
		}
		defer cl.Close()
		for cctx.Err() == nil {
			fs := cl.PollFetches(cctx)
			fs.EachRecord(func(r *kgo.Record) {
				mu.Lock()
				got = append(got, srec{Offset: r.Offset, Epoch: r.LeaderEpoch, Value: string(r.Value)})
				mu.Unlock()
			})
		}
	}()

	// A shift and a source epoch above zero.
	produceTo(s.Addrs(), 0, 150)
	sadm, _ := s.Admin()
	defer sadm.Close()
	if _, err := sadm.DeleteRecords(ctx, kadm.Offsets{topic: {0: {Topic: topic, Partition: 0, At: 100}}}); err != nil {
		t.Fatal(err)
	}
	leader, _, err := s.Leader(ctx, topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.MoveLeader(ctx, topic, 0, 3-leader); err != nil {
		t.Fatal(err)
	}
	mctx, stopMirror := context.WithCancel(ctx)
	mdone := make(chan error, 1)
	mcfg := e.mirrorConfig(topic)
	mcfg.GroupInterval = 200 * time.Millisecond // the log start follows the source's quickly
	go func() { _, err := mirror.Follow(mctx, mcfg); mdone <- err }()
	ocl, _ := kgo.NewClient(kgo.SeedBrokers(px))
	defer ocl.Close()
	waitUntil(t, time.Minute, func() bool {
		st, err := kadm.NewClient(ocl).ListStartOffsets(ctx, topic)
		o, _ := st.Lookup(topic, 0)
		return err == nil && o.Offset == 100
	})
	type jres struct {
		recs []realclients.Record
		err  error
	}
	jdone := make(chan jres, 1)
	go func() {
		r, err := realclients.JavaConsumeSlow(ctx, px, topic, 400, 120000, "", 20, 100)
		jdone <- jres{r, err}
	}()
	produceTo(s.Addrs(), 150, 150)
	// The producers stop on the source; the mirror catches up and stops.
	src := count(ctx, t, s, topic)[0]
	waitUntil(t, time.Minute, func() bool {
		el, err := kadm.NewClient(ocl).ListEndOffsets(ctx, topic)
		o, _ := el.Lookup(topic, 0)
		return err == nil && o.Offset == src[1]
	})
	if d := count(ctx, t, e.pair.Dest, topic)[0]; d[1] == src[1] {
		t.Fatalf("no shift: D ends at %d like the source", d[1])
	}
	stopMirror()
	if err := <-mdone; err != nil {
		t.Fatalf("mirror: %v", err)
	}
	// Promotion by the mirroring identity, through offsetgate.
	pcl := e.proxyClient(t)
	res, err := kadm.NewClient(pcl).AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.DeleteConfig, Name: rules.MarkKey}}, topic)
	if err != nil || res[0].Err != nil {
		t.Fatalf("promotion: %v %+v", err, res)
	}
	// The consumers' instance follows the marks; then the producers move to offsetgate.
	waitUntil(t, 30*time.Second, func() bool {
		rc, err := kadm.NewClient(ocl).DescribeTopicConfigs(ctx, topic)
		if err != nil {
			return false
		}
		for _, c := range rc[0].Configs {
			if c.Key == rules.MarkKey {
				return false
			}
		}
		return true
	})
	produceTo([]string{px}, 300, 200)
	waitUntil(t, time.Minute, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) >= 400 })
	stopConsumer()
	<-cdone
	// Every record's value names its source offset: m<offset>.
	for i, r := range got {
		if r.Offset != int64(100+i) || r.Value != fmt.Sprintf("m%d", r.Offset) {
			t.Fatalf("franz-go record %d through offsetgate: %+v (a jump, a gap or a repeat across the promotion)", i, r)
		}
		if i > 0 && r.Epoch < got[i-1].Epoch {
			t.Fatalf("franz-go record %d: leader epoch went from %d to %d", i, got[i-1].Epoch, r.Epoch)
		}
	}
	if len(got) != 400 {
		t.Fatalf("the consumer read %d records, want 400", len(got))
	}
	var jr jres
	select {
	case jr = <-jdone:
	case <-ctx.Done():
		t.Fatal("the Java consumer did not finish")
	}
	if jr.err != nil {
		t.Fatalf("Java consumer across the promotion: %v", jr.err)
	}
	for i, r := range jr.recs {
		if r.Offset != int64(100+i) || r.Value != fmt.Sprintf("m%d", r.Offset) {
			t.Fatalf("Java record %d through offsetgate: %+v", i, r)
		}
		if i > 0 && r.Epoch < jr.recs[i-1].Epoch {
			t.Fatalf("Java record %d: leader epoch went from %d to %d", i, jr.recs[i-1].Epoch, r.Epoch)
		}
	}
	if jr.recs[0].Epoch != 0 || jr.recs[len(jr.recs)-1].Epoch < 1 {
		t.Fatalf("Java saw epochs %d..%d: the test needs a source epoch change", jr.recs[0].Epoch, jr.recs[len(jr.recs)-1].Epoch)
	}
}
