package ledger

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A claim fences the previous holder: its appends are refused by the broker itself, the new
// holder's land right after what was there, and everything reads back in order.
func TestFencedClaim(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l := New(cl)
	const id = "00112233445566778899aabbccddeeff"
	if err := l.Ensure(ctx, id, 2); err != nil {
		t.Fatal(err)
	}
	a, err := l.Claim(ctx, id, 1)
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
	b, err := l.Claim(ctx, id, 1)
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
	es, end, err := l.ReadFrom(ctx, id, 1, 0)
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
	if es, _, err := l.ReadFrom(ctx, id, 0, 0); err != nil || len(es) != 0 {
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
