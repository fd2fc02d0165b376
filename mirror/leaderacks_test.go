package mirror_test

import (
	"context"
	"testing"
	"time"

	"offsetgate/internal/testkafka"
	"offsetgate/mirror"
	"offsetgate/proxy"
)

// A following mirror through an offsetgate with ledger_acks: leader, on the real destination
// (replication factor 2, so a write is answered only once the ledger's follower has its
// entries): its writes append to the ledger with acks=1 and wait for the entries' replication
// beside their data, and the copy is exact, record for record.
func TestMirrorFollowLedgerLeaderAcks(t *testing.T) {
	prefix := testkafka.Names(t, "la")
	e := newEnv(t, prefix, func(c *proxy.Config) { c.LedgerAcks = "leader" })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := e.pair.Source
	topic := prefix + "-t"
	if err := s.CreateTopic(ctx, topic, 3, 2, nil); err != nil {
		t.Fatal(err)
	}
	produceSource(ctx, t, s, topic, 100)
	fctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	fcfg := e.mirrorConfig(topic)
	go func() { _, err := mirror.Follow(fctx, fcfg); done <- err }()
	for round := 0; round < 5; round++ {
		produceSource(ctx, t, s, topic, 60)
		time.Sleep(200 * time.Millisecond)
	}
	caughtUp(ctx, t, e, topic, 60*time.Second)
	stop()
	if err := <-done; err != nil {
		t.Fatalf("stopping the following mirror: %v", err)
	}
	sameAsSource(ctx, t, e, topic)
	leader, waited := leaderAcksMetrics(t, e)
	if leader == 0 || waited == 0 {
		t.Fatalf("%v ledger appends answered by the leader, %v writes waited for their entries' replication: want some of each", leader, waited)
	}
}

// leaderAcksMetrics is an instance's count of ledger appends answered by their leader and of
// writes that waited for their entries' replication.
func leaderAcksMetrics(t *testing.T, e *env) (appends, waits float64) {
	t.Helper()
	mfs, err := e.srv.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "offsetgate_mirror_ledger_leader_appends_total":
				appends += m.GetCounter().GetValue()
			case "offsetgate_mirror_ledger_replication_wait_seconds":
				waits += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return appends, waits
}
