// Package moves advances the live moves of consumer groups from the source cluster to the
// destination (catalog.Move; what source connections do in each state is session/moves.go).
// Every offsetgate instance with a source runs a Driver: the steps are idempotent, so several
// drivers agree, and a move goes on when the instance that started it is gone.
//
//   - draining → final once the source's group holds no partition and every member has
//     rejoined since it last held one (each member's subscription owns nothing): the members'
//     commits for what they processed are on the source. An empty group is final at once.
//   - final → moved once the source's committed offsets are copied to the destination, in
//     destination offsets (the source view's CommitToDest), after the mirror has reached them.
//   - returning → returning-final → returned: the same back, before promotion: drained on the
//     destination, its commits copied to the source in source offsets (ToSource).
//
// A group that cannot move (not a consumer group, a KIP-848 group, a topic that is not
// mirrored) is failed with the reason, and its members go on with the source.
package moves

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"offsetgate/catalog"
	"offsetgate/view"
	"offsetgate/wire"
)

// Config is what a driver needs.
type Config struct {
	Catalog *catalog.Catalog
	View    *view.View
	// Source and Dest are offsetgate's own clients of the two clusters.
	Source, Dest *kgo.Client
	// Dial connects to a destination broker as offsetgate itself (its TLS and SASL), for the
	// carriers of moved groups' requests.
	Dial func(ctx context.Context, addr string) (*wire.Conn, error)
	// Metrics, when set, counts carried requests (RegisterMetrics).
	Metrics *Metrics
	// Interval is the time between two steps (default 250ms).
	Interval time.Duration
	Log      *zap.Logger
}

// Driver advances moves.
type Driver struct {
	cfg       Config
	src, dest *kadm.Client
	waiting   map[string]string // group -> what it waits for, logged when it changes
}

// New makes a driver; Run runs it.
func New(cfg Config) *Driver {
	if cfg.Interval <= 0 {
		cfg.Interval = 250 * time.Millisecond
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	return &Driver{cfg: cfg, src: kadm.NewClient(cfg.Source), dest: kadm.NewClient(cfg.Dest), waiting: map[string]string{}}
}

// Run steps every move in progress until ctx ends.
func (d *Driver) Run(ctx context.Context) {
	t := time.NewTicker(d.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !d.cfg.Catalog.HasMoves() {
			continue
		}
		for _, m := range d.cfg.Catalog.Moves() {
			var err error
			switch m.State {
			case catalog.MoveDraining:
				err = d.drain(ctx, m, d.src, "source", catalog.MoveFinal)
			case catalog.MoveFinal:
				err = d.copy(ctx, m)
			case catalog.MoveReturning:
				err = d.drain(ctx, m, d.dest, "destination", catalog.MoveReturnFinal)
			case catalog.MoveReturnFinal:
				err = d.copyBack(ctx, m)
			default:
				continue
			}
			var refused errRefused
			if errors.As(err, &refused) {
				d.cfg.Log.Error("group move failed", zap.String("group", m.Group), zap.Error(err))
				// A move that fails leaves the group where its members are: on the source,
				// or on the destination for a move back.
				failed := catalog.MoveFailed
				if m.State == catalog.MoveReturning || m.State == catalog.MoveReturnFinal {
					failed = catalog.MoveMoved
				}
				m.State, m.Reason, m.Since = failed, err.Error(), time.Time{}
				if err := d.cfg.Catalog.StoreMove(ctx, m); err != nil {
					d.cfg.Log.Warn("storing a failed move", zap.String("group", m.Group), zap.Error(err))
				}
				continue
			}
			if err != nil && ctx.Err() == nil {
				d.wait(m.Group, err.Error())
			}
		}
	}
}

// errRefused is a group that cannot move.
type errRefused struct{ error }

func refuse(format string, a ...any) error { return errRefused{fmt.Errorf(format, a...)} }

// wait logs what a move waits for, once per change.
func (d *Driver) wait(group, why string) {
	if d.waiting[group] == why {
		return
	}
	d.waiting[group] = why
	d.cfg.Log.Info("group move waiting", zap.String("group", group), zap.String("for", why))
}

// advance stores a move's next state.
func (d *Driver) advance(ctx context.Context, m catalog.Move, to catalog.MoveState) error {
	from := m.State
	m.State, m.Since, m.Reason = to, time.Time{}, ""
	if err := d.cfg.Catalog.StoreMove(ctx, m); err != nil {
		return err
	}
	delete(d.waiting, m.Group)
	d.cfg.Log.Info("group move", zap.String("group", m.Group), zap.String("from", string(from)), zap.String("to", string(to)))
	return nil
}

// drain checks whether the group on one cluster has let go of every partition, and then
// advances the move to next.
func (d *Driver) drain(ctx context.Context, m catalog.Move, cl *kadm.Client, cluster string, next catalog.MoveState) error {
	listed, err := cl.ListGroups(ctx)
	if err != nil {
		return fmt.Errorf("listing the %s's groups: %w", cluster, err)
	}
	if lg, ok := listed[m.Group]; ok && lg.GroupType == "consumer" {
		return refuse("group %s uses the consumer group protocol of KIP-848, which offsetgate does not move yet (classic groups only)", m.Group)
	}
	described, err := cl.DescribeGroups(ctx, m.Group)
	if err != nil {
		return fmt.Errorf("describing group %s on the %s: %w", m.Group, cluster, err)
	}
	g, ok := described[m.Group]
	if !ok || g.Err != nil {
		return fmt.Errorf("describing group %s on the %s: %v", m.Group, cluster, g.Err)
	}
	switch g.State {
	case "Empty", "Dead":
		return d.advance(ctx, m, next)
	case "Stable":
	default:
		return fmt.Errorf("the %s's group to settle (%s)", cluster, g.State)
	}
	if g.ProtocolType != "consumer" {
		return refuse("group %s has protocol type %q: only consumer groups move", m.Group, g.ProtocolType)
	}
	for _, mem := range g.Members {
		a, ok := mem.Assigned.AsConsumer()
		if !ok {
			return refuse("member %s of group %s has an assignment that is not a consumer's", mem.MemberID, m.Group)
		}
		if len(a.Topics) > 0 {
			return fmt.Errorf("member %s to give up its partitions", mem.MemberID)
		}
		j, ok := mem.Join.AsConsumer()
		if !ok {
			return refuse("member %s of group %s has a subscription that is not a consumer's", mem.MemberID, m.Group)
		}
		if len(j.OwnedPartitions) > 0 {
			return fmt.Errorf("member %s to rejoin without partitions", mem.MemberID)
		}
	}
	return d.advance(ctx, m, next)
}

// copy copies the source's final commits to the destination once the mirror has reached them.
func (d *Driver) copy(ctx context.Context, m catalog.Move) error {
	err := d.transfer(ctx, m.Group, d.src, d.dest, "source", "destination", "",
		func(o kadm.OffsetResponse, pv *view.Partition) (int64, error) {
			if pv.End() < o.At {
				pv.Stale() // read the ledger again next time: another instance may be writing it
				return 0, fmt.Errorf("the mirror of %s[%d] to reach %d (at %d)", o.Topic, o.Partition, o.At, pv.End())
			}
			return pv.CommitToDest(o.At), nil
		})
	if err != nil {
		return err
	}
	d.evict(ctx, d.cfg.Source, "source", m.Group)
	return d.advance(ctx, m, catalog.MoveMoved)
}

// copyBack copies the destination's final commits of a group going back to the source, in
// source offsets, and hands the group back.
func (d *Driver) copyBack(ctx context.Context, m catalog.Move) error {
	// A promoted topic (or one never mirrored): the source is no longer where it is written.
	err := d.transfer(ctx, m.Group, d.dest, d.src, "destination", "source", " (promoted?): it stays on the destination",
		func(o kadm.OffsetResponse, pv *view.Partition) (int64, error) { return pv.ToSource(o.At), nil })
	if err != nil {
		return err
	}
	d.evict(ctx, d.cfg.Dest, "destination", m.Group)
	return d.advance(ctx, m, catalog.MoveReturned)
}

// transfer commits a group's commits on one cluster to the other, each offset translated by
// its partition's source view (translate may ask to wait, with an error). A topic that is not
// a mirror topic on the destination refuses the move (notMirror ends the reason).
func (d *Driver) transfer(ctx context.Context, group string, from, to *kadm.Client, fromName, toName, notMirror string,
	translate func(kadm.OffsetResponse, *view.Partition) (int64, error)) error {
	committed, err := from.FetchOffsets(ctx, group)
	if err == nil {
		err = committed.Error()
	}
	if err != nil {
		return fmt.Errorf("the %s's commits of group %s: %w", fromName, group, err)
	}
	var names []string
	for topic := range committed {
		names = append(names, topic)
	}
	if err := d.cfg.Catalog.Refresh(ctx, names); err != nil {
		return fmt.Errorf("looking up the group's topics on the destination: %w", err)
	}
	out := kadm.Offsets{}
	var stop error
	committed.Each(func(o kadm.OffsetResponse) {
		if stop != nil || o.At < 0 {
			return
		}
		t, ok := d.cfg.Catalog.ByName(o.Topic)
		if !ok || t.Mark == nil {
			stop = refuse("group %s has offsets of %s, which is not a mirror topic on the destination%s", group, o.Topic, notMirror)
			return
		}
		pv, err := d.cfg.View.Load(ctx, t, o.Partition)
		if err != nil {
			stop = fmt.Errorf("the source view of %s[%d]: %w", o.Topic, o.Partition, err)
			return
		}
		at, err := translate(o, pv)
		if err != nil {
			stop = err
			return
		}
		out.Add(kadm.Offset{Topic: o.Topic, Partition: o.Partition, At: at, LeaderEpoch: -1, Metadata: o.Metadata})
	})
	if stop != nil || len(out) == 0 {
		return stop
	}
	resp, err := to.CommitOffsets(ctx, group, out)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return fmt.Errorf("committing group %s's offsets on the %s: %w", group, toName, err)
	}
	return nil
}

// evict removes the group's members from the cluster it leaves: they will never heartbeat
// there again, and a group that still lists them would wait for them (a rebalance timeout)
// when its members come back. A failure is logged: the cluster drops them at their session
// timeout anyway.
func (d *Driver) evict(ctx context.Context, cl *kgo.Client, cluster, group string) {
	described, err := kadm.NewClient(cl).DescribeGroups(ctx, group)
	g, ok := described[group]
	if err != nil || !ok || g.Err != nil || len(g.Members) == 0 {
		return
	}
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group = group
	for _, mem := range g.Members {
		id := kmsg.NewLeaveGroupRequestMember()
		id.MemberID, id.InstanceID = mem.MemberID, mem.InstanceID
		reason := "offsetgate: group " + group + " moved off this cluster"
		id.Reason = &reason
		req.Members = append(req.Members, id)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err == nil {
		err = kerrFor(resp.ErrorCode, nil)
	}
	if err != nil {
		d.cfg.Log.Warn("removing a moved group's members", zap.String("group", group), zap.String("cluster", cluster), zap.Error(err))
	}
}

// DestCoordinator finds a group's coordinator on the destination with offsetgate's own client.
func DestCoordinator(ctx context.Context, dest *kgo.Client, group string) (int32, string, int32, error) {
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.CoordinatorKey = group
	req.CoordinatorKeys = []string{group}
	resp, err := req.RequestWith(ctx, dest)
	if err != nil {
		return -1, "", -1, err
	}
	if len(resp.Coordinators) > 0 {
		c := resp.Coordinators[0]
		if err := kerrFor(c.ErrorCode, c.ErrorMessage); err != nil {
			return -1, "", -1, err
		}
		return c.NodeID, c.Host, c.Port, nil
	}
	if err := kerrFor(resp.ErrorCode, resp.ErrorMessage); err != nil {
		return -1, "", -1, err
	}
	return resp.NodeID, resp.Host, resp.Port, nil
}

func kerrFor(code int16, msg *string) error {
	if code == 0 {
		return nil
	}
	err := kerr.ErrorForCode(code)
	if msg != nil && *msg != "" {
		return fmt.Errorf("%w: %s", err, *msg)
	}
	return err
}
