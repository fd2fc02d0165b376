package mirror

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

// ErrSourceBackwards stops a partition whose source went backwards: truncated below the
// mirrored end, or deleted and recreated. Mirroring on would not be exact.
var ErrSourceBackwards = errors.New("the source went backwards")

// Reader fetches one source partition's raw batches from its leader, remembering the topic
// id and leader between fetches, and notices when the source went backwards.
type Reader struct {
	src    *kgo.Client
	topic  string
	part   int32
	id     [16]byte
	leader int32
	known  bool // id and leader were learned
}

// NewReader makes a reader of one partition.
func NewReader(src *kgo.Client, topic string, part int32) *Reader {
	return &Reader{src: src, topic: topic, part: part}
}

// fetchWait is how long a fetch waits on the leader for data to arrive.
const fetchWait = 500 * time.Millisecond

func (r *Reader) refresh(ctx context.Context) error {
	// A raw request: kadm answers metadata from the client's cache, which would keep showing a
	// deleted topic's old id for a while.
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(r.topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, r.src)
	if err != nil {
		return err
	}
	if len(resp.Topics) != 1 {
		return fmt.Errorf("source metadata of %s: %d topics answered", r.topic, len(resp.Topics))
	}
	t := resp.Topics[0]
	if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
		if errors.Is(err, kerr.UnknownTopicOrPartition) && r.known {
			return fmt.Errorf("%w: source topic %s was deleted", ErrSourceBackwards, r.topic)
		}
		return fmt.Errorf("source topic %s: %w", r.topic, err)
	}
	if r.known && t.TopicID != r.id {
		return fmt.Errorf("%w: source topic %s was deleted and recreated (topic id changed)", ErrSourceBackwards, r.topic)
	}
	for _, p := range t.Partitions {
		if p.Partition == r.part {
			r.id, r.leader, r.known = t.TopicID, p.Leader, true
			return nil
		}
	}
	return fmt.Errorf("source partition %s[%d] does not exist", r.topic, r.part)
}

// Fetch returns the whole batches at offset (a trailing partial batch left out; one batch
// larger than maxBytes asked for again whole) and the partition's high watermark. Transient
// errors are retried; a source that went backwards is an ErrSourceBackwards.
func (r *Reader) Fetch(ctx context.Context, offset int64, maxBytes int32) ([][]byte, int64, error) {
	var last error
	for attempt := 0; attempt < 20; attempt++ {
		if attempt > 0 || !r.known {
			if attempt > 0 {
				select {
				case <-ctx.Done():
					return nil, 0, ctx.Err()
				case <-time.After(time.Duration(min(attempt, 5)) * 100 * time.Millisecond):
				}
			}
			if err := r.refresh(ctx); err != nil {
				if errors.Is(err, ErrSourceBackwards) {
					return nil, 0, err
				}
				last = err
				continue
			}
		}
		req := kmsg.NewPtrFetchRequest()
		req.MaxWaitMillis, req.MinBytes, req.MaxBytes, req.ReplicaID = int32(fetchWait.Milliseconds()), 1, maxBytes, -1
		req.IsolationLevel = 0 // read_uncommitted: markers and open transactions are seen
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
				if err := r.outOfRange(ctx, offset); err != nil {
					return nil, 0, err
				}
			}
			last = fmt.Errorf("fetch from the source (broker %d) at %d: %w", r.leader, offset, err)
			continue
		}
		sets, _, err := batch.Split(p.RecordBatches)
		if errors.Is(err, batch.ErrTruncated) {
			sets, err = wholeBatches(p.RecordBatches), nil
		}
		if err != nil {
			return nil, 0, err
		}
		if len(sets) == 0 && len(p.RecordBatches) > 0 {
			// One batch larger than maxBytes: ask for it whole.
			if h, herr := batch.ReadHeader(p.RecordBatches); herr == nil && int32(h.Size()) > maxBytes {
				maxBytes = int32(h.Size())
				attempt--
				continue
			}
		}
		return sets, p.HighWatermark, nil
	}
	return nil, 0, last
}

// outOfRange tells a source that went backwards (its end is below offset) from a moment of
// leader change; it returns an error only for the former, or for records lost to retention.
func (r *Reader) outOfRange(ctx context.Context, offset int64) error {
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
		return fmt.Errorf("%w: source partition %s[%d] now ends at %d, below the mirrored end %d (truncated)", ErrSourceBackwards, r.topic, r.part, e.Offset, offset)
	case s.Err == nil && offset < s.Offset:
		return fmt.Errorf("the source's log start moved to %d, beyond the mirrored end %d: records were lost to retention before they were mirrored", s.Offset, offset)
	}
	return nil
}

func wholeBatches(b []byte) [][]byte {
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
