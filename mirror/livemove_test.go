package mirror_test

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"offsetgate/catalog"
	"offsetgate/internal/ports"
	"offsetgate/internal/realclients"
	"offsetgate/internal/testkafka"
	"offsetgate/mirror"
	"offsetgate/proxy"
)

// sourceMode is a mutation for plainServerWith: the listener fronts the source (bootstrap)
// and the destination, the source's brokers at node ids raised by 20 on ports of their own.
func sourceMode(t testing.TB, pair *testkafka.Pair, instance string) func(*proxy.Config) {
	spare, err := ports.Block(len(pair.Source.Nodes))
	if err != nil {
		t.Fatal(err)
	}
	const shift = 20
	pinned := map[int32]int{}
	for i, n := range pair.Source.Nodes {
		pinned[n.ID+shift] = spare + i
	}
	return func(c *proxy.Config) {
		c.Listeners = []proxy.ListenerConfig{{Name: "apps", Listen: c.Listen, BrokerPorts: pinned, Upstream: proxy.UpstreamSource}}
		c.Listen = ""
		c.Source = &proxy.SourceConfig{Bootstrap: pair.Source.Addrs(), NodeIDOffset: shift}
		c.InstanceID = instance
	}
}

// A consumer group moves from the source to the destination live: its members, franz-go
// clients (cooperative, eager, static) or Java consumers (cooperative and eager assignors)
// that process each record once and commit after processing, consume a source topic through
// offsetgate's source listener while producers keep writing to it through the same listener
// and the mirror follows; the move is started, and the same clients, never restarted, end up
// members of the group on the destination, with every record processed exactly once and the
// group's commits on the destination in source terms.
func TestLiveGroupMove(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    memberKind
		back bool // and then back to the source
		// instances is how many offsetgate instances front the source; member m uses
		// instance m % instances (default 1).
		instances int
	}{
		{name: "cooperative", m: memberKind{balancer: kgo.CooperativeStickyBalancer()}},
		{name: "eager", m: memberKind{balancer: kgo.RangeBalancer()}},
		{name: "static", m: memberKind{balancer: kgo.CooperativeStickyBalancer(), static: true}},
		{name: "java-cooperative", m: memberKind{java: "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"}},
		{name: "java-eager", m: memberKind{java: "org.apache.kafka.clients.consumer.RangeAssignor"}},
		// Moved and back, on a topic whose source log starts above 0 and whose destination
		// offsets are shifted: both translations of the commits are in play.
		{name: "back", m: memberKind{balancer: kgo.CooperativeStickyBalancer()}, back: true},
		// Two instances, each running the moves' driver, each member on its own.
		{name: "two-instances", m: memberKind{balancer: kgo.CooperativeStickyBalancer()}, instances: 2},
	} {
		t.Run(tc.name, func(t *testing.T) { testLiveGroupMove(t, tc.m, tc.back, max(tc.instances, 1)) })
	}
}

// memberKind is a group member's client: franz-go with a balancer (static: with a
// group.instance.id), or, when java names an assignor, the Java consumer.
type memberKind struct {
	balancer kgo.GroupBalancer
	static   bool
	java     string
	// javaProps, when set, makes the member a Java consumer with these properties (and the
	// assignor java names, if any).
	javaProps map[string]string
}

// run consumes as member m of group until ctx ends, calling each for every record processed.
func (k memberKind) run(t *testing.T, ctx context.Context, bootstrap, topic, group string, m int, each func(p int32, o int64)) {
	if k.java != "" || k.javaProps != nil {
		props := map[string]string{"client.id": fmt.Sprintf("%s-m%d", group, m)}
		if k.java != "" {
			props["partition.assignment.strategy"] = k.java
		}
		for p, v := range k.javaProps {
			props[p] = v
		}
		err := realclients.JavaConsumeStream(ctx, bootstrap, topic, 1<<30, int((10 * time.Minute).Milliseconds()),
			realclients.JavaOptions{Group: group, Props: props},
			func(r realclients.Record) { each(r.Partition, r.Offset) })
		if err != nil && ctx.Err() == nil {
			t.Errorf("java member %d: %v", m, err)
		}
		return
	}
	opts := []kgo.Opt{kgo.SeedBrokers(bootstrap), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.Balancers(k.balancer), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(), kgo.ClientID(fmt.Sprintf("%s-m%d", group, m))}
	if k.static {
		opts = append(opts, kgo.InstanceID(fmt.Sprintf("member-%d", m)))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Error(err)
		return
	}
	defer cl.CloseAllowingRebalance() // it blocks rebalances on poll
	for ctx.Err() == nil {
		fctx, fcancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(fctx)
		fcancel()
		fs.EachError(func(tp string, p int32, err error) {
			if ctx.Err() == nil && fctx.Err() == nil {
				t.Logf("fetch %s[%d]: %v", tp, p, err)
			}
		})
		fs.EachRecord(func(r *kgo.Record) { each(r.Partition, r.Offset) })
		// Processed, then committed, then the rebalance may go on: exactly once.
		if err := cl.CommitUncommittedOffsets(ctx); err != nil && ctx.Err() == nil {
			t.Logf("commit: %v", err)
		}
		cl.AllowRebalance()
	}
}

func testLiveGroupMove(t *testing.T, kind memberKind, back bool, instances int) {
	prefix := testkafka.Names(t, "lm")
	var mutate func(*proxy.Config)
	if back {
		mutate = shifted
	}
	e := newEnv(t, prefix, mutate)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := e.pair.Source
	topic := prefix + "-t"
	const parts = 3
	if err := s.CreateTopic(ctx, topic, parts, 2, nil); err != nil {
		t.Fatal(err)
	}
	sadm, err := s.Admin()
	if err != nil {
		t.Fatal(err)
	}
	defer sadm.Close()
	if back {
		// The source's log starts above 0: the mirror starts there, the destination at 0.
		produceSource(ctx, t, s, topic, 300)
		ends, err := sadm.ListEndOffsets(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		del := kadm.Offsets{}
		ends.Each(func(o kadm.ListedOffset) { del.Add(kadm.Offset{Topic: topic, Partition: o.Partition, At: o.Offset}) })
		if _, err := sadm.DeleteRecords(ctx, del); err != nil {
			t.Fatal(err)
		}
	}
	starts, err := sadm.ListStartOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	_, appsSrv := e.plainServerWith(t, sourceMode(t, e.pair, "apps"))
	apps := appsSrv.BootstrapAddr()
	memberAddrs := []string{apps}
	for i := 1; i < instances; i++ {
		_, other := e.plainServerWith(t, sourceMode(t, e.pair, fmt.Sprintf("apps-%d", i)))
		memberAddrs = append(memberAddrs, other.BootstrapAddr())
	}

	// Producers write to the source through offsetgate the whole time.
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
	// The mirror follows.
	mctx, stopMirror := context.WithCancel(ctx)
	mdone := make(chan error, 1)
	go func() { _, err := mirror.Follow(mctx, e.mirrorConfig(topic)); mdone <- err }()
	defer func() { stopMirror(); <-mdone }()

	// Two members of the group, consuming through the source listener.
	group := prefix + "-g"
	type key struct {
		p int32
		o int64
	}
	var mu sync.Mutex
	seen := map[key]int{}
	var times []time.Time
	var members sync.WaitGroup
	cctx, stopConsuming := context.WithCancel(ctx)
	for m := 0; m < 2; m++ {
		members.Add(1)
		go func() {
			defer members.Done()
			kind.run(t, cctx, memberAddrs[m%len(memberAddrs)], topic, group, m, func(p int32, o int64) {
				mu.Lock()
				defer mu.Unlock()
				seen[key{p, o}]++
				times = append(times, time.Now())
			})
		}()
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(seen)
	}
	waitUntil(t, time.Minute, func() bool { return count() > 150 })

	// The move.
	dcl, err := kgo.NewClient(kgo.SeedBrokers(e.pair.Dest.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer dcl.Close()
	moveStart := time.Now()
	if err := catalog.StoreMoveWith(ctx, dcl, catalog.Move{Group: group, State: catalog.MoveDraining}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 2*time.Minute, func() bool {
		m, ok := appsSrv.Catalog().Move(group)
		if ok && m.State == catalog.MoveFailed {
			t.Fatalf("the move failed: %s", m.Reason)
		}
		return ok && m.State == catalog.MoveMoved
	})
	moved := time.Now()
	t.Logf("moved after %v", moved.Sub(moveStart))
	atMove := count()
	// The members go on, on the destination's coordinator.
	waitUntil(t, time.Minute, func() bool { return count() > atMove+150 })
	var backStart, backDone time.Time
	if back {
		backStart = time.Now()
		if err := catalog.StoreMoveWith(ctx, dcl, catalog.Move{Group: group, State: catalog.MoveReturning}); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, 2*time.Minute, func() bool {
			m, ok := appsSrv.Catalog().Move(group)
			if ok && m.State == catalog.MoveMoved && m.Reason != "" {
				t.Fatalf("the move back failed: %s", m.Reason)
			}
			return ok && m.State == catalog.MoveReturned
		})
		backDone = time.Now()
		t.Logf("back on the source after %v", backDone.Sub(backStart))
		atBack := count()
		waitUntil(t, time.Minute, func() bool { return count() > atBack+150 })
	}
	stopProducing()
	<-pdone
	ends, err := sadm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) {
		st, _ := starts.Lookup(topic, o.Partition)
		total += o.Offset - st.Offset
	})
	waitUntil(t, time.Minute, func() bool { return int64(count()) >= total })
	// The members commit what they processed: on the source after a move back, otherwise on
	// the destination, in destination offsets that read back through offsetgate as the
	// source's ends. Checked before they stop (a Java member is stopped by killing it).
	atEnds := func(committed func(topic string, p int32) (int64, bool)) bool {
		ok := true
		ends.Each(func(o kadm.ListedOffset) {
			if at, found := committed(topic, o.Partition); !found || at != o.Offset {
				ok = false
			}
		})
		return ok
	}
	if back {
		waitUntil(t, 30*time.Second, func() bool {
			so, err := sadm.FetchOffsets(ctx, group)
			return err == nil && atEnds(func(tp string, p int32) (int64, bool) {
				c, found := so.Lookup(tp, p)
				return c.At, found
			})
		})
	} else {
		dg, err := kadm.NewClient(dcl).DescribeGroups(ctx, group)
		if err != nil {
			t.Fatal(err)
		}
		if g := dg[group]; g.Err != nil || g.State == "Dead" || g.State == "Empty" {
			t.Fatalf("the group on the destination: %+v", g)
		}
		pcl, err := kgo.NewClient(kgo.SeedBrokers(e.plain(t)))
		if err != nil {
			t.Fatal(err)
		}
		defer pcl.Close()
		waitUntil(t, 30*time.Second, func() bool {
			po, err := groupOffsetsOf(ctx, pcl, group, topic, parts)
			return err == nil && atEnds(func(tp string, p int32) (int64, bool) {
				c, found := po.Lookup(tp, p)
				return c.At, found
			})
		})
	}
	stopConsuming()
	members.Wait()

	// Every record on the source processed exactly once.
	mu.Lock()
	defer mu.Unlock()
	ends.Each(func(o kadm.ListedOffset) {
		st, _ := starts.Lookup(topic, o.Partition)
		for off := st.Offset; off < o.Offset; off++ {
			if n := seen[key{o.Partition, off}]; n != 1 {
				t.Errorf("%s[%d] offset %d processed %d times", topic, o.Partition, off, n)
			}
		}
	})
	if int64(len(seen)) != total {
		t.Errorf("processed %d distinct records, the source holds %d", len(seen), total)
	}
	// The pause: the longest gap between two processed records around a move.
	sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
	pause := func(from, to time.Time) time.Duration {
		var gap time.Duration
		for i := 1; i < len(times); i++ {
			if times[i].After(from.Add(-time.Second)) && times[i-1].Before(to.Add(10*time.Second)) {
				gap = max(gap, times[i].Sub(times[i-1]))
			}
		}
		return gap
	}
	t.Logf("group %s moved live: %d records processed once each; longest pause around the move %v", group, len(seen), pause(moveStart, moved))
	mfs, err := appsSrv.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var carried, carryErrors float64
	for _, mf := range mfs {
		switch mf.GetName() {
		case "offsetgate_group_move_carried_requests_total":
			carried = mf.GetMetric()[0].GetCounter().GetValue()
		case "offsetgate_group_move_carry_errors_total":
			carryErrors = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	// Errors may be counted as the members close (a carried heartbeat cut off).
	if carried == 0 {
		t.Errorf("no request carried to the destination (%v failed)", carryErrors)
	}
	t.Logf("%v requests carried, %v failed", carried, carryErrors)
	if back {
		t.Logf("group %s moved back: longest pause around the move back %v", group, pause(backStart, backDone))
	}
}

// A group of the new consumer protocol (KIP-848) cannot be moved live: the move fails with the
// reason, and the group's member, a Java consumer with group.protocol=consumer, goes on with
// the source undisturbed, processing every record once.
func TestLiveGroupMoveRefusesKIP848(t *testing.T) {
	prefix := testkafka.Names(t, "lk")
	e := newEnv(t, prefix, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := e.pair.Source
	topic := prefix + "-t"
	if err := s.CreateTopic(ctx, topic, 2, 2, nil); err != nil {
		t.Fatal(err)
	}
	_, appsSrv := e.plainServerWith(t, sourceMode(t, e.pair, "apps"))
	apps := appsSrv.BootstrapAddr()
	mctx, stopMirror := context.WithCancel(ctx)
	mdone := make(chan error, 1)
	go func() { _, err := mirror.Follow(mctx, e.mirrorConfig(topic)); mdone <- err }()
	defer func() { stopMirror(); <-mdone }()

	group := prefix + "-g"
	var mu sync.Mutex
	seen := map[[2]int64]int{}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(seen)
	}
	cctx, stopConsuming := context.WithCancel(ctx)
	cdone := make(chan struct{})
	go func() {
		defer close(cdone)
		memberKind{javaProps: map[string]string{"group.protocol": "consumer"}}.run(t, cctx, apps, topic, group, 0, func(p int32, o int64) {
			mu.Lock()
			defer mu.Unlock()
			seen[[2]int64{int64(p), o}]++
		})
	}()
	produce := func(n int) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(apps), kgo.DefaultProduceTopic(topic))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		for i := 0; i < n; i++ {
			if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(strconv.Itoa(i))}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	produce(100)
	waitUntil(t, time.Minute, func() bool { return count() >= 100 })

	dcl, err := kgo.NewClient(kgo.SeedBrokers(e.pair.Dest.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer dcl.Close()
	if err := catalog.StoreMoveWith(ctx, dcl, catalog.Move{Group: group, State: catalog.MoveDraining}); err != nil {
		t.Fatal(err)
	}
	var m catalog.Move
	waitUntil(t, time.Minute, func() bool {
		var ok bool
		m, ok = appsSrv.Catalog().Move(group)
		return ok && m.State == catalog.MoveFailed
	})
	if !strings.Contains(m.Reason, "KIP-848") {
		t.Fatalf("the move failed for %q; want the reason to name KIP-848", m.Reason)
	}
	// The member goes on with the source.
	produce(100)
	waitUntil(t, time.Minute, func() bool { return count() >= 200 })
	stopConsuming()
	<-cdone
	mu.Lock()
	defer mu.Unlock()
	for k, n := range seen {
		if n != 1 {
			t.Errorf("%s[%d] offset %d processed %d times", topic, k[0], k[1], n)
		}
	}
}
