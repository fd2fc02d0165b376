package proxy_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/internal/ports"
	"offsetgate/internal/realclients"
	"offsetgate/internal/testkafka"
	"offsetgate/proxy"
)

// startSourceMode runs offsetgate with one listener that fronts the source (bootstrap) and
// the destination (its brokers' ports) at once; the shared clusters both number their
// brokers from 1, so the source's are presented from shift+1.
func startSourceMode(t *testing.T, pair *testkafka.Pair, shift int32, transport string) *running {
	t.Helper()
	// The source's brokers get ports of a block of their own, pinned by their raised ids.
	spare, err := ports.Block(len(pair.Source.Nodes))
	if err != nil {
		t.Fatal(err)
	}
	pinned := map[int32]int{}
	for i, n := range pair.Source.Nodes {
		pinned[n.ID+shift] = spare + i
	}
	r := startProxy(t, pair.Dest, transport, func(c *proxy.Config) {
		c.Listeners = []proxy.ListenerConfig{{Name: "main", Listen: c.Listen, BrokerPorts: pinned, Upstream: proxy.UpstreamSource}}
		c.Listen = ""
		c.Source = &proxy.SourceConfig{Bootstrap: pair.Source.Addrs(), NodeIDOffset: shift}
	})
	r.addr = r.cfg.Listeners[0].Listen
	return r
}

// Source mode: producers and a consumer group that use the source go through offsetgate as
// if it were the source (records and commits land on the source, nothing on the
// destination), with the source's brokers presented at node ids of their own range and the
// listener's ports; the destination's brokers stay reachable on the same listener.
func TestSourceMode(t *testing.T) {
	for _, transport := range []string{"gnet", "goroutine"} {
		t.Run(transport, func(t *testing.T) { testSourceMode(t, transport) })
	}
}

func testSourceMode(t *testing.T, transport string) {
	pair := testkafka.Shared(t)
	const shift = 20
	r := startSourceMode(t, pair, shift, transport)
	defer r.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic := fmt.Sprintf("srcmode-%d", time.Now().UnixNano())
	if err := pair.Source.CreateTopic(ctx, topic, 3, 2, nil); err != nil {
		t.Fatal(err)
	}
	base := r.cfg.Listeners[0].ListenPort()

	// Metadata through offsetgate: the source's brokers, raised and at the listener's ports.
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	md, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if len(md.Brokers) != len(pair.Source.Nodes) {
		t.Fatalf("%d brokers presented, the source has %d", len(md.Brokers), len(pair.Source.Nodes))
	}
	for _, b := range md.Brokers {
		if b.NodeID <= shift || pair.Source.Node(b.NodeID-shift) == nil || int(b.Port) != r.cfg.Listeners[0].BrokerPorts[b.NodeID] || b.Host != "127.0.0.1" {
			t.Fatalf("source broker presented as %d at %s:%d (listener base %d, shift %d)", b.NodeID, b.Host, b.Port, base, shift)
		}
	}
	if md.ControllerID >= 0 && md.ControllerID <= shift {
		t.Fatalf("controller presented as %d, not in the source's range", md.ControllerID)
	}
	for _, p := range md.Topics[0].Partitions {
		if p.Leader <= shift {
			t.Fatalf("partition %d led by %d, not a presented source broker", p.Partition, p.Leader)
		}
	}

	// Produce and consume with a group, through offsetgate only.
	const n = 300
	prod, err := kgo.NewClient(kgo.SeedBrokers(r.addr), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for i := 0; i < n; i++ {
		prod.Produce(ctx, &kgo.Record{Value: []byte(strconv.Itoa(i))}, func(_ *kgo.Record, err error) {
			if err != nil {
				t.Errorf("produce through source mode: %v", err)
			}
		})
	}
	if err := prod.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	group := topic + "-g"
	cons, err := kgo.NewClient(kgo.SeedBrokers(r.addr), kgo.ConsumeTopics(topic), kgo.ConsumerGroup(group),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for len(seen) < n && ctx.Err() == nil {
		fs := cons.PollFetches(ctx)
		fs.EachError(func(tp string, p int32, err error) { t.Errorf("fetch %s[%d]: %v", tp, p, err) })
		fs.EachRecord(func(rec *kgo.Record) { seen[string(rec.Value)]++ })
		if err := cons.CommitUncommittedOffsets(ctx); err != nil {
			t.Fatalf("commit through source mode: %v", err)
		}
	}
	cons.Close()
	if len(seen) != n {
		t.Fatalf("consumed %d distinct records of %d", len(seen), n)
	}
	for v, c := range seen {
		if c != 1 {
			t.Fatalf("record %s consumed %d times", v, c)
		}
	}

	// Everything is on the source: its records, the group's commits; the destination has
	// neither the topic nor the group.
	sadm, err := pair.Source.Admin()
	if err != nil {
		t.Fatal(err)
	}
	defer sadm.Close()
	ends, err := sadm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	if total != n {
		t.Fatalf("the source holds %d records, want %d", total, n)
	}
	committed, err := sadm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	committed.Each(func(o kadm.OffsetResponse) { sum += o.At })
	if sum != n {
		t.Fatalf("the group committed %d on the source, want %d", sum, n)
	}
	dadm, err := pair.Dest.Admin()
	if err != nil {
		t.Fatal(err)
	}
	defer dadm.Close()
	if td, err := dadm.ListTopics(ctx, topic); err != nil || (td.Has(topic) && td[topic].Err == nil) {
		t.Fatalf("the destination has the source-mode topic (%v)", err)
	}
	if gs, err := dadm.ListGroups(ctx); err != nil {
		t.Fatal(err)
	} else if _, ok := gs[group]; ok {
		t.Fatalf("the destination has the source-mode group")
	}

	// A broker's configs, named by its presented id, are the source broker's.
	sid := md.Brokers[0].NodeID
	adm := kadm.NewClient(cl)
	rcs, err := adm.DescribeBrokerConfigs(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On(strconv.Itoa(int(sid)), nil)
	if err != nil || rc.Err != nil {
		t.Fatalf("configs of presented broker %d: %v %v", sid, err, rc.Err)
	}
	want := strconv.Itoa(int(sid - shift))
	found := false
	for _, c := range rc.Configs {
		if c.Key == "node.id" {
			found = true
			if c.MaybeValue() != want {
				t.Fatalf("presented broker %d has node.id %s, want the source's %s", sid, c.MaybeValue(), want)
			}
		}
	}
	if !found {
		t.Fatalf("no node.id among broker %d's configs", sid)
	}

	// The destination, on the same listener: a client seeded at a destination broker's port
	// sees the destination's topics.
	dtopic := topic + "-dest"
	if err := pair.Dest.CreateTopic(ctx, dtopic, 1, 1, nil); err != nil {
		t.Fatal(err)
	}
	did := pair.Dest.Nodes[0].ID
	dcl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:" + strconv.Itoa(base+1+int(did))))
	if err != nil {
		t.Fatal(err)
	}
	defer dcl.Close()
	dtd, err := kadm.NewClient(dcl).ListTopics(ctx, dtopic, topic)
	if err != nil {
		t.Fatal(err)
	}
	if !dtd.Has(dtopic) || dtd[dtopic].Err != nil || (dtd.Has(topic) && dtd[topic].Err == nil) {
		t.Fatalf("through the destination's port: topics %v, want %s and not %s", dtd.Names(), dtopic, topic)
	}
	for _, b := range dtd[dtopic].Partitions {
		if b.Leader > shift {
			t.Fatalf("destination partition led by %d, in the source's range", b.Leader)
		}
	}
}

// The Java client and librdkafka (confluent-kafka) through source mode: both produce to a
// source topic and read it all back, with a group, through offsetgate; the records are on the
// source at the offsets the clients saw.
func TestSourceModeRealClients(t *testing.T) {
	pair := testkafka.Shared(t)
	r := startSourceMode(t, pair, 20, "gnet")
	defer r.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	topic := fmt.Sprintf("srcmode-real-%d", time.Now().UnixNano())
	if err := pair.Source.CreateTopic(ctx, topic, 2, 2, nil); err != nil {
		t.Fatal(err)
	}
	if err := realclients.JavaProduce(ctx, r.addr, topic, 100, "java", ""); err != nil {
		t.Fatalf("Java producer through source mode: %v", err)
	}
	if err := realclients.PythonProduce(ctx, r.addr, topic, 100, "py"); err != nil {
		t.Fatalf("librdkafka producer through source mode: %v", err)
	}
	java, err := realclients.JavaConsume(ctx, r.addr, topic, 200, 120000, topic+"-java")
	if err != nil {
		t.Fatalf("Java consumer through source mode: %v", err)
	}
	py, err := realclients.PythonConsume(ctx, r.addr, topic, 200, 120, topic+"-py")
	if err != nil {
		t.Fatalf("librdkafka consumer through source mode: %v", err)
	}
	// What the source holds, read directly.
	direct, err := realclients.JavaConsume(ctx, pair.Source.Bootstrap(), topic, 200, 120000, "")
	if err != nil {
		t.Fatal(err)
	}
	at := map[string]realclients.Record{}
	for _, rec := range direct {
		at[fmt.Sprintf("%d/%d", rec.Partition, rec.Offset)] = rec
	}
	for name, got := range map[string][]realclients.Record{"Java": java, "librdkafka": py} {
		if len(got) != 200 {
			t.Fatalf("%s consumed %d records through source mode, want 200", name, len(got))
		}
		for _, rec := range got {
			d, ok := at[fmt.Sprintf("%d/%d", rec.Partition, rec.Offset)]
			if !ok || d.Value != rec.Value || d.Key != rec.Key {
				t.Fatalf("%s read %+v through source mode; the source holds %+v there", name, rec, d)
			}
		}
	}
}
