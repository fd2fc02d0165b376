package mirror

import (
	"context"
	"strings"
	"testing"
	"time"

	"offsetgate/internal/ledgertest"
	"offsetgate/ledger"
)

// The status replays a ledger trimmed below its snapshot as a takeover does: a snapshot that
// cannot be read for a moment (a leader election on the destination) is an error to read
// again, never a halt; one that is not there is said so; a readable one replays.
func TestStatusReplayWithUnreadableSnapshot(t *testing.T) {
	c, cl := ledgertest.Cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	const id = "00112233445566778899aabbccddeeff"
	// A snapshot at ledger offset 2 of a partition with nothing mirrored yet.
	ledgertest.TrimmedBehindSnapshot(ctx, t, cl, id, []ledger.Entry{{Kind: ledger.KindOwner, Src: -1, Owner: "a"}, {Kind: ledger.KindOwner, Src: -1, Owner: "a"}},
		[]byte(`{"v":1,"at":2,"state":{"Next":-1,"DNext":0,"Epoch":-1}}`))
	broken := ledgertest.FailSnapshots(c, id)

	broken.Metadata.Store(5) // LEADER_NOT_AVAILABLE
	if _, unreadable, err := replayLedger(ctx, cl, id, 0); err == nil {
		t.Fatalf("replay while the snapshot has no leader: no error (unreadable %q), want an error to read again", unreadable)
	}
	broken.Metadata.Store(3) // UNKNOWN_TOPIC_OR_PARTITION
	if _, unreadable, err := replayLedger(ctx, cl, id, 0); err != nil || !strings.Contains(unreadable, "trimmed below ledger offset 2 and no snapshot was found") {
		t.Fatalf("replay without the snapshot topic: %v, unreadable %q", err, unreadable)
	}
	broken.Metadata.Store(0)
	r, unreadable, err := replayLedger(ctx, cl, id, 0)
	if err != nil || unreadable != "" || r.Next != -1 || r.Halted != "" {
		t.Fatalf("replay with the snapshot: %v, unreadable %q, next %d, halted %q", err, unreadable, r.Next, r.Halted)
	}
}
