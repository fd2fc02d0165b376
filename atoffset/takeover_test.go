package atoffset

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"offsetgate/catalog"
	"offsetgate/ledger"
)

// A takeover whose snapshot cannot be read for a while (its partition's leader moving) is
// refused retriably, never halted: the ledger is trimmed below the snapshot, and replaying it
// alone would look like a ledger no snapshot covers. Once the snapshot reads, the write lands.
func TestTakeoverWaitsForAnUnreadableSnapshot(t *testing.T) {
	for _, mode := range []string{"metadata", "missing", "list offsets"} {
		t.Run(mode, func(t *testing.T) { takeoverWithUnreadableSnapshot(t, mode) })
	}
}

func takeoverWithUnreadableSnapshot(t *testing.T, mode string) {
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
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	const topic = "mirrored"
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	td, err := adm.ListTopics(ctx, topic)
	if err != nil || td[topic].Err != nil {
		t.Fatal(err, td[topic].Err)
	}
	tid := td[topic].ID
	id := catalog.IDString(tid)

	// An earlier instance's history: two claims, a snapshot after them, the ledger trimmed
	// below it (as a snapshot lets the source view do).
	l := ledger.New(cl)
	if err := l.Ensure(ctx, id, 1); err != nil {
		t.Fatal(err)
	}
	app, err := l.Claim(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Hour)
	if _, _, err := app.Append(ctx, []ledger.Entry{{Kind: ledger.KindOwner, Src: -1, Owner: "old", Until: past},
		{Kind: ledger.KindOwner, Src: -1, Owner: "old", Until: past}}); err != nil {
		t.Fatal(err)
	}
	snap, err := snapshotOf(State{Next: -1, Epoch: -1}, Counts{}, 2, "old", past).encode()
	if err != nil {
		t.Fatal(err)
	}
	if err := l.EnsureSnapshots(ctx, id, 1); err != nil {
		t.Fatal(err)
	}
	if err := l.WriteSnapshot(ctx, id, 0, snap); err != nil {
		t.Fatal(err)
	}
	if err := l.Trim(ctx, id, 0, 2); err != nil {
		t.Fatal(err)
	}

	// While broken is set, the snapshot partition cannot be read: its leader answers
	// NOT_LEADER_OR_FOLLOWER (the client retries that until its context ends), or a metadata
	// answer shows the topic without a leader (given back at once), or not at all (a snapshot
	// absent while the ledger is trimmed is read again, not taken for none).
	var broken atomic.Bool
	broken.Store(true)
	c.ControlKey(int16(kmsg.ListOffsets), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := r.(*kmsg.ListOffsetsRequest)
		if mode != "list offsets" || !broken.Load() || len(req.Topics) == 0 || req.Topics[0].Topic != ledger.SnapshotTopic(id) {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
		resp.SetVersion(req.GetVersion())
		for _, rt := range req.Topics {
			st := kmsg.NewListOffsetsResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewListOffsetsResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, 6
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	c.ControlKey(int16(kmsg.Metadata), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := r.(*kmsg.MetadataRequest)
		if mode == "list offsets" || !broken.Load() || len(req.Topics) != 1 || req.Topics[0].Topic == nil || *req.Topics[0].Topic != ledger.SnapshotTopic(id) {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.MetadataResponse)
		resp.SetVersion(req.GetVersion())
		mt := kmsg.NewMetadataResponseTopic()
		mt.Topic, mt.ErrorCode = req.Topics[0].Topic, 5 // LEADER_NOT_AVAILABLE
		if mode == "missing" {
			mt.ErrorCode = 3 // UNKNOWN_TOPIC_OR_PARTITION: as if the snapshots were gone
		}
		resp.Topics = append(resp.Topics, mt)
		return resp, nil, true
	})

	w := New(Config{Instance: "new", Lease: 10 * time.Second}, cl, l, zap.NewNop(), nil)
	defer w.Close()
	mt := catalog.Topic{Name: topic, ID: tid}
	// The client retries the refusal until its context ends (a Produce's timeout, in
	// offsetgate); then the write is refused, retriably.
	wctx, wcancel := context.WithTimeout(ctx, 3*time.Second)
	res := w.Write(wctx, mt, 0, sourceBatch(0, 3), -1, false, nil)
	wcancel()
	if res.Code != ErrRetriable || !strings.Contains(res.Msg, "snapshot") {
		t.Fatalf("a write while the snapshot cannot be read: code %d %q, want a retriable refusal (%d) naming the snapshot", res.Code, res.Msg, ErrRetriable)
	}

	broken.Store(false)
	if res := w.Write(ctx, mt, 0, sourceBatch(0, 3), -1, false, nil); res.Code != 0 || res.BaseOffset != 0 {
		t.Fatalf("a write once the snapshot reads: code %d %q at %d, want written at 0", res.Code, res.Msg, res.BaseOffset)
	}
}

// sourceBatch is an uncompressed source batch of n records at base offset base, no producer.
func sourceBatch(base int64, n int) []byte {
	var recs []byte
	for i := 0; i < n; i++ {
		r := kmsg.Record{OffsetDelta: int32(i), Value: []byte("v")}
		recs = r.AppendTo(recs)
	}
	ts := time.Now().UnixMilli()
	b := kmsg.RecordBatch{FirstOffset: base, PartitionLeaderEpoch: 0, Magic: 2, LastOffsetDelta: int32(n - 1),
		FirstTimestamp: ts, MaxTimestamp: ts, ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1,
		NumRecords: int32(n), Records: recs}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[8:], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[17:], crc32.Checksum(out[21:], crc32.MakeTable(crc32.Castagnoli)))
	return out
}
