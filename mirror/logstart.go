package mirror

import (
	"context"
	"encoding/hex"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"offsetgate/rules"
)

// FollowLogStart moves each mirror partition's log start up to the source's (retention or
// DeleteRecords on the source), with DeleteRecords through offsetgate in source offsets, never
// beyond what is mirrored. holds, when not nil, says which partitions of the topics are this
// process's to follow (a mirror group's member follows its own). It returns the partitions it
// moved.
func FollowLogStart(ctx context.Context, src, px *kgo.Client, topics []string, holds func(topic string, partition int32) bool) (map[string]map[int32]int64, error) {
	sadm, padm := kadm.NewClient(src), kadm.NewClient(px)
	topics, err := sameSource(ctx, sadm, padm, topics)
	if err != nil {
		return nil, err
	}
	if len(topics) == 0 {
		return map[string]map[int32]int64{}, nil
	}
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
		if o.Err != nil || (holds != nil && !holds(o.Topic, o.Partition)) {
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

// sameSource keeps the topics whose source topic is still the one the mirror was made from
// (its id, kept with the mark): a source deleted and recreated under the same name must not
// move anything on the mirror.
func sameSource(ctx context.Context, sadm, padm *kadm.Client, topics []string) ([]string, error) {
	md, err := sadm.Metadata(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("source metadata: %w", err)
	}
	rc, err := padm.DescribeTopicConfigs(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("mirror topic configs: %w", err)
	}
	recorded := map[string]string{}
	for _, r := range rc {
		for _, c := range r.Configs {
			if c.Key == rules.SourcePrefix+"topic.id" && c.Value != nil {
				recorded[r.Name] = *c.Value
			}
		}
	}
	var out []string
	for _, t := range topics {
		st, ok := md.Topics[t]
		if !ok || st.Err != nil {
			continue
		}
		if id, ok := recorded[t]; ok && id != hex.EncodeToString(st.ID[:]) {
			continue
		}
		out = append(out, t)
	}
	return out, nil
}
