package mirror_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"offsetgate/batch"
	"offsetgate/internal/realclients"
	"offsetgate/internal/testkafka"
	"offsetgate/mirror"
	"offsetgate/proxy"
	"offsetgate/rawread"
)

// withConsumers gives an instance a plaintext listener, "consumers", at 127.0.0.1:port (its
// broker ports next to it) for clients without certificates, such as the Java tool; the mTLS
// listener stays the first one (env.addr, the mirror's).
func withConsumers(port int) func(*proxy.Config) {
	return func(c *proxy.Config) {
		c.Listeners = []proxy.ListenerConfig{
			{Name: "mirror", Listen: c.Listen, Advertise: c.Advertise, BrokerPorts: c.BrokerPorts, TLS: c.TLS.Listener},
			{Name: "consumers", Listen: "127.0.0.1:" + strconv.Itoa(port)},
		}
		c.Listen, c.Advertise, c.BrokerPorts, c.TLS.Listener = "", "", nil, nil
	}
}

// apiCounter is an instance's counter metric name for api (a Kafka API name: "Fetch").
func apiCounter(t *testing.T, e *env, name, api string) float64 {
	t.Helper()
	mfs, err := e.srv.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "api" && l.GetValue() == api {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no metric %s{api=%q}", name, api)
	return 0
}

// The Java consumer bootstrapped with two offsetgate instances carries on through the second
// when the one it reads through stops: every record of the mirror topic once, in order, with
// the source's offsets, keys and values. B starts only once the consumer has read through A
// (so A is surely the one it uses: the Java client picks a bootstrap address at random), and
// A stops while most records are still unread; the client's fetches are kept to one small
// batch, so what it read after the stop came through B. Every broker address the client knows
// is A's, so what takes it to B is its metadata.recovery.strategy, rebootstrap by default since
// Kafka 4.0 (with none, the default before, it is stuck once A is gone).
func TestJavaConsumerSurvivesInstanceLoss(t *testing.T) {
	prefix := testkafka.Names(t, "jl")
	aPort, bPort := freeBase(t), freeBase(t)
	a := newEnv(t, prefix, withConsumers(aPort))
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s := a.pair.Source
	topic := prefix + "-t"
	if err := s.CreateTopic(ctx, topic, 2, 2, nil); err != nil {
		t.Fatal(err)
	}
	const n, batchBytes = 600, 1024
	produceSource(ctx, t, s, topic, n, kgo.RecordPartitioner(kgo.RoundRobinPartitioner()), kgo.ProducerBatchMaxBytes(batchBytes))
	if _, err := mirror.Once(ctx, a.mirrorConfig(topic)); err != nil {
		t.Fatal(err)
	}
	want := map[int32][]rec{}
	for p, se := range count(ctx, t, s, topic) {
		if se[0] != 0 {
			t.Fatalf("%s[%d] starts at %d on the source", topic, p, se[0])
		}
		want[p] = readAll(ctx, t, s, topic, p, int(se[1]))
	}
	if len(want) != 2 || len(want[0])+len(want[1]) != n {
		t.Fatalf("source partitions: %d and %d records", len(want[0]), len(want[1]))
	}
	// The largest batch bounds what one fetch gives the client (fetch.max.bytes is smaller):
	// it holds at most one batch per partition that it has not handed out yet.
	aConsumers := "127.0.0.1:" + strconv.Itoa(aPort)
	maxBatch := max(largestBatch(ctx, t, aConsumers, topic, 0), largestBatch(ctx, t, aConsumers, topic, 1))

	// 5 records a poll, 100ms apart: about 10s for all, after the JVM's start.
	type printedRec struct {
		realclients.Record
		at time.Time
	}
	recs := make(chan printedRec, 2*n)
	var printed atomic.Int64
	jdone := make(chan error, 1)
	bootstrap := aConsumers + ",127.0.0.1:" + strconv.Itoa(bPort)
	go func() {
		jdone <- realclients.JavaConsumeStream(ctx, bootstrap, topic, n, 180000, realclients.JavaOptions{MaxPoll: 5, PauseMs: 100,
			Props: map[string]string{"fetch.max.bytes": "1", "max.partition.fetch.bytes": "1"}},
			func(r realclients.Record) { printed.Add(1); recs <- printedRec{r, time.Now()} })
	}()

	var got []realclients.Record
	var gap time.Duration // the longest wait for a record after A stopped
	var last time.Time
	var b *env
	var atStop int64
	var stoppedAt time.Time
	var jerr error
	for finished := false; !finished; {
		select {
		case r := <-recs:
			got = append(got, r.Record)
			if !stoppedAt.IsZero() && r.at.After(stoppedAt) {
				gap = max(gap, r.at.Sub(last))
			}
			last = r.at
		case jerr = <-jdone:
			finished = true
			continue
		case <-ctx.Done():
			t.Fatalf("the Java consumer printed %d of %d records", printed.Load(), n)
		}
		switch {
		case b == nil && len(got) >= 20:
			// Only A is up: the records so far came through it.
			if f := apiCounter(t, a, "offsetgate_requests_total", "Fetch"); f == 0 {
				t.Fatalf("the consumer read %d records, and A served no fetch", len(got))
			}
			b = a.another(prefix, withConsumers(bPort))
			t.Logf("B started after %d records", printed.Load())
		case b != nil && stoppedAt.IsZero() && len(got) >= 100:
			if f := apiCounter(t, b, "offsetgate_requests_total", "Fetch"); f != 0 {
				t.Fatalf("B served %v fetches before A stopped: the consumer was not reading through A", f)
			}
			stopping := time.Now()
			a.stop() // the instance the consumer reads through goes away mid-read
			stoppedAt, atStop = time.Now(), printed.Load()
			t.Logf("A stopped in %v, with %d of %d records printed", stoppedAt.Sub(stopping).Round(100*time.Millisecond), atStop, n)
		}
	}
	if jerr != nil {
		t.Fatalf("the Java consumer (%d records before it ended): %v", printed.Load(), jerr)
	}
	for len(recs) > 0 {
		got = append(got, (<-recs).Record)
	}
	if stoppedAt.IsZero() {
		t.Fatalf("A never stopped: the consumer read all %d records before (B started: %v)", len(got), b != nil)
	}
	t.Logf("the rest read through B in %v after A stopped, at most %v between two records", time.Since(stoppedAt).Round(100*time.Millisecond), gap.Round(100*time.Millisecond))

	// Every record once, in order, as the source has it.
	next := map[int32]int{}
	for i, r := range got {
		w := want[r.Partition]
		o := next[r.Partition]
		if o >= len(w) || r.Offset != int64(o) {
			t.Fatalf("Java record %d: %s[%d] offset %d, want %d: a record skipped or read twice", i, topic, r.Partition, r.Offset, o)
		}
		if r.Key != w[o].Key || r.Value != w[o].Value {
			t.Fatalf("Java record %d: %s[%d] offset %d is %q=%q, the source's %q=%q", i, topic, r.Partition, r.Offset, r.Key, r.Value, w[o].Key, w[o].Value)
		}
		next[r.Partition]++
	}
	for p, w := range want {
		if next[p] != len(w) {
			t.Fatalf("the Java consumer read %d of the %d records of %s[%d]", next[p], len(w), topic, p)
		}
	}

	// What the client held from A when it stopped is at most a batch per partition: the
	// records beyond came through B.
	after := int64(n) - atStop
	if after <= int64(2*maxBatch) {
		t.Fatalf("only %d records were read after A stopped, and the client could hold %d from A", after, 2*maxBatch)
	}
	bFetches, bBytes := apiCounter(t, b, "offsetgate_requests_total", "Fetch"), apiCounter(t, b, "offsetgate_response_bytes_total", "Fetch")
	if bFetches == 0 {
		t.Fatalf("B served no fetch, yet %d records were read after A stopped", after)
	}
	t.Logf("after A stopped: %d records (the client could hold %d from A), B served %v fetches and %v fetch bytes", after, 2*maxBatch, bFetches, bBytes)
}

// largestBatch is the most records in one batch of a partition as clients of addr fetch it.
func largestBatch(ctx context.Context, t *testing.T, addr, topic string, partition int32) int {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rd := rawread.New(cl, topic, partition)
	most := 0
	var off int64
	for {
		bs, hwm, err := rd.Fetch(ctx, off, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bs {
			h, err := batch.ReadHeader(b)
			if err != nil {
				t.Fatal(err)
			}
			most = max(most, int(h.LastOffsetDelta)+1)
			off = h.LastOffset() + 1
		}
		if len(bs) == 0 || off >= hwm {
			return most
		}
	}
}
