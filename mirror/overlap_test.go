package mirror_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
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
