package proxy_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"sort"
	"strconv"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap/zaptest"

	"offsetgate/internal/ports"
	"offsetgate/internal/testkafka"
	"offsetgate/proxy"
)

func TestMain(m *testing.M) { testkafka.Main(m) }

// running is a proxy started for one test.
type running struct {
	srv  *proxy.Server
	cfg  proxy.Config
	addr string
	stop func()
}

// freeBase finds a port p such that p and the broker ports p+1+id of the cluster's nodes are
// free on loopback.
func freeBase(t testing.TB, c *testkafka.Cluster) int {
	t.Helper()
	maxID := int32(0)
	for _, n := range c.Nodes {
		maxID = max(maxID, n.ID)
	}
	p, err := ports.Block(int(maxID) + 2)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func startProxy(t testing.TB, dest *testkafka.Cluster, transport string, mutate func(*proxy.Config)) *running {
	t.Helper()
	base := freeBase(t, dest)
	cfg := proxy.Config{
		Listen:    "127.0.0.1:" + strconv.Itoa(base),
		Bootstrap: dest.Addrs(),
		Transport: transport,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	srv, err := proxy.New(cfg, zaptest.NewLogger(t).Named(transport))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	select {
	case <-srv.Ready():
	case err := <-done:
		cancel()
		t.Fatalf("proxy did not start: %v", err)
	}
	r := &running{srv: srv, cfg: cfg, addr: cfg.Listen}
	stopped := false
	r.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("proxy stopped with %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("proxy did not stop")
		}
	}
	t.Cleanup(r.stop)
	// Wait for the broker listeners.
	deadline := time.Now().Add(20 * time.Second)
	for _, n := range dest.Nodes {
		addr := fmt.Sprintf("127.0.0.1:%d", base+1+int(n.ID))
		for {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				c.Close()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("broker listener %s never came up", addr)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return r
}

// proxyPorts are the ports a client may legitimately be told about.
func (r *running) ports(dest *testkafka.Cluster) map[string]bool {
	out := map[string]bool{r.addr: true}
	for _, n := range dest.Nodes {
		out[fmt.Sprintf("127.0.0.1:%d", r.cfg.BrokerPort(n.ID))] = true
	}
	return out
}

func (r *running) metric(t testing.TB, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := r.srv.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	return findMetric(mfs, name, labels)
}

func findMetric(mfs []*dto.MetricFamily, name string, labels map[string]string) float64 {
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for k, v := range labels {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == k && lp.GetValue() == v {
						found = true
					}
				}
				if !found {
					continue metrics
				}
			}
			switch {
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			}
		}
	}
	return sum
}

// recordKey identifies a record for comparisons between clients.
type rec struct {
	Partition int32
	Offset    int64
	Key       string
	Value     string
}

func franzClient(t testing.TB, addrs []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addrs...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func produce(ctx context.Context, t *testing.T, cl *kgo.Client, topic string, n int, prefix string) {
	t.Helper()
	var rs []*kgo.Record
	for i := 0; i < n; i++ {
		rs = append(rs, &kgo.Record{Topic: topic, Key: []byte(fmt.Sprintf("%s-k%d", prefix, i)), Value: []byte(fmt.Sprintf("%s-v%d", prefix, i))})
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatalf("produce to %s: %v", topic, err)
	}
}

// consumeAll reads n records of topic from the start of every partition.
func consumeAll(ctx context.Context, t *testing.T, addrs []string, topic string, n int, opts ...kgo.Opt) []rec {
	t.Helper()
	cl := franzClient(t, addrs, append([]kgo.Opt{kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted())}, opts...)...)
	var out []rec
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records of %s: %v", len(out), n, topic, ctx.Err())
		}
		fs.EachError(func(tp string, p int32, err error) { t.Fatalf("fetch %s[%d]: %v", tp, p, err) })
		for _, r := range fs.Records() {
			out = append(out, rec{r.Partition, r.Offset, string(r.Key), string(r.Value)})
		}
	}
	sortRecs(out)
	return out
}

func sortRecs(rs []rec) {
	sort.Slice(rs, func(i, j int) bool {
		if rs[i].Partition != rs[j].Partition {
			return rs[i].Partition < rs[j].Partition
		}
		return rs[i].Offset < rs[j].Offset
	})
}

// waitMetric waits until a metric reaches at least min: connections are counted when their
// goroutines or event-loop callbacks finish, a moment after the client sees the close.
func (r *running) waitMetric(t testing.TB, name string, labels map[string]string, min float64) float64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		v := r.metric(t, name, labels)
		if v >= min || time.Now().After(deadline) {
			return v
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// produceOne is a Produce request (acks=all) of records to partition 0 of topic.
func produceOne(version int16, topic string, records []byte, timeoutMillis int32) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(version)
	req.Acks, req.TimeoutMillis = -1, timeoutMillis
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = records
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

// fetchOne is a consumer's Fetch request (by topic name, v12 or lower) of partition 0 of topic
// from offset 0, maxBytes in all and for the partition.
func fetchOne(version int16, topic string, maxWaitMillis, maxBytes int32) *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.SetVersion(version)
	req.MaxWaitMillis, req.MaxBytes, req.ReplicaID = maxWaitMillis, maxBytes, -1
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = topic
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.PartitionMaxBytes, fp.CurrentLeaderEpoch = maxBytes, -1
	ft.Partitions = append(ft.Partitions, fp)
	req.Topics = append(req.Topics, ft)
	return req
}

// topicAtLeader creates a one-partition topic on d and dials p's listener for its leader.
func topicAtLeader(ctx context.Context, t *testing.T, d *testkafka.Cluster, p *running, prefix string) (string, *rawConn) {
	t.Helper()
	topic := testkafka.Names(t, prefix)
	if err := d.CreateTopic(ctx, topic, 1, 1, nil); err != nil {
		t.Fatal(err)
	}
	leader, _, err := d.Leader(ctx, topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	return topic, dialRaw(t, fmt.Sprintf("127.0.0.1:%d", p.cfg.BrokerPort(leader)))
}

// randomTopic creates a one-partition topic on d holding n records of 4,000 random bytes, in
// uncompressed batches of up to 1 MiB, for tests that need large Fetch answers.
func randomTopic(ctx context.Context, t *testing.T, d *testkafka.Cluster, prefix string, n int) string {
	t.Helper()
	topic := testkafka.Names(t, prefix)
	if err := d.CreateTopic(ctx, topic, 1, 1, nil); err != nil {
		t.Fatal(err)
	}
	cl := franzClient(t, d.Addrs(), kgo.ProducerBatchMaxBytes(1<<20), kgo.ProducerBatchCompression(kgo.NoCompression()))
	rs := make([]*kgo.Record, n)
	for i := range rs {
		v := make([]byte, 4000)
		_, _ = rand.Read(v)
		rs[i] = &kgo.Record{Topic: topic, Value: v}
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return topic
}
