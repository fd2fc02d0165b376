package mirror

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"offsetgate/batch"
)

// batchAt is a one-record batch at source offset off (all of the same size).
func batchAt(off int64) []byte {
	b := batch.Filler(1, 1000, batch.Producer{ID: -1, Epoch: -1, Sequence: -1}, false)
	binary.BigEndian.PutUint64(b[0:], uint64(off))
	return b
}

func records(bs ...[]byte) []byte {
	var out []byte
	for _, b := range bs {
		out = append(out, b...)
	}
	return out
}

// A chunk waiting for its writer grows with what the next fetches bring, up to MaxBytes, so
// that records arriving while a partition's previous chunk is written go with the next write
// instead of one write later; a batch that does not fit stops the growth and is fetched whole
// once the chunk is taken.
func TestWaitingChunkGrows(t *testing.T) {
	one := len(batchAt(0))
	cfg := Config{MaxBytes: int32(3 * one), follow: true}
	e := newEngine(cfg, nil, nil, nil, nil)
	p := &part{topic: "t", num: 0, leader: 1, target: -1, max: cfg.MaxBytes, st: &partStats{}}
	e.order = []*part{p}
	f := &fetcher{e: e, broker: 1}

	e.mu.Lock()
	e.takeLocked(p, records(batchAt(0)))
	p.chunk, p.writing = nil, true // a writer took it
	e.takeLocked(p, records(batchAt(1)))
	if p.chunk == nil || len(p.chunk.hs) != 1 || p.next != 2 {
		e.mu.Unlock()
		t.Fatalf("read-ahead chunk: %+v next %d", p.chunk, p.next)
	}
	e.mu.Unlock()

	// The waiting chunk is still fetched for, with the room it has left.
	req, asked, _ := f.request()
	if req == nil || len(asked) != 1 || req.Topics[0].Partitions[0].PartitionMaxBytes != int32(2*one) ||
		req.Topics[0].Partitions[0].FetchOffset != 2 {
		t.Fatalf("a waiting chunk with room is not fetched for: %+v", req)
	}
	e.mu.Lock()
	e.takeLocked(p, records(batchAt(2), batchAt(3), batchAt(4))) // the third does not fit
	if len(p.chunk.hs) != 3 || p.next != 4 || e.buffered != int64(4*one) || p.max <= cfg.MaxBytes {
		e.mu.Unlock()
		t.Fatalf("chunk after growing: %d batches, next %d, buffered %d", len(p.chunk.hs), p.next, e.buffered)
	}
	e.mu.Unlock()

	// Full: the partition is not fetched for until a writer takes the chunk.
	if req, _, _ := f.request(); req != nil {
		t.Fatalf("a full waiting chunk is fetched for: %+v", req)
	}
	// What did not fit is asked for whole afterwards.
	e.mu.Lock()
	p.chunk = nil
	e.mu.Unlock()
	req, _, _ = f.request()
	if req == nil || req.Topics[0].Partitions[0].FetchOffset != 4 || req.Topics[0].Partitions[0].PartitionMaxBytes <= cfg.MaxBytes {
		t.Fatalf("after the chunk was taken: %+v", req)
	}
}

// retry's pauses start short (a topic created a moment ago is usually known everywhere a few
// tens of milliseconds later) and grow, so its eight attempts still span over six seconds.
func TestRetryWaits(t *testing.T) {
	var total time.Duration
	for a := 0; a < 8; a++ {
		w := retryWait(a)
		if a > 0 && w < retryWait(a-1) {
			t.Fatalf("pause %d (%v) shorter than the one before (%v)", a, w, retryWait(a-1))
		}
		total += w
	}
	if first := retryWait(0); first > 100*time.Millisecond {
		t.Fatalf("first pause %v: a run's first record waits for it", first)
	}
	if total < 6*time.Second {
		t.Fatalf("eight attempts span %v, want over 6s for a connection being re-established", total)
	}
	// And retry itself: a call that fails once with a retriable error is asked again.
	calls := 0
	err := retry(context.Background(), func() error {
		if calls++; calls == 1 {
			return errors.New("partition missing from the answer")
		}
		return nil
	})
	if err != nil || calls != 2 {
		t.Fatalf("retry: %v after %d calls", err, calls)
	}
}
