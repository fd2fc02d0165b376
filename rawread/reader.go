// Package rawread reads one partition's raw record batches from its leader, with a client of
// its caller's (the source's, offsetgate's own, or one through offsetgate): the mirror, the
// prover, the ledger and status all read this way. It also holds the one uncached leader lookup
// they share.
package rawread

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/batch"
)

// ErrWentBackwards is a partition that went backwards under a reader: truncated below the
// offset it reads, or its topic deleted and recreated. Reading on would not be exact.
var ErrWentBackwards = errors.New("the source went backwards")

// Reader fetches one partition's raw batches from its leader, remembering the topic id and
// leader between fetches, and notices when the partition went backwards.
type Reader struct {
	src    *kgo.Client
	topic  string
	part   int32
	id     [16]byte
	leader int32
	known  bool // id and leader were learned
}

// New makes a reader of one partition.
func New(src *kgo.Client, topic string, part int32) *Reader {
	return &Reader{src: src, topic: topic, part: part}
}

// FetchWait is how long a fetch waits on the leader for data to arrive.
const FetchWait = 500 * time.Millisecond

func (r *Reader) refresh(ctx context.Context) error {
	// Uncached: kadm answers metadata from the client's cache, which would keep showing a
	// deleted topic's old id for a while.
	lp, err := Lookup(ctx, r.src, r.topic, r.part)
	if err != nil {
		if errors.Is(err, kerr.UnknownTopicOrPartition) && r.known {
			return fmt.Errorf("%w: source topic %s was deleted", ErrWentBackwards, r.topic)
		}
		return err
	}
	if r.known && lp.TopicID != r.id {
		return fmt.Errorf("%w: source topic %s was deleted and recreated (topic id changed)", ErrWentBackwards, r.topic)
	}
	r.id, r.leader, r.known = lp.TopicID, lp.Leader, true
	return nil
}

// Fetch returns the whole batches at offset (a trailing partial batch left out; one batch
// larger than maxBytes asked for again whole) and the partition's high watermark. Transient
// errors are retried; a source that went backwards is an ErrWentBackwards.
func (r *Reader) Fetch(ctx context.Context, offset int64, maxBytes int32) ([][]byte, int64, error) {
	sets, p, err := r.fetch(ctx, offset, maxBytes, 0)
	return sets, p.HighWatermark, err
}

// Committed is what a read_committed fetch says besides its batches.
type Committed struct {
	HighWatermark, LastStable int64
	Aborted                   []kmsg.FetchResponseTopicPartitionAbortedTransaction
}

// FetchCommitted is Fetch at read_committed: the batches up to the last stable offset, and the
// aborted transactions the answer names.
func (r *Reader) FetchCommitted(ctx context.Context, offset int64, maxBytes int32) ([][]byte, Committed, error) {
	sets, p, err := r.fetch(ctx, offset, maxBytes, 1)
	return sets, Committed{p.HighWatermark, p.LastStableOffset, p.AbortedTransactions}, err
}

func (r *Reader) fetch(ctx context.Context, offset int64, maxBytes int32, isolation int8) ([][]byte, kmsg.FetchResponseTopicPartition, error) {
	var none kmsg.FetchResponseTopicPartition
	var last error
	for attempt := 0; attempt < 20; attempt++ {
		if attempt > 0 || !r.known {
			if attempt > 0 {
				select {
				case <-ctx.Done():
					return nil, none, ctx.Err()
				case <-time.After(time.Duration(min(attempt, 5)) * 100 * time.Millisecond):
				}
			}
			if err := r.refresh(ctx); err != nil {
				if errors.Is(err, ErrWentBackwards) {
					return nil, none, err
				}
				last = err
				continue
			}
		}
		req := kmsg.NewPtrFetchRequest()
		req.MaxWaitMillis, req.MinBytes, req.MaxBytes, req.ReplicaID = int32(FetchWait.Milliseconds()), 1, maxBytes, -1
		req.IsolationLevel = isolation // 0, read_uncommitted: markers and open transactions are seen
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic, ft.TopicID = r.topic, r.id
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.Partition, fp.FetchOffset, fp.PartitionMaxBytes, fp.CurrentLeaderEpoch, fp.LogStartOffset = r.part, offset, maxBytes, -1, -1
		ft.Partitions = append(ft.Partitions, fp)
		req.Topics = append(req.Topics, ft)
		kr, err := r.src.Broker(int(r.leader)).Request(ctx, req)
		if err != nil {
			last = err
			continue
		}
		resp := kr.(*kmsg.FetchResponse)
		if resp.ErrorCode != 0 {
			last = kerr.ErrorForCode(resp.ErrorCode)
			continue
		}
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			last = errors.New("malformed fetch response")
			continue
		}
		p := resp.Topics[0].Partitions[0]
		if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
			if errors.Is(err, kerr.OffsetOutOfRange) {
				if err := r.OutOfRange(ctx, offset); err != nil {
					return nil, none, err
				}
			}
			last = fmt.Errorf("fetch from the source (broker %d) at %d: %w", r.leader, offset, err)
			continue
		}
		sets, _, err := batch.Split(p.RecordBatches)
		if errors.Is(err, batch.ErrTruncated) {
			sets, err = WholeBatches(p.RecordBatches), nil
		}
		if err != nil {
			return nil, none, err
		}
		if len(sets) == 0 && len(p.RecordBatches) > 0 {
			// One batch larger than maxBytes: ask for it whole.
			if h, herr := batch.ReadHeader(p.RecordBatches); herr == nil && int32(h.Size()) > maxBytes {
				maxBytes = int32(h.Size())
				attempt--
				continue
			}
		}
		return sets, p, nil
	}
	return nil, none, last
}

// OutOfRange tells a partition that went backwards (its end is below offset) from a moment of
// leader change; it returns an error only for the former, or for records lost to retention.
func (r *Reader) OutOfRange(ctx context.Context, offset int64) error {
	adm := kadm.NewClient(r.src)
	ends, err := adm.ListEndOffsets(ctx, r.topic)
	if err != nil {
		return nil
	}
	starts, err := adm.ListStartOffsets(ctx, r.topic)
	if err != nil {
		return nil
	}
	e, _ := ends.Lookup(r.topic, r.part)
	s, _ := starts.Lookup(r.topic, r.part)
	switch {
	case e.Err == nil && offset > e.Offset:
		return fmt.Errorf("%w: source partition %s[%d] now ends at %d, below the mirrored end %d (truncated)", ErrWentBackwards, r.topic, r.part, e.Offset, offset)
	case s.Err == nil && offset < s.Offset:
		return fmt.Errorf("the source's log start moved to %d, beyond the mirrored end %d: records were lost to retention before they were mirrored", s.Offset, offset)
	}
	return nil
}

// WholeBatches is the whole batches at the start of b (a fetch answer that ends in a partial
// batch).
func WholeBatches(b []byte) [][]byte {
	var out [][]byte
	for len(b) >= batch.HeaderLen {
		h, err := batch.ReadHeader(b)
		if err != nil || h.Size() > len(b) {
			break
		}
		out = append(out, b[:h.Size()])
		b = b[h.Size():]
	}
	return out
}
