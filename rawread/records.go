package rawread

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/batch"
)

var decompressor = kgo.DefaultDecompressor()

// Records reads a partition's records from offset from up to its high watermark at the time
// of the call, and returns them with the offset to read from next time (Each, collected).
func Records(ctx context.Context, cl *kgo.Client, topic string, partition int32, from int64) ([]*kgo.Record, int64, error) {
	var out []*kgo.Record
	next, err := Each(ctx, cl, topic, partition, from, -1, func(r *kgo.Record) error {
		out = append(out, r)
		return nil
	})
	if err != nil {
		return nil, from, err
	}
	return out, next, nil
}

// Each hands a partition's records from offset from up to offset to (exclusive; -1: the high
// watermark at the time of the call) to fn, in order, one fetch's worth at a time, so a reader
// of a long partition holds one fetch in memory, not the partition. It returns the offset to
// read from next time. It fetches raw batches from the leader with the caller's client, so a
// reader that follows a partition's tail costs one small request, not a consumer client of its
// own. Transient errors (no leader yet, a topic created a moment ago) are retried for about six
// seconds; an error of fn stops the read and is returned as it is.
func Each(ctx context.Context, cl *kgo.Client, topic string, partition int32, from, to int64, fn func(*kgo.Record) error) (int64, error) {
	return EachWith(ctx, cl, nil, topic, partition, from, to, fn)
}

// EachWith is Each for a reader that reads the same partition often (a source view reading
// pages back): hint, when it names a leader, is used instead of asking the cluster first, and
// is set to what the read found; a read that fails with it asks the cluster as Each does.
func EachWith(ctx context.Context, cl *kgo.Client, hint *Partition, topic string, partition int32, from, to int64, fn func(*kgo.Record) error) (int64, error) {
	return eachWith(ctx, cl, func(ctx context.Context) (Partition, error) { return Lookup(ctx, cl, topic, partition) }, hint, topic, partition, from, to, false, fn)
}

// ErrGone is the error of an exact read (Meta.EachExact) that met offsets the log no longer
// holds: retention or a trim moved its start past them.
var ErrGone = errors.New("offsets gone from the log (its start moved past them)")

// eachWith is EachWith with the lookup of the partition's leader given (a Meta's, or Lookup).
// exact: offsets the log no longer holds are ErrGone, not skipped.
func eachWith(ctx context.Context, cl *kgo.Client, lookup func(context.Context) (Partition, error), hint *Partition, topic string, partition int32, from, to int64, exact bool, fn func(*kgo.Record) error) (int64, error) {
	var last error
	done := func(hwm int64) bool { return from >= hwm || (to >= 0 && from >= to) }
	// A short range is read in small fetches: every batch a fetch returns is decompressed
	// and decoded whole, and the caller wants a few records (the broker still returns at
	// least one whole batch).
	// A long read goes 1 MiB at a time: what a fetch returns is decompressed whole, and a
	// well-compressed topic (a ledger) can be tens of times that once decompressed.
	maxBytes := int32(1 << 20)
	if to >= 0 {
		// About 64 bytes per record asked for: ledger entries compress to a few dozen bytes.
		maxBytes = int32(min(1<<20, max(16<<10, (to-from)*64)))
	}
	for attempt := 0; attempt < 60; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return from, fmt.Errorf("reading %s[%d]: %w", topic, partition, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
		var lp Partition
		var err error
		if attempt == 0 && hint != nil && hint.Leader >= 0 && hint.TopicID != ([16]byte{}) {
			lp = *hint
		} else if lp, err = lookup(ctx); err != nil {
			last = err
			continue
		}
		if hint != nil {
			*hint = lp
		}
		if lp.Leader < 0 {
			last = fmt.Errorf("no leader for %s[%d]", topic, partition)
			continue
		}
		for {
			req := kmsg.NewPtrFetchRequest()
			req.ReplicaID, req.MaxWaitMillis, req.MinBytes, req.MaxBytes = -1, 0, 1, maxBytes
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic, rt.TopicID = topic, lp.TopicID
			rp := kmsg.NewFetchRequestTopicPartition()
			rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch, rp.LogStartOffset = partition, from, maxBytes, -1, -1
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
			kr, err := cl.Broker(int(lp.Leader)).Request(ctx, req)
			if err != nil {
				last = err
				break
			}
			resp := kr.(*kmsg.FetchResponse)
			if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
				last = errors.New("malformed fetch response")
				break
			}
			p := &resp.Topics[0].Partitions[0]
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				last = err
				var ke *kerr.Error
				if errors.As(err, &ke) && !ke.Retriable && !errors.Is(err, kerr.OffsetOutOfRange) {
					// A refusal (an identity not allowed to read the topic) stays one.
					return from, fmt.Errorf("reading %s[%d]: %w", topic, partition, err)
				}
				if errors.Is(err, kerr.OffsetOutOfRange) {
					// Retention or a trim removed the start: read what is left (the broker
					// does not say where its log starts in this answer).
					start, lerr := ListOffset(ctx, cl, topic, partition, Earliest)
					switch {
					case lerr != nil:
						last = lerr
					case from < start && exact:
						return from, fmt.Errorf("reading %s[%d] from %d: %w (it starts at %d)", topic, partition, from, ErrGone, start)
					case from < start && (to < 0 || start < to):
						from = start
						continue
					case from < start:
						return to, nil // all of [from, to) is gone
					}
				}
				break
			}
			if done(p.HighWatermark) {
				return from, nil
			}
			fp, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Offset: from, Topic: topic, Partition: partition,
				IsolationLevel: kgo.ReadUncommitted()}, p, decompressor, nil)
			if fp.Err != nil {
				last = fp.Err
				break
			}
			for _, r := range fp.Records {
				if to >= 0 && r.Offset >= to {
					return to, nil
				}
				if err := fn(r); err != nil {
					return from, err
				}
				from = r.Offset + 1
			}
			// Batches with no record to hand out (control batches, or records compacted away)
			// still move the reader past them.
			if ws := WholeBatches(p.RecordBatches); len(ws) > 0 {
				if h, err := batch.ReadHeader(ws[len(ws)-1]); err == nil {
					from = max(from, h.LastOffset()+1)
				}
			}
			if done(p.HighWatermark) {
				return from, nil
			}
			if len(fp.Records) == 0 {
				last = fmt.Errorf("no progress at offset %d (high watermark %d)", from, p.HighWatermark)
				break
			}
		}
	}
	return from, fmt.Errorf("reading %s[%d]: %w", topic, partition, last)
}
