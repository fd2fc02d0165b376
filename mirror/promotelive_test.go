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
	"offsetgate/internal/realclients"
	"offsetgate/internal/testkafka"
	"offsetgate/mirror"
)

// The whole live cutover through source listeners: idempotent producers (franz-go and the
// Java client, each on its own offsetgate instance) write a source topic through offsetgate's
// source listeners while the mirror
// follows (the destination's offsets shifted from the source's), a consumer group of two
// franz-go members and a Java consumer read it through the same listener; the group is moved
// to the destination live, then the topic is promoted with `offsetgate promote`'s steps
// (sealed, the mirror reaches the source's end, the mark removed) while all of them go on,
// never restarted. Every record acknowledged is on the destination once, at the offset its
// producer was told (source terms, read through offsetgate), each producer's records in the
// order written, nothing written to the source after the promotion, writes and reads after it
// carried to the destination, the group processed every record once and the Java consumer
// read every record in order.
func TestPromoteLiveProducers(t *testing.T) {
	prefix := testkafka.Names(t, "pl")
	e := newEnv(t, prefix, shifted)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := e.pair.Source
	topic := prefix + "-t"
	const parts = 3
	if err := s.CreateTopic(ctx, topic, parts, 2, nil); err != nil {
		t.Fatal(err)
	}
	// The source's log starts above 0: the destination's offsets differ by the shift.
	produceSource(ctx, t, s, topic, 150)
	sadm, err := s.Admin()
	if err != nil {
		t.Fatal(err)
	}
	defer sadm.Close()
	ends, err := sadm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	del := kadm.Offsets{}
	ends.Each(func(o kadm.ListedOffset) { del.Add(kadm.Offset{Topic: topic, Partition: o.Partition, At: o.Offset}) })
	if _, err := sadm.DeleteRecords(ctx, del); err != nil {
		t.Fatal(err)
	}
	starts, err := sadm.ListStartOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	_, appsSrv := e.plainServerWith(t, sourceMode(t, e.pair, "apps"))
	apps := appsSrv.BootstrapAddr()
	// The Java clients use a second instance: the seal and the promotion reach both.
	_, apps2Srv := e.plainServerWith(t, sourceMode(t, e.pair, "apps-2"))
	apps2 := apps2Srv.BootstrapAddr()

	mctx, stopMirror := context.WithCancel(ctx)
	mdone := make(chan error, 1)
	go func() { _, err := mirror.Follow(mctx, e.mirrorConfig(topic)); mdone <- err }()
	defer func() { stopMirror(); <-mdone }()

	// Producers write through the source listener the whole time; each record's value names
	// its producer and number, and the offset it was acknowledged at is kept.
	type ack struct {
		p   int32
		off int64
	}
	var mu sync.Mutex
	acked := map[string]ack{}
	var ackTimes []time.Time
	var produced, failed atomic.Int64
	pctx, stopProducing := context.WithCancel(ctx)
	var producers sync.WaitGroup
	for w := 0; w < 2; w++ {
		producers.Add(1)
		go func() {
			defer producers.Done()
			cl, err := kgo.NewClient(kgo.SeedBrokers(apps), kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(3*time.Millisecond),
				kgo.ClientID(fmt.Sprintf("%s-p%d", prefix, w)))
			if err != nil {
				t.Error(err)
				return
			}
			defer cl.Close()
			for i := 0; pctx.Err() == nil; i++ {
				v := fmt.Sprintf("p%d-%d", w, i)
				cl.Produce(ctx, &kgo.Record{Key: []byte(strconv.Itoa(i)), Value: []byte(v)}, func(r *kgo.Record, err error) {
					if err != nil {
						if failed.Add(1) < 5 {
							t.Errorf("producing %s: %v", v, err)
						}
						return
					}
					produced.Add(1)
					mu.Lock()
					acked[v] = ack{r.Partition, r.Offset}
					ackTimes = append(ackTimes, time.Now())
					mu.Unlock()
				})
				time.Sleep(2 * time.Millisecond)
			}
			if err := cl.Flush(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	// And a Java producer (idempotent by default), steady across the promotion.
	const javaCount = 4000
	jdone := make(chan error, 1)
	go func() { jdone <- realclients.JavaProducePaced(ctx, apps2, topic, javaCount, "J", "", 4) }()
	// Consumers through the source listener the whole time: a group of two franz-go members
	// (moved to the destination live before the promotion), and a Java consumer that reads
	// every partition from the start (no group).
	type key struct {
		p int32
		o int64
	}
	var cmu sync.Mutex
	groupSeen := map[key]int{}
	var javaRead []realclients.Record
	cctx, stopConsuming := context.WithCancel(ctx)
	var consumers sync.WaitGroup
	group := prefix + "-g"
	for m := 0; m < 2; m++ {
		consumers.Add(1)
		go func() {
			defer consumers.Done()
			memberKind{balancer: kgo.CooperativeStickyBalancer()}.run(t, cctx, apps, topic, group, m, func(p int32, o int64) {
				cmu.Lock()
				groupSeen[key{p, o}]++
				cmu.Unlock()
			})
		}()
	}
	consumers.Add(1)
	go func() {
		defer consumers.Done()
		err := realclients.JavaConsumeStream(cctx, apps2, topic, 1<<30, int((10 * time.Minute).Milliseconds()), realclients.JavaOptions{},
			func(r realclients.Record) {
				cmu.Lock()
				javaRead = append(javaRead, r)
				cmu.Unlock()
			})
		if err != nil && cctx.Err() == nil {
			t.Errorf("the Java consumer: %v", err)
		}
	}()
	defer func() { stopConsuming(); consumers.Wait() }()
	waitUntil(t, time.Minute, func() bool { return produced.Load() > 500 })
	// The Java producer is writing (its JVM takes seconds to start).
	watch, err := kgo.NewClient(kgo.SeedBrokers(s.Addrs()...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	javaWriting := false
	waitUntil(t, 2*time.Minute, func() bool {
		fctx, fcancel := context.WithTimeout(ctx, time.Second)
		defer fcancel()
		watch.PollFetches(fctx).EachRecord(func(r *kgo.Record) { javaWriting = javaWriting || strings.HasPrefix(string(r.Value), "J-v") })
		return javaWriting
	})
	watch.Close()
	// The mirror follows (its topic exists, and holds records of the producers).
	pcl := e.proxyClient(t)
	waitUntil(t, time.Minute, func() bool {
		el, err := kadm.NewClient(pcl).ListEndOffsets(ctx, topic)
		if err != nil || el.Error() != nil {
			return false
		}
		n := 0
		el.Each(func(o kadm.ListedOffset) {
			if st, _ := starts.Lookup(topic, o.Partition); o.Offset > st.Offset {
				n++
			}
		})
		return n == parts
	})

	// The group moves to the destination live (its members keep fetching through the source
	// listener, from the source until the promotion).
	dcl, err := kgo.NewClient(kgo.SeedBrokers(e.pair.Dest.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer dcl.Close()
	waitUntil(t, time.Minute, func() bool { cmu.Lock(); defer cmu.Unlock(); return len(groupSeen) > 100 })
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

	// The promotion, as `offsetgate promote --source S --wait 1m` runs it.
	src, err := kgo.NewClient(kgo.SeedBrokers(s.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	start := time.Now()
	atStart := produced.Load()
	res, err := mirror.Promote(ctx, pcl, topic, mirror.PromoteOptions{Source: src, Wait: time.Minute,
		Progress: func(msg string) { t.Log(msg) }})
	if err != nil {
		t.Fatalf("promotion: %v", err)
	}
	t.Logf("promoted in %v (%d records acknowledged meanwhile)", time.Since(start), produced.Load()-atStart)
	if res.Late != 0 {
		t.Errorf("the source took %d records after the promotion", res.Late)
	}
	atPromotion := produced.Load()
	srcEnds, err := sadm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, time.Minute, func() bool { return produced.Load() > atPromotion+500 })
	if err := <-jdone; err != nil {
		t.Fatalf("the Java producer: %v", err)
	}
	stopProducing()
	producers.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d records failed", failed.Load())
	}
	// Nothing more reached the source after the promotion.
	after, err := sadm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	srcEnds.Each(func(o kadm.ListedOffset) {
		if a, _ := after.Lookup(topic, o.Partition); a.Offset != o.Offset {
			t.Errorf("the source's %s[%d] went from %d to %d after the promotion", topic, o.Partition, o.Offset, a.Offset)
		}
	})

	// Everything, read through a destination listener in source offsets.
	px := e.plain(t)

	// Admin tools on the source listener see the promoted topic's producers as a destination
	// listener shows them (the source's states and the writes carried to the destination
	// since), not the source's broker's, which knows nothing of those writes.
	producersOf := func(seeds ...string) []string {
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ps, err := kadm.NewClient(cl).DescribeProducers(ctx, kadm.TopicsSet{topic: {0: {}, 1: {}, 2: {}}})
		if err != nil {
			t.Fatalf("DescribeProducers through %s: %v", seeds, err)
		}
		var out []string
		for _, tp := range ps {
			for _, pp := range tp.Partitions {
				if pp.Err != nil {
					t.Fatalf("DescribeProducers of %s[%d] through %s: %v", topic, pp.Partition, seeds, pp.Err)
				}
			}
		}
		for _, p := range ps.SortedProducers() {
			out = append(out, fmt.Sprintf("p%d pid %d epoch %d seq %d ts %d txn %d", p.Partition, p.ProducerID,
				p.ProducerEpoch, p.LastSequence, p.LastTimestamp, p.CurrentTxnStartOffset))
		}
		return out
	}
	viaSource, viaDest, ofSource := producersOf(apps), producersOf(px), producersOf(s.Addrs()...)
	if fmt.Sprint(viaSource) != fmt.Sprint(viaDest) {
		t.Errorf("DescribeProducers through the source listener:\n%s\nthrough a destination listener:\n%s",
			strings.Join(viaSource, "\n"), strings.Join(viaDest, "\n"))
	}
	if fmt.Sprint(viaSource) == fmt.Sprint(ofSource) || len(viaSource) <= len(ofSource) {
		t.Errorf("DescribeProducers through the source listener lists %d producers, the source %d: the writes since the promotion are missing",
			len(viaSource), len(ofSource))
	}
	t.Logf("DescribeProducers: %d producers through the source listener, %d through a destination listener, %d on the source",
		len(viaSource), len(viaDest), len(ofSource))
	cl, err := kgo.NewClient(kgo.SeedBrokers(px), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	mu.Lock()
	want := len(acked) + javaCount
	mu.Unlock()
	type at struct {
		p   int32
		off int64
	}
	seen := map[string]at{}
	next, first := map[int32]int64{}, map[int32]int64{}
	lastOf := map[[2]int]int{} // producer, partition -> last number read
	java, javaLast := map[int]int{}, map[int32]int{}
	javaBefore, javaAfter := 0, 0
	rctx, rcancel := context.WithTimeout(ctx, time.Minute)
	defer rcancel()
	for len(seen) < want && rctx.Err() == nil {
		fs := cl.PollFetches(rctx)
		fs.EachRecord(func(r *kgo.Record) {
			v := string(r.Value)
			if prev, dup := seen[v]; dup {
				t.Errorf("%s read twice: at %d[%d] and %d[%d]", v, prev.p, prev.off, r.Partition, r.Offset)
			}
			seen[v] = at{r.Partition, r.Offset}
			if n, ok := next[r.Partition]; ok && r.Offset != n {
				t.Errorf("%s[%d]: offset %d after %d (a gap or a jump)", topic, r.Partition, r.Offset, n-1)
			} else if !ok {
				first[r.Partition] = r.Offset
			}
			next[r.Partition] = r.Offset + 1
			if strings.HasPrefix(v, "J-v") {
				i, err := strconv.Atoi(v[3:])
				if err != nil {
					t.Errorf("record %q: %v", v, err)
					return
				}
				java[i]++
				if last, ok := javaLast[r.Partition]; ok && i <= last {
					t.Errorf("%s after J-v%d in %s[%d]: the Java producer's order broken", v, last, topic, r.Partition)
				}
				javaLast[r.Partition] = i
				if end, _ := srcEnds.Lookup(topic, r.Partition); r.Offset >= end.Offset {
					javaAfter++
				} else {
					javaBefore++
				}
				return
			}
			var w, i int
			if _, err := fmt.Sscanf(v, "p%d-%d", &w, &i); err != nil {
				t.Errorf("record %q: %v", v, err)
				return
			}
			k := [2]int{w, int(r.Partition)}
			if last, ok := lastOf[k]; ok && i <= last {
				t.Errorf("%s after p%d-%d in %s[%d]: a producer's order broken", v, w, last, topic, r.Partition)
			}
			lastOf[k] = i
		})
	}
	// The consumers on the source listener read everything once, across the promotion: the
	// group (moved) processed every offset once; the Java consumer read every record at the
	// offset it has on the destination (source terms), in order.
	byOffset := map[key]string{}
	for v, a := range seen {
		byOffset[key{a.p, a.off}] = v
	}
	waitUntil(t, 2*time.Minute, func() bool {
		cmu.Lock()
		defer cmu.Unlock()
		return len(groupSeen) >= len(seen) && len(javaRead) >= len(seen)
	})
	stopConsuming()
	consumers.Wait()
	for k := range byOffset {
		if n := groupSeen[k]; n != 1 {
			t.Errorf("the moved group processed %s[%d] offset %d %d times", topic, k.p, k.o, n)
		}
	}
	if len(groupSeen) != len(byOffset) {
		t.Errorf("the group processed %d offsets, the topic holds %d", len(groupSeen), len(byOffset))
	}
	jnext := map[int32]int64{}
	for _, r := range javaRead {
		if want := byOffset[key{r.Partition, r.Offset}]; r.Value != want {
			t.Errorf("the Java consumer read %q at %s[%d] offset %d, the destination holds %q there", r.Value, topic, r.Partition, r.Offset, want)
		}
		if n, ok := jnext[r.Partition]; ok && r.Offset != n {
			t.Errorf("the Java consumer read %s[%d] offset %d after %d", topic, r.Partition, r.Offset, n-1)
		}
		jnext[r.Partition] = r.Offset + 1
	}
	if len(javaRead) != len(byOffset) {
		t.Errorf("the Java consumer read %d records, the topic holds %d", len(javaRead), len(byOffset))
	}
	mu.Lock()
	defer mu.Unlock()
	for v, a := range acked {
		got, ok := seen[v]
		switch {
		case !ok:
			t.Errorf("%s acknowledged at %d[%d] is not on the destination", v, a.p, a.off)
		case got.p != a.p || got.off != a.off:
			t.Errorf("%s acknowledged at %d[%d], read at %d[%d]", v, a.p, a.off, got.p, got.off)
		}
	}
	if len(seen) != len(acked)+javaCount {
		t.Errorf("read %d records, %d acknowledged", len(seen), len(acked)+javaCount)
	}
	for i := 0; i < javaCount; i++ {
		if java[i] != 1 {
			t.Errorf("J-v%d read %d times", i, java[i])
		}
	}
	// The Java producer wrote on both sides of the promotion, else it was not switched.
	if javaBefore == 0 || javaAfter == 0 {
		t.Errorf("the Java producer's records: %d on the source's side of the promotion, %d after it; the test needs both", javaBefore, javaAfter)
	}
	starts.Each(func(o kadm.ListedOffset) {
		if f, ok := first[o.Partition]; ok && f != o.Offset {
			t.Errorf("%s[%d] read from %d, the source's log start is %d", topic, o.Partition, f, o.Offset)
		}
	})
	mfs, err := appsSrv.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	carriedBy := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() == "offsetgate_promoted_carried_requests_total" {
			for _, m := range mf.GetMetric() {
				carriedBy[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
			}
		}
	}
	if carriedBy["Produce"] == 0 || carriedBy["Fetch"] == 0 {
		t.Errorf("requests carried to the destination after the promotion: %v; want writes and reads", carriedBy)
	}
	carried := carriedBy["Produce"]
	// The producers' pause: the longest time without an acknowledgement (the seal holds writes
	// until the mirror has the source's end).
	sort.Slice(ackTimes, func(i, j int) bool { return ackTimes[i].Before(ackTimes[j]) })
	var pause time.Duration
	for i := 1; i < len(ackTimes); i++ {
		pause = max(pause, ackTimes[i].Sub(ackTimes[i-1]))
	}
	t.Logf("longest time without an acknowledgement: %v", pause)
	t.Logf("%d franz-go records acknowledged, %d after the promotion; Java: %d before, %d after; %v Produce requests carried",
		len(acked), len(acked)-int(atPromotion), javaBefore, javaAfter, carried)
}
