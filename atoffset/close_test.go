package atoffset

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"offsetgate/catalog"
	"offsetgate/ledger"
	"offsetgate/wire"
)

// Close while a partition is being written, with a snapshot due at every other ledger entry:
// Close returns (the snapshots started before it are waited for, none starts after it), the
// write under way is answered, and a write that comes after Close is refused with nothing
// written, rather than opening a connection that nothing would close.
func TestCloseWhileWriting(t *testing.T) {
	_, cl, ctx, tid := kfakeTopic(t)
	w := New(Config{Instance: "a", SnapshotEvery: 2, Dial: plainDial}, cl, ledger.New(cl), zap.NewNop(), nil)
	mt := catalog.Topic{Name: kfakeTopicName, ID: tid}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		written int64 // source offsets written, in order from 0
		stop    = make(chan struct{})
		batches = map[int64][]byte{} // a batch is resent with the same bytes, as a mirror does
	)
	batchAt := func(at int64) []byte {
		mu.Lock()
		defer mu.Unlock()
		if batches[at] == nil {
			batches[at] = sourceBatch(at, 3)
		}
		return batches[at]
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			mu.Lock()
			from := written
			mu.Unlock()
			res := w.Write(ctx, mt, 0, batchAt(from), from, false, nil)
			if res.Code != 0 {
				continue // refused once closing: the loop ends at stop
			}
			mu.Lock()
			written += 3
			mu.Unlock()
		}
	}()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		n := written
		mu.Unlock()
		if n >= 30 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d offsets written in 20s", n)
		}
	}
	closed := make(chan struct{})
	go func() { w.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("Close did not return in 20s while a partition was being written")
	}
	close(stop)
	wg.Wait()

	mu.Lock()
	from := written
	mu.Unlock()
	done := make(chan Result, 1)
	go func() { done <- w.Write(ctx, mt, 0, batchAt(from), from, false, nil) }()
	select {
	case res := <-done:
		if res.Code != ErrRetriable {
			t.Fatalf("a write after Close: code %d %q at %d, want refused (retriable)", res.Code, res.Msg, res.BaseOffset)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a write after Close was not answered in 10s")
	}
	// What the writer acknowledged is on the destination, and nothing after Close was added
	// to it: another writer (the lease is the default's, so the same instance) goes on from
	// the mirrored end.
	w2 := New(Config{Instance: "a", SnapshotEvery: 2}, cl, ledger.New(cl), zap.NewNop(), nil)
	defer w2.Close()
	if res := w2.Write(ctx, mt, 0, batchAt(from), from, false, nil); res.Code != 0 || res.BaseOffset != from {
		t.Fatalf("the next writer from offset %d: code %d %q at %d", from, res.Code, res.Msg, res.BaseOffset)
	}
}

// plainDial opens the writer's own connections to a kfake broker (no TLS, no SASL), for the
// pipelined writes of Config.Dial.
func plainDial(ctx context.Context, addr string) (*wire.Conn, error) {
	return wire.Dial(ctx, addr, nil, nil, "atoffset-test")
}
