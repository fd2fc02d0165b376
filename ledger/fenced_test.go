package ledger

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/batch"
	"offsetgate/internal/kfaketest"
)

// A claim fences the previous holder: its appends are refused by the broker itself, the new
// holder's land right after what was there, and everything reads back in order.
func TestFencedClaim(t *testing.T) {
	ctx, l := kfakeLedger(t, 2)
	a, err := l.Claim(ctx, testID, 1)
	if err != nil {
		t.Fatal(err)
	}
	base, next, err := a.Append(ctx, []Entry{{Kind: KindOwner, Src: -1, Owner: "a"}, {Kind: KindSegment, Src: 0}})
	if err != nil || base != 0 || next != 2 {
		t.Fatalf("A's first append: [%d, %d) %v", base, next, err)
	}
	if base, next, err = a.Append(ctx, []Entry{{Kind: KindBatch, Src: 0, Last: 4, Count: 5}}); err != nil || base != 2 || next != 3 {
		t.Fatalf("A's second append: [%d, %d) %v", base, next, err)
	}
	b, err := l.Claim(ctx, testID, 1)
	if err != nil {
		t.Fatal(err)
	}
	if base, next, err = b.Append(ctx, []Entry{{Kind: KindOwner, Src: -1, Owner: "b"}}); err != nil || base != 3 || next != 4 {
		t.Fatalf("B's claim: [%d, %d) %v", base, next, err)
	}
	if _, _, err = a.Append(ctx, []Entry{{Kind: KindBatch, Src: 5, Last: 9, D: 5, Count: 5}}); !errors.Is(err, ErrFenced) {
		t.Fatalf("A after B's claim: %v, want ErrFenced", err)
	}
	if base, _, err = b.Append(ctx, []Entry{{Kind: KindBatch, Src: 5, Last: 9, D: 5, Count: 5}}); err != nil || base != 4 {
		t.Fatalf("B: at %d, %v", base, err)
	}
	es, end, err := l.ReadFrom(ctx, testID, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	var owners []string
	for _, e := range es {
		if e.Kind == KindOwner {
			owners = append(owners, e.Owner)
		}
	}
	if len(es) != 5 || end != 5 || es[4].Src != 5 || len(owners) != 2 || owners[1] != "b" {
		t.Fatalf("ledger holds %d entries (end %d): %+v", len(es), end, es)
	}
	// The other partition is untouched.
	if es, _, err := l.ReadFrom(ctx, testID, 0, 0); err != nil || len(es) != 0 {
		t.Fatalf("partition 0: %v %v", es, err)
	}
}

func TestNextSequence(t *testing.T) {
	for _, c := range []struct{ seq, n, want int32 }{
		{0, 5, 5}, {math.MaxInt32 - 5, 5, math.MaxInt32}, {math.MaxInt32 - 5, 6, 0}, {math.MaxInt32, 1, 0}, {math.MaxInt32 - 1, 4, 2},
	} {
		if got := nextSequence(c.seq, c.n); got != c.want {
			t.Errorf("nextSequence(%d, %d) = %d, want %d", c.seq, c.n, got, c.want)
		}
	}
}

// A fenced append is one batch in the ledger topic's codec (zstd), so the broker stores it as
// sent instead of recompressing it; its records decode back to the entries, in order, keyed
// and timestamped by source offset, under the partition's producer at its sequence.
func TestFencedBatchInTopicCodec(t *testing.T) {
	f := &Fenced{l: New(nil), pid: 7, epoch: 2, seq: 40}
	es := []Entry{{Kind: KindSegment, Src: 100, Delta: 5}, {Kind: KindBatch, Src: 100, Last: 109, D: 105, Count: 10, CRC: 99}}
	data, err := f.batch(es)
	if err != nil {
		t.Fatal(err)
	}
	h, err := batch.ReadHeader(data)
	if err != nil || h.Size() != len(data) || !batch.Valid(data) {
		t.Fatalf("batch of %d bytes: header %+v, %v, valid %v", len(data), h, err, batch.Valid(data))
	}
	if codec := h.Attributes & batch.AttrCodecMask; codec != int16(kgo.CodecZstd) {
		t.Fatalf("codec %d, want zstd (%d)", codec, kgo.CodecZstd)
	}
	if h.ProducerID != 7 || h.ProducerEpoch != 2 || h.BaseSequence != 40 || h.RecordCount != 2 {
		t.Fatalf("header %+v", h)
	}
	var rb kmsg.RecordBatch
	if err := rb.ReadFrom(data); err != nil {
		t.Fatal(err)
	}
	raw, err := kgo.DefaultDecompressor().Decompress(rb.Records, kgo.CodecZstd)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range es {
		var r kmsg.Record
		if err := r.ReadFrom(raw); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		raw = raw[r.Length+int32(kbin.VarintLen(r.Length)):]
		got, err := Decode(r.Value)
		want.V = VersionOf(want)
		if err != nil || !reflect.DeepEqual(got, want) || string(r.Key) != want.Kind+":100" || rb.FirstTimestamp+r.TimestampDelta64 != 100 {
			t.Fatalf("record %d: key %q ts %d entry %+v (%v), want %+v", i, r.Key, rb.FirstTimestamp+r.TimestampDelta64, got, err, want)
		}
	}
	if len(raw) != 0 {
		t.Fatalf("%d bytes after the last record", len(raw))
	}
}

// A sender that fails is tried again (the append lands), one that says it is closed is not:
// the append fails at once, saying so, and nothing is appended.
func TestFencedSenderClosed(t *testing.T) {
	ctx, l := kfakeLedger(t, 1)
	f, err := l.Claim(ctx, testID, 0)
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	f.SendWith(func(ctx context.Context, _, _ string, _ [16]byte, _ int32, data []byte) (kmsg.ProduceResponseTopicPartition, error) {
		calls++
		if calls == 1 {
			return kmsg.ProduceResponseTopicPartition{}, errors.New("connection reset")
		}
		return f.request(ctx, data, false)
	})
	if base, next, err := f.Append(ctx, []Entry{{Kind: KindOwner, Src: -1, Owner: "a"}}); err != nil || base != 0 || next != 1 || calls != 2 {
		t.Fatalf("after a failed send: [%d, %d) %v in %d sends, want [0, 1) in 2", base, next, err, calls)
	}
	calls = 0
	f.SendWith(func(context.Context, string, string, [16]byte, int32, []byte) (kmsg.ProduceResponseTopicPartition, error) {
		calls++
		return kmsg.ProduceResponseTopicPartition{}, fmt.Errorf("%w: sink closed", ErrSenderClosed)
	})
	if _, _, err := f.Append(ctx, []Entry{{Kind: KindBatch, Src: 0, Last: 4, Count: 5}}); !errors.Is(err, ErrSenderClosed) || calls != 1 {
		t.Fatalf("a closed sender: %v after %d sends, want ErrSenderClosed after 1", err, calls)
	}
	if es, end, err := l.ReadFrom(ctx, testID, 0, 0); err != nil || len(es) != 1 || end != 1 {
		t.Fatalf("the ledger holds %d entries (end %d, %v), want the owner entry alone", len(es), end, err)
	}
}

// testID is the mirror topic id of the ledgers of kfakeLedger.
const testID = "00112233445566778899aabbccddeeff"

// kfakeLedger is a ledger of testID with the given partitions on a one-broker kfake cluster,
// closed when the test ends.
func kfakeLedger(t *testing.T, partitions int32) (context.Context, *Ledger) {
	t.Helper()
	_, cl := kfaketest.Cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	l := New(cl)
	if err := l.Ensure(ctx, testID, partitions); err != nil {
		t.Fatal(err)
	}
	return ctx, l
}
