package mirror

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

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
		var dd kadm.DescribedGroups
		err := coordinated(ctx, func() (err error) {
			dd, err = padm.DescribeGroups(ctx, g)
			if d, ok := dd[g]; err == nil && ok && d.Err != nil && coordinatorBusy(d.Err) {
				err = d.Err // a group unknown on the destination is no error: nothing to keep
			}
			return err
		})
		if err != nil {
			return out, fmt.Errorf("describing group %s through offsetgate: %w", g, err)
		}
		if d, ok := dd[g]; ok && len(d.Members) > 0 {
			gc.Skipped = fmt.Sprintf("active on the destination (members: %d)", len(d.Members))
			out = append(out, gc)
			continue
		}
		var so kadm.OffsetResponses
		err = coordinated(ctx, func() (err error) { so, err = sadm.FetchOffsets(ctx, g); return err })
		if err != nil {
			return out, fmt.Errorf("offsets of group %s on the source: %w", g, err)
		}
		var do kadm.OffsetResponses
		err = coordinated(ctx, func() (err error) { do, err = destOffsets(ctx, px, g, ends); return err })
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
			err := coordinated(ctx, func() error {
				resp, err := padm.CommitOffsets(ctx, g, commit)
				if err == nil {
					err = resp.Error()
				}
				return err
			})
			if err != nil {
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

// destOffsets is a group's committed offsets through offsetgate for the mirrored partitions
// only: an OffsetFetch of every topic of the group would have offsetgate load the source view
// of every mirror topic first (all of them may be in the answer), which on a destination with
// many mirror topics can outlast the request.
func destOffsets(ctx context.Context, px *kgo.Client, group string, parts kadm.ListedOffsets) (kadm.OffsetResponses, error) {
	byTopic := map[string][]int32{}
	parts.Each(func(o kadm.ListedOffset) { byTopic[o.Topic] = append(byTopic[o.Topic], o.Partition) })
	req := kmsg.NewPtrOffsetFetchRequest()
	rg := kmsg.NewOffsetFetchRequestGroup()
	rg.Group = group
	for t, ps := range byTopic {
		rt := kmsg.NewOffsetFetchRequestGroupTopic()
		rt.Topic, rt.Partitions = t, ps
		rg.Topics = append(rg.Topics, rt)
	}
	req.Groups = append(req.Groups, rg)
	resp, err := req.RequestWith(ctx, px)
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
				o := kadm.OffsetResponse{Offset: kadm.Offset{Topic: t.Topic, Partition: p.Partition, At: p.Offset, LeaderEpoch: p.LeaderEpoch},
					Err: kerr.ErrorForCode(p.ErrorCode)}
				if p.Metadata != nil {
					o.Metadata = *p.Metadata
				}
				out.Add(o)
			}
		}
	}
	return out, nil
}

// coordinatorWait bounds how long a group request waits for a coordinator: a destination that
// has never held a group creates __consumer_offsets at the first group request and answers
// COORDINATOR_NOT_AVAILABLE until it is ready, for a few seconds.
const coordinatorWait = 30 * time.Second

// coordinated runs a group request again while the coordinator is not ready (not available,
// loading, or moved), for up to coordinatorWait; any other error ends it at once.
func coordinated(ctx context.Context, do func() error) error {
	deadline := time.Now().Add(coordinatorWait)
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		err := do()
		if err == nil || !coordinatorBusy(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
}

// coordinatorBusy reports whether err is, or holds only, coordinator errors that pass.
func coordinatorBusy(err error) bool {
	busy := func(err error) bool {
		return errors.Is(err, kerr.CoordinatorNotAvailable) || errors.Is(err, kerr.CoordinatorLoadInProgress) || errors.Is(err, kerr.NotCoordinator)
	}
	var se *kadm.ShardErrors
	if errors.As(err, &se) && len(se.Errs) > 0 {
		for _, e := range se.Errs {
			if !busy(e.Err) {
				return false
			}
		}
		return true
	}
	return busy(err)
}
