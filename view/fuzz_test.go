package view

import (
	"testing"

	"offsetgate/ledger"
)

// ledgerFrom builds a consistent ledger from fuzz bytes, as offsetgate's writer would record
// one: each step is a batch of 1-16 records, preceded by nothing, a filled hole (fillers) or a
// large hole (a new segment); epochs only rise.
func ledgerFrom(b []byte) ([]ledger.Entry, []ledger.Entry) {
	src := int64(100)
	d := int64(0)
	epoch := int32(0)
	es := []ledger.Entry{{Kind: ledger.KindSegment, Src: src, Delta: src - d}}
	var batches []ledger.Entry
	for i, c := range b {
		if i >= 64 {
			break
		}
		n := int64(c&0x0f) + 1
		if len(batches) > 0 {
			switch c >> 6 {
			case 2:
				m := n/2 + 1
				es = append(es, ledger.Entry{Kind: ledger.KindFiller, Src: src, Last: src + m - 1, D: d, Count: int32(m)})
				src, d = src+m, d+m
			case 3:
				src += 100000 * n
				es = append(es, ledger.Entry{Kind: ledger.KindSegment, Src: src, Delta: src - d})
			}
		}
		if c&0x10 != 0 {
			epoch++
		}
		e := ledger.Entry{Kind: ledger.KindBatch, Src: src, Last: src + n - 1, D: d, Count: int32(n), Epoch: epoch}
		es = append(es, e)
		batches = append(batches, e)
		src, d = src+n, d+n
	}
	return es, batches
}

// Translation of any ledger a writer could record: every record of every batch maps to its D
// offset and back, source to destination never goes down, and epochs never fall with offsets.
func FuzzTranslate(f *testing.F) {
	f.Add([]byte{0x03, 0x13, 0x85, 0x02, 0xc1, 0x17})
	f.Add([]byte{0xff, 0x00, 0x80, 0x40})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		es, batches := ledgerFrom(b)
		p := NewPartition(es)
		for _, e := range batches {
			for s := e.Src; s <= e.Last; s++ {
				d := e.D + (s - e.Src)
				if got := p.ToDest(s); got != d {
					t.Fatalf("ToDest(%d) = %d, want %d", s, got, d)
				}
				if got := p.ToSource(d); got != s {
					t.Fatalf("ToSource(%d) = %d, want %d", d, got, s)
				}
				if got := p.EpochAt(s); got != e.Epoch {
					t.Fatalf("EpochAt(%d) = %d, want %d", s, got, e.Epoch)
				}
			}
		}
		last, lastEpoch := int64(-2), int32(-2)
		for s := int64(100); s < 100+int64(len(b))*20 && s < 5000; s++ {
			d := p.ToDest(s)
			if d < last {
				t.Fatalf("ToDest went down: %d -> %d at source %d", last, d, s)
			}
			last = d
			if ep := p.EpochAt(s); ep < lastEpoch {
				t.Fatalf("EpochAt went down at %d", s)
			} else {
				lastEpoch = ep
			}
		}
	})
}
