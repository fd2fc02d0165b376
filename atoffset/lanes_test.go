package atoffset

import "testing"

// A partition's ledger appends always take the same lane (they stay in order behind each
// other), consecutive partitions spread over all ledger lanes (their appends do not wait for
// each other's replication), and ledger lanes never meet data lanes (a ledger append never
// queues behind data).
func TestLedgerLanes(t *testing.T) {
	for _, tid := range [][16]byte{{}, {1, 2, 3}, {0xff, 0xfe}} {
		p := &part{tid: tid}
		seen := map[int]bool{}
		for partition := int32(0); partition < 64; partition++ {
			l := ledgerLane(tid, partition)
			if l != ledgerLane(tid, partition) {
				t.Fatalf("partition %d: lane changed", partition)
			}
			if l >= 0 || l < -ledgerLanes {
				t.Fatalf("partition %d: ledger lane %d outside [-%d, -1]", partition, l, ledgerLanes)
			}
			if d := dataLane(p, partition); d < 1 || d > dataLanes {
				t.Fatalf("partition %d: data lane %d outside [1, %d]", partition, d, dataLanes)
			}
			if partition < ledgerLanes {
				seen[l] = true
			}
		}
		if len(seen) != ledgerLanes {
			t.Fatalf("topic %x: %d consecutive partitions took %d ledger lanes, want all %d", tid, ledgerLanes, len(seen), ledgerLanes)
		}
	}
}
