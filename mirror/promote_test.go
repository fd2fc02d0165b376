package mirror_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"offsetgate/internal/testkafka"
	"offsetgate/mirror"
	"offsetgate/rules"
)

// Promotion with producers moved: producers write to the source while the mirror follows and a
// consumer reads through offsetgate; the producers stop, the mirror catches up and stops, the
// topic is promoted through offsetgate, the producers start again against offsetgate. The
// consumer, which never stopped, reads every record once with no jump in offsets.
func TestPromotionMovesProducers(t *testing.T) {
	prefix := testkafka.Names(t, "pm")
	e := newEnv(t, prefix, nil)
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
			if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(fmt.Sprintf("m%d", i))}).FirstErr(); err != nil {
				t.Fatalf("producing m%d to %v: %v", i, addrs, err)
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

	mctx, stopMirror := context.WithCancel(ctx)
	mdone := make(chan error, 1)
	go func() { _, err := mirror.Follow(mctx, e.mirrorConfig(topic)); mdone <- err }()
	produceTo(s.Addrs(), 0, 300)
	// The producers stop on the source; the mirror catches up and stops.
	waitUntil(t, time.Minute, func() bool { return count(ctx, t, e.pair.Dest, topic)[0][1] == 300 })
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
	ocl, _ := kgo.NewClient(kgo.SeedBrokers(px))
	defer ocl.Close()
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
	waitUntil(t, time.Minute, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) >= 500 })
	stopConsumer()
	<-cdone
	for i, r := range got {
		if r.Offset != int64(i) || r.Value != fmt.Sprintf("m%d", i) {
			t.Fatalf("record %d through offsetgate: %+v (a jump, a gap or a repeat across the promotion)", i, r)
		}
	}
	if len(got) != 500 {
		t.Fatalf("the consumer read %d records, want 500", len(got))
	}
}
