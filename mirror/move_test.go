package mirror_test

import (
	"context"
	"fmt"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"offsetgate/internal/realclients"
	"offsetgate/internal/testkafka"
	"offsetgate/mirror"
)

// Consumer groups move from the source to offsetgate while producers write to the source the
// whole time and the mirror follows: a franz-go group, then a Java group, each stopped on the
// source, its final offsets copied by the mirror, started through offsetgate. Every record is
// processed exactly once, in order per partition; the pause is measured.
func TestMoveGroupsLive(t *testing.T) {
	prefix := testkafka.Names(t, "mv")
	e := newEnv(t, prefix, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	s := e.pair.Source
	topic := prefix + "-t"
	if err := s.CreateTopic(ctx, topic, 2, 2, nil); err != nil {
		t.Fatal(err)
	}
	// Producers write to the source the whole time.
	var produced atomic.Int64
	pctx, stopProducing := context.WithCancel(ctx)
	pdone := make(chan struct{})
	go func() {
		defer close(pdone)
		cl, err := kgo.NewClient(kgo.SeedBrokers(s.Addrs()...), kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(2*time.Millisecond))
		if err != nil {
			t.Error(err)
			return
		}
		defer cl.Close()
		for i := 0; pctx.Err() == nil; i++ {
			if err := cl.ProduceSync(pctx, &kgo.Record{Key: []byte(fmt.Sprintf("r%d", i)), Value: []byte("v")}).FirstErr(); err != nil {
				if pctx.Err() == nil {
					t.Error(err)
				}
				return
			}
			produced.Add(1)
			time.Sleep(3 * time.Millisecond)
		}
	}()
	// The mirror follows and copies the groups' offsets every 300 ms.
	cfg := e.mirrorConfig(topic)
	cfg.Groups = regexp.MustCompile("^" + regexp.QuoteMeta(prefix) + "-")
	cfg.GroupInterval = 300 * time.Millisecond
	mctx, stopMirror := context.WithCancel(ctx)
	mdone := make(chan error, 1)
	go func() { _, err := mirror.Follow(mctx, cfg); mdone <- err }()
	defer func() { stopMirror(); <-mdone }()
	px := e.plain(t)

	type key struct {
		p int32
		o int64
	}
	var mu sync.Mutex
	seen := map[key]int{}
	lastOffset := map[int32]int64{}
	record := func(who string, p int32, o int64) {
		mu.Lock()
		defer mu.Unlock()
		seen[key{p, o}]++
		if last, ok := lastOffset[p]; ok && o <= last {
			t.Errorf("%s: partition %d went from offset %d to %d", who, p, last, o)
		}
		lastOffset[p] = o
	}
	// waitCopied waits until offsetgate shows the group's source commits.
	waitCopied := func(group string) time.Duration {
		start := time.Now()
		sadm, _ := s.Admin()
		defer sadm.Close()
		so, err := sadm.FetchOffsets(ctx, group)
		if err != nil {
			t.Fatal(err)
		}
		pcl, _ := kgo.NewClient(kgo.SeedBrokers(px))
		defer pcl.Close()
		waitUntil(t, time.Minute, func() bool {
			po, err := kadm.NewClient(pcl).FetchOffsets(ctx, group)
			if err != nil {
				return false
			}
			same := true
			so.Each(func(o kadm.OffsetResponse) {
				if p, ok := po.Lookup(o.Topic, o.Partition); !ok || p.At != o.At {
					same = false
				}
			})
			return same
		})
		return time.Since(start)
	}
	groupRead := func(group string, addrs []string, until func() bool) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		for !until() {
			fctx, fcancel := context.WithTimeout(ctx, 2*time.Second)
			fs := cl.PollFetches(fctx)
			fcancel()
			fs.EachRecord(func(r *kgo.Record) { record(group, r.Partition, r.Offset) })
			if err := cl.CommitUncommittedOffsets(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}

	// franz-go: two seconds on the source, stop, copy, start through offsetgate.
	g1 := prefix + "-franz"
	t0 := time.Now()
	groupRead(g1, s.Addrs(), func() bool { return time.Since(t0) > 2*time.Second })
	stopped := time.Now()
	copyWait := waitCopied(g1)
	var firstAfter time.Duration
	resumed := 0
	groupRead(g1, []string{px}, func() bool {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n > resumed && firstAfter == 0 && resumed > 0 {
			firstAfter = time.Since(stopped)
		}
		if resumed == 0 {
			resumed = n
		}
		return n >= resumed+100
	})
	t.Logf("franz-go group paused %v (waiting for the copy: %v)", firstAfter.Round(time.Millisecond), copyWait.Round(time.Millisecond))

	// The Java group, on the same records from the start: its own exactly-once set.
	javaSeen := map[key]int{}
	g2 := prefix + "-java"
	first, err := realclients.JavaConsumeSlow(ctx, s.Bootstrap(), topic, 300, 60000, g2, 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	jstopped := time.Now()
	jcopy := waitCopied(g2)
	stopProducing()
	<-pdone
	total := produced.Load()
	// The mirror catches up, then both groups finish through offsetgate.
	waitUntil(t, 2*time.Minute, func() bool {
		c := count(ctx, t, e.pair.Dest, topic)
		return c[0][1]+c[1][1] >= total
	})
	rest, err := realclients.JavaConsume(ctx, px, topic, int(total)-len(first), 60000, g2)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Java group paused %v (copy %v, then a JVM start)", time.Since(jstopped).Round(time.Millisecond), jcopy.Round(time.Millisecond))
	lastJava := map[int32]int64{}
	for _, r := range append(first, rest...) {
		javaSeen[key{r.Partition, r.Offset}]++
		if last, ok := lastJava[r.Partition]; ok && r.Offset <= last {
			t.Fatalf("Java group: partition %d went from %d to %d", r.Partition, last, r.Offset)
		}
		lastJava[r.Partition] = r.Offset
	}
	groupRead(g1, []string{px}, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return int64(len(seen)) >= total
	})
	for name, m := range map[string]map[key]int{"franz-go": seen, "java": javaSeen} {
		if int64(len(m)) != total {
			t.Fatalf("%s group processed %d distinct records, %d were produced", name, len(m), total)
		}
		for k, n := range m {
			if n != 1 {
				t.Fatalf("%s group processed %v %d times", name, k, n)
			}
		}
	}
	t.Logf("%d records produced during the test, each processed once by each group", total)
}
