package moves

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"offsetgate/batch"
	"offsetgate/view"
)

// What a carried write of a promoted topic becomes: a source producer's batch goes to the
// destination under a raised producer id with a valid CRC, a retry of a batch the mirror
// copied is answered with its source offset and not written again, and transactional
// batches are refused.
func TestCarriedBatch(t *testing.T) {
	mirrored := func(pid int64, epoch int16, seq int32, n int) view.ProducerMatch {
		// Producer 7, epoch 0, wrote sequences 0-9 (source offsets 100-109) and 10-19 (110-119).
		if pid != 7 || epoch != 0 {
			return view.ProducerMatch{}
		}
		m := view.ProducerMatch{Seen: true, LastSeq: 19}
		switch seq {
		case 0:
			m.Found, m.Src = true, 100
		case 10:
			m.Found, m.Src = true, 110
		}
		return m
	}
	part := func(p batch.Producer, attrs int16) ProducePart {
		b := batch.Filler(10, 1, p, false)
		b[22] = byte(attrs) // attributes' low byte
		b[21] = byte(attrs >> 8)
		copy(b[17:21], []byte{0, 0, 0, 0})
		crc := batch.CRC(b)
		b[17], b[18], b[19], b[20] = byte(crc>>24), byte(crc>>16), byte(crc>>8), byte(crc)
		return ProducePart{Topic: "t", Partition: 0, Records: b}
	}

	t.Run("next", func(t *testing.T) {
		in := part(batch.Producer{ID: 7, Epoch: 0, Sequence: 20}, 0)
		out, _, ok := carriedBatch(mirrored, in)
		if !ok {
			t.Fatal("the next batch of a mirrored producer was not carried")
		}
		h, err := batch.ReadHeader(out)
		if err != nil {
			t.Fatal(err)
		}
		if h.ProducerID != 7|SourcePIDBit || h.ProducerEpoch != 0 || h.BaseSequence != 20 {
			t.Fatalf("carried as producer %d epoch %d sequence %d", h.ProducerID, h.ProducerEpoch, h.BaseSequence)
		}
		if !batch.Valid(out) {
			t.Fatal("the carried batch's CRC is wrong")
		}
		if h0, _ := batch.ReadHeader(in.Records); h0.ProducerID != 7 {
			t.Fatal("the client's bytes were changed in place")
		}
	})
	t.Run("retry-of-mirrored", func(t *testing.T) {
		_, res, ok := carriedBatch(mirrored, part(batch.Producer{ID: 7, Epoch: 0, Sequence: 10}, 0))
		if ok || res.Code != 0 || res.BaseOffset != 110 {
			t.Fatalf("a retry of a mirrored batch: carried %v, answered %+v; want its source offset 110", ok, res)
		}
	})
	t.Run("overlap", func(t *testing.T) {
		_, res, ok := carriedBatch(mirrored, part(batch.Producer{ID: 7, Epoch: 0, Sequence: 5}, 0))
		if ok || res.Code != kerr.OutOfOrderSequenceNumber.Code {
			t.Fatalf("a batch overlapping mirrored sequences: carried %v, answered %+v", ok, res)
		}
	})
	t.Run("random-id", func(t *testing.T) {
		// A cluster that draws random producer ids (kfake) may issue one with bit 62 set.
		const id = SourcePIDBit | 12345
		out, _, ok := carriedBatch(mirrored, part(batch.Producer{ID: id, Epoch: 0, Sequence: 0}, 0))
		if h, _ := batch.ReadHeader(out); !ok || h.ProducerID != id {
			t.Fatalf("a producer id with bit 62 set: carried %v as %d", ok, h.ProducerID)
		}
	})
	t.Run("other-producer", func(t *testing.T) {
		if _, _, ok := carriedBatch(mirrored, part(batch.Producer{ID: 8, Epoch: 0, Sequence: 0}, 0)); !ok {
			t.Fatal("another producer's first batch was not carried")
		}
	})
	t.Run("transactional", func(t *testing.T) {
		_, res, ok := carriedBatch(mirrored, part(batch.Producer{ID: 7, Epoch: 0, Sequence: 20}, batch.AttrTransactional))
		if ok || res.Code != kerr.InvalidTxnState.Code {
			t.Fatalf("a transactional batch: carried %v, answered %+v", ok, res)
		}
	})
	t.Run("two-batches", func(t *testing.T) {
		p := part(batch.Producer{ID: -1, Epoch: -1, Sequence: -1}, 0)
		p.Records = append(p.Records, p.Records...)
		if _, res, ok := carriedBatch(mirrored, p); ok || res.Code != kerr.InvalidRecord.Code {
			t.Fatalf("two batches in one partition: carried %v, answered %+v", ok, res)
		}
	})
}
