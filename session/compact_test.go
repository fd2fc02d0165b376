package session

import (
	"bytes"
	"math/rand"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// produceOf builds a Produce request of version v with topics x partitions record sets of
// random sizes (some empty, one null), and returns its frame.
func produceOf(t *testing.T, rng *rand.Rand, v int16, topics, parts int) (*kmsg.ProduceRequest, []byte) {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(v)
	req.Acks, req.TimeoutMillis = -1, 30000
	if v >= 3 {
		id := "txn-a"
		req.TransactionID = &id
	}
	for i := 0; i < topics; i++ {
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = string(rune('a'+i)) + "-topic"
		rt.TopicID[0] = byte(i + 1)
		for p := 0; p < parts; p++ {
			rp := kmsg.NewProduceRequestTopicPartition()
			rp.Partition = int32(p*3 + i)
			switch n := rng.Intn(6); {
			case i == 0 && p == 1:
				rp.Records = nil
			case n == 0:
				rp.Records = []byte{}
			default:
				rp.Records = make([]byte, rng.Intn(300<<10)+1)
				rng.Read(rp.Records)
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	return req, reqFrame(req, 7)
}

// A request compacted while it arrives, in pieces of random sizes and with the sent mark
// lagging behind what arrived, decodes to the same topics and partitions as the whole one,
// with every record set sent dropped and none still unsent touched.
func TestCompactProduce(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	for _, v := range []int16{3, 7, 8, 9, 11, 12, 13} {
		orig, frame := produceOf(t, rng, v, 3, 5)
		held := []byte{} // the compacted frame so far
		arrived, dropped := 0, 0
		for arrived < len(frame) {
			n := min(len(frame)-arrived, rng.Intn(200<<10)+1)
			held = append(held, frame[arrived:arrived+n]...)
			arrived += n
			lag := rng.Intn(64 << 10)
			if arrived == len(frame) {
				lag = 1 // all but the last byte is sent
			}
			done := max(0, len(held)-lag)
			tail := append([]byte(nil), held[done:]...)
			out, removed, ok := CompactProduce(held, done)
			if !ok {
				t.Fatalf("v%d: compaction refused a request kmsg wrote", v)
			}
			if !bytes.Equal(out[done-removed:], tail) {
				t.Fatalf("v%d: bytes not yet sent were changed", v)
			}
			held, dropped = out, dropped+removed
		}
		if dropped == 0 {
			t.Fatalf("v%d: nothing dropped", v)
		}
		if got := int(uint32(held[0])<<24|uint32(held[1])<<16|uint32(held[2])<<8|uint32(held[3])) + 4; got != len(held) {
			t.Fatalf("v%d: size prefix says %d bytes, frame holds %d", v, got, len(held))
		}
		h, err := parseReqHeader(held[4:])
		if err != nil {
			t.Fatal(err)
		}
		got := kmsg.ProduceRequest{Version: v}
		if err := got.ReadFrom(held[4+h.bodyOff:]); err != nil {
			t.Fatalf("v%d: the compacted request does not decode: %v", v, err)
		}
		if got.Acks != orig.Acks || got.TimeoutMillis != orig.TimeoutMillis || len(got.Topics) != len(orig.Topics) {
			t.Fatalf("v%d: request fields differ: %+v", v, got)
		}
		if v >= 3 && (got.TransactionID == nil || *got.TransactionID != *orig.TransactionID) {
			t.Fatalf("v%d: transactional id lost", v)
		}
		var want int
		for i, ot := range orig.Topics {
			gt := got.Topics[i]
			if v < 13 && gt.Topic != ot.Topic || v >= 13 && gt.TopicID != ot.TopicID || len(gt.Partitions) != len(ot.Partitions) {
				t.Fatalf("v%d: topic %d differs", v, i)
			}
			for j, op := range ot.Partitions {
				gp := gt.Partitions[j]
				// The last record set of a version without tagged fields ends with the frame,
				// whose last byte is sent only once the request is judged: it stays.
				last := i == len(orig.Topics)-1 && j == len(ot.Partitions)-1 && v < 9
				kept := last && bytes.Equal(gp.Records, op.Records)
				if gp.Partition != op.Partition || (op.Records == nil) != (gp.Records == nil) || len(gp.Records) != 0 && !kept {
					t.Fatalf("v%d: partition %d/%d: %d/%v, want %d with its records dropped", v, i, j, gp.Partition, gp.Records == nil, op.Partition)
				}
				if !kept {
					want += len(op.Records)
				}
			}
		}
		if dropped < want {
			t.Fatalf("v%d: dropped %d bytes, record sets hold %d", v, dropped, want)
		}
	}
}

// A record set whose length is written in a longer form than kmsg's (Kafka reads it; kmsg
// too) is not compacted: CompactProduce says so, and the frame is left as it was.
func TestCompactProduceOddLength(t *testing.T) {
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(9)
	req.Acks = -1
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "t"
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = bytes.Repeat([]byte{0xab}, 10)
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	frame := reqFrame(req, 1)
	i := bytes.Index(frame, append([]byte{11}, rp.Records...))
	if i < 0 {
		t.Fatal("record set not found")
	}
	// 11 as two bytes: 0x8b 0x00.
	odd := append(append(append([]byte(nil), frame[:i]...), 0x8b, 0x00), frame[i+1:]...)
	size := len(odd) - 4
	odd[0], odd[1], odd[2], odd[3] = byte(size>>24), byte(size>>16), byte(size>>8), byte(size)
	h, _ := parseReqHeader(odd[4:])
	if err := (&kmsg.ProduceRequest{Version: 9}).ReadFrom(odd[4+h.bodyOff:]); err != nil {
		t.Skipf("kmsg does not read the longer form: %v", err)
	}
	keep := append([]byte(nil), odd...)
	out, removed, ok := CompactProduce(odd, len(odd))
	if ok || removed != 0 || !bytes.Equal(out, keep) {
		t.Fatalf("ok %v, removed %d: a length in a form not written back must stop compaction", ok, removed)
	}
	if _, _, ok := CompactProduce(plainProduce("t", 1), 30); !ok {
		t.Fatal("a request with nothing sent yet must not stop compaction")
	}
}
