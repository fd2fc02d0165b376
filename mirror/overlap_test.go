package mirror_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/internal/testkafka"
)

// A mirroring client that pipelines produce-at-offset requests of two partitions on one
// connection (a, b, a, b, ...) gets every answer, in order, and every batch lands at its
// offset: the writes of different partitions run at once, a partition's next request waits
// for its previous one, and the transport takes the waiting requests when the writes finish.
func TestOneConnectionPipelinesPartitions(t *testing.T) {
	prefix := testkafka.Names(t, "ov")
	e := newEnv(t, prefix, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic := prefix + "-t"
	e.createMirrorTopic(ctx, topic, 3)
	h := e.hand(topic)

	// Two partitions led by the same offsetgate broker (three partitions on two brokers).
	md, err := kadm.NewClient(h.px).Metadata(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	byLeader := map[int32][]int32{}
	for p := int32(0); p < 3; p++ {
		l := md.Topics[topic].Partitions[p].Leader
		byLeader[l] = append(byLeader[l], p)
	}
	var parts []int32
	for _, ps := range byLeader {
		if len(ps) >= 2 {
			parts = ps[:2]
		}
	}
	if parts == nil {
		t.Fatalf("no broker leads two of the three partitions: %v", byLeader)
	}
	c := h.leaderConn(ctx, parts[0]) // leads parts[1] too

	ts := time.Date(2022, 1, 2, 3, 4, 5, 0, time.UTC).UnixMilli()
	const rounds = 5
	type sent struct {
		part int32
		base int64
		req  kmsg.Request
		corr int32
	}
	var all []sent
	for i := 0; i < rounds; i++ {
		for _, p := range parts {
			base := int64(i * 10)
			req := atOffsetRequest(topic, p, srcBatch(base, 10, 1, 0, ts+base))
			corr, err := c.SendAtOffset(req, -1)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, sent{part: p, base: base, req: req, corr: corr})
		}
	}
	if err := c.SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	for _, s := range all {
		resp := kmsg.NewPtrProduceResponse()
		if err := c.Receive(s.req, resp, s.corr); err != nil {
			t.Fatalf("answer to correlation id %d: %v", s.corr, err)
		}
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			t.Fatalf("answer %d: %+v", s.corr, resp.Topics)
		}
		p := resp.Topics[0].Partitions[0]
		if p.Partition != s.part || p.ErrorCode != 0 || p.BaseOffset != s.base {
			t.Fatalf("partition %d at %d: answered partition %d, code %d (%s), base %d", s.part, s.base, p.Partition, p.ErrorCode, msg(p), p.BaseOffset)
		}
	}
	ends := count(ctx, t, e.pair.Dest, topic)
	for _, p := range parts {
		if ends[p] != [2]int64{0, rounds * 10} {
			t.Fatalf("destination partition %d holds %v, want [0 %d]", p, ends[p], rounds*10)
		}
	}
}

// A mirroring client that pipelines one partition's produce-at-offset requests (with from
// offsets) on one connection gets every answer in order and every batch at its offset: each
// request's ledger entries are appended while the data of the one before are on their way.
// A pipelined request whose from offset shows that one between went missing is refused, and
// so is the next, never filled as a hole; a resend from the mirrored end then goes on.
func TestOneConnectionPipelinesAPartition(t *testing.T) {
	prefix := testkafka.Names(t, "ovp")
	e := newEnv(t, prefix, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic := prefix + "-t"
	e.createMirrorTopic(ctx, topic, 1)
	h := e.hand(topic)
	c := h.leaderConn(ctx, 0)
	if err := c.SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	ts := time.Date(2022, 1, 2, 3, 4, 5, 0, time.UTC).UnixMilli()
	type sent struct {
		from int64
		req  kmsg.Request
		corr int32
	}
	// Requests of three batches of 10 records each, from offset from.
	send := func(from int64) sent {
		var recs []byte
		for b := int64(0); b < 3; b++ {
			recs = append(recs, srcBatch(from+b*10, 10, 1, 0, ts+from+b*10)...)
		}
		req := atOffsetRequest(topic, 0, recs)
		corr, err := c.SendAtOffset(req, from)
		if err != nil {
			t.Fatal(err)
		}
		return sent{from: from, req: req, corr: corr}
	}
	answer := func(s sent) kmsg.ProduceResponseTopicPartition {
		t.Helper()
		resp := kmsg.NewPtrProduceResponse()
		if err := c.Receive(s.req, resp, s.corr); err != nil {
			t.Fatalf("answer to the request from %d: %v", s.from, err)
		}
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			t.Fatalf("answer to the request from %d: %+v", s.from, resp.Topics)
		}
		return resp.Topics[0].Partitions[0]
	}
	const rounds = 20
	var all []sent
	for i := int64(0); i < rounds; i++ {
		all = append(all, send(i*30))
	}
	for _, s := range all {
		if p := answer(s); p.ErrorCode != 0 || p.BaseOffset != s.from {
			t.Fatalf("request from %d: code %d (%s), base %d", s.from, p.ErrorCode, msg(p), p.BaseOffset)
		}
	}
	end := int64(rounds * 30)
	if got := count(ctx, t, e.pair.Dest, topic)[0]; got != [2]int64{0, end} {
		t.Fatalf("destination holds %v, want [0 %d]", got, end)
	}

	// The request from end+30 goes missing (as if refused before it reached the writer): the
	// two sent behind it are refused.
	ok := send(end)
	skip := send(end + 60)
	after := send(end + 90)
	if p := answer(ok); p.ErrorCode != 0 || p.BaseOffset != end {
		t.Fatalf("request from %d: code %d (%s)", end, p.ErrorCode, msg(p))
	}
	for _, s := range []sent{skip, after} {
		if p := answer(s); p.ErrorCode == 0 {
			t.Fatalf("the request from %d, sent behind a missing one, was written at %d", s.from, p.BaseOffset)
		}
	}
	if got := count(ctx, t, e.pair.Dest, topic)[0]; got != [2]int64{0, end + 30} {
		t.Fatalf("after the refusals the destination holds %v, want [0 %d]: nothing past the missing request", got, end+30)
	}
	// Resent from the mirrored end, in order, everything lands.
	for _, from := range []int64{end + 30, end + 60, end + 90} {
		if p := answer(send(from)); p.ErrorCode != 0 || p.BaseOffset != from {
			t.Fatalf("resend from %d: code %d (%s)", from, p.ErrorCode, msg(p))
		}
	}
	if got := count(ctx, t, e.pair.Dest, topic)[0]; got != [2]int64{0, end + 120} {
		t.Fatalf("destination holds %v, want [0 %d]", got, end+120)
	}
	// Every record, once, at its offset, through offsetgate.
	cl := e.proxyClient(t)
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(0)}})
	want := int64(0)
	for want < end+120 {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset != want || string(r.Value) != fmt.Sprintf("v%d", want) {
				t.Fatalf("record at %d holds %q, want offset %d with v%d", r.Offset, r.Value, want, want)
			}
			want++
		})
	}
}
