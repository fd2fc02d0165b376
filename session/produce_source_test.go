package session

import (
	"bytes"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A source connection's Produce once topics are sealed for promotion or promoted: a sealed
// topic's partitions are refused (retriable) and reach no cluster, a promoted topic's are
// carried to the destination, the rest go to the source, and the client gets one answer.
func TestSourceProduceSwitch(t *testing.T) {
	newSession := func() (*Session, *syncConn, *recordingCarrier) {
		c := &recordingCarrier{names: map[[16]byte]string{{1}: "plain", {2}: "promo"}}
		fc := &syncConn{posted: make(chan func(), 16)}
		s := New(Config{NodeShift: 1000, Addresses: &presented{real: map[int32]string{}},
			Moves: &movesOf{carrier: c, sealed: map[string]bool{"sealed": true}, promoted: map[string]bool{"promo": true}}}, fc)
		return s, fc, c
	}
	produce := func(version, acks int16, topics ...string) *kmsg.ProduceRequest {
		r := kmsg.NewPtrProduceRequest()
		r.SetVersion(version)
		r.Acks, r.TimeoutMillis = acks, 5000
		for i, n := range topics {
			t := kmsg.NewProduceRequestTopic()
			if version >= 13 {
				t.TopicID = [16]byte{byte(i + 1)}
			} else {
				t.Topic = n
			}
			p := kmsg.NewProduceRequestTopicPartition()
			p.Partition, p.Records = int32(i), []byte(n+"-records")
			t.Partitions = append(t.Partitions, p)
			r.Topics = append(r.Topics, t)
		}
		return r
	}

	t.Run("mixed", func(t *testing.T) {
		s, fc, c := newSession()
		if _, err := s.HandleClient(reqFrame(produce(9, -1, "plain", "sealed", "promo"), 1)); err != nil {
			t.Fatal(err)
		}
		// The source's part goes on once the carried part is written.
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
			t.Fatalf("%d requests forwarded to the source, want 1", len(up))
		}
		var fwd kmsg.ProduceRequest
		readForwarded(t, up[0], &fwd)
		if len(fwd.Topics) != 1 || fwd.Topics[0].Topic != "plain" {
			t.Fatalf("the source was sent %+v, want topic plain alone", fwd.Topics)
		}
		if len(c.writes) != 1 || c.writes[0].Topic != "promo" || c.writes[0].Partition != 2 || !bytes.Equal(c.writes[0].Records, []byte("promo-records")) {
			t.Fatalf("carried %+v, want promo[2] with its records", c.writes)
		}
		answer := kmsg.NewPtrProduceResponse()
		answer.Version = 9
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic = "plain"
		rp := kmsg.NewProduceResponseTopicPartition()
		rp.BaseOffset = 5
		rt.Partitions = append(rt.Partitions, rp)
		answer.Topics = append(answer.Topics, rt)
		if _, err := s.HandleUpstream(respFrame(1, true, answer)); err != nil {
			t.Fatal(err)
		}
		var got kmsg.ProduceResponse
		readAnswer(t, fc.answers(t, 1)[0], &got, 9)
		want := map[string]struct {
			code       int16
			base, logs int64
		}{"plain": {0, 5, -1}, "sealed": {kerr.NotLeaderForPartition.Code, -1, -1}, "promo": {0, 1000, 7}}
		if len(got.Topics) != 3 {
			t.Fatalf("answer names %d topics, want 3: %+v", len(got.Topics), got.Topics)
		}
		for _, tp := range got.Topics {
			w, p := want[tp.Topic], tp.Partitions[0]
			if p.ErrorCode != w.code || p.BaseOffset != w.base || p.LogStartOffset != w.logs {
				t.Errorf("%s answered code %d base %d log start %d, want %+v", tp.Topic, p.ErrorCode, p.BaseOffset, p.LogStartOffset, w)
			}
		}
	})

	t.Run("promoted-acks-0", func(t *testing.T) {
		s, fc, c := newSession()
		if _, err := s.HandleClient(reqFrame(produce(9, 0, "promo"), 1)); err != nil {
			t.Fatal(err)
		}
		fn := <-fc.posted
		fn()
		if up := fc.forwarded(t); len(up) != 0 {
			t.Fatalf("%d requests reached the source", len(up))
		}
		if len(c.writes) != 1 {
			t.Fatalf("carried %d partitions, want 1", len(c.writes))
		}
		if fc.client.Len() != 0 {
			t.Fatal("an acks=0 Produce was answered")
		}
	})

	t.Run("by-id", func(t *testing.T) {
		// Produce v13 names topics by the source's ids: {1} is plain, {2} promoted.
		s, fc, c := newSession()
		if _, err := s.HandleClient(reqFrame(produce(13, -1, "plain", "promo"), 1)); err != nil {
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
			t.Fatalf("%d requests forwarded to the source, want 1", len(up))
		}
		var fwd kmsg.ProduceRequest
		readForwarded(t, up[0], &fwd)
		if len(fwd.Topics) != 1 || fwd.Topics[0].TopicID != [16]byte{1} {
			t.Fatalf("the source was sent %+v, want topic id 1 alone", fwd.Topics)
		}
		if len(c.writes) != 1 || c.writes[0].Topic != "promo" {
			t.Fatalf("carried %+v, want promo by its name", c.writes)
		}
		answer := kmsg.NewPtrProduceResponse()
		answer.Version = 13
		rt := kmsg.NewProduceResponseTopic()
		rt.TopicID = [16]byte{1}
		rt.Partitions = append(rt.Partitions, kmsg.NewProduceResponseTopicPartition())
		answer.Topics = append(answer.Topics, rt)
		if _, err := s.HandleUpstream(respFrame(1, true, answer)); err != nil {
			t.Fatal(err)
		}
		var got kmsg.ProduceResponse
		readAnswer(t, fc.answers(t, 1)[0], &got, 13)
		if len(got.Topics) != 2 || got.Topics[1].TopicID != [16]byte{2} || got.Topics[1].Partitions[0].BaseOffset != 1000 {
			t.Fatalf("answer %+v, want topic id 1 then 2 (at 1000)", got.Topics)
		}
	})

	t.Run("untouched", func(t *testing.T) {
		s, fc, c := newSession()
		in := reqFrame(produce(9, -1, "plain"), 1)
		if _, err := s.HandleClient(in); err != nil {
			t.Fatal(err)
		}
		up := fc.forwarded(t)
		if len(up) != 1 || !bytes.Equal(up[0], in) {
			t.Fatal("a Produce naming no sealed or promoted topic was not forwarded as it came")
		}
		if len(c.writes) != 0 {
			t.Fatal("carried a write of an ordinary topic")
		}
	})

	t.Run("unknown-id", func(t *testing.T) {
		s, fc, _ := newSession()
		r := produce(13, -1, "x")
		r.Topics[0].TopicID = [16]byte{9}
		if _, err := s.HandleClient(reqFrame(r, 1)); err != nil {
			t.Fatal(err)
		}
		fn := <-fc.posted
		fn()
		if fc.closed == nil {
			t.Fatal("a Produce naming a topic id the source does not know was not refused")
		}
		if len(fc.forwarded(t)) != 0 {
			t.Fatal("it reached the source")
		}
	})
}
