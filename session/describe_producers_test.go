package session

import (
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
