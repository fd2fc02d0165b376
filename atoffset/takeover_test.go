package atoffset

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"offsetgate/catalog"
	"offsetgate/internal/ledgertest"
	"offsetgate/ledger"
)

// A takeover whose snapshot cannot be read for a while (its partition's leader moving) is
// refused retriably, never halted: the ledger is trimmed below the snapshot, and replaying it
// alone would look like a ledger no snapshot covers. Once the snapshot reads, the write lands.
func TestTakeoverWaitsForAnUnreadableSnapshot(t *testing.T) {
	// While the snapshot topic is broken: its leader answers NOT_LEADER_OR_FOLLOWER (the client
	// retries that until its context ends), or a metadata answer shows it without a leader
	// (given back at once), or not at all (a snapshot absent while the ledger is trimmed is read
	// again, not taken for none).
	for _, c := range []struct {
		mode           string
		metadata, list int32
	}{{"metadata", 5, 0}, {"missing", 3, 0}, {"list offsets", 0, 6}} {
		t.Run(c.mode, func(t *testing.T) { takeoverWithUnreadableSnapshot(t, c.metadata, c.list) })
	}
}

func takeoverWithUnreadableSnapshot(t *testing.T, metadataCode, listCode int32) {
	c, cl, ctx, tid := kfakeTopic(t)
	const topic = kfakeTopicName
	id := catalog.IDString(tid)

	// An earlier instance's history: two claims, a snapshot after them, the ledger trimmed
	// below it (as a snapshot lets the source view do).
	past := time.Now().Add(-time.Hour)
	snap, err := snapshotOf(State{Next: -1, Epoch: -1}, Counts{}, 2, "old", past).encode()
	if err != nil {
		t.Fatal(err)
	}
	ledgertest.TrimmedBehindSnapshot(ctx, t, cl, id, []ledger.Entry{{Kind: ledger.KindOwner, Src: -1, Owner: "old", Until: past},
		{Kind: ledger.KindOwner, Src: -1, Owner: "old", Until: past}}, snap)

	broken := ledgertest.FailSnapshots(c, id)
	broken.Metadata.Store(metadataCode)
	broken.ListOffsets.Store(listCode)
	w := New(Config{Instance: "new", Lease: 10 * time.Second}, cl, ledger.New(cl), zap.NewNop(), nil)
	defer w.Close()
	mt := catalog.Topic{Name: topic, ID: tid}
	// The client retries NOT_LEADER until its context ends (a Produce's timeout, in
	// offsetgate); then the write is refused, retriably.
	wctx, wcancel := context.WithTimeout(ctx, 3*time.Second)
	res := w.Write(wctx, mt, 0, sourceBatch(0, 3), -1, false, nil)
	wcancel()
	if res.Code != ErrRetriable || !strings.Contains(res.Msg, "snapshot") {
		t.Fatalf("a write while the snapshot cannot be read: code %d %q, want a retriable refusal (%d) naming the snapshot", res.Code, res.Msg, ErrRetriable)
	}

	broken.Metadata.Store(0)
	broken.ListOffsets.Store(0)
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

// A takeover asks for D's high watermark, and for a partition never written for its data's
// producer id, while it claims the partition: both are sent before the owner entry is appended
// (the owner entry's append is held until they arrive, or for 3 s), and the write lands as
// without the overlap.
func TestTakeoverReadsWhileClaiming(t *testing.T) {
	c, cl, ctx, tid := kfakeTopic(t)
	const topic = kfakeTopicName
	lt := ledger.Topic(catalog.IDString(tid))

	var (
		mu                  sync.Mutex
		hwmAsked, pidAsked  bool
		ownerHeld           bool
		atOwner             [2]bool // hwmAsked, pidAsked when the owner entry's append arrived
		ready               = make(chan struct{})
		readyClosed, seenOw bool
	)
	mark := func(f *bool) {
		mu.Lock()
		defer mu.Unlock()
		*f = true
		if hwmAsked && pidAsked && !readyClosed {
			readyClosed = true
			close(ready)
		}
	}
	c.ControlKey(int16(kmsg.ListOffsets), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		for _, rt := range r.(*kmsg.ListOffsetsRequest).Topics {
			if rt.Topic == topic {
				mark(&hwmAsked)
			}
		}
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.InitProducerID), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if r.(*kmsg.InitProducerIDRequest).TransactionalID == nil {
			mark(&pidAsked) // the data's producer; the claim has a transactional id
		}
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := r.(*kmsg.ProduceRequest)
		// Topics by name (v12 and before) or by id (v13 on): the first write that is not the
		// mirror partition's data is the owner entry.
		if len(req.Topics) != 1 || !(req.Topics[0].Topic == lt || req.Topics[0].Topic == "" && req.Topics[0].TopicID != tid) {
			return nil, nil, false
		}
		mu.Lock()
		first := !seenOw
		seenOw = true
		mu.Unlock()
		if !first {
			return nil, nil, false
		}
		c.SleepControl(func() {
			select {
			case <-ready:
			case <-time.After(3 * time.Second):
			}
		})
		mu.Lock()
		ownerHeld, atOwner = true, [2]bool{hwmAsked, pidAsked}
		mu.Unlock()
		return nil, nil, false
	})

	w := New(Config{Instance: "one", Lease: 10 * time.Second}, cl, ledger.New(cl), zap.NewNop(), nil)
	defer w.Close()
	mt := catalog.Topic{Name: topic, ID: tid}
	if res := w.Write(ctx, mt, 0, sourceBatch(0, 3), -1, false, nil); res.Code != 0 || res.BaseOffset != 0 {
		t.Fatalf("the first write: code %d %q at %d, want written at 0", res.Code, res.Msg, res.BaseOffset)
	}
	mu.Lock()
	defer mu.Unlock()
	if !ownerHeld {
		t.Fatal("no append to the ledger was seen")
	}
	if !atOwner[0] || !atOwner[1] {
		t.Fatalf("when the owner entry was appended: high watermark asked %v, data producer id asked %v; want both asked while claiming", atOwner[0], atOwner[1])
	}
}

// kfakeTopicName is the topic of the tests that run on a kfake cluster of their own.
const kfakeTopicName = "mirrored"

// kfakeTopic starts a kfake cluster holding the topic kfakeTopicName (one partition) and returns it,
// a client of it, a context for the test (a minute) and the topic's id.
func kfakeTopic(t *testing.T) (*kfake.Cluster, *kgo.Client, context.Context, [16]byte) {
	t.Helper()
	c, cl := ledgertest.Cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c, cl, ctx, oneTopic(ctx, t, cl, kfakeTopicName)
}

// oneTopic creates a topic of one partition and returns its id.
func oneTopic(ctx context.Context, t *testing.T, cl *kgo.Client, topic string) [16]byte {
	t.Helper()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	td, err := adm.ListTopics(ctx, topic)
	if err != nil || td[topic].Err != nil {
		t.Fatal(err, td[topic].Err)
	}
	return td[topic].ID
}
