package mirror_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/internal/realclients"
	"offsetgate/internal/relay"
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
			po, err := groupOffsetsOf(ctx, pcl, group, topic, 2)
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

// groupOffsetsOf reads a group's offsets of one topic's partitions. Through offsetgate, asking
// for every topic of a group makes it read the source view of every mirror topic first (any of
// them may be in the answer); the shared destination holds hundreds.
func groupOffsetsOf(ctx context.Context, cl *kgo.Client, group, topic string, partitions int32) (kadm.OffsetResponses, error) {
	rg := kmsg.NewOffsetFetchRequestGroup()
	rg.Group = group
	gt := kmsg.NewOffsetFetchRequestGroupTopic()
	gt.Topic = topic
	for p := int32(0); p < partitions; p++ {
		gt.Partitions = append(gt.Partitions, p)
	}
	rg.Topics = append(rg.Topics, gt)
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Groups = append(req.Groups, rg)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, err
	}
	out := kadm.OffsetResponses{}
	for _, g := range resp.Groups {
		if err := kerr.ErrorForCode(g.ErrorCode); err != nil {
			return nil, err
		}
		for _, t := range g.Topics {
			for _, p := range t.Partitions {
				if out[t.Topic] == nil {
					out[t.Topic] = map[int32]kadm.OffsetResponse{}
				}
				out[t.Topic][p.Partition] = kadm.OffsetResponse{Offset: kadm.Offset{Topic: t.Topic, Partition: p.Partition, At: p.Offset},
					Err: kerr.ErrorForCode(p.ErrorCode)}
			}
		}
	}
	return out, nil
}

// The mirror's group copy asks offsetgate for the group's offsets of the mirrored topics only.
// An OffsetFetch for every topic of a group makes offsetgate read the source view of every
// mirror topic on the destination before it answers (any of them may be in the answer): just
// after offsetgate started, in front of a destination with hundreds of mirror topics, that took
// longer than the client waits (TestMoveConsumerGroup failed so, under -race, in two runs of
// three).
func TestCopyGroupsNamesItsTopics(t *testing.T) {
	prefix := testkafka.Names(t, "cg")
	e := newEnv(t, prefix, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := e.pair.Source
	topic, group := prefix+"-t", prefix+"-g"
	if err := s.CreateTopic(ctx, topic, 2, 2, nil); err != nil {
		t.Fatal(err)
	}
	produceSource(ctx, t, s, topic, 200, kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if _, err := mirror.Once(ctx, e.mirrorConfig(topic)); err != nil {
		t.Fatal(err)
	}
	sadm := kadm.NewClient(e.srcClient(t))
	if _, err := sadm.CommitOffsets(ctx, group, kadm.Offsets{topic: {
		0: {Topic: topic, Partition: 0, At: 40, LeaderEpoch: -1},
		1: {Topic: topic, Partition: 1, At: 60, LeaderEpoch: -1},
	}}); err != nil {
		t.Fatal(err)
	}
	// The group copy through a relay that reads every OffsetFetch it carries.
	var mu sync.Mutex
	var fetches, all int
	set := relay.NewSet(false, func(_ int, dir relay.Direction, frame []byte) relay.Action {
		if dir != relay.ToServer || len(frame) < 14 || binary.BigEndian.Uint16(frame[4:]) != uint16(kmsg.OffsetFetch) {
			return relay.Pass
		}
		v := int16(binary.BigEndian.Uint16(frame[6:]))
		body := frame[12:]
		if n := int16(binary.BigEndian.Uint16(body)); n > 0 { // client id
			body = body[2+int(n):]
		} else {
			body = body[2:]
		}
		req := kmsg.NewPtrOffsetFetchRequest()
		req.SetVersion(v)
		if req.IsFlexible() {
			body = body[1:] // no tagged fields in the header
		}
		if err := req.ReadFrom(body); err != nil {
			t.Errorf("OffsetFetch v%d: %v", v, err)
			return relay.Pass
		}
		mu.Lock()
		defer mu.Unlock()
		fetches++
		if v < 8 && req.Topics == nil {
			all++
		}
		for _, g := range req.Groups {
			if g.Topics == nil {
				all++
			}
		}
		return relay.Pass
	})
	defer set.Close()
	plain, err := kgo.NewClient(kgo.SeedBrokers(e.plain(t)), kgo.Dialer(set.Dial))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	res, err := mirror.CopyGroups(ctx, e.srcClient(t), plain, regexp.MustCompile("^"+regexp.QuoteMeta(group)+"$"), []string{topic})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].Copied != 2 || res[0].Partition[topic][0] != 40 || res[0].Partition[topic][1] != 60 {
		t.Fatalf("copied %+v", res)
	}
	mu.Lock()
	defer mu.Unlock()
	if fetches == 0 || all > 0 {
		t.Fatalf("%d OffsetFetch requests through offsetgate, %d of them for every topic of the group", fetches, all)
	}
}
