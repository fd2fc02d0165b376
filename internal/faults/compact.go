package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// produceCompact writes keyed records to the compacted topic at about rate records a second,
// from 128 keys (one in 16 a tombstone), so the source's cleaner has most of every segment to
// remove, until ctx ends. It writes nothing while paused.
func (e *env) produceCompact(ctx context.Context, w *written, rate int, seed uint64, paused *atomic.Bool) error {
	cl, err := e.src.Client(kgo.DefaultProduceTopic(e.compactTopic), kgo.ProducerLinger(5*time.Millisecond),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()), kgo.MaxBufferedRecords(20000))
	if err != nil {
		return err
	}
	defer cl.Close()
	rng := rand.New(rand.NewPCG(seed, 0xc0ac7))
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	perTick := max(rate/50, 1)
	for seq := 0; ; {
		select {
		case <-ctx.Done():
			cl.Flush(context.Background())
			return nil
		case <-tick.C:
		}
		if paused.Load() {
			continue
		}
		for i := 0; i < perTick; i++ {
			r := &kgo.Record{Key: []byte(fmt.Sprintf("c%d", rng.IntN(128)))}
			if rng.IntN(16) != 0 {
				r.Value = []byte(fmt.Sprintf("c%d-%x", seq, rng.Uint64()))
			}
			seq++
			cl.Produce(ctx, r, func(r *kgo.Record, err error) {
				if err != nil {
					if ctx.Err() == nil {
						w.failed.Add(1)
					}
					return
				}
				w.produced.Add(1)
				w.add(r.Partition, r.Offset, recordHash(r.Key, r.Value))
			})
		}
	}
}

// readCompact reads the compacted topic through offsetgate from the start, keeping its own
// positions: offsets only go forward (the source's cleaner leaves gaps, which are skipped),
// and every record read is the one written at its offset.
func (e *env) readCompact(ctx context.Context, w *written, t *tally) error {
	// The client's own log, for a failure's story (epoch validations, resets).
	lf, err := os.OpenFile(filepath.Join(e.dir, "compact-consumer.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer lf.Close()
	logw := lockedWriter{mu: &sync.Mutex{}, w: lf}
	cl, err := e.fromStart(2, e.compactTopic, kgo.ClientID("faults-compact-reader"),
		kgo.WithLogger(kgo.BasicLogger(logw, kgo.LogLevelInfo, func() string { return time.Now().Format("15:04:05.000 ") })))
	if err != nil {
		return err
	}
	defer cl.Close()
	poll(ctx, cl, t, func(r *kgo.Record) {
		next := t.next[r.Partition]
		if r.Offset < next {
			t.violate("%s: %s[%d]: offset %d read again (next was %d)", t.name, r.Topic, r.Partition, r.Offset, next)
		}
		t.check(w, r)
		t.next[r.Partition] = max(next, r.Offset+1)
		t.records++
	})
	return nil
}

// compactedAway reads the compacted topic on the source from its start to its end and returns
// how many records it still holds and how many offsets it spans: the cleaner's work, which a
// campaign that claims to test compaction must show.
func (e *env) compactedAway(ctx context.Context) (left, spanned int64, err error) {
	starts, err := e.srcAdm.ListStartOffsets(ctx, e.compactTopic)
	if err != nil {
		return 0, 0, err
	}
	ends, err := e.srcAdm.ListEndOffsets(ctx, e.compactTopic)
	if err != nil {
		return 0, 0, err
	}
	parts := map[int32]kgo.Offset{}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		s, _ := starts.Lookup(e.compactTopic, o.Partition)
		spanned += o.Offset - s.Offset
		if o.Offset > s.Offset {
			parts[o.Partition] = kgo.NewOffset().At(s.Offset)
			want[o.Partition] = o.Offset
		}
	})
	if len(want) == 0 {
		return 0, spanned, nil
	}
	cl, err := e.src.Client(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{e.compactTopic: parts}))
	if err != nil {
		return 0, 0, err
	}
	defer cl.Close()
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return 0, 0, err
		}
		fs.EachRecord(func(r *kgo.Record) {
			left++
			if end, ok := want[r.Partition]; ok && r.Offset+1 >= end {
				delete(want, r.Partition)
			}
		})
	}
	return left, spanned, nil
}
