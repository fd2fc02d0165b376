package catalog

// Live moves of consumer groups from the source to the destination (docs/operations.md, "Moving
// a group live"). A move's state is a record of the marks topic keyed "group:<name>", so every
// instance follows it as it follows the marks; instances of an older version skip such keys.

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
)

// MoveKeyPrefix starts the key of a group move's record in the marks topic; every other key is
// a topic id (readers of the marks topic skip what they do not know).
const MoveKeyPrefix = "group:"

const movePrefix = MoveKeyPrefix

// MoveState is where a group's move is.
type MoveState string

const (
	// MoveDraining: the group's members on the source are made to give up their partitions
	// (Heartbeat answered REBALANCE_IN_PROGRESS, the leader's assignments emptied) and commit.
	MoveDraining MoveState = "draining"
	// MoveFinal: the source's commits are final (refused from now on) and are copied to the
	// destination once the mirror has reached them.
	MoveFinal MoveState = "final"
	// MoveMoved: the group's coordinator is the destination's.
	MoveMoved MoveState = "moved"
	// MoveFailed: the move stopped before the final state (the reason says why); the group
	// stays on the source and its members rejoin there.
	MoveFailed MoveState = "failed"
	// MoveReturning: a moved group goes back to the source (before promotion): its members on
	// the destination are made to give up their partitions and commit, as in MoveDraining.
	MoveReturning MoveState = "returning"
	// MoveReturnFinal: the destination's commits are final and are copied to the source.
	MoveReturnFinal MoveState = "returning-final"
	// MoveReturned: the group is the source's again.
	MoveReturned MoveState = "returned"
)

// Move is one group's move.
type Move struct {
	Group  string    `json:"group"`
	State  MoveState `json:"state"`
	Since  time.Time `json:"since"`
	Reason string    `json:"reason,omitempty"`
}

// Moving reports whether the group's requests on the source are no longer the source's alone.
func (m Move) Moving() bool {
	switch m.State {
	case MoveDraining, MoveFinal, MoveMoved, MoveReturning, MoveReturnFinal:
		return true
	}
	return false
}

func (c *Catalog) applyMove(r *kgo.Record) {
	group := string(r.Key[len(movePrefix):])
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.Value == nil {
		delete(c.moves, group)
	} else {
		var m Move
		if err := json.Unmarshal(r.Value, &m); err != nil || m.Group != group {
			// Fail closed: a move that cannot be read keeps the group off the source's
			// coordinator (final: commits refused, no coordinator) until an operator writes
			// it again.
			c.log.Error("unreadable group move: holding the group", zap.String("group", group), zap.Error(err))
			m = Move{Group: group, State: MoveFinal, Reason: "unreadable move record"}
		}
		c.moves[group] = &m
	}
	c.anyMoves.Store(len(c.moves) > 0)
}

// HasMoves reports, without a lock, whether any group has a move.
func (c *Catalog) HasMoves() bool { return c.anyMoves.Load() }

// Move returns a group's move.
func (c *Catalog) Move(group string) (Move, bool) {
	if !c.anyMoves.Load() {
		return Move{}, false
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	m, ok := c.moves[group]
	if !ok {
		return Move{}, false
	}
	return *m, true
}

// Moves lists every group's move, by group.
func (c *Catalog) Moves() []Move {
	c.mu.RLock()
	out := make([]Move, 0, len(c.moves))
	for _, m := range c.moves {
		out = append(out, *m)
	}
	c.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Group < out[j].Group })
	return out
}

// StoreMove writes a group's move durably and applies it here at once.
func (c *Catalog) StoreMove(ctx context.Context, m Move) error {
	if m.Since.IsZero() {
		m.Since = time.Now().UTC()
	}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	r := &kgo.Record{Topic: MarksTopic, Key: []byte(movePrefix + m.Group), Value: b}
	if err := c.cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		return fmt.Errorf("catalog: storing the move of group %s: %w", m.Group, err)
	}
	c.applyMove(r)
	return nil
}

// StoreMoveWith writes a group's move with the given client (the cutover command, which is not
// an offsetgate instance).
func StoreMoveWith(ctx context.Context, cl *kgo.Client, m Move) error {
	if m.Since.IsZero() {
		m.Since = time.Now().UTC()
	}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: MarksTopic, Key: []byte(movePrefix + m.Group), Value: b}).FirstErr(); err != nil {
		return fmt.Errorf("storing the move of group %s in %s: %w", m.Group, MarksTopic, err)
	}
	return nil
}
