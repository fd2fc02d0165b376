package session

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/ledger"
	"offsetgate/view"
)

// A mirror partition's answer lists the source's producers, never offsetgate's destination
// producer; a promoted partition's adds the clients writing on D since the promotion, their
// open transaction's first offset in the presented offsets.
func TestSourceProducers(t *testing.T) {
	ts := time.Now().Add(-time.Minute).UnixMilli()
	pv := view.NewPartition([]ledger.Entry{{Kind: ledger.KindBatch, Src: 100, Last: 102, D: 0, Count: 3, MaxTS: ts,
		SrcPID: 42, SrcPEpoch: 2, SrcSeq: 5, PID: 7}})
	active := func(pid int64, txn int64) kmsg.DescribeProducersResponseTopicPartitionActiveProducer {
		a := kmsg.NewDescribeProducersResponseTopicPartitionActiveProducer()
		a.ProducerID, a.LastSequence, a.LastTimestamp, a.CurrentTxnStartOffset = pid, 1, ts, txn
		return a
	}
	onD := []kmsg.DescribeProducersResponseTopicPartitionActiveProducer{active(7, -1), active(9, 4)}
	for _, promoted := range []bool{false, true} {
		got := sourceProducers(pv, promoted, onD, time.Now())
		want := 1
		if promoted {
			want = 2
		}
		if len(got) != want {
			t.Fatalf("promoted=%v: %d producers %+v, want %d", promoted, len(got), got, want)
		}
		if p := got[0]; p.ProducerID != 42 || p.ProducerEpoch != 2 || p.LastSequence != 7 || p.LastTimestamp != ts || p.CurrentTxnStartOffset != -1 || p.CoordinatorEpoch != -1 {
			t.Fatalf("promoted=%v: source producer %+v", promoted, p)
		}
		if promoted {
			// D offset 4 is past the mirrored end, shifted as the last batch: source 104.
			if p := got[1]; p.ProducerID != 9 || p.CurrentTxnStartOffset != 104 {
				t.Fatalf("client of the promoted topic: %+v, want producer 9 from offset 104", p)
			}
		}
	}
}

// A source connection's DescribeProducers once a topic is promoted: the promoted partition is
// asked of the destination and answered with the source view's producers and the
// destination's own clients (offsetgate's left out); the other partition goes to the source,
// and the client gets both in one answer. Without the promotion the source would answer for
// the promoted topic too, knowing nothing of the writes made on the destination since.
func TestSourceDescribeProducersPromoted(t *testing.T) {
	ts := time.Now().Add(-time.Minute).UnixMilli()
	pv := view.NewPartition([]ledger.Entry{{Kind: ledger.KindBatch, Src: 100, Last: 102, D: 0, Count: 3, MaxTS: ts,
		SrcPID: 42, SrcPEpoch: 2, SrcSeq: 5, PID: 7}})
	c := &recordingCarrier{views: map[partKey]*view.Partition{{"promo", 0}: pv}, dest: func(req kmsg.Request) kmsg.Response {
		resp := kmsg.NewPtrDescribeProducersResponse()
		dreq, ok := req.(*kmsg.DescribeProducersRequest)
		if !ok {
			return req.ResponseKind()
		}
		for _, dt := range dreq.Topics {
			rt := kmsg.NewDescribeProducersResponseTopic()
			rt.Topic = dt.Topic
			for _, p := range dt.Partitions {
				rp := kmsg.NewDescribeProducersResponseTopicPartition()
				rp.Partition = p
				for _, pid := range []int64{7, 9} { // offsetgate's writer, a client since the promotion
					a := kmsg.NewDescribeProducersResponseTopicPartitionActiveProducer()
					a.ProducerID, a.LastTimestamp, a.CurrentTxnStartOffset = pid, ts, -1
					if pid == 9 {
						a.CurrentTxnStartOffset = 4
					}
					rp.ActiveProducers = append(rp.ActiveProducers, a)
				}
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	}}
	fc := &syncConn{posted: make(chan func(), 16)}
	s := New(Config{NodeShift: 1000, NoSASL: true, Addresses: &presented{real: map[int32]string{}},
		Moves: &movesOf{carrier: c, promoted: map[string]bool{"promo": true}}}, fc)
	req := kmsg.NewPtrDescribeProducersRequest()
	for _, n := range []string{"plain", "promo"} {
		rt := kmsg.NewDescribeProducersRequestTopic()
		rt.Topic, rt.Partitions = n, []int32{0}
		req.Topics = append(req.Topics, rt)
	}
	if _, err := s.HandleClient(reqFrame(req, 1)); err != nil {
		t.Fatal(err)
	}
	var up [][]byte
	for i := 0; i < 200 && len(up) == 0; i++ {
		select {
		case fn := <-fc.posted:
			fn()
		case <-time.After(10 * time.Millisecond):
		}
		up = fc.forwarded(t)
	}
	if len(up) != 1 {
		t.Fatalf("%d requests reached the source, want 1", len(up))
	}
	var fwd kmsg.DescribeProducersRequest
	readForwarded(t, up[0], &fwd)
	if len(fwd.Topics) != 1 || fwd.Topics[0].Topic != "plain" {
		t.Fatalf("the source was asked %+v, want plain alone", fwd.Topics)
	}
	if len(c.sent) != 1 {
		t.Fatalf("%d requests sent to the destination, want 1", len(c.sent))
	}
	if d := c.sent[0].(*kmsg.DescribeProducersRequest); len(d.Topics) != 1 || d.Topics[0].Topic != "promo" {
		t.Fatalf("the destination was asked %+v, want promo alone", d.Topics)
	}
	answer := kmsg.NewPtrDescribeProducersResponse()
	rt := kmsg.NewDescribeProducersResponseTopic()
	rt.Topic = "plain"
	rp := kmsg.NewDescribeProducersResponseTopicPartition()
	sp := kmsg.NewDescribeProducersResponseTopicPartitionActiveProducer()
	sp.ProducerID = 5
	rp.ActiveProducers = append(rp.ActiveProducers, sp)
	rt.Partitions = append(rt.Partitions, rp)
	answer.Topics = append(answer.Topics, rt)
	if _, err := s.HandleUpstream(respFrame(1, true, answer)); err != nil {
		t.Fatal(err)
	}
	var got kmsg.DescribeProducersResponse
	readAnswer(t, fc.answers(t, 1)[0], &got, 0)
	pids := map[string][]int64{}
	txn := map[int64]int64{}
	for _, gt := range got.Topics {
		for _, gp := range gt.Partitions {
			if gp.ErrorCode != 0 {
				t.Fatalf("%s[%d] answered error %d", gt.Topic, gp.Partition, gp.ErrorCode)
			}
			for _, a := range gp.ActiveProducers {
				pids[gt.Topic] = append(pids[gt.Topic], a.ProducerID)
				txn[a.ProducerID] = a.CurrentTxnStartOffset
			}
		}
	}
	if fmt.Sprint(pids["plain"]) != "[5]" || fmt.Sprint(pids["promo"]) != "[42 9]" {
		t.Fatalf("producers %v; want the source's 5 for plain, the source view's 42 and the destination's client 9 for promo", pids)
	}
	if txn[9] != 104 {
		t.Fatalf("producer 9's transaction starts at %d, want 104 (D offset 4 in source terms)", txn[9])
	}
}
