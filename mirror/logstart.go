package mirror

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// FollowLogStart moves each mirror partition's log start up to the source's (retention or
// DeleteRecords on the source), with DeleteRecords through offsetgate in source offsets, never
// beyond what is mirrored. It returns the partitions it moved.
func FollowLogStart(ctx context.Context, src, px *kgo.Client, topics []string) (map[string]map[int32]int64, error) {
	sadm, padm := kadm.NewClient(src), kadm.NewClient(px)
	sstart, err := sadm.ListStartOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("source log starts: %w", err)
	}
	pstart, err := padm.ListStartOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("mirrored log starts: %w", err)
	}
	pend, err := padm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("mirrored ends: %w", err)
	}
	del := kadm.Offsets{}
	sstart.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			return
		}
		cur, ok1 := pstart.Lookup(o.Topic, o.Partition)
		end, ok2 := pend.Lookup(o.Topic, o.Partition)
		if !ok1 || !ok2 || cur.Err != nil || end.Err != nil {
			return
		}
		at := min(o.Offset, end.Offset)
		if at > cur.Offset {
			del.Add(kadm.Offset{Topic: o.Topic, Partition: o.Partition, At: at})
		}
	})
	moved := map[string]map[int32]int64{}
	if len(del) == 0 {
		return moved, nil
	}
	resp, err := padm.DeleteRecords(ctx, del)
	if err != nil {
		return nil, fmt.Errorf("moving mirrored log starts: %w", err)
	}
	var firstErr error
	resp.Each(func(r kadm.DeleteRecordsResponse) {
		if r.Err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("moving the log start of %s[%d]: %w", r.Topic, r.Partition, r.Err)
			}
			return
		}
		if moved[r.Topic] == nil {
			moved[r.Topic] = map[int32]int64{}
		}
		moved[r.Topic][r.Partition] = r.LowWatermark
	})
	return moved, firstErr
}
