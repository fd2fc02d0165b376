package mirror_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"offsetgate/internal/testkafka"
	"offsetgate/mirror"
)

// A run mirrors every partition whatever --parallel says: twelve partitions with two writers,
// once and then following while the source is written to. (A following run used to own one
// partition per slot and wait on it forever, leaving the others unmirrored.)
func TestMirrorMorePartitionsThanParallel(t *testing.T) {
	prefix := testkafka.Names(t, "wide")
	e := newEnv(t, prefix, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s := e.pair.Source
	const parts = 12
	topic := prefix + "-t"
	if err := s.CreateTopic(ctx, topic, parts, 2, nil); err != nil {
		t.Fatal(err)
	}
	spread := kgo.RecordPartitioner(kgo.RoundRobinPartitioner())
	produceSource(ctx, t, s, topic, 600, spread)
	same := func() bool {
		return fmt.Sprint(count(ctx, t, s, topic)) == fmt.Sprint(count(ctx, t, e.pair.Dest, topic))
	}

	cfg := e.mirrorConfig(topic)
	cfg.Parallel = 2
	sum, err := mirror.Once(ctx, cfg)
	if err != nil {
		t.Fatalf("mirror --once: %v", err)
	}
	if len(sum.Partitions) != parts {
		t.Fatalf("the run reported %d partitions, want %d", len(sum.Partitions), parts)
	}
	for _, p := range sum.Partitions {
		if p.Records == 0 {
			t.Fatalf("%s[%d] mirrored no record", p.Topic, p.Partition)
		}
	}
	if !same() {
		t.Fatalf("after --once: source %v, destination %v", count(ctx, t, s, topic), count(ctx, t, e.pair.Dest, topic))
	}

	// Following, with records produced to every partition while it runs.
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	var progress syncBuf
	fcfg := e.mirrorConfig(topic)
	fcfg.Parallel, fcfg.Progress, fcfg.ProgressEvery = 2, &progress, time.Second
	done := make(chan error, 1)
	go func() { _, err := mirror.Follow(fctx, fcfg); done <- err }()
	for round := 0; round < 3; round++ {
		produceSource(ctx, t, s, topic, 240, spread)
		time.Sleep(200 * time.Millisecond)
	}
	deadline := time.Now().Add(60 * time.Second)
	for !same() {
		if time.Now().After(deadline) {
			t.Fatalf("the following mirror did not catch up: source %v, destination %v\nprogress:\n%s",
				count(ctx, t, s, topic), count(ctx, t, e.pair.Dest, topic), progress.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Every partition reported with known ends, never as "-1" or an invented zero lag.
	waitUntil(t, 10*time.Second, func() bool {
		out := progress.String()
		for p := 0; p < parts; p++ {
			if !strings.Contains(out, fmt.Sprintf("%s[%d]: mirrored to ", topic, p)) {
				return false
			}
		}
		return true
	})
	if out := progress.String(); strings.Contains(out, "mirrored to -1") || strings.Contains(out, "source end -1") {
		t.Fatalf("progress shows unknown ends as numbers:\n%s", out)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("stopping the following mirror: %v", err)
	}
	sameAsSource(ctx, t, e, topic)
}

// status never shows a lag of 0 for ends it does not know: a partition with nothing mirrored
// is "not started" with the source's whole range as lag, and one the source does not answer
// for has no lag, with the reason.
func TestStatusUnknownEnds(t *testing.T) {
	prefix := testkafka.Names(t, "su")
	e := newEnv(t, prefix, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic := prefix + "-t"
	if err := e.pair.Source.CreateTopic(ctx, topic, 1, 2, nil); err != nil {
		t.Fatal(err)
	}
	produceSource(ctx, t, e.pair.Source, topic, 50)
	e.createMirrorTopic(ctx, topic, 2) // partition 1 has no source partition
	st, err := mirror.Status(ctx, e.proxyClient(t), e.srcClient(t))
	if err != nil {
		t.Fatal(err)
	}
	var got []mirror.PartitionStatus
	for _, p := range st {
		if p.Topic == topic {
			got = append(got, p)
		}
	}
	if len(got) != 2 {
		t.Fatalf("status of %s: %+v", topic, st)
	}
	p0, p1 := got[0], got[1]
	if p0.End != -1 || !strings.HasPrefix(p0.State(), "not started") || p0.Lag == nil || *p0.Lag != 50 {
		t.Fatalf("partition 0 (nothing mirrored, 50 source records): %+v, state %q", p0, p0.State())
	}
	if p1.Lag != nil || p1.SourceEnd != nil || p1.LagUnknown == "" {
		t.Fatalf("partition 1 (no source partition): lag %v, reason %q", p1.Lag, p1.LagUnknown)
	}
}

// Partitions added to a source topic while a run follows it are added to the mirror topic
// and mirrored; a run started after the source grew adds them too.
func TestFollowPartitionsAdded(t *testing.T) {
	prefix := testkafka.Names(t, "grow")
	e := newEnv(t, prefix, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := e.pair.Source
	topic := prefix + "-t"
	if err := s.CreateTopic(ctx, topic, 2, 2, nil); err != nil {
		t.Fatal(err)
	}
	spread := kgo.RecordPartitioner(kgo.RoundRobinPartitioner())
	produceSource(ctx, t, s, topic, 100, spread)
	same := func() bool {
		return fmt.Sprint(count(ctx, t, s, topic)) == fmt.Sprint(count(ctx, t, e.pair.Dest, topic))
	}
	caughtUp := func(what string, progress *syncBuf) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for !same() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: source %v, destination %v\nprogress:\n%s", what,
					count(ctx, t, s, topic), count(ctx, t, e.pair.Dest, topic), progress.String())
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	adm, err := s.Admin()
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()

	fctx, stop := context.WithCancel(ctx)
	var progress syncBuf
	cfg := e.mirrorConfig(topic)
	cfg.Progress, cfg.GroupInterval = &progress, 500*time.Millisecond
	done := make(chan error, 1)
	go func() { _, err := mirror.Follow(fctx, cfg); done <- err }()
	caughtUp("before the source grew", &progress)
	if _, err := adm.UpdatePartitions(ctx, 5, topic); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 30*time.Second, func() bool { return len(count(ctx, t, e.pair.Dest, topic)) == 5 })
	produceSource(ctx, t, s, topic, 100, spread)
	caughtUp("partitions added while following", &progress)
	// Consumers read the new partitions through offsetgate (their source views are loaded
	// when they are first met), with the source's offsets.
	for p := int32(2); p < 5; p++ {
		want := readAll(ctx, t, s, topic, p, 20)
		cl := e.proxyClient(t)
		cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().AtStart()}})
		var got []int64
		for len(got) < len(want) {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("%s[%d] through offsetgate: read %d of %d records", topic, p, len(got), len(want))
			}
			fs.EachRecord(func(r *kgo.Record) { got = append(got, r.Offset) })
		}
		for i := range want {
			if got[i] != want[i].Offset {
				t.Fatalf("%s[%d] through offsetgate: record %d at offset %d, the source's at %d", topic, p, i, got[i], want[i].Offset)
			}
		}
	}
	if !strings.Contains(progress.String(), "partitions added on the source (5, was 2)") {
		t.Fatalf("the run did not say it added partitions:\n%s", progress.String())
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// Grown while no run followed: the next run adds the partitions before it mirrors.
	if _, err := adm.UpdatePartitions(ctx, 6, topic); err != nil {
		t.Fatal(err)
	}
	produceSource(ctx, t, s, topic, 60, spread)
	if _, err := mirror.Once(ctx, e.mirrorConfig(topic)); err != nil {
		t.Fatalf("a run after the source grew: %v", err)
	}
	if !same() {
		t.Fatalf("after a --once run: source %v, destination %v", count(ctx, t, s, topic), count(ctx, t, e.pair.Dest, topic))
	}
}
