package session

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// FuzzProduceAcks checks the acks reader against kmsg's own decoding over every Produce
// version, with and without a transactional id, and never panics on garbage.
func FuzzProduceAcks(f *testing.F) {
	f.Add(int16(0), int16(1), "", false, []byte{})
	f.Add(int16(9), int16(-1), "txn", true, []byte{1, 2})
	f.Add(int16(3), int16(0), "some-long-transactional-id", true, []byte{})
	f.Add(int16(13), int16(0), "", false, []byte{0xff})
	f.Fuzz(func(t *testing.T, version, acks int16, txn string, hasTxn bool, garbage []byte) {
		// Garbage must never panic.
		_, _ = produceAcks(version, garbage)
		if version < 0 || version > 13 {
			return
		}
		req := kmsg.NewPtrProduceRequest()
		req.SetVersion(version)
		req.Acks = acks
		req.TimeoutMillis = 1000
		if hasTxn && version >= 3 {
			req.TransactionID = &txn
		}
		req.Topics = []kmsg.ProduceRequestTopic{{Topic: "t", Partitions: []kmsg.ProduceRequestTopicPartition{{Partition: 0}}}}
		body := req.AppendTo(nil)
		got, err := produceAcks(version, body)
		if err != nil {
			t.Fatalf("v%d: %v", version, err)
		}
		if got != acks {
			t.Fatalf("v%d txn=%v: read acks %d, want %d", version, hasTxn, got, acks)
		}
		// Any truncation is an error or a value, never a panic.
		for i := 0; i < len(body); i++ {
			_, _ = produceAcks(version, body[:i])
		}
	})
}
