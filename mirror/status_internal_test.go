package mirror

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/ledger"
)

// The status replays a ledger trimmed below its snapshot as a takeover does: a snapshot that
// cannot be read for a moment (a leader election on the destination) is an error to read
// again, never a halt; one that is not there is said so; a readable one replays.
func TestStatusReplayWithUnreadableSnapshot(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	const id = "00112233445566778899aabbccddeeff"
	l := ledger.New(cl)
	if err := l.Ensure(ctx, id, 1); err != nil {
		t.Fatal(err)
	}
	app, err := l.Claim(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := app.Append(ctx, []ledger.Entry{{Kind: ledger.KindOwner, Src: -1, Owner: "a"}, {Kind: ledger.KindOwner, Src: -1, Owner: "a"}}); err != nil {
		t.Fatal(err)
	}
	if err := l.EnsureSnapshots(ctx, id, 1); err != nil {
		t.Fatal(err)
	}
	// A snapshot at ledger offset 2 of a partition with nothing mirrored yet.
	if err := l.WriteSnapshot(ctx, id, 0, []byte(`{"v":1,"at":2,"state":{"Next":-1,"DNext":0,"Epoch":-1}}`)); err != nil {
		t.Fatal(err)
	}
	if err := l.Trim(ctx, id, 0, 2); err != nil {
		t.Fatal(err)
	}

	var answer atomic.Int32 // the topic error a metadata request for the snapshots gets; 0: none
	c.ControlKey(int16(kmsg.Metadata), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := r.(*kmsg.MetadataRequest)
		code := int16(answer.Load())
		if code == 0 || len(req.Topics) != 1 || req.Topics[0].Topic == nil || *req.Topics[0].Topic != ledger.SnapshotTopic(id) {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.MetadataResponse)
		resp.SetVersion(req.GetVersion())
		mt := kmsg.NewMetadataResponseTopic()
		mt.Topic, mt.ErrorCode = req.Topics[0].Topic, code
		resp.Topics = append(resp.Topics, mt)
		return resp, nil, true
	})

	answer.Store(5) // LEADER_NOT_AVAILABLE
	if _, unreadable, err := replayLedger(ctx, cl, id, 0); err == nil {
		t.Fatalf("replay while the snapshot has no leader: no error (unreadable %q), want an error to read again", unreadable)
	}
	answer.Store(3) // UNKNOWN_TOPIC_OR_PARTITION
	if _, unreadable, err := replayLedger(ctx, cl, id, 0); err != nil || !strings.Contains(unreadable, "trimmed below ledger offset 2 and no snapshot was found") {
		t.Fatalf("replay without the snapshot topic: %v, unreadable %q", err, unreadable)
	}
	answer.Store(0)
	r, unreadable, err := replayLedger(ctx, cl, id, 0)
	if err != nil || unreadable != "" || r.Next != -1 || r.Halted != "" {
		t.Fatalf("replay with the snapshot: %v, unreadable %q, next %d, halted %q", err, unreadable, r.Next, r.Halted)
	}
}
