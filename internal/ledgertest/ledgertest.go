// Package ledgertest builds ledger histories on an in-process kfake cluster for fast package
// tests: a trimmed ledger behind a snapshot, and a snapshot topic whose reads fail on demand
// (a leader moving on the destination).
package ledgertest

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/internal/kfaketest"
	"offsetgate/ledger"
)

// Cluster starts a one-broker kfake cluster and a client of it, both closed when the test ends.
func Cluster(t testing.TB) (*kfake.Cluster, *kgo.Client) {
	t.Helper()
	return kfaketest.Cluster(t)
}

// TrimmedBehindSnapshot writes partition 0 of the ledger of topic id as an earlier instance
// leaves it: its entries, then a snapshot (which must be of the ledger's end after them), and
// the ledger trimmed below that end.
func TrimmedBehindSnapshot(ctx context.Context, t testing.TB, cl *kgo.Client, id string, entries []ledger.Entry, snapshot []byte) {
	t.Helper()
	l := ledger.New(cl)
	if err := l.Ensure(ctx, id, 1); err != nil {
		t.Fatal(err)
	}
	app, err := l.Claim(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, next, err := app.Append(ctx, entries)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.EnsureSnapshots(ctx, id, 1); err != nil {
		t.Fatal(err)
	}
	if err := l.WriteSnapshot(ctx, id, 0, snapshot); err != nil {
		t.Fatal(err)
	}
	if err := l.Trim(ctx, id, 0, next); err != nil {
		t.Fatal(err)
	}
}

// Unreadable makes a snapshot topic unreadable while a code is set (0: answered as usual):
// Metadata, a Metadata request naming only that topic is answered with the code as the topic's
// error (5, LEADER_NOT_AVAILABLE: a leader moving; 3, UNKNOWN_TOPIC_OR_PARTITION: the topic
// gone); ListOffsets, its ListOffsets with the code for every partition (6, NOT_LEADER).
type Unreadable struct {
	Metadata    atomic.Int32
	ListOffsets atomic.Int32
}

// FailSnapshots installs u on c for the snapshot topic of topic id.
func FailSnapshots(c *kfake.Cluster, id string) *Unreadable {
	u := &Unreadable{}
	topic := ledger.SnapshotTopic(id)
	c.ControlKey(int16(kmsg.Metadata), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := r.(*kmsg.MetadataRequest)
		code := int16(u.Metadata.Load())
		if code == 0 || len(req.Topics) != 1 || req.Topics[0].Topic == nil || *req.Topics[0].Topic != topic {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.MetadataResponse)
		resp.SetVersion(req.GetVersion())
		mt := kmsg.NewMetadataResponseTopic()
		mt.Topic, mt.ErrorCode = req.Topics[0].Topic, code
		resp.Topics = append(resp.Topics, mt)
		return resp, nil, true
	})
	c.ControlKey(int16(kmsg.ListOffsets), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := r.(*kmsg.ListOffsetsRequest)
		code := int16(u.ListOffsets.Load())
		if code == 0 || len(req.Topics) == 0 || req.Topics[0].Topic != topic {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
		resp.SetVersion(req.GetVersion())
		for _, rt := range req.Topics {
			st := kmsg.NewListOffsetsResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewListOffsetsResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	return u
}
