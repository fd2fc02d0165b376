package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"offsetgate/internal/relay"
)

// kind is one kind of fault: inject does it, waits and undoes it, and says what it did.
type kind struct {
	name   string
	doc    string
	inject func(ctx context.Context, e *env, rng *rand.Rand) (string, error)
}

// between is a random duration in [lo, hi).
func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)))
}

// pick is a random index below n, drawing nothing from rng when there is one choice, so that
// a single-instance campaign's seeds replay as they did before there could be several.
func pick(rng *rand.Rand, n int) int {
	if n <= 1 {
		return 0
	}
	return rng.IntN(n)
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// kinds is every fault the campaign knows, in report order.
func kinds() []kind {
	return []kind{
		{"og-kill", "SIGKILL offsetgate (one instance), start it again after 0-2 s", func(ctx context.Context, e *env, rng *rand.Rand) (string, error) {
			og := e.ogs[pick(rng, len(e.ogs))]
			d := between(rng, 0, 2*time.Second)
			og.kill()
			if err := sleep(ctx, d); err != nil {
				return "", err
			}
			return fmt.Sprintf("%s killed, down %s", og.name, d.Round(time.Millisecond)), e.startOG(ctx, og)
		}},
		{"og-stop", "SIGSTOP offsetgate (one instance) for longer than the ownership lease, then SIGCONT", func(ctx context.Context, e *env, rng *rand.Rand) (string, error) {
			og := e.ogs[pick(rng, len(e.ogs))]
			d := e.cfg.Lease + between(rng, 500*time.Millisecond, 4*time.Second)
			og.pause()
			err := sleep(ctx, d)
			og.resume()
			return fmt.Sprintf("%s stopped for %s (lease %s)", og.name, d.Round(time.Millisecond), e.cfg.Lease), err
		}},
		{"mirror-kill", "SIGKILL the mirror (one process), start it again after 0-2 s", func(ctx context.Context, e *env, rng *rand.Rand) (string, error) {
			mr := e.mrs[pick(rng, len(e.mrs))]
			d := between(rng, 0, 2*time.Second)
			mr.kill()
			if err := sleep(ctx, d); err != nil {
				return "", err
			}
			return fmt.Sprintf("%s killed, down %s", mr.name, d.Round(time.Millisecond)), e.startMirror(ctx, mr)
		}},
		{"mirror-stop", "SIGSTOP the mirror (one process) for longer than the ownership lease, then SIGCONT", func(ctx context.Context, e *env, rng *rand.Rand) (string, error) {
			mr := e.mrs[pick(rng, len(e.mrs))]
			d := e.cfg.Lease + between(rng, 500*time.Millisecond, 4*time.Second)
			mr.pause()
			err := sleep(ctx, d)
			mr.resume()
			return fmt.Sprintf("%s stopped for %s (lease %s)", mr.name, d.Round(time.Millisecond), e.cfg.Lease), err
		}},
		{"dest-broker-restart", "stop a destination broker (controlled shutdown), start it again", func(ctx context.Context, e *env, rng *rand.Rand) (string, error) {
			d := between(rng, 0, 3*time.Second)
			// Node 2, the broker-only node: the controller stays up (the harness never moves
			// leaders by stopping it).
			e.dst.StopNode(2)
			if err := sleep(ctx, d); err != nil {
				return "", err
			}
			rctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
			defer cancel()
			return fmt.Sprintf("destination node 2 stopped, down %s", d.Round(time.Millisecond)), e.dst.RestartNode(rctx, 2)
		}},
		{"dest-broker-kill", "SIGKILL a destination broker, start it again", func(ctx context.Context, e *env, rng *rand.Rand) (string, error) {
			d := between(rng, 0, 3*time.Second)
			e.dst.Node(2).Kill()
			if err := sleep(ctx, d); err != nil {
				return "", err
			}
			rctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
			defer cancel()
			return fmt.Sprintf("destination node 2 killed, down %s", d.Round(time.Millisecond)), e.dst.RestartNode(rctx, 2)
		}},
		{"source-leader-move", "move a source partition's leader to its other replica", func(ctx context.Context, e *env, rng *rand.Rand) (string, error) {
			p := rng.Int32N(e.cfg.Partitions)
			return moveLeader(ctx, e, "source", e.topic, p)
		}},
		{"dest-leader-move", "move the leader of a mirror partition (or of its ledger partition) on the destination", func(ctx context.Context, e *env, rng *rand.Rand) (string, error) {
			p := rng.Int32N(e.cfg.Partitions)
			topic := e.topic
			if rng.IntN(3) == 0 {
				lt, err := e.ledgerTopic(ctx)
				if err != nil {
					return "", err
				}
				topic = lt
			}
			return moveLeader(ctx, e, "dest", topic, p)
		}},
		{"link-og-dest-cut", "cut every connection between offsetgate and the destination, and refuse new ones for 1-6 s", func(ctx context.Context, e *env, rng *rand.Rand) (string, error) {
			d := between(rng, time.Second, 6*time.Second)
			return fmt.Sprintf("offsetgate-destination link down for %s", d.Round(time.Millisecond)), linkDown(ctx, e.dstLinks, d)
		}},
		{"link-og-dest-stall", "stall every connection between offsetgate and the destination for 2-12 s", func(ctx context.Context, e *env, rng *rand.Rand) (string, error) {
			d := between(rng, 2*time.Second, 12*time.Second)
			return fmt.Sprintf("offsetgate-destination link stalled for %s", d.Round(time.Millisecond)), linkStall(ctx, e.dstLinks, d)
		}},
		{"link-mirror-og-cut", "cut every connection between the mirror and offsetgate, and refuse new ones for 1-6 s", func(ctx context.Context, e *env, rng *rand.Rand) (string, error) {
			d := between(rng, time.Second, 6*time.Second)
			return fmt.Sprintf("mirror-offsetgate link down for %s", d.Round(time.Millisecond)), linkDown(ctx, e.ogLinks, d)
		}},
		{"link-mirror-og-stall", "stall every connection between the mirror and offsetgate for 2-12 s", func(ctx context.Context, e *env, rng *rand.Rand) (string, error) {
			d := between(rng, 2*time.Second, 12*time.Second)
			return fmt.Sprintf("mirror-offsetgate link stalled for %s", d.Round(time.Millisecond)), linkStall(ctx, e.ogLinks, d)
		}},
		{"dest-refuse-writes", "the destination refuses offsetgate's writes to the mirror topic (or its ledger) for 2-10 s: CORRUPT_MESSAGE, nothing appended; or NOT_ENOUGH_REPLICAS_AFTER_APPEND, appended", func(ctx context.Context, e *env, rng *rand.Rand) (string, error) {
			d := between(rng, 2*time.Second, 10*time.Second)
			topic := e.topic
			if rng.IntN(3) == 0 {
				lt, err := e.ledgerTopic(ctx)
				if err != nil {
					return "", err
				}
				topic = lt
			}
			w := &writeRefusal{topic: topic, appended: rng.IntN(2) == 0, reqs: map[[2]int32]int16{}}
			ts, err := e.dstAdm.ListTopics(ctx, topic)
			if err != nil {
				return "", err
			}
			w.id = ts[topic].ID
			for _, r := range e.dstLinks {
				r.SetFault(w.fault)
			}
			serr := sleep(ctx, d)
			for _, r := range e.dstLinks {
				r.SetFault(nil)
			}
			how := "CORRUPT_MESSAGE, nothing appended"
			if w.appended {
				how = "NOT_ENOUGH_REPLICAS_AFTER_APPEND, appended"
			}
			return fmt.Sprintf("%s: %d writes refused (%s) in %s", topic, w.hits.Load(), how, d.Round(time.Millisecond)), serr
		}},
	}
}

func linkDown(ctx context.Context, rs []*relay.Relay, d time.Duration) error {
	for _, r := range rs {
		r.SetDown(true)
	}
	err := sleep(ctx, d)
	for _, r := range rs {
		r.SetDown(false)
	}
	return err
}

func linkStall(ctx context.Context, rs []*relay.Relay, d time.Duration) error {
	for _, r := range rs {
		r.SetStall(true)
	}
	err := sleep(ctx, d)
	for _, r := range rs {
		r.SetStall(false)
	}
	return err
}

func moveLeader(ctx context.Context, e *env, side, topic string, p int32) (string, error) {
	c := e.src
	if side == "dest" {
		c = e.dst
	}
	leader, _, err := c.Leader(ctx, topic, p)
	if err != nil {
		return "", err
	}
	to := int32(1)
	if leader == 1 {
		to = 2
	}
	mctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := c.MoveLeader(mctx, topic, p, to); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s leader of %s[%d] moved from node %d to %d", side, topic, p, leader, to), nil
}

// ledgerTopic is the mirror topic's ledger on the destination.
func (e *env) ledgerTopic(ctx context.Context) (string, error) {
	ts, err := e.dstAdm.ListTopics(ctx)
	if err != nil {
		return "", err
	}
	for _, t := range ts.Sorted() {
		if strings.HasPrefix(t.Topic, "__offsetgate_ledger") {
			return t.Topic, nil
		}
	}
	return "", fmt.Errorf("no ledger topic on the destination")
}

// KindNames lists the fault kinds.
func KindNames() []string {
	var out []string
	for _, k := range kinds() {
		out = append(out, k.name)
	}
	return out
}
