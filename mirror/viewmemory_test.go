package mirror_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"offsetgate/internal/realclients"
	"offsetgate/internal/testkafka"
	"offsetgate/mirror"
	"offsetgate/proxy"
	"offsetgate/verify"
)

// metric reads one unlabelled metric of an offsetgate instance.
func metric(t testing.TB, srv *proxy.Server, name string) float64 {
	t.Helper()
	mfs, err := srv.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			m := mf.GetMetric()[0]
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// A consumers' instance whose source view may hold 1 MiB of index pages serves a mirror
// partition of some 20,000 batches (several times that) exactly: franz-go and the Java client
// read every record from the start with the source's offsets, epochs, keys, values, headers
// and timestamps, verify finds every batch byte-identical (the headers are restored from pages
// read back from the ledger), and the pages in memory stay within the budget.
func TestSourceViewBoundedMemory(t *testing.T) {
	prefix := testkafka.Names(t, "vm")
	e := newEnv(t, prefix, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	s := e.pair.Source
	topic := prefix + "-t"
	if err := s.CreateTopic(ctx, topic, 1, 2, nil); err != nil {
		t.Fatal(err)
	}
	const n = 30000
	start := time.Now()
	step := func(what string) { t.Logf("%s: %v", what, time.Since(start).Round(100*time.Millisecond)) }
	// About one record per batch: many batches, so many index entries.
	produceSource(ctx, t, s, topic, n, kgo.ProducerBatchMaxBytes(512), kgo.ProducerLinger(0))
	step("produced")
	if _, err := mirror.Once(ctx, e.mirrorConfig(topic)); err != nil {
		t.Fatal(err)
	}
	step("mirrored")
	want := consume(ctx, t, s.Addrs(), topic, 0, kgo.NewOffset().AtStart(), n)

	px, srv := e.plainServerWith(t, func(c *proxy.Config) { c.ViewMemoryMB = 1 })
	got := consume(ctx, t, []string{px}, topic, 0, kgo.NewOffset().AtStart(), n, kgo.FetchMaxBytes(64<<10))
	sameRecords(t, "franz-go through offsetgate with a 1 MiB view", got, want)
	step("read through offsetgate")
	loads := metric(t, srv, "offsetgate_view_page_loads_total")
	evictions := metric(t, srv, "offsetgate_view_page_evictions_total")
	resident := metric(t, srv, "offsetgate_view_page_bytes")
	t.Logf("pages read back %v, evicted %v, %v bytes resident", loads, evictions, resident)
	if loads == 0 || evictions == 0 {
		t.Fatalf("pages read back %v, evicted %v: the view did not page", loads, evictions)
	}
	if resident > 1<<20 {
		t.Fatalf("%v bytes of pages in memory, budget 1 MiB", resident)
	}

	java, err := realclients.JavaConsume(ctx, px, topic, n, 120000, "")
	if err != nil {
		t.Fatalf("Java consumer: %v", err)
	}
	if len(java) != n {
		t.Fatalf("Java consumer read %d records, want %d", len(java), n)
	}
	step("read by Java")
	for i, r := range java {
		if w := want[i]; r.Offset != w.Offset || r.Epoch != w.Epoch || r.Key != w.Key || r.Value != w.Value {
			t.Fatalf("Java record %d: %+v, the source's %+v", i, r, w)
		}
	}

	pcl, err := kgo.NewClient(kgo.SeedBrokers(px))
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close()
	scl, err := kgo.NewClient(kgo.SeedBrokers(s.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer scl.Close()
	res, err := verify.Run(ctx, verify.Config{Source: scl, Proxy: pcl, Topic: topic}, nil)
	if err != nil {
		t.Fatal(err)
	}
	step("verified")
	for _, r := range res {
		if r.Err != nil || r.Diff != nil || r.Batches < n/3 {
			t.Fatalf("verify: %s", r.Line(topic))
		}
		t.Log(r.Line(topic))
	}
	if got := metric(t, srv, "offsetgate_view_page_bytes"); got > 1<<20 {
		t.Fatalf("%v bytes of pages in memory after verify, budget 1 MiB", got)
	}
}
