package mirror_test

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"offsetgate/internal/testkafka"
	"offsetgate/mirror"
)

// The mirror as a service: topics chosen by a regular expression, per-partition metrics and
// progress, transactional sources refused with a clear message before anything of them is
// written, and a source topic deleted and recreated under the same name noticed both while
// following and when a run starts.
func TestMirrorService(t *testing.T) {
	prefix := testkafka.Names(t, "svc")
	e := newEnv(t, prefix, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s := e.pair.Source
	a, b := prefix+"-a", prefix+"-b"
	for _, topic := range []string{a, b} {
		if err := s.CreateTopic(ctx, topic, 2, 2, nil); err != nil {
			t.Fatal(err)
		}
		produceSource(ctx, t, s, topic, 200)
	}

	// Bad input: a missing source topic, a destination topic that is not a mirror topic, a
	// mirror topic with more partitions than the source's. Refused before anything is written.
	plain := prefix + "-plain"
	if err := s.CreateTopic(ctx, plain, 2, 2, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.pair.Dest.CreateTopic(ctx, plain, 2, 2, nil); err != nil {
		t.Fatal(err)
	}
	produceSource(ctx, t, s, plain, 10)
	counted := prefix + "-count"
	if err := s.CreateTopic(ctx, counted, 2, 2, nil); err != nil {
		t.Fatal(err)
	}
	e.createMirrorTopic(ctx, counted, 3) // more than the source's (fewer would be grown to match)
	for name, topic := range map[string]string{"missing": prefix + "-missing", "not a mirror topic": plain, "partition count": counted} {
		_, err := mirror.Once(ctx, e.mirrorConfig(topic))
		var ie *mirror.InputError
		if !errors.As(err, &ie) {
			t.Fatalf("%s: %v, want an input error", name, err)
		}
		t.Logf("%s: %v", name, err)
	}
	if d := count(ctx, t, e.pair.Dest, plain); d[0][1]+d[1][1] != 0 {
		t.Fatalf("something was written to %s: %v", plain, d)
	}

	// --topic-regex, metrics, progress.
	reg := prometheus.NewRegistry()
	var progress bytes.Buffer
	cfg := e.mirrorConfig()
	cfg.TopicRegex = regexp.MustCompile("^" + regexp.QuoteMeta(prefix) + "-[ab]$")
	cfg.Metrics, cfg.Progress = reg, &mirror.LockedWriter{W: &progress}
	sum, err := mirror.Once(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.Partitions) != 4 {
		t.Fatalf("the regular expression gave %d partitions, want 4", len(sum.Partitions))
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			got[mf.GetName()] += m.GetGauge().GetValue()
		}
	}
	if got["offsetgate_mirror_client_records"] != 400 || got["offsetgate_mirror_client_lag_records"] != 0 || got["offsetgate_mirror_client_mirrored_offset"] != 400 {
		t.Fatalf("metrics after the run: %v", got)
	}
	// Every batch mirrored was fetched and confirmed once, each write queued and sent once.
	var batches int
	for _, ps := range sum.Partitions {
		batches += ps.Batches
	}
	hist := map[string]uint64{}
	for _, mf := range mfs {
		if h := mf.GetMetric()[0].GetHistogram(); h != nil {
			hist[mf.GetName()] = h.GetSampleCount()
		}
	}
	if lagged := hist["offsetgate_mirror_client_lag_seconds"]; batches == 0 || lagged != uint64(batches) || hist["offsetgate_mirror_client_fetch_age_seconds"] < lagged ||
		hist["offsetgate_mirror_client_write_seconds"] == 0 || hist["offsetgate_mirror_client_write_seconds"] != hist["offsetgate_mirror_client_queue_seconds"] ||
		hist["offsetgate_mirror_client_write_seconds"] > lagged {
		t.Fatalf("lag stages after %d batches: %v", batches, hist)
	}
	if !strings.Contains(progress.String(), a+"[0]") {
		t.Fatalf("no progress line for %s[0]:\n%s", a, progress.String())
	}

	// A transactional source: mirrored whole, marker included (mirror/txn_test.go has the rest).
	txn := prefix + "-txn"
	if err := s.CreateTopic(ctx, txn, 1, 2, nil); err != nil {
		t.Fatal(err)
	}
	produceSource(ctx, t, s, txn, 50)
	tcl, err := kgo.NewClient(kgo.SeedBrokers(s.Addrs()...), kgo.TransactionalID(prefix+"-tx"), kgo.DefaultProduceTopic(txn))
	if err != nil {
		t.Fatal(err)
	}
	if err := tcl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := tcl.ProduceSync(ctx, &kgo.Record{Value: []byte("in a transaction")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := tcl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	tcl.Close()
	if _, err = mirror.Once(ctx, e.mirrorConfig(txn)); err != nil {
		t.Fatalf("a transactional source: %v", err)
	}
	if d, src := count(ctx, t, e.pair.Dest, txn)[0], count(ctx, t, s, txn)[0]; d != src {
		t.Fatalf("the destination holds %v of the transactional topic, the source %v", d, src)
	}

	// A source topic deleted and recreated while the mirror follows it.
	fctx, fcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		fcfg := e.mirrorConfig(a)
		fcfg.Progress = timedLog{t, start}
		sum, err := mirror.Follow(fctx, fcfg)
		for _, p := range sum.Partitions {
			t.Logf("%s[%d] after %v: %v", p.Topic, p.Partition, time.Since(start), p.Err)
		}
		done <- err
	}()
	// The 200 records of the run above are on D already: records written now prove the
	// follower is past its start checks and following before the topic goes (deleted sooner,
	// its start found no topic: a CI failure).
	produceSource(ctx, t, s, a, 10)
	deadline := time.Now().Add(time.Minute)
	for c := count(ctx, t, e.pair.Dest, a); c[0][1]+c[1][1] < 210 && time.Now().Before(deadline); c = count(ctx, t, e.pair.Dest, a) {
		time.Sleep(200 * time.Millisecond)
	}
	sadm, _ := s.Admin()
	defer sadm.Close()
	if _, err := sadm.DeleteTopics(ctx, a); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if err := s.CreateTopic(ctx, a, 2, 2, nil); err == nil {
			break
		} else if i == 50 {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	produceSource(ctx, t, s, a, 300)
	var ferr error
	select {
	case ferr = <-done:
	case <-time.After(90 * time.Second):
		fcancel()
		ferr = <-done
	}
	fcancel()
	if !errors.Is(ferr, mirror.ErrSourceBackwards) {
		t.Fatalf("following a recreated source: %v", ferr)
	}
	t.Logf("follow ended: %v", ferr)
	if d := count(ctx, t, e.pair.Dest, a); d[0][1]+d[1][1] > 210 {
		t.Fatalf("the mirror took records of the recreated topic: %v", d)
	}
	// And a new run refuses it at once.
	if _, err := mirror.Once(ctx, e.mirrorConfig(a)); !errors.Is(err, mirror.ErrSourceBackwards) {
		t.Fatalf("a run after the source was recreated: %v", err)
	}
}

// timedLog writes progress lines to the test log with the time since start.
type timedLog struct {
	t     *testing.T
	start time.Time
}

func (w timedLog) Write(p []byte) (int, error) {
	w.t.Logf("%v: %s", time.Since(w.start).Round(time.Millisecond), bytes.TrimSpace(p))
	return len(p), nil
}

// A following run with --topic-regex mirrors source topics created after it started, and says
// so; a new matching topic it cannot mirror (its name taken on the destination by an ordinary
// topic) is reported and left alone.
func TestFollowRegexNewTopics(t *testing.T) {
	prefix := testkafka.Names(t, "disc")
	e := newEnv(t, prefix, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := e.pair.Source
	first, later, taken := prefix+"-r1", prefix+"-r2", prefix+"-r3"
	if err := s.CreateTopic(ctx, first, 1, 2, nil); err != nil {
		t.Fatal(err)
	}
	produceSource(ctx, t, s, first, 20)

	progress := &syncBuf{}
	cfg := e.mirrorConfig()
	cfg.TopicRegex = regexp.MustCompile("^" + regexp.QuoteMeta(prefix) + "-r[0-9]$")
	cfg.Progress, cfg.GroupInterval = progress, 300*time.Millisecond
	fctx, fcancel := context.WithCancel(ctx)
	defer fcancel()
	type result struct {
		sum mirror.Summary
		err error
	}
	done := make(chan result, 1)
	go func() {
		sum, err := mirror.Follow(fctx, cfg)
		done <- result{sum, err}
	}()
	waitUntil(t, time.Minute, func() bool { return count(ctx, t, e.pair.Dest, first)[0][1] == 20 })

	if err := s.CreateTopic(ctx, later, 2, 2, nil); err != nil {
		t.Fatal(err)
	}
	produceSource(ctx, t, s, later, 60)
	if err := e.pair.Dest.CreateTopic(ctx, taken, 1, 2, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateTopic(ctx, taken, 1, 2, nil); err != nil {
		t.Fatal(err)
	}
	produceSource(ctx, t, s, taken, 5)
	waitUntil(t, time.Minute, func() bool {
		c := count(ctx, t, e.pair.Dest, later)
		return len(c) == 2 && c[0][1]+c[1][1] == 60
	})
	produceSource(ctx, t, s, first, 5) // the first topic is still followed
	waitUntil(t, time.Minute, func() bool { return count(ctx, t, e.pair.Dest, first)[0][1] == 25 })
	waitUntil(t, 30*time.Second, func() bool {
		return strings.Contains(progress.String(), taken+": new source topic not mirrored")
	})
	fcancel()
	var res result
	select {
	case res = <-done:
	case <-ctx.Done():
		t.Fatal("the following run did not end")
	}
	if res.err != nil {
		t.Fatalf("following run: %v", res.err)
	}
	parts := map[string]int{}
	for _, p := range res.sum.Partitions {
		parts[p.Topic]++
	}
	if parts[first] != 1 || parts[later] != 2 || parts[taken] != 0 {
		t.Fatalf("partitions in the summary: %v", parts)
	}
	out := progress.String()
	if !strings.Contains(out, later+": new source topic, 2 partitions: mirroring") {
		t.Fatalf("no line for the new topic:\n%s", out)
	}
	if n := strings.Count(out, taken+": new source topic not mirrored"); n != 1 {
		t.Fatalf("the topic not mirrored was reported %d times:\n%s", n, out)
	}
	if c := count(ctx, t, e.pair.Dest, taken); c[0][1] != 0 {
		t.Fatalf("the ordinary destination topic was written to: %v", c)
	}
}

// syncBuf is a bytes.Buffer for progress lines written from several goroutines.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
