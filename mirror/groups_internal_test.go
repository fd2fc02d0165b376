package mirror

import (
	"context"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// A group request is asked again while the destination's coordinator is not ready (a fresh
// destination answers COORDINATOR_NOT_AVAILABLE while it creates __consumer_offsets), and
// never for another error.
func TestCoordinated(t *testing.T) {
	ctx := context.Background()
	calls := 0
	err := coordinated(ctx, func() error {
		calls++
		if calls < 3 {
			return &kadm.ShardErrors{Name: "DescribeGroups", Errs: []kadm.ShardError{{Err: kerr.CoordinatorNotAvailable}}}
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("coordinator not ready twice: %v after %d calls", err, calls)
	}
	calls = 0
	err = coordinated(ctx, func() error { calls++; return kerr.GroupAuthorizationFailed })
	if !errors.Is(err, kerr.GroupAuthorizationFailed) || calls != 1 {
		t.Fatalf("another error: %v after %d calls", err, calls)
	}
	mixed := &kadm.ShardErrors{Errs: []kadm.ShardError{{Err: kerr.CoordinatorLoadInProgress}, {Err: kerr.InvalidGroupID}}}
	if coordinatorBusy(mixed) {
		t.Fatal("shard errors with one that does not pass were taken as busy")
	}
	if !coordinatorBusy(kerr.NotCoordinator) || coordinatorBusy(errors.New("dial tcp: refused")) {
		t.Fatal("coordinatorBusy misjudged a plain error")
	}
}

// One process of a mirror group copies the consumer groups' offsets: the one the group gave
// partition 0 of the first topic (by name) it mirrors, for every topic, whatever order the
// client lists them in.
func TestGroupCopierOf(t *testing.T) {
	held := map[string]map[int32]bool{"b": {0: true}, "a": {1: true}}
	holds := func(topic string, p int32) bool { return held[topic][p] }
	if _, ok := copierOf([]string{"b", "a"}, holds); ok {
		t.Fatal("a process without partition 0 of the first topic copies")
	}
	held["a"][0] = true
	topics, ok := copierOf([]string{"b", "a"}, holds)
	if !ok || len(topics) != 2 || topics[0] != "a" || topics[1] != "b" {
		t.Fatalf("the holder of a[0]: %v %v", topics, ok)
	}
	if _, ok := copierOf(nil, holds); ok {
		t.Fatal("a process that mirrors nothing yet copies")
	}
}
