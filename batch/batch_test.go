package batch

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A batch rewritten for the destination keeps its records and codec and carries a valid CRC;
// a filler batch decodes to n keyless, valueless records with the filler header.
func TestForDestinationAndFiller(t *testing.T) {
	rec := kmsg.Record{Key: []byte("k"), Value: []byte("v"), OffsetDelta: 0}
	rec.Length = int32(len(rec.AppendTo(nil)) - 1)
	src := kmsg.RecordBatch{FirstOffset: 1000, PartitionLeaderEpoch: 7, Magic: 2, Attributes: AttrLogAppendTime,
		FirstTimestamp: 5, MaxTimestamp: 9, ProducerID: 42, ProducerEpoch: 3, FirstSequence: 11, NumRecords: 1, Records: rec.AppendTo(nil)}
	b := src.AppendTo(nil)
	putLenCRC(b)
	if !Valid(b) {
		t.Fatal("test batch has a bad CRC")
	}
	sets, hs, err := Split(append(append([]byte(nil), b...), b...))
	if err != nil || len(sets) != 2 || hs[1].BaseOffset != 1000 || hs[0].LeaderEpoch != 7 {
		t.Fatalf("split: %d batches, %+v, %v", len(sets), hs, err)
	}
	if _, _, err := Split(b[:len(b)-1]); err == nil {
		t.Fatal("a truncated batch was accepted")
	}
	d := ForDestination(b, Producer{ID: 99, Epoch: 0, Sequence: 4})
	h, err := ReadHeader(d)
	if err != nil || !Valid(d) {
		t.Fatalf("rewritten batch invalid: %v", err)
	}
	if h.BaseOffset != 0 || h.ProducerID != 99 || h.BaseSequence != 4 || h.Attributes&AttrLogAppendTime != 0 || h.MaxTimestamp != 9 {
		t.Fatalf("rewritten header %+v", h)
	}
	if string(d[HeaderLen:]) != string(b[HeaderLen:]) {
		t.Fatal("records changed")
	}

	f := Filler(5, 1234, Producer{ID: 99, Sequence: 5})
	fh, err := ReadHeader(f)
	if err != nil || !Valid(f) || fh.RecordCount != 5 || fh.LastOffsetDelta != 4 || fh.BaseTimestamp != 1234 {
		t.Fatalf("filler header %+v, %v", fh, err)
	}
	fp := kmsg.FetchResponseTopicPartition{RecordBatches: f}
	p, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Topic: "t", Partition: 0, KeepControlRecords: true, Offset: 0}, &fp, kgo.DefaultDecompressor(), nil)
	if len(p.Records) != 5 {
		t.Fatalf("filler decodes to %d records, want 5", len(p.Records))
	}
	for _, r := range p.Records {
		if r.Key != nil || r.Value != nil || len(r.Headers) != 1 || r.Headers[0].Key != FillerHeader || r.Timestamp.UnixMilli() != 1234 {
			t.Fatalf("filler record %+v", r)
		}
	}
	_ = context.Background
}

func putLenCRC(b []byte) {
	n := uint32(len(b) - 12)
	b[8], b[9], b[10], b[11] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
	c := CRC(b)
	b[17], b[18], b[19], b[20] = byte(c>>24), byte(c>>16), byte(c>>8), byte(c)
}
