package rawread

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ListOffsets timestamps: the log start and the high watermark.
const (
	Earliest int64 = -2
	Latest   int64 = -1
)

// ListOffset asks a partition's leader for one offset (Earliest: the log start; Latest: the
// high watermark; else the first offset at or after a timestamp).
func ListOffset(ctx context.Context, cl *kgo.Client, topic string, partition int32, timestamp int64) (int64, error) {
	what := "end offset"
	if timestamp == Earliest {
		what = "log start"
	}
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = partition, timestamp, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	for _, sh := range cl.RequestSharded(ctx, req) {
		if sh.Err != nil {
			return 0, fmt.Errorf("%s of %s[%d]: %w", what, topic, partition, sh.Err)
		}
		for _, t := range sh.Resp.(*kmsg.ListOffsetsResponse).Topics {
			for _, p := range t.Partitions {
				if p.Partition == partition {
					if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
						return 0, fmt.Errorf("%s of %s[%d]: %w", what, topic, partition, err)
					}
					return p.Offset, nil
				}
			}
		}
	}
	return 0, fmt.Errorf("%s of %s[%d]: no answer", what, topic, partition)
}
