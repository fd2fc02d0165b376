package mirror

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// GroupCopy is what one pass of copying group offsets did.
type GroupCopy struct {
	Group     string
	Copied    int // partitions whose offset moved on the destination
	Skipped   string
	Partition map[string]map[int32]int64 // offsets committed on the destination this pass
}

// CopyGroups copies the committed offsets of source consumer groups matching re, for the
// given mirror topics, to the destination through offsetgate. A group's offset is never copied
// beyond the partition's mirrored end, never moves a group backwards on the destination, and a
// group with active members on the destination is left alone (a group cannot straddle two
// clusters: it is stopped on the source, its offsets copied, then started against offsetgate).
// Leader epochs and metadata are copied with the offsets.
func CopyGroups(ctx context.Context, src, px *kgo.Client, re *regexp.Regexp, topics []string) ([]GroupCopy, error) {
	sadm, padm := kadm.NewClient(src), kadm.NewClient(px)
	listed, err := sadm.ListGroups(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing source groups: %w", err)
	}
	ends, err := padm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("mirrored ends through offsetgate: %w", err)
	}
	want := map[string]bool{}
	for _, t := range topics {
		want[t] = true
	}
	var out []GroupCopy
	for _, g := range listed.Groups() {
		if !re.MatchString(g) {
			continue
		}
		gc := GroupCopy{Group: g, Partition: map[string]map[int32]int64{}}
		dd, err := padm.DescribeGroups(ctx, g)
		if err != nil {
			return out, fmt.Errorf("describing group %s through offsetgate: %w", g, err)
		}
		if d, ok := dd[g]; ok && len(d.Members) > 0 {
			gc.Skipped = fmt.Sprintf("%d active members on the destination", len(d.Members))
			out = append(out, gc)
			continue
		}
		so, err := sadm.FetchOffsets(ctx, g)
		if err != nil {
			return out, fmt.Errorf("offsets of group %s on the source: %w", g, err)
		}
		do, err := fetchOffsetsOf(ctx, px, g, ends)
		if errors.Is(err, kerr.GroupIDNotFound) {
			// Some brokers answer so for a group that never committed there: nothing yet.
			do, err = kadm.OffsetResponses{}, nil
		}
		if err != nil {
			return out, fmt.Errorf("offsets of group %s through offsetgate: %w", g, err)
		}
		commit := kadm.Offsets{}
		so.Each(func(o kadm.OffsetResponse) {
			if o.Err != nil || !want[o.Topic] || o.At < 0 {
				return
			}
			end, ok := ends.Lookup(o.Topic, o.Partition)
			if !ok || end.Err != nil {
				return
			}
			at := o.At
			epoch := o.LeaderEpoch
			if at > end.Offset {
				at, epoch = end.Offset, -1 // never beyond what is mirrored
			}
			if cur, ok := do.Lookup(o.Topic, o.Partition); ok && cur.Err == nil && cur.At >= at {
				return // never backwards
			}
			commit.Add(kadm.Offset{Topic: o.Topic, Partition: o.Partition, At: at, LeaderEpoch: epoch, Metadata: o.Metadata})
		})
		if len(commit) > 0 {
			resp, err := padm.CommitOffsets(ctx, g, commit)
			if err != nil {
				return out, fmt.Errorf("committing group %s through offsetgate: %w", g, err)
			}
			if err := resp.Error(); err != nil {
				return out, fmt.Errorf("committing group %s through offsetgate: %w", g, err)
			}
			commit.Each(func(o kadm.Offset) {
				if gc.Partition[o.Topic] == nil {
					gc.Partition[o.Topic] = map[int32]int64{}
				}
				gc.Partition[o.Topic][o.Partition] = o.At
				gc.Copied++
			})
		}
		out = append(out, gc)
	}
	return out, nil
}

// fetchOffsetsOf reads a group's committed offsets for the partitions of parts only (the
// mirrored topics). Asking for every topic of the group (kadm's FetchOffsets) would make
// offsetgate read the source view of every mirror topic on the destination before it
// answers, since any of them may be in the answer: with many mirror topics, longer than a
// client waits for an answer.
func fetchOffsetsOf(ctx context.Context, cl *kgo.Client, group string, parts kadm.ListedOffsets) (kadm.OffsetResponses, error) {
	rg := kmsg.NewOffsetFetchRequestGroup()
	rg.Group = group
	for t, ps := range parts {
		gt := kmsg.NewOffsetFetchRequestGroupTopic()
		gt.Topic = t // the client fills in the topic id for v10, and the names in the answer
		for p := range ps {
			gt.Partitions = append(gt.Partitions, p)
		}
		rg.Topics = append(rg.Topics, gt)
	}
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Groups = append(req.Groups, rg)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, err
	}
	out := kadm.OffsetResponses{}
	for _, g := range resp.Groups {
		if err := kerr.ErrorForCode(g.ErrorCode); err != nil {
			return nil, err
		}
		for _, t := range g.Topics {
			for _, p := range t.Partitions {
				if out[t.Topic] == nil {
					out[t.Topic] = map[int32]kadm.OffsetResponse{}
				}
				out[t.Topic][p.Partition] = kadm.OffsetResponse{
					Offset: kadm.Offset{Topic: t.Topic, Partition: p.Partition, At: p.Offset, LeaderEpoch: p.LeaderEpoch},
					Err:    kerr.ErrorForCode(p.ErrorCode),
				}
			}
		}
	}
	return out, nil
}
