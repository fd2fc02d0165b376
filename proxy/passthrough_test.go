package proxy_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/internal/realclients"
	"offsetgate/internal/testkafka"
)

var transports = []string{"gnet", "goroutine"}

// Real clients produce and consume through offsetgate exactly as they would against the
// brokers: franz-go, the Java client (plain and transactional), kcat and confluent-kafka. What
// every client reads through offsetgate is what franz-go reads directly from the brokers, and no
// client is ever told a real broker address. Both transports run the same session code.
func TestClientsThroughProxy(t *testing.T) {
	pair := testkafka.Shared(t)
	d := pair.Dest
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			p := startProxy(t, d, tr, nil)
			allowed := p.ports(d)
			var mu sync.Mutex
			var leaked []string
			hook := kgo.WithHooks(connectHook(func(addr string) {
				if !allowed[addr] {
					mu.Lock()
					leaked = append(leaked, addr)
					mu.Unlock()
				}
			}))

			topic := testkafka.Names(t, "clients")
			if err := d.CreateTopic(ctx, topic, 2, 2, nil); err != nil {
				t.Fatal(err)
			}
			produce(ctx, t, franzClient(t, []string{p.addr}, hook), topic, 100, "franz")
			if err := realclients.JavaProduce(ctx, p.addr, topic, 50, "java", ""); err != nil {
				t.Fatal(err)
			}
			if err := realclients.JavaProduce(ctx, p.addr, topic, 20, "javatxn", testkafka.Names(t, "txn")); err != nil {
				t.Fatal(err)
			}
			if err := realclients.KcatProduce(ctx, p.addr, topic, 20, "kcat"); err != nil {
				t.Fatal(err)
			}
			if err := realclients.PythonProduce(ctx, p.addr, topic, 20, "py"); err != nil {
				t.Fatal(err)
			}
			const total = 210

			direct := consumeAll(ctx, t, d.Addrs(), topic, total)
			via := consumeAll(ctx, t, []string{p.addr}, topic, total, hook)
			assertSame(t, "franz-go through offsetgate", direct, via)

			jrecs, err := realclients.JavaConsume(ctx, p.addr, topic, total, 90000, testkafka.Names(t, "jgroup"))
			if err != nil {
				t.Fatal(err)
			}
			assertSame(t, "Java consumer group through offsetgate", direct, fromClient(jrecs))
			krecs, err := realclients.KcatConsume(ctx, p.addr, topic, total)
			if err != nil {
				t.Fatal(err)
			}
			assertSame(t, "kcat through offsetgate", direct, fromClient(krecs))
			precs, err := realclients.PythonConsume(ctx, p.addr, topic, total, 90, "")
			if err != nil {
				t.Fatal(err)
			}
			assertSame(t, "confluent-kafka through offsetgate", direct, fromClient(precs))

			mu.Lock()
			defer mu.Unlock()
			if len(leaked) > 0 {
				t.Fatalf("franz-go connected to addresses that are not offsetgate's: %v", leaked)
			}
		})
	}
}

type connectHook func(addr string)

func (h connectHook) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, _ error) {
	h(net.JoinHostPort(meta.Host, strconv.Itoa(int(meta.Port))))
}

func fromClient(rs []realclients.Record) []rec {
	out := make([]rec, 0, len(rs))
	for _, r := range rs {
		out = append(out, rec{r.Partition, r.Offset, r.Key, r.Value})
	}
	sortRecs(out)
	return out
}

func assertSame(t *testing.T, what string, want, got []rec) {
	t.Helper()
	if len(want) != len(got) {
		t.Fatalf("%s: %d records, want %d", what, len(got), len(want))
	}
	for i := range want {
		if want[i] != got[i] {
			t.Fatalf("%s: record %d is %+v, directly it is %+v", what, i, got[i], want[i])
		}
	}
}

// A consumer group rebalances through offsetgate: a second member joins, partitions are
// shared, every record is consumed once and the commits land on the destination.
func TestGroupRebalanceThroughProxy(t *testing.T) {
	pair := testkafka.Shared(t)
	d := pair.Dest
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p := startProxy(t, d, "gnet", nil)
	topic := testkafka.Names(t, "group")
	group := testkafka.Names(t, "g")
	if err := d.CreateTopic(ctx, topic, 4, 2, nil); err != nil {
		t.Fatal(err)
	}
	produce(ctx, t, franzClient(t, []string{p.addr}), topic, 400, "g")

	var mu sync.Mutex
	seen := map[rec]int{}
	var revoked int
	member := func(name string) *kgo.Client {
		return franzClient(t, []string{p.addr}, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.ClientID(name),
			kgo.OnPartitionsRevoked(func(context.Context, *kgo.Client, map[string][]int32) {
				mu.Lock()
				revoked++
				mu.Unlock()
			}), kgo.FetchMaxBytes(2000), kgo.FetchMaxPartitionBytes(1000))
	}
	poll := func(cl *kgo.Client, max int) int {
		got := 0
		for got < max {
			pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
			fs := cl.PollRecords(pctx, max-got)
			pcancel()
			if len(fs.Records()) == 0 {
				return got
			}
			mu.Lock()
			for _, r := range fs.Records() {
				seen[rec{r.Partition, r.Offset, string(r.Key), string(r.Value)}]++
			}
			mu.Unlock()
			got += len(fs.Records())
			if err := cl.CommitUncommittedOffsets(ctx); err != nil {
				t.Fatalf("commit through offsetgate: %v", err)
			}
		}
		return got
	}
	a := member("a")
	poll(a, 100)
	b := member("b")
	// Both members poll until everything is read; b's join forces a rebalance.
	for len(seen) < 400 && ctx.Err() == nil {
		poll(a, 50)
		poll(b, 50)
	}
	if len(seen) != 400 {
		t.Fatalf("group read %d distinct records, want 400", len(seen))
	}
	mu.Lock()
	if revoked == 0 {
		t.Errorf("no rebalance happened")
	}
	mu.Unlock()
	// Commits are on the destination, read directly.
	adm, err := d.Admin()
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	offs, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	var committed int64
	offs.Each(func(o kadm.OffsetResponse) { committed += o.At })
	if committed != 400 {
		t.Fatalf("committed offsets sum to %d, want 400 (4 partitions fully read)", committed)
	}
}

// A partition leader moves on the destination; a franz-go producer and the Java consumer
// follow it through offsetgate.
func TestLeaderMoveThroughProxy(t *testing.T) {
	pair := testkafka.Shared(t)
	d := pair.Dest
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p := startProxy(t, d, "gnet", nil)
	topic := testkafka.Names(t, "move")
	if err := d.CreateTopic(ctx, topic, 1, 2, nil); err != nil {
		t.Fatal(err)
	}
	cl := franzClient(t, []string{p.addr})
	produce(ctx, t, cl, topic, 30, "before")
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
	produce(ctx, t, cl, topic, 30, "after")
	// Metadata through offsetgate shows the new leader and epoch, at a proxy address.
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	pm := resp.Topics[0].Partitions[0]
	if pm.Leader != to || pm.LeaderEpoch <= epoch {
		t.Fatalf("through offsetgate: leader %d epoch %d, want %d above %d", pm.Leader, pm.LeaderEpoch, to, epoch)
	}
	recs, err := realclients.JavaConsume(ctx, p.addr, topic, 60, 60000, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 60 || recs[59].Key != "after-k29" || recs[59].Epoch != pm.LeaderEpoch {
		t.Fatalf("Java consumer after the move: %d records, last %+v (want epoch %d)", len(recs), recs[len(recs)-1], pm.LeaderEpoch)
	}
}

// acks=0 Produce has no response; later requests on the same connection still get theirs.
func TestAcksZeroThroughProxy(t *testing.T) {
	pair := testkafka.Shared(t)
	d := pair.Dest
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			p := startProxy(t, d, tr, nil)
			topic := testkafka.Names(t, "acks0")
			if err := d.CreateTopic(ctx, topic, 1, 2, nil); err != nil {
				t.Fatal(err)
			}
			cl := franzClient(t, []string{p.addr}, kgo.RequiredAcks(kgo.NoAck()), kgo.DisableIdempotentWrite(),
				kgo.MaxBufferedRecords(10))
			produce(ctx, t, cl, topic, 200, "noack")
			// A request after the unanswered ones gets its own response, in order.
			if _, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl); err != nil {
				t.Fatal(err)
			}
			// No slot waits for the responses that never come. (The client's own background
			// requests can be in flight for a moment; a slot waiting for an acks=0 answer would
			// stay forever.)
			waitFor(t, 5*time.Second, func() bool { return p.metric(t, "offsetgate_requests_in_flight", nil) == 0 },
				"no request in flight after acks=0 produce and a metadata round trip")
			if got := consumeAll(ctx, t, []string{p.addr}, topic, 200); len(got) != 200 {
				t.Fatalf("read %d records, want 200", len(got))
			}
		})
	}
}

// Graceful shutdown lets a request that is in flight (a long-polling Fetch) finish.
func TestGracefulShutdownDrains(t *testing.T) {
	pair := testkafka.Shared(t)
	d := pair.Dest
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := startProxy(t, d, "gnet", nil)
	topic := testkafka.Names(t, "drain")
	if err := d.CreateTopic(ctx, topic, 1, 1, nil); err != nil {
		t.Fatal(err)
	}
	leader, _, err := d.Leader(ctx, topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	cl := franzClient(t, []string{p.addr})
	mreq := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	mreq.Topics = append(mreq.Topics, mt)
	mresp, err := mreq.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	fr := kmsg.NewPtrFetchRequest()
	fr.MaxWaitMillis = 2500
	fr.MinBytes = 1 << 20
	fr.MaxBytes = 1 << 20
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = topic
	ft.TopicID = mresp.Topics[0].TopicID // kgo picks the version; v13+ names topics by id
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.PartitionMaxBytes = 1 << 20
	ft.Partitions = append(ft.Partitions, fp)
	fr.Topics = append(fr.Topics, ft)
	type result struct {
		took time.Duration
		err  error
	}
	res := make(chan result, 1)
	start := time.Now()
	go func() {
		resp, err := cl.Broker(int(leader)).Request(ctx, fr)
		if err == nil {
			if e := resp.(*kmsg.FetchResponse).Topics[0].Partitions[0].ErrorCode; e != 0 {
				err = fmt.Errorf("fetch error code %d", e)
			}
		}
		res <- result{time.Since(start), err}
	}()
	time.Sleep(500 * time.Millisecond)
	p.stop()
	r := <-res
	if r.err != nil {
		t.Fatalf("in-flight fetch failed across shutdown: %v", r.err)
	}
	if r.took < 2*time.Second {
		t.Fatalf("fetch returned after %v: it did not long-poll, so the test proves nothing", r.took)
	}
}
