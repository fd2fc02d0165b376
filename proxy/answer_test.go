package proxy_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"offsetgate/internal/testkafka"
	"offsetgate/proxy"
)

// A consumer of 16 partitions of a few MiB each, through gnet, has its large Fetch answers
// passed to it as they arrive (never held whole), and every record arrives byte for byte and
// in order: with Fetch v16 (sent to the destination as v15, whose answer has nothing to
// rewrite) and with the newest version franz-go and the brokers share. A mirror topic exists
// on the destination, so the mirror rules are on and the consumer's incremental fetches pass
// only because offsetgate followed its fetch sessions from their start.
func TestAnswersPassedToConsumer(t *testing.T) {
	pair := testkafka.Shared(t)
	d := pair.Dest
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	prefix := testkafka.Names(t, "m")
	e := newMirrorEnv(t, prefix)
	if err := e.createMirror(ctx, e.mirror, prefix+"-mirror", 1, nil); err != nil {
		t.Fatalf("creating a mirror topic: %v", err)
	}
	p := startProxy(t, d, "gnet", nil)

	const parts, perPart, size = 16, 3 << 20, 4000
	topic := testkafka.Names(t, "answers")
	if err := d.CreateTopic(ctx, topic, parts, 1, nil); err != nil {
		t.Fatal(err)
	}
	prod := franzClient(t, d.Addrs(), kgo.ProducerBatchMaxBytes(1<<20), kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	values := make([][][]byte, parts)
	var rs []*kgo.Record
	for part := range values {
		for n := 0; n < perPart; n += size {
			v := make([]byte, size)
			_, _ = rand.Read(v)
			values[part] = append(values[part], v)
			rs = append(rs, &kgo.Record{Topic: topic, Partition: int32(part), Value: v})
		}
	}
	if err := prod.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		opts []kgo.Opt
	}{
		{"fetch v16", []kgo.Opt{kgo.MaxVersions(kversion.V3_7_0())}},
		{"newest", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := p.metric(t, "offsetgate_answers_streamed_total", nil)
			cl := franzClient(t, []string{p.addr}, append([]kgo.Opt{kgo.ConsumeTopics(topic),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, tc.opts...)...)
			got := make([]int, parts)
			for total := 0; total < len(rs); {
				fs := cl.PollFetches(ctx)
				if ctx.Err() != nil {
					t.Fatalf("consumed %d of %d records: %v", total, len(rs), ctx.Err())
				}
				fs.EachError(func(tp string, p int32, err error) { t.Fatalf("fetch %s[%d]: %v", tp, p, err) })
				fs.EachRecord(func(r *kgo.Record) {
					i := got[r.Partition]
					if r.Offset != int64(i) || i >= len(values[r.Partition]) || !bytes.Equal(r.Value, values[r.Partition][i]) {
						t.Fatalf("partition %d: record at offset %d is not the %d-th record produced, byte for byte", r.Partition, r.Offset, i)
					}
					got[r.Partition]++
					total++
				})
			}
			// A consumer opens one fetch session per broker with a full fetch; the rest of its
			// fetches are incremental, and pass only if their sessions were followed.
			passed := p.metric(t, "offsetgate_answers_streamed_total", nil) - before
			if passed <= float64(len(d.Nodes)) {
				t.Fatalf("%v Fetch answers passed as they arrived (offsetgate_answers_streamed_total), want more than one per broker", passed)
			}
			t.Logf("%v answers passed as they arrived", passed)
		})
	}
}

// Answers keep their order around an answer that passes as it arrives: behind a large Fetch,
// a request offsetgate answers itself (a too-new ApiVersions), one whose answer it rewrites
// (Metadata) and a second Fetch are pipelined in one write, and come back in request order,
// the Fetch answers byte for byte. A client that reads slowly through small buffers makes the
// connection go over its budget while the answers pass: reading stops and resumes mid-answer.
func TestAnswerOrderAndSlowClient(t *testing.T) {
	pair := testkafka.Shared(t)
	d := pair.Dest
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	topic := randomTopic(ctx, t, d, "answer-order", 2048) // 8 MB of records
	leader := leaderOf(ctx, t, d, topic)
	p := startProxy(t, d, "gnet", func(c *proxy.Config) {
		c.Limits.MaxHeldBytes = 4 << 20 // a share of 2 MiB for the one connection
		c.Limits.SocketSendBytes = 64 << 10
	})
	direct := dialRaw(t, nodeAddr(d, leader))
	want := kmsg.NewPtrFetchResponse()
	direct.roundTrip(fetchOne(11, topic, 500, 6<<20), want)
	wantBatches := want.Topics[0].Partitions[0].RecordBatches
	if len(wantBatches) < 4<<20 {
		t.Fatalf("the destination answered %d bytes of batches; the test needs megabytes", len(wantBatches))
	}

	raw := listenerKind{name: "gnet"}.dial(t, net.JoinHostPort("127.0.0.1", itoa(p.cfg.BrokerPort(leader))), 16<<10)
	md := kmsg.NewPtrMetadataRequest()
	md.SetVersion(9)
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	md.Topics = append(md.Topics, mt)
	raw.roundTrip(md, kmsg.NewPtrMetadataResponse()) // the upstream connection is open from here

	before := p.metric(t, "offsetgate_answers_streamed_total", nil)
	pausesBefore := p.metric(t, "offsetgate_budget_pauses_total", nil)
	f := kmsg.NewRequestFormatter(kmsg.FormatterClientID("raw-test"))
	// AppendRequest writes the size at the start of what it is given: one frame each.
	stream := f.AppendRequest(nil, fetchOne(11, topic, 500, 6<<20), 2)
	av := kmsg.NewPtrApiVersionsRequest()
	av.SetVersion(3)
	av.ClientSoftwareName, av.ClientSoftwareVersion = "offsetgate-test", "1"
	tooNew := f.AppendRequest(nil, av, 3)
	tooNew[7] = 99 // version 99: answered by offsetgate itself (KIP-511)
	stream = append(stream, tooNew...)
	stream = append(stream, f.AppendRequest(nil, md, 4)...)
	stream = append(stream, f.AppendRequest(nil, fetchOne(11, topic, 500, 6<<20), 5)...)
	if _, err := raw.c.Write(stream); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the answers pile up until the budget stops them

	fetched := func(n int, corr int32) {
		t.Helper()
		resp := kmsg.NewPtrFetchResponse()
		resp.SetVersion(11)
		if err := resp.ReadFrom(raw.answer(n, corr)[4:]); err != nil {
			t.Fatalf("answer %d: %v", n, err)
		}
		if part := resp.Topics[0].Partitions[0]; part.ErrorCode != 0 || !bytes.Equal(part.RecordBatches, wantBatches) {
			t.Fatalf("answer %d: error code %d, %d bytes of batches, not the destination's %d byte for byte", n, part.ErrorCode,
				len(part.RecordBatches), len(wantBatches))
		}
	}
	fetched(1, 2)
	var avr kmsg.ApiVersionsResponse
	if err := avr.ReadFrom(raw.answer(2, 3)[4:]); err != nil || avr.ErrorCode != 35 {
		t.Fatalf("the too-new ApiVersions: error code %d, %v", avr.ErrorCode, err)
	}
	mresp := kmsg.NewPtrMetadataResponse()
	mresp.SetVersion(9)
	if err := mresp.ReadFrom(skipTagsTest(t, raw.answer(3, 4)[4:])); err != nil {
		t.Fatal(err)
	}
	for _, b := range mresp.Brokers {
		if b.Port != int32(p.cfg.BrokerPort(b.NodeID)) {
			t.Fatalf("the Metadata answer names broker %d at port %d, not offsetgate's", b.NodeID, b.Port)
		}
	}
	fetched(4, 5)
	if passed := p.metric(t, "offsetgate_answers_streamed_total", nil) - before; passed != 2 {
		t.Fatalf("offsetgate_answers_streamed_total moved by %v, want 2", passed)
	}
	if p.metric(t, "offsetgate_budget_pauses_total", nil) == pausesBefore {
		t.Fatal("the connection never went over its budget: the test proves nothing about resuming mid-answer")
	}
	// Each answer is larger than the budget: holding one whole (assembled, or written on to the
	// client's outbound buffer unbounded) would show here.
	if high := p.metric(t, "offsetgate_held_bytes_high_water", nil); high > 3<<20 {
		t.Fatalf("offsetgate held %.1f MiB at most for a client that did not read; its share is 2 MiB", high/(1<<20))
	}
}

// nodeAddr is the client address of d's node id.
func nodeAddr(d *testkafka.Cluster, id int32) string {
	for _, n := range d.Nodes {
		if n.ID == id {
			return n.Addr()
		}
	}
	return d.Addrs()[0]
}
