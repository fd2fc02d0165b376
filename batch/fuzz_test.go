package batch

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// sampleBatch is one valid record batch: the corpus starts from real shapes.
func sampleBatch() []byte {
	b := Filler(3, 1700000000000, Producer{ID: 7, Epoch: 1, Sequence: 5}, false)
	binary.BigEndian.PutUint64(b[0:], 1000)
	return b
}

// Reading never panics and never reads past its input; what Split returns tiles the input it
// consumed; Restore puts back exactly the fields it is given.
func FuzzBatch(f *testing.F) {
	one := sampleBatch()
	f.Add(one)
	f.Add(append(append([]byte{}, one...), one...))
	f.Add(one[:len(one)-3])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ReadHeader(b)
		if err == nil && h.Size() < HeaderLen {
			t.Fatalf("a header of size %d was read", h.Size())
		}
		_ = Valid(b)
		sets, hs, err := Split(b)
		if err == nil {
			var joined []byte
			for i, s := range sets {
				if hs[i].Size() != len(s) {
					t.Fatalf("batch %d: header size %d, slice %d", i, hs[i].Size(), len(s))
				}
				joined = append(joined, s...)
			}
			if !bytes.Equal(joined, b[:len(joined)]) {
				t.Fatal("the batches Split returned are not the input's")
			}
		}
		if len(b) < HeaderLen {
			return
		}
		c := append([]byte(nil), b...)
		src := Source{BaseOffset: 42, LeaderEpoch: 3, Attributes: 0x10, MaxTimestamp: 99, ProducerID: 5, ProducerEpoch: 2, BaseSequence: 9, CRC: 0xdeadbeef, Length: 123}
		Restore(c, src)
		got, err := ReadHeader(c)
		if err != nil {
			return // a length field that does not fit: Restore leaves it, ReadHeader refuses it
		}
		if got.BaseOffset != 42 || got.LeaderEpoch != 3 || got.Attributes != 0x10 || got.MaxTimestamp != 99 ||
			got.ProducerID != 5 || got.ProducerEpoch != 2 || got.BaseSequence != 9 {
			t.Fatalf("restored header %+v", got)
		}
		if got.Length == 123 && got.CRC != 0xdeadbeef {
			t.Fatalf("same length, CRC %x not the source's", got.CRC)
		}
	})
}
