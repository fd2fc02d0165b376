package atoffset

import "testing"

// A partition's ledger appends always take the same lane (they stay in order behind each
// other), consecutive partitions spread over all ledger lanes (their appends do not wait for
// each other's replication), and ledger lanes never meet data lanes (a ledger append never
// queues behind data). Data lanes: DefaultDataLanes unless configured (bounded), a
// partition's data always on the same one, consecutive partitions over all of them.
func TestLedgerLanes(t *testing.T) {
	for _, c := range []struct{ asked, want int }{{0, DefaultDataLanes}, {1, 1}, {2, 2}, {-3, DefaultDataLanes}, {MaxDataLanes + 5, MaxDataLanes}} {
		w := New(Config{DataLanes: c.asked}, nil, nil, nil, nil)
		if w.cfg.DataLanes != c.want {
			t.Fatalf("DataLanes %d: writer uses %d, want %d", c.asked, w.cfg.DataLanes, c.want)
		}
		p := &part{tid: [16]byte{7}}
		seen := map[int]bool{}
		for partition := int32(0); partition < int32(c.want); partition++ {
			d := w.dataLane(p, partition)
			if d < 1 || d > c.want || d != w.dataLane(p, partition) {
				t.Fatalf("DataLanes %d, partition %d: data lane %d outside [1, %d] or not stable", c.asked, partition, d, c.want)
			}
			seen[d] = true
		}
		if len(seen) != c.want {
			t.Fatalf("DataLanes %d: %d consecutive partitions took %d data lanes, want all", c.asked, c.want, len(seen))
		}
	}
	w := New(Config{}, nil, nil, nil, nil)
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
			if ll := ledgerLeaderLane(tid, partition); ll >= -ledgerLanes || ll < -2*ledgerLanes || ll != ledgerLeaderLane(tid, partition) {
				t.Fatalf("partition %d: acks=1 ledger lane %d outside [-%d, -%d] or not stable", partition, ll, 2*ledgerLanes, ledgerLanes+1)
			}
			if d := w.dataLane(p, partition); d < 1 {
				t.Fatalf("partition %d: data lane %d is a ledger lane", partition, d)
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
