package testkafka_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/internal/realclients"
	"offsetgate/internal/testkafka"
)

func TestMain(m *testing.M) { testkafka.Main(m) }

// The brokers answering must be the Kafka processes this harness formatted, not something
// else listening on the port: their cluster id is the one the harness chose.
func TestBrokersAreTheHarnessKafka(t *testing.T) {
	pair := testkafka.Shared(t)
	if pair.Source.ClusterID == pair.Dest.ClusterID {
		t.Fatalf("source and destination share cluster id %s", pair.Source.ClusterID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range []*testkafka.Cluster{pair.Source, pair.Dest} {
		if len(c.Nodes) != 2 {
			t.Fatalf("%s has %d nodes, want a combined node and a broker-only node", c.Name, len(c.Nodes))
		}
		for _, n := range c.Nodes {
			if !n.Running() {
				t.Fatalf("%s node %d (pid %d) is not running", c.Name, n.ID, n.Pid())
			}
			cl, err := kgo.NewClient(kgo.SeedBrokers(n.Addr()))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
			cl.Close()
			if err != nil {
				t.Fatalf("%s node %d metadata: %v", c.Name, n.ID, err)
			}
			if resp.ClusterID == nil || *resp.ClusterID != c.ClusterID {
				t.Fatalf("%s node %d answers for cluster %v, harness formatted %s", c.Name, n.ID, resp.ClusterID, c.ClusterID)
			}
			// ApiVersions tells the software: a Kafka 4 broker knows at least Produce v12.
			av, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, mustClient(t, n.Addr()))
			if err != nil {
				t.Fatal(err)
			}
			var produceMax int16 = -1
			for _, k := range av.ApiKeys {
				if k.ApiKey == 0 {
					produceMax = k.MaxVersion
				}
			}
			if produceMax < 12 {
				t.Fatalf("%s node %d supports Produce up to v%d; not a Kafka 4 broker", c.Name, n.ID, produceMax)
			}
		}
	}
}

func mustClient(t *testing.T, addrs ...string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func produceFranz(ctx context.Context, t *testing.T, cl *kgo.Client, topic string, n int, prefix string) {
	t.Helper()
	var rs []*kgo.Record
	for i := 0; i < n; i++ {
		rs = append(rs, &kgo.Record{Topic: topic, Key: []byte(fmt.Sprintf("%s-k%d", prefix, i)), Value: []byte(fmt.Sprintf("%s-v%d", prefix, i))})
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatalf("franz-go produce to %s: %v", topic, err)
	}
}

func consumeFranz(ctx context.Context, t *testing.T, addrs []string, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("franz-go consumed %d of %d records of %s: %v", len(out), n, topic, ctx.Err())
		}
		fs.EachError(func(tp string, p int32, err error) { t.Fatalf("fetch %s[%d]: %v", tp, p, err) })
		out = append(out, fs.Records()...)
	}
	return out
}

// Both clusters take writes and reads from franz-go and from the Java client, and a partition
// leader on the destination moves (with a higher leader epoch) while clients keep working.
func TestProduceConsumeAndLeaderMove(t *testing.T) {
	pair := testkafka.Shared(t)
	// Five JVM clients one after the other, while other packages' tests load both cores: three
	// minutes ran out once in CI (in the last Java consumer) with nothing wrong.
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()

	for _, c := range []*testkafka.Cluster{pair.Source, pair.Dest} {
		topic := testkafka.Names(t, c.Name)
		if err := c.CreateTopic(ctx, topic, 2, 2, nil); err != nil {
			t.Fatal(err)
		}
		produceFranz(ctx, t, mustClient(t, c.Addrs()...), topic, 50, "go")
		if err := realclients.JavaProduce(ctx, c.Bootstrap(), topic, 50, "java", ""); err != nil {
			t.Fatal(err)
		}
		got := consumeFranz(ctx, t, c.Addrs(), topic, 100)
		if len(got) != 100 {
			t.Fatalf("%s: franz-go read %d records, want 100", c.Name, len(got))
		}
		jrecs, err := realclients.JavaConsume(ctx, c.Bootstrap(), topic, 100, 60000, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(jrecs) != 100 {
			t.Fatalf("%s: Java client read %d records, want 100", c.Name, len(jrecs))
		}
	}

	// Leader move on the destination.
	d := pair.Dest
	topic := testkafka.Names(t, "move")
	if err := d.CreateTopic(ctx, topic, 1, 2, nil); err != nil {
		t.Fatal(err)
	}
	produceFranz(ctx, t, mustClient(t, d.Addrs()...), topic, 10, "before")
	leader, epoch, err := d.Leader(ctx, topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	to := int32(1)
	if leader == 1 {
		to = 2
	}
	if err := d.MoveLeader(ctx, topic, 0, to); err != nil {
		t.Fatal(err)
	}
	leader2, epoch2, err := d.Leader(ctx, topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	if leader2 != to || epoch2 <= epoch {
		t.Fatalf("after the move: leader %d epoch %d, want leader %d and an epoch above %d", leader2, epoch2, to, epoch)
	}
	produceFranz(ctx, t, mustClient(t, d.Addrs()...), topic, 10, "after")
	recs := consumeFranz(ctx, t, d.Addrs(), topic, 20)
	if recs[0].LeaderEpoch != epoch || recs[19].LeaderEpoch != epoch2 {
		t.Fatalf("batch epochs %d..%d, want %d..%d", recs[0].LeaderEpoch, recs[19].LeaderEpoch, epoch, epoch2)
	}
	jrecs, err := realclients.JavaConsume(ctx, d.Bootstrap(), topic, 20, 60000, testkafka.Names(t, "group"))
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range jrecs {
		if r.Offset != int64(i) {
			t.Fatalf("Java record %d at offset %d", i, r.Offset)
		}
	}
}

// librdkafka clients (kcat and confluent-kafka for Python) work against the destination.
func TestLibrdkafkaClients(t *testing.T) {
	pair := testkafka.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d := pair.Dest
	topic := testkafka.Names(t, "rdk")
	if err := d.CreateTopic(ctx, topic, 1, 2, nil); err != nil {
		t.Fatal(err)
	}
	if err := realclients.KcatProduce(ctx, d.Bootstrap(), topic, 20, "kcat"); err != nil {
		t.Fatal(err)
	}
	if err := realclients.PythonProduce(ctx, d.Bootstrap(), topic, 20, "py"); err != nil {
		t.Fatal(err)
	}
	krecs, err := realclients.KcatConsume(ctx, d.Bootstrap(), topic, 40)
	if err != nil {
		t.Fatal(err)
	}
	precs, err := realclients.PythonConsume(ctx, d.Bootstrap(), topic, 40, 60, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(krecs) != 40 || len(precs) != 40 {
		t.Fatalf("kcat read %d, python read %d, want 40 each", len(krecs), len(precs))
	}
	for i := range krecs {
		if krecs[i].Key != precs[i].Key || krecs[i].Offset != precs[i].Offset {
			t.Fatalf("record %d: kcat %+v, python %+v", i, krecs[i], precs[i])
		}
	}
	if krecs[0].Key != "kcat-k0" || krecs[20].Key != "py-k0" {
		t.Fatalf("unexpected keys %q, %q", krecs[0].Key, krecs[20].Key)
	}
}

// A cluster of a test's own can be started, crashed and cleaned up, with no process left.
func TestOwnClusterStopsCleanly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := testkafka.Start(ctx, testkafka.Options{Name: "own", Brokers: 2})
	if err != nil {
		t.Fatal(err)
	}
	pids := []int{c.Nodes[0].Pid(), c.Nodes[1].Pid()}
	c.Nodes[1].Kill()
	if c.Nodes[1].Running() {
		t.Fatal("killed node still running")
	}
	c.Stop()
	for _, pid := range pids {
		if processAlive(pid) {
			t.Fatalf("pid %d survived Stop", pid)
		}
	}
}

func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// A zombie ("Z") has exited and only waits to be reaped.
	f := strings.Fields(string(b))
	return len(f) > 2 && f[2] != "Z"
}
