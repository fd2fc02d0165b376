package mirror_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"

	"offsetgate/internal/testkafka"
	"offsetgate/mirror"
	"offsetgate/proxy"
)

// A following mirror through an offsetgate with ledger_acks: leader, on the real destination
// (replication factor 2, so a write is answered only once the ledger's follower has its
// entries): its writes append to the ledger with acks=1 and wait for the entries' replication
// beside their data, and the copy is exact, record for record. Past the defaults: 12
// partitions through a mirror with 3 writers, and halfway a second instance takes every
// partition over (each takeover in this mode writes with a producer id of its own) and the
// mirror goes on through it, exact again, nothing halted.
func TestMirrorFollowLedgerLeaderAcks(t *testing.T) {
	prefix := testkafka.Names(t, "la")
	cfg := func(c *proxy.Config) { c.LedgerAcks = "leader"; c.OwnershipLease = 2 * time.Second }
	a := newEnv(t, prefix, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s := a.pair.Source
	topic := prefix + "-t"
	const partitions = 12
	if err := s.CreateTopic(ctx, topic, partitions, 2, nil); err != nil {
		t.Fatal(err)
	}
	produceEvery(ctx, t, s, topic, partitions, 10)
	follow := func(e *env) {
		t.Helper()
		fctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		fcfg := e.mirrorConfig(topic)
		fcfg.Parallel = 3
		go func() { _, err := mirror.Follow(fctx, fcfg); done <- err }()
		for round := 0; round < 5; round++ {
			produceEvery(ctx, t, s, topic, partitions, 5)
			time.Sleep(200 * time.Millisecond)
		}
		caughtUp(ctx, t, e, topic, 90*time.Second)
		stop()
		if err := <-done; err != nil {
			t.Fatalf("stopping the following mirror: %v", err)
		}
		sameAsSource(ctx, t, e, topic)
		leader, waited := leaderAcksMetrics(t, e)
		if leader == 0 || waited == 0 {
			t.Fatalf("%v ledger appends answered by the leader, %v writes waited for their entries' replication: want some of each", leader, waited)
		}
		t.Logf("%v ledger appends answered by the leader, %v replication waits, %d partitions written", leader, waited, writtenPartitions(t, e))
		if h := halted(t, e); h != 0 {
			t.Fatalf("%d partitions halted", h)
		}
	}
	follow(a)
	a.stop()
	produceEvery(ctx, t, s, topic, partitions, 5)
	time.Sleep(2500 * time.Millisecond) // A's leases run out
	b := a.another(prefix, cfg)
	follow(b)
	if n := writtenPartitions(t, b); n != partitions {
		t.Fatalf("the second instance wrote %d partitions, want all %d", n, partitions)
	}
}

// produceEvery writes n records to every partition of topic on the source.
func produceEvery(ctx context.Context, t testing.TB, c *testkafka.Cluster, topic string, partitions int32, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var rs []*kgo.Record
	for p := range partitions {
		for i := range n {
			rs = append(rs, &kgo.Record{Partition: p, Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(fmt.Sprintf("p%d-%d", p, i))})
		}
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// halted is how many partitions an instance has halted.
func halted(t *testing.T, e *env) int {
	t.Helper()
	n := 0
	forMetrics(t, e, func(name string, m *dto.Metric) {
		if name == "offsetgate_mirror_partition_halted" && m.GetGauge().GetValue() != 0 {
			n++
		}
	})
	return n
}

// writtenPartitions is how many partitions an instance wrote to successfully.
func writtenPartitions(t *testing.T, e *env) int {
	t.Helper()
	seen := map[string]bool{}
	forMetrics(t, e, func(name string, m *dto.Metric) {
		if name != "offsetgate_mirror_writes_total" || m.GetCounter().GetValue() == 0 {
			return
		}
		l := map[string]string{}
		for _, lp := range m.GetLabel() {
			l[lp.GetName()] = lp.GetValue()
		}
		if l["code"] == "0" {
			seen[l["topic"]+"/"+l["partition"]] = true
		}
	})
	return len(seen)
}

// forMetrics calls fn with every sample of an instance's metrics.
func forMetrics(t *testing.T, e *env, fn func(name string, m *dto.Metric)) {
	t.Helper()
	mfs, err := e.srv.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			fn(mf.GetName(), m)
		}
	}
}

// leaderAcksMetrics is an instance's count of ledger appends answered by their leader and of
// writes that waited for their entries' replication.
func leaderAcksMetrics(t *testing.T, e *env) (appends, waits float64) {
	t.Helper()
	forMetrics(t, e, func(name string, m *dto.Metric) {
		switch name {
		case "offsetgate_mirror_ledger_leader_appends_total":
			appends += m.GetCounter().GetValue()
		case "offsetgate_mirror_ledger_replication_wait_seconds":
			waits += float64(m.GetHistogram().GetSampleCount())
		}
	})
	return appends, waits
}
