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
