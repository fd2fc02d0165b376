package atoffset

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"offsetgate/catalog"
	"offsetgate/ledger"
)

// A snapshot is stored in the background: while the snapshot topic's creation is held (it
// took up to two seconds on a loaded destination, and every write of the partition waited),
// the write that made the snapshot due and the partition's next writes are answered; once it
// is let go, the snapshot is stored, the ledger trim hears of it, and a takeover by another
// writer starts from it.
func TestSnapshotOffTheWritePath(t *testing.T) {
	c, cl, ctx, tid := kfakeTopic(t)
	const topic = kfakeTopicName
	snapTopic := ledger.SnapshotTopic(catalog.IDString(tid))
	release := make(chan struct{})
	var held atomic.Bool
	c.ControlKey(int16(kmsg.CreateTopics), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		for _, rt := range r.(*kmsg.CreateTopicsRequest).Topics {
			if rt.Topic == snapTopic && !held.Swap(true) {
				c.SleepControl(func() { <-release })
			}
		}
		return nil, nil, false
	})
	trimmed := make(chan int64, 16)
	const lease = 2 * time.Second
	w := New(Config{Instance: "a", Lease: lease, SnapshotEvery: 4,
		AfterSnapshot: func(_ context.Context, _ catalog.TopicID, _ string, _ int32, at int64) { trimmed <- at }},
		cl, ledger.New(cl), zap.NewNop(), nil)
	defer w.Close()
	mt := catalog.Topic{Name: topic, ID: tid}
	write := func(i int) {
		t.Helper()
		done := make(chan Result, 1)
		go func() { done <- w.Write(ctx, mt, 0, sourceBatch(int64(i*3), 3), -1, false, nil) }()
		select {
		case res := <-done:
			if res.Code != 0 || res.BaseOffset != int64(i*3) {
				t.Fatalf("write %d: code %d %q at %d", i, res.Code, res.Msg, res.BaseOffset)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("write %d not answered in 10s while the snapshot topic's creation is held: the snapshot is on the write path", i)
		}
	}
	i := 0
	for ; i < 5; i++ {
		write(i)
	}
	for deadline := time.Now().Add(10 * time.Second); !held.Load(); {
		if time.Now().After(deadline) {
			t.Fatal("no snapshot was taken after 5 writes with a snapshot due every 4 ledger entries")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for ; i < 12; i++ {
		write(i) // a snapshot is due again meanwhile: it waits for the one being stored
	}
	select {
	case at := <-trimmed:
		t.Fatalf("the ledger trim heard of a snapshot at %d while the snapshot topic was not created yet", at)
	default:
	}
	close(release)
	var at int64
	select {
	case at = <-trimmed:
	case <-time.After(20 * time.Second):
		t.Fatal("the snapshot was not stored once the snapshot topic's creation was let go")
	}
	b, err := ledger.New(cl).LastSnapshot(ctx, catalog.IDString(tid), 0)
	if err != nil || b == nil {
		t.Fatalf("the newest snapshot: %v (%d bytes)", err, len(b))
	}
	if _, got, err := DecodeSnapshot(b); err != nil || got != at || at < 4 {
		t.Fatalf("the stored snapshot covers the ledger before %d (%v), the trim heard %d", got, err, at)
	}

	// Another writer, once a's lease ran out, takes over from the snapshot: the ledger below
	// it is trimmed, so a replay of the whole ledger would be refused.
	if err := ledger.New(cl).Trim(ctx, catalog.IDString(tid), 0, at); err != nil {
		t.Fatal(err)
	}
	w.Close()
	time.Sleep(lease + 100*time.Millisecond)
	w2 := New(Config{Instance: "b", Lease: lease, SnapshotEvery: 4}, cl, ledger.New(cl), zap.NewNop(), nil)
	defer w2.Close()
	if res := w2.Write(ctx, mt, 0, sourceBatch(int64(i*3), 3), -1, false, nil); res.Code != 0 || res.BaseOffset != int64(i*3) {
		t.Fatalf("b after a, from the snapshot: code %d %q at %d, want written at %d", res.Code, res.Msg, res.BaseOffset, i*3)
	}
}
