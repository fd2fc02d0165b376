package verify

import (
	"testing"

	"offsetgate/batch"
)

// An aborted-transaction entry is compared by the first record it hides: the source's entry
// for a transaction its cleaner partly removed keeps the first offset as written, the
// mirror's names the first batch left, and both hide the same records; an entry whose
// records are all gone hides nothing and is not compared.
func TestHides(t *testing.T) {
	data := func(base int64, n int32, pid int64) batch.Header {
		return batch.Header{BaseOffset: base, LastOffsetDelta: n - 1, RecordCount: n, ProducerID: pid, Attributes: batch.AttrTransactional}
	}
	marker := func(at, pid int64) batch.Header {
		return batch.Header{BaseOffset: at, RecordCount: 1, ProducerID: pid, Attributes: batch.AttrTransactional | batch.AttrControl}
	}
	empty := data(70, 3, 7)
	empty.RecordCount = 0
	hs := []batch.Header{data(60, 2, 9), empty, data(79, 2, 7), data(81, 1, 9), marker(83, 7), marker(84, 9), marker(90, 5)}
	for _, c := range []struct {
		pid, first, at int64
		ok             bool
	}{
		{7, 77, 79, true}, // cleaned in part: the first batch left
		{7, 79, 79, true}, // as the mirror names it
		{7, 80, 80, true}, // inside a batch
		{9, 60, 60, true}, // untouched
		{5, 85, 0, false}, // all records gone: only the marker is left
		{7, 84, 0, false}, // after the marker: nothing of the producer follows
		{4, 0, 0, false},  // a producer with no batch here
	} {
		at, ok := hides(hs, c.pid, c.first)
		if ok != c.ok || at != c.at {
			t.Errorf("hides(%d@%d) = %d, %v; want %d, %v", c.pid, c.first, at, ok, c.at, c.ok)
		}
	}
}
