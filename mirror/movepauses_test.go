package mirror_test

import (
	"context"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"offsetgate/catalog"
	"offsetgate/internal/testkafka"
	"offsetgate/mirror"
)

// The pause a live move costs a group, as a distribution: one group of two franz-go members
// (cooperative) is moved to the destination and back again and again while it consumes and
// producers write through the source listener; each move's pause is the longest time between
// two processed records from the move's start until the group has processed 100 more records.
// OFFSETGATE_MOVES sets how many moves (default 6; docs/operations.md reports longer runs),
// OFFSETGATE_MOVE_CLIENT the members' client: franz-cooperative (default), franz-eager,
// java-cooperative or java-eager. Every record is processed exactly once across all moves.
func TestLiveGroupMovePauses(t *testing.T) {
	kinds := map[string]memberKind{
		"franz-cooperative": {balancer: kgo.CooperativeStickyBalancer()},
		"franz-eager":       {balancer: kgo.RangeBalancer()},
		"java-cooperative":  {java: "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"},
		"java-eager":        {java: "org.apache.kafka.clients.consumer.RangeAssignor"},
	}
	client := "franz-cooperative"
	if v := os.Getenv("OFFSETGATE_MOVE_CLIENT"); v != "" {
		client = v
	}
	kind, ok := kinds[client]
	if !ok {
		t.Fatalf("OFFSETGATE_MOVE_CLIENT=%q: want franz-cooperative, franz-eager, java-cooperative or java-eager", client)
	}
	moves := 6
	if v := os.Getenv("OFFSETGATE_MOVES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 2 {
			t.Fatalf("OFFSETGATE_MOVES=%q: want a number of moves, at least 2", v)
		}
		moves = n
	}
	prefix := testkafka.Names(t, "mp")
	e := newEnv(t, prefix, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(moves)*time.Minute+2*time.Minute)
	defer cancel()
	s := e.pair.Source
	topic := prefix + "-t"
	if err := s.CreateTopic(ctx, topic, 3, 2, nil); err != nil {
		t.Fatal(err)
	}
	_, appsSrv := e.plainServerWith(t, sourceMode(t, e.pair, "apps"))
	apps := appsSrv.BootstrapAddr()

	var produced atomic.Int64
	pctx, stopProducing := context.WithCancel(ctx)
	pdone := make(chan struct{})
	go func() {
		defer close(pdone)
		cl, err := kgo.NewClient(kgo.SeedBrokers(apps), kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(2*time.Millisecond))
		if err != nil {
			t.Error(err)
			return
		}
		defer cl.Close()
		for i := 0; pctx.Err() == nil; i++ {
			if err := cl.ProduceSync(pctx, &kgo.Record{Key: []byte(strconv.Itoa(i)), Value: []byte("v")}).FirstErr(); err != nil {
				if pctx.Err() == nil {
					t.Error(err)
				}
				return
			}
			produced.Add(1)
			time.Sleep(5 * time.Millisecond)
		}
	}()
	mctx, stopMirror := context.WithCancel(ctx)
	mdone := make(chan error, 1)
	go func() { _, err := mirror.Follow(mctx, e.mirrorConfig(topic)); mdone <- err }()
	defer func() { stopMirror(); <-mdone }()

	group := prefix + "-g"
	type key struct {
		p int32
		o int64
	}
	var mu sync.Mutex
	seen := map[key]int{}
	var times []time.Time
	cctx, stopConsuming := context.WithCancel(ctx)
	var members sync.WaitGroup
	for m := 0; m < 2; m++ {
		members.Add(1)
		go func() {
			defer members.Done()
			kind.run(t, cctx, apps, topic, group, m, func(p int32, o int64) {
				mu.Lock()
				defer mu.Unlock()
				seen[key{p, o}]++
				times = append(times, time.Now())
			})
		}()
	}
	defer func() { stopConsuming(); members.Wait() }()
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(seen)
	}
	waitUntil(t, time.Minute, func() bool { return count() > 100 })

	dcl, err := kgo.NewClient(kgo.SeedBrokers(e.pair.Dest.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer dcl.Close()
	var pauses, took []time.Duration
	for i := 0; i < moves; i++ {
		start, want, done := catalog.MoveDraining, catalog.MoveMoved, "moved"
		if i%2 == 1 {
			start, want, done = catalog.MoveReturning, catalog.MoveReturned, "back"
		}
		t0 := time.Now()
		if err := catalog.StoreMoveWith(ctx, dcl, catalog.Move{Group: group, State: start}); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, 2*time.Minute, func() bool {
			m, ok := appsSrv.Catalog().Move(group)
			if ok && m.State == catalog.MoveFailed {
				t.Fatalf("move %d failed: %s", i, m.Reason)
			}
			return ok && m.State == want
		})
		t1 := time.Now()
		at := count()
		waitUntil(t, time.Minute, func() bool { return count() > at+100 })
		mu.Lock()
		var gap time.Duration
		last := t0
		for _, at := range times {
			if at.After(t0) {
				gap = max(gap, at.Sub(last))
				last = at
			}
		}
		mu.Unlock()
		pauses, took = append(pauses, gap), append(took, t1.Sub(t0))
		t.Logf("move %d (%s) took %v; longest pause %v", i+1, done, t1.Sub(t0).Round(time.Millisecond), gap.Round(time.Millisecond))
	}
	stopProducing()
	<-pdone
	sadm, err := s.Admin()
	if err != nil {
		t.Fatal(err)
	}
	defer sadm.Close()
	ends, err := sadm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	waitUntil(t, time.Minute, func() bool { return int64(count()) >= total })
	stopConsuming()
	members.Wait()
	mu.Lock()
	defer mu.Unlock()
	ends.Each(func(o kadm.ListedOffset) {
		for off := int64(0); off < o.Offset; off++ {
			if n := seen[key{o.Partition, off}]; n != 1 {
				t.Errorf("%s[%d] offset %d processed %d times", topic, o.Partition, off, n)
			}
		}
	})
	pct := func(ds []time.Duration, q float64) time.Duration {
		s := append([]time.Duration(nil), ds...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return s[min(len(s)-1, int(q*float64(len(s))))]
	}
	t.Logf("%d moves of a %s group of two: pause p50 %v p99 %v (max %v); move took p50 %v p99 %v",
		moves, client, pct(pauses, 0.5).Round(time.Millisecond), pct(pauses, 0.99).Round(time.Millisecond), pct(pauses, 1).Round(time.Millisecond),
		pct(took, 0.5).Round(time.Millisecond), pct(took, 0.99).Round(time.Millisecond))
}
