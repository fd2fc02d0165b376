package proxy_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/catalog"
	"offsetgate/internal/realclients"
	"offsetgate/internal/testkafka"
	"offsetgate/proxy"
	"offsetgate/rules"
)

// A large Produce request is passed to the broker as it arrives (gnet), its last byte held until
// it is judged. One judged not to go on unchanged (here: a write to offsetgate's own topic) is
// cut: the connection closes before the broker has the whole request, so nothing of it is
// written; the same client's next attempt is judged whole first and answered with the refusal.
func TestStreamedRequestCut(t *testing.T) {
	pair := testkafka.Shared(t)
	d := pair.Dest
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := startProxy(t, d, "gnet", nil)
	leader, _, err := d.Leader(ctx, catalog.MarksTopic, 0)
	if err != nil {
		t.Fatal(err)
	}
	adm, err := d.Admin()
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	end := func() int64 {
		t.Helper()
		o, err := adm.ListEndOffsets(ctx, catalog.MarksTopic)
		if err != nil {
			t.Fatal(err)
		}
		lo, ok := o.Lookup(catalog.MarksTopic, 0)
		if !ok || lo.Err != nil {
			t.Fatalf("end offset of %s: %v", catalog.MarksTopic, lo.Err)
		}
		return lo.Offset
	}
	// First a request that goes on unchanged: streamed, finished, and written byte for byte.
	topic, plain := topicAtLeader(ctx, t, d, p, "streamed")
	hello := func(r *rawConn, topic string) {
		md := kmsg.NewPtrMetadataRequest()
		md.SetVersion(9)
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(topic)
		md.Topics = append(md.Topics, mt)
		r.roundTrip(md, kmsg.NewPtrMetadataResponse())
	}
	hello(plain, topic)
	sent := make([]byte, 900<<10)
	_, _ = rand.Read(sent)
	f := kmsg.NewRequestFormatter(kmsg.FormatterClientID("raw-test")).AppendRequest(nil, produceOne(7, topic, batchOf(sent), 10000), 2)
	plain.corr = 2
	for _, piece := range [][]byte{f[:300<<10], f[300<<10 : 600<<10], f[600<<10:]} {
		if _, err := plain.c.Write(piece); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	pr := kmsg.NewPtrProduceResponse()
	pr.SetVersion(7)
	if err := pr.ReadFrom(plain.answer(1, 2)[4:]); err != nil {
		t.Fatal(err)
	}
	if code := pr.Topics[0].Partitions[0].ErrorCode; code != 0 {
		t.Fatalf("streamed produce: error code %d", code)
	}
	if got := p.metric(t, "offsetgate_requests_streamed_total", nil); got != 1 {
		t.Fatalf("offsetgate_requests_streamed_total = %v after one large request, want 1", got)
	}
	freq := fetchOne(11, topic, 500, 8<<20)
	fresp := kmsg.NewPtrFetchResponse()
	plain.roundTrip(freq, fresp)
	var rb kmsg.RecordBatch
	if err := rb.ReadFrom(fresp.Topics[0].Partitions[0].RecordBatches); err != nil {
		t.Fatal(err)
	}
	var r kmsg.Record
	if err := r.ReadFrom(rb.Records); err != nil || !bytes.Equal(r.Value, sent) {
		t.Fatalf("the streamed record did not come back byte for byte (%v)", err)
	}

	before := end()
	value := make([]byte, 600<<10)
	_, _ = rand.Read(value)
	frame := func(corr int32) []byte {
		return kmsg.NewRequestFormatter(kmsg.FormatterClientID("raw-test")).AppendRequest(nil,
			produceOne(7, catalog.MarksTopic, batchOf(value), 10000), corr)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", p.cfg.BrokerPort(leader))

	raw := dialRaw(t, addr)
	// As a client starts: a connection is admitted at its first request, and its upstream
	// connection dialed at the first that goes there; a request before that is read whole.
	hello(raw, catalog.MarksTopic)
	f = frame(2)
	// In pieces, so that most of the request is on its way before its end arrives.
	for _, piece := range [][]byte{f[:200<<10], f[200<<10 : len(f)-10], f[len(f)-10:]} {
		if _, err := raw.c.Write(piece); err != nil {
			break // closed by offsetgate: what the test expects
		}
		time.Sleep(50 * time.Millisecond)
	}
	if resp, err := raw.readFrame(); err == nil {
		t.Fatalf("a refused streamed request was answered (%d bytes) instead of cut", len(resp))
	}
	if got := p.waitMetric(t, "offsetgate_requests_streamed_total", nil, 2); got < 2 {
		t.Fatalf("the request was not streamed (offsetgate_requests_streamed_total %v): the test proves nothing", got)
	}
	if got := p.waitMetric(t, "offsetgate_streamed_requests_cut_total", nil, 1); got != 1 {
		t.Fatalf("offsetgate_streamed_requests_cut_total = %v, want 1", got)
	}
	time.Sleep(500 * time.Millisecond) // a write the broker took would show by now
	if after := end(); after != before {
		t.Fatalf("%s grew from %d to %d: the cut request was written", catalog.MarksTopic, before, after)
	}

	// The client's next attempt is judged whole and refused with its error.
	raw2 := dialRaw(t, addr)
	hello(raw2, catalog.MarksTopic)
	resp := kmsg.NewPtrProduceResponse()
	resp.SetVersion(7)
	if _, err := raw2.c.Write(frame(2)); err != nil {
		t.Fatal(err)
	}
	body, err := raw2.readFrame()
	if err != nil {
		t.Fatalf("the retry after a cut was not answered: %v", err)
	}
	if err := resp.ReadFrom(body[4:]); err != nil {
		t.Fatal(err)
	}
	if code := resp.Topics[0].Partitions[0].ErrorCode; code != rules.ErrTopicAuthorization {
		t.Fatalf("the retry was answered with error code %d, want %d", code, rules.ErrTopicAuthorization)
	}
	if got := p.metric(t, "offsetgate_requests_streamed_total", nil); got != 2 {
		t.Fatalf("the retry was streamed too (offsetgate_requests_streamed_total %v)", got)
	}
	if after := end(); after != before {
		t.Fatalf("%s grew from %d to %d", catalog.MarksTopic, before, after)
	}
}

// The Java client and librdkafka, producing in batches of up to 1 MiB through gnet, have their
// large requests streamed, none cut, and every record lands.
func TestStreamedRealClients(t *testing.T) {
	pair := testkafka.Shared(t)
	d := pair.Dest
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p := startProxy(t, d, "gnet", nil)
	topic := testkafka.Names(t, "streamed-clients")
	if err := d.CreateTopic(ctx, topic, 4, 2, nil); err != nil {
		t.Fatal(err)
	}
	const javaRecords, kcatRecords = 60000, 20000
	if err := realclients.JavaProducePerf(ctx, p.addr, topic, javaRecords, 1024); err != nil {
		t.Fatal(err)
	}
	java := p.metric(t, "offsetgate_requests_streamed_total", nil)
	if err := realclients.KcatProduceLarge(ctx, p.addr, topic, kcatRecords, 1024); err != nil {
		t.Fatal(err)
	}
	all := p.metric(t, "offsetgate_requests_streamed_total", nil)
	if java < 1 || all <= java {
		t.Fatalf("streamed requests: %v from the Java client, %v from kcat; want some from each", java, all-java)
	}
	if cut := p.metric(t, "offsetgate_streamed_requests_cut_total", nil); cut != 0 {
		t.Fatalf("%v streamed requests cut", cut)
	}
	adm, err := d.Admin()
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	if total != javaRecords+kcatRecords {
		t.Fatalf("the destination holds %d records, want %d", total, javaRecords+kcatRecords)
	}
}

// A streamed Produce request of megabytes is not held whole: each record set, once sent to the
// broker, is dropped from offsetgate's buffer (its topics and partitions are all the judge
// reads). The request still reaches the destination byte for byte, in the two encodings of
// Produce (v7: fixed-width lengths; v9: flexible), and the bytes dropped are counted.
func TestStreamedRequestCompacted(t *testing.T) {
	pair := testkafka.Shared(t)
	d := pair.Dest
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := startProxy(t, d, "gnet", nil)
	// Small socket buffers: the broker's socket takes a request of 20 MiB in small pieces, so
	// offsetgate must hold the client back while the broker catches up.
	slow := startProxy(t, d, "gnet", func(c *proxy.Config) { c.Limits.SocketSendBytes = 64 << 10 })
	topic := testkafka.Names(t, "compacted")
	// Room for one batch of 2.7 MiB (a broker takes one batch per partition in a request).
	if err := d.CreateTopic(ctx, topic, 16, 1, map[string]*string{"max.message.bytes": kmsg.StringPtr("4194304")}); err != nil {
		t.Fatal(err)
	}
	byLeader := map[int32][]int32{}
	var leader int32
	for part := int32(0); part < 16; part++ {
		l, _, err := d.Leader(ctx, topic, part)
		if err != nil {
			t.Fatal(err)
		}
		byLeader[l] = append(byLeader[l], part)
		if len(byLeader[l]) > len(byLeader[leader]) {
			leader = l
		}
	}
	parts := byLeader[leader]
	if len(parts) < 2 {
		t.Fatalf("partitions by leader %v: the test needs two on one broker", byLeader)
	}
	dial := func(p *running) *rawConn {
		raw := dialRaw(t, fmt.Sprintf("127.0.0.1:%d", p.cfg.BrokerPort(leader)))
		md := kmsg.NewPtrMetadataRequest()
		md.SetVersion(9)
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(topic)
		md.Topics = append(md.Topics, mt)
		raw.roundTrip(md, kmsg.NewPtrMetadataResponse())
		return raw
	}
	raw, slowRaw := dial(p), dial(slow)

	values := map[int32][][]byte{}
	// The third request holds 2.7 MiB for each partition, megabytes more than the broker's
	// socket takes at once: it is read only as far ahead of the broker as offsetgate allows.
	for round, c := range []struct {
		version int16
		size    int
	}{{7, 900 << 10}, {9, 900 << 10}, {9, 2700 << 10}} {
		version := c.version
		p, raw := p, raw
		if round == 2 {
			p, raw = slow, slowRaw
		}
		req := kmsg.NewPtrProduceRequest()
		req.SetVersion(version)
		req.Acks, req.TimeoutMillis = -1, 10000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = topic
		for _, part := range parts {
			rp := kmsg.NewProduceRequestTopicPartition()
			v := make([]byte, c.size)
			_, _ = rand.Read(v)
			values[part] = append(values[part], v)
			rp.Partition, rp.Records = part, batchOf(v)
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		raw.corr++
		f := kmsg.NewRequestFormatter(kmsg.FormatterClientID("raw-test")).AppendRequest(nil, req, raw.corr)
		for off := 0; off < len(f); off += 200 << 10 {
			if _, err := raw.c.Write(f[off:min(len(f), off+200<<10)]); err != nil {
				t.Fatal(err)
			}
			time.Sleep(5 * time.Millisecond)
		}
		pr := kmsg.NewPtrProduceResponse()
		pr.SetVersion(version)
		body := raw.answer(int(raw.corr), raw.corr)[4:]
		if version >= 9 {
			body = skipTagsTest(t, body)
		}
		if err := pr.ReadFrom(body); err != nil {
			t.Fatal(err)
		}
		for _, pp := range pr.Topics[0].Partitions {
			if pp.ErrorCode != 0 {
				t.Fatalf("v%d partition %d: error code %d", version, pp.Partition, pp.ErrorCode)
			}
		}
		if got, want := p.metric(t, "offsetgate_requests_streamed_total", nil), float64(min(round+1, 2)); round == 2 && got != 1 || round < 2 && got != want {
			t.Fatalf("v%d: offsetgate_requests_streamed_total = %v", version, got)
		}
		// Every record set but the last ends before the request's last byte, so at least
		// those were dropped as they went (the broker's socket takes a few MiB at once).
		least := float64((round + 1) * (len(parts) - 1) * 900 << 10)
		if round == 2 {
			// Read at most 4 MiB and a piece ahead of the broker: what lies wholly before
			// that was sent and dropped, whatever the broker's pace.
			least = float64(len(parts)*c.size - (4<<20 + 256<<10) - c.size)
		}
		if got := p.metric(t, "offsetgate_streamed_bytes_dropped_total", nil); got < least {
			t.Fatalf("v%d: offsetgate_streamed_bytes_dropped_total = %v, want at least %v", version, got, least)
		}
	}
	t.Logf("client held back for its broker %v times", slow.metric(t, "offsetgate_upstream_backlog_holds_total", nil))
	for _, part := range parts {
		freq := fetchOne(11, topic, 500, 16<<20)
		freq.Topics[0].Partitions[0].Partition = part
		fresp := kmsg.NewPtrFetchResponse()
		raw.roundTrip(freq, fresp)
		batches := fresp.Topics[0].Partitions[0].RecordBatches
		for i, want := range values[part] {
			var rb kmsg.RecordBatch
			if err := rb.ReadFrom(batches); err != nil {
				t.Fatalf("partition %d batch %d: %v", part, i, err)
			}
			batches = batches[12+int(rb.Length):]
			var r kmsg.Record
			if err := r.ReadFrom(rb.Records); err != nil || !bytes.Equal(r.Value, want) {
				t.Fatalf("partition %d batch %d did not come back byte for byte (%v)", part, i, err)
			}
		}
	}
}
