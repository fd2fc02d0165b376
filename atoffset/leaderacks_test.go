package atoffset

import (
	"context"
	"encoding/binary"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"offsetgate/batch"
	"offsetgate/catalog"
	"offsetgate/ledger"
	"offsetgate/rawread"
)

// With LedgerLeaderAcks, a fresh partition's first plan is appended with acks=all and the
// later ones with acks=1, each write answered once its entries are replicated; a takeover
// writes with a producer of its own (so D never takes a resend for a batch it holds), its first
// plan with acks=all, and so does a write of more than maxUnreplicated batches. When an append
// that the leader answered is lost (a fake answer: nothing was appended, and the replication
// check then hears NOT_LEADER_OR_FOLLOWER, as after a leader change) while its data reached D,
// the write is refused, and the partition, read again, finds D holding offsets beyond its
// ledger: the mirror's resend, identical to what D holds, is recorded as D holds it and not
// written twice; a resend that differs halts the partition, and nothing more is written.
func TestLedgerLeaderAcksLostAppend(t *testing.T) {
	c, cl, ctx, tid := kfakeTopic(t)
	id := catalog.IDString(tid)
	ledgerTopic := ledger.Topic(id)
	var (
		mu         sync.Mutex
		acks       []int16 // of every ledger Produce, in order
		fakeAt     = int64(-1)
		faked      bool
		failFetch  bool
		refetch    int
		replicated int // Replication fetches answered by the cluster
	)
	c.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := r.(*kmsg.ProduceRequest)
		for _, rt := range req.Topics {
			if rt.Topic != ledgerTopic {
				continue
			}
			mu.Lock()
			defer mu.Unlock()
			acks = append(acks, req.Acks)
			if req.Acks != 1 || fakeAt < 0 || faked {
				return nil, nil, false
			}
			// The leader's answer to an append it then loses: nothing is appended.
			faked, failFetch = true, true
			resp := req.ResponseKind().(*kmsg.ProduceResponse)
			resp.Version = req.Version
			st := kmsg.NewProduceResponseTopic()
			st.Topic = rt.Topic
			sp := kmsg.NewProduceResponseTopicPartition()
			sp.Partition, sp.BaseOffset, sp.LogAppendTime, sp.LogStartOffset = rt.Partitions[0].Partition, fakeAt, -1, 0
			st.Partitions = append(st.Partitions, sp)
			resp.Topics = append(resp.Topics, st)
			return resp, nil, true
		}
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.Fetch), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := r.(*kmsg.FetchRequest)
		if req.MaxBytes != 1 || len(req.Topics) != 1 {
			return nil, nil, false
		}
		rt := req.Topics[0] // the ledger's: only Fenced.Replication asks for one byte
		mu.Lock()
		defer mu.Unlock()
		if !failFetch {
			replicated++
			return nil, nil, false
		}
		failFetch = false
		refetch++
		resp := req.ResponseKind().(*kmsg.FetchResponse)
		resp.Version = req.Version
		ft := kmsg.NewFetchResponseTopic()
		ft.Topic, ft.TopicID = rt.Topic, rt.TopicID
		fp := kmsg.NewFetchResponseTopicPartition()
		fp.Partition, fp.ErrorCode, fp.HighWatermark = rt.Partitions[0].Partition, kerr.NotLeaderForPartition.Code, -1
		ft.Partitions = append(ft.Partitions, fp)
		resp.Topics = append(resp.Topics, ft)
		return resp, nil, true
	})

	newWriter := func() *Writer {
		w := New(Config{Instance: "a", LedgerLeaderAcks: true, Dial: plainDial}, cl, ledger.New(cl), zap.NewNop(), nil)
		t.Cleanup(w.Close)
		return w
	}
	mt := catalog.Topic{Name: kfakeTopicName, ID: tid}
	b := map[int64][]byte{}
	batchAt := func(at int64) []byte {
		if b[at] == nil {
			b[at] = sourceBatch(at, 3)
		}
		return b[at]
	}
	write := func(w *Writer, at int64, records []byte) Result {
		t.Helper()
		if records == nil {
			records = batchAt(at)
		}
		return w.Write(ctx, mt, 0, records, at, false, nil)
	}
	mustWrite := func(w *Writer, at int64, records []byte) {
		t.Helper()
		if res := write(w, at, records); res.Code != 0 || res.BaseOffset != at {
			t.Fatalf("write at %d: code %d %q at %d", at, res.Code, res.Msg, res.BaseOffset)
		}
	}
	acksSince := func(from int) []int16 {
		mu.Lock()
		defer mu.Unlock()
		return append([]int16(nil), acks[from:]...)
	}
	same := func(a, b []int16) bool { return slices.Equal(a, b) }
	adm := kadm.NewClient(cl)
	dEnd := func() int64 {
		t.Helper()
		ends, err := adm.ListEndOffsets(ctx, kfakeTopicName)
		if err != nil {
			t.Fatal(err)
		}
		o, _ := ends.Lookup(kfakeTopicName, 0)
		return o.Offset
	}

	w := newWriter()
	for at := int64(0); at < 9; at += 3 {
		mustWrite(w, at, nil)
	}
	// The claim's owner entry and the fresh partition's first plan with acks=all; the next
	// plans with acks=1, their replication confirmed.
	if got := acksSince(0); !same(got, []int16{-1, -1, 1, 1}) {
		t.Fatalf("ledger appends' acks %v, want [-1 -1 1 1]", got)
	}
	mu.Lock()
	if replicated != 2 {
		t.Fatalf("%d replication checks reached the cluster, want 2", replicated)
	}
	mu.Unlock()

	// A takeover (the same instance, as after a restart) writes with a producer of its own,
	// its first plan with acks=all.
	w.Close()
	w2 := newWriter()
	n := len(acksSince(0))
	mustWrite(w2, 9, nil)
	if got := acksSince(n); !same(got, []int16{-1, -1}) {
		t.Fatalf("a takeover's ledger appends went with acks %v, want [-1 -1] (owner entry, first plan)", got)
	}
	pids := map[int64]int64{} // D base offset to producer id
	sets, _, err := rawread.New(cl, kfakeTopicName, 0).Fetch(ctx, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	for _, set := range sets {
		h, err := batch.ReadHeader(set)
		if err != nil {
			t.Fatal(err)
		}
		pids[h.BaseOffset] = h.ProducerID
	}
	if len(pids) != 4 || pids[6] == pids[9] || pids[0] != pids[6] {
		t.Fatalf("producer ids of the destination's batches %v; want those at 0, 3, 6 the same and the takeover's own at 9", pids)
	}
	// A write of more batches than maxUnreplicated appends with acks=all.
	var six []byte
	for at := int64(12); at < 30; at += 3 {
		six = append(six, batchAt(at)...)
	}
	n = len(acksSince(0))
	mustWrite(w2, 12, six)
	if got := acksSince(n); !same(got, []int16{-1}) {
		t.Fatalf("the ledger append of a write of six batches went with acks %v, want [-1] (more than %d batches)", got, maxUnreplicated)
	}
	mustWrite(w2, 30, nil)

	// The lost append.
	loseNext := func(at int64) {
		t.Helper()
		ends, err := adm.ListEndOffsets(ctx, ledgerTopic)
		if err != nil {
			t.Fatal(err)
		}
		end, _ := ends.Lookup(ledgerTopic, 0)
		mu.Lock()
		fakeAt, faked, refetch = end.Offset, false, 0
		mu.Unlock()
		res := write(w2, at, nil)
		mu.Lock()
		if !faked || refetch != 1 {
			t.Fatalf("the lost append was not exercised (faked %v, failed checks %d; the write: code %d %q)", faked, refetch, res.Code, res.Msg)
		}
		mu.Unlock()
		if res.Code != ErrRetriable {
			t.Fatalf("a write whose ledger entries were lost: code %d %q at %d, want refused (retriable)", res.Code, res.Msg, res.BaseOffset)
		}
		if got := dEnd(); got != at+3 {
			t.Fatalf("the destination ends at %d after the lost append's write, want %d (its data landed)", got, at+3)
		}
	}
	loseNext(33)
	// The resend: the partition is read again and finds D holding offsets beyond its ledger;
	// the resent batch is the one D holds, so it is recorded as D holds it (its producer),
	// not written again, and the mirror goes on.
	mustWrite(w2, 33, nil)
	if got := dEnd(); got != 36 {
		t.Fatalf("the destination ends at %d after the resend, want 36 (the batch adopted, not written twice)", got)
	}
	es, _, err := ledger.New(cl).ReadFrom(ctx, id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	onD := map[int64]int64{}
	sets, _, err = rawread.New(cl, kfakeTopicName, 0).Fetch(ctx, 33, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	for _, set := range sets {
		h, _ := batch.ReadHeader(set)
		onD[h.BaseOffset] = h.ProducerID
	}
	var adopted []ledger.Entry
	for _, e := range es {
		if e.Kind == ledger.KindBatch && e.Src == 33 {
			adopted = append(adopted, e)
		}
	}
	if len(adopted) != 1 || adopted[0].D != 33 || adopted[0].PID != onD[33] {
		t.Fatalf("the ledger's entries for source offset 33: %+v; want one, at 33, with the producer of D's batch (%d)", adopted, onD[33])
	}
	mustWrite(w2, 36, nil)

	// Lost with a hole before the batch (source offsets 39-40 hold nothing): the filler and the
	// batch D holds are both adopted.
	loseNext(41)
	mustWrite(w2, 41, nil)
	if got := dEnd(); got != 44 {
		t.Fatalf("the destination ends at %d after the resend over a hole, want 44", got)
	}
	if es, _, err = ledger.New(cl).ReadFrom(ctx, id, 0, 0); err != nil {
		t.Fatal(err)
	}
	kinds := map[int64]string{}
	for _, e := range es {
		if e.Src >= 39 && (e.Kind == ledger.KindBatch || e.Kind == ledger.KindFiller) {
			kinds[e.Src] += e.Kind
		}
	}
	if kinds[39] != ledger.KindFiller || kinds[41] != ledger.KindBatch || len(kinds) != 2 {
		t.Fatalf("the ledger's entries from source offset 39: %v; want a filler at 39 and a batch at 41, once each", kinds)
	}

	mustWrite(w2, 44, nil) // the takeover's producer's first write (acks=all)

	// Lost again, and this time the resend differs from what D holds (another batch at the
	// same offsets): the partition halts; nothing more is written, and the halt holds for the
	// next writer too.
	loseNext(47)
	other := sourceBatch(47, 3)
	other[len(other)-1] ^= 1 // another value in its last record
	binary.BigEndian.PutUint32(other[17:], batch.CRC(other))
	for i, w := range []*Writer{w2, newWriter()} {
		if i == 1 {
			w2.Close()
		}
		res := write(w, 47, other)
		if res.Code != ErrHalted || !strings.Contains(res.Msg, "beyond what the ledger accounts for") || !strings.Contains(res.Msg, "is not the mirror's batch") {
			t.Fatalf("writer %d, a different resend at 47: code %d %q at %d, want halted", i+1, res.Code, res.Msg, res.BaseOffset)
		}
	}
	if got := dEnd(); got != 50 {
		t.Fatalf("the destination ends at %d after the halt, want 50 (nothing written)", got)
	}
}

// A replication check held by the ledger's leader (its follower behind) holds no ledger read
// of the writer's client: the checks go on a client of their own (Config.ReplicationClient),
// where a broker, answering a connection's requests in turn, would otherwise make a takeover's
// or the source view's read wait for the follower.
func TestLedgerReplicationCheckOwnClient(t *testing.T) {
	c, cl, ctx, tid := kfakeTopic(t)
	id := catalog.IDString(tid)
	repl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer repl.Close()
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	c.ControlKey(int16(kmsg.Fetch), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if req := r.(*kmsg.FetchRequest); req.MaxBytes == 1 { // only Fenced.Replication asks for one byte
			once.Do(func() {
				close(held)
				c.SleepControl(func() { <-release })
			})
		}
		return nil, nil, false
	})
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	defer free()
	w := New(Config{Instance: "a", LedgerLeaderAcks: true, ReplicationClient: repl, Dial: plainDial}, cl, ledger.New(cl), zap.NewNop(), nil)
	defer w.Close()
	mt := catalog.Topic{Name: kfakeTopicName, ID: tid}
	if res := w.Write(ctx, mt, 0, sourceBatch(0, 3), 0, false, nil); res.Code != 0 {
		t.Fatalf("the first write (acks=all, no check): code %d %q", res.Code, res.Msg)
	}
	second := make(chan Result, 1)
	go func() { second <- w.Write(ctx, mt, 0, sourceBatch(3, 3), 3, false, nil) }()
	select {
	case <-held:
	case res := <-second:
		t.Fatalf("the second write was answered (code %d %q) without a replication check", res.Code, res.Msg)
	case <-ctx.Done():
		t.Fatal("no replication check came")
	}
	// The check is held: a read of the ledger on the writer's client still goes through.
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	es, _, err := ledger.New(cl).ReadFrom(rctx, id, 0, 0)
	if err != nil || len(es) == 0 {
		t.Fatalf("reading the ledger while a replication check is held: %d entries, %v", len(es), err)
	}
	free()
	if res := <-second; res.Code != 0 || res.BaseOffset != 3 {
		t.Fatalf("the second write once its check was answered: code %d %q at %d", res.Code, res.Msg, res.BaseOffset)
	}
}
