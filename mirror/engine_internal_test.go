package mirror

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/batch"
	"offsetgate/internal/kfaketest"
)

// batchAt is a one-record batch at source offset off (all of the same size).
func batchAt(off int64) []byte {
	b := batch.Filler(1, 1000, batch.Producer{ID: -1, Epoch: -1, Sequence: -1}, false)
	binary.BigEndian.PutUint64(b[0:], uint64(off))
	return b
}

func records(bs ...[]byte) []byte {
	var out []byte
	for _, b := range bs {
		out = append(out, b...)
	}
	return out
}

// A chunk waiting for its writer grows with what the next fetches bring, up to MaxBytes, so
// that records arriving while a partition's previous chunk is written go with the next write
// instead of one write later; a batch that does not fit stops the growth and is fetched whole
// once the chunk is taken.
func TestWaitingChunkGrows(t *testing.T) {
	one := len(batchAt(0))
	cfg := Config{MaxBytes: int32(3 * one), follow: true}
	e := newEngine(cfg, nil, nil, nil, nil)
	p := &part{topic: "t", num: 0, leader: 1, target: -1, max: cfg.MaxBytes, st: &partStats{}}
	e.order = []*part{p}
	f := &fetcher{e: e, broker: 1}

	e.mu.Lock()
	e.takeLocked(p, records(batchAt(0)))
	p.chunk, p.writing = nil, true // a writer took it
	e.takeLocked(p, records(batchAt(1)))
	if p.chunk == nil || len(p.chunk.hs) != 1 || p.next != 2 {
		e.mu.Unlock()
		t.Fatalf("read-ahead chunk: %+v next %d", p.chunk, p.next)
	}
	e.mu.Unlock()

	// The waiting chunk is still fetched for, with the room it has left.
	req, asked, _ := f.request()
	if req == nil || len(asked) != 1 || req.Topics[0].Partitions[0].PartitionMaxBytes != int32(2*one) ||
		req.Topics[0].Partitions[0].FetchOffset != 2 {
		t.Fatalf("a waiting chunk with room is not fetched for: %+v", req)
	}
	e.mu.Lock()
	e.takeLocked(p, records(batchAt(2), batchAt(3), batchAt(4))) // the third does not fit
	if len(p.chunk.hs) != 3 || p.next != 4 || e.buffered != int64(4*one) || p.max <= cfg.MaxBytes {
		e.mu.Unlock()
		t.Fatalf("chunk after growing: %d batches, next %d, buffered %d", len(p.chunk.hs), p.next, e.buffered)
	}
	e.mu.Unlock()

	// Full: the partition is not fetched for until a writer takes the chunk.
	if req, _, _ := f.request(); req != nil {
		t.Fatalf("a full waiting chunk is fetched for: %+v", req)
	}
	// What did not fit is asked for whole afterwards.
	e.mu.Lock()
	p.chunk = nil
	e.mu.Unlock()
	req, _, _ = f.request()
	if req == nil || req.Topics[0].Partitions[0].FetchOffset != 4 || req.Topics[0].Partitions[0].PartitionMaxBytes <= cfg.MaxBytes {
		t.Fatalf("after the chunk was taken: %+v", req)
	}
}

// retry's pauses start short (a topic created a moment ago is usually known everywhere a few
// tens of milliseconds later) and grow, so its eight attempts still span over six seconds.
func TestRetryWaits(t *testing.T) {
	var total time.Duration
	for a := 0; a < 8; a++ {
		w := retryWait(a)
		if a > 0 && w < retryWait(a-1) {
			t.Fatalf("pause %d (%v) shorter than the one before (%v)", a, w, retryWait(a-1))
		}
		total += w
	}
	if first := retryWait(0); first > 100*time.Millisecond {
		t.Fatalf("first pause %v: a run's first record waits for it", first)
	}
	if total < 6*time.Second {
		t.Fatalf("eight attempts span %v, want over 6s for a connection being re-established", total)
	}
	// And retry itself: a call that fails once with a retriable error is asked again.
	calls := 0
	err := retry(context.Background(), func() error {
		if calls++; calls == 1 {
			return errors.New("partition missing from the answer")
		}
		return nil
	})
	if err != nil || calls != 2 {
		t.Fatalf("retry: %v after %d calls", err, calls)
	}
}

// A following run whose write of a partition failed with an error a later attempt can get past
// (offsetgate or the destination unreachable for longer than a write's retries) takes the
// partition up again from the mirrored end after a pause, rather than stopping it until the
// run is restarted (the fault campaign found a partition stopped that way); a refusal of what
// was sent stops it; and a partition a mirror group releases while it waits is not taken up.
func TestFollowingPartitionResumes(t *testing.T) {
	_, cl := kfaketest.Cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 3, 1, nil, "t"); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	e := newEngine(Config{MaxBytes: 1 << 20, Parallel: 1, follow: true}, cl, cl, nil, newTracker(reg))
	if err := e.addParts(ctx, "t", prepared{parts: 3}, []int32{0, 1, 2}); err != nil {
		t.Fatal(err)
	}
	fail := func(num int32, err error) *part {
		e.mu.Lock()
		defer e.mu.Unlock()
		p := e.parts[partKey{"t", num}]
		p.writing = true // a writer had it
		e.endLocked(ctx, p, fmt.Errorf("at offset 0: %w", err))
		return p
	}
	state := func(p *part) string { s, _ := p.st.state.Load().(string); return s }

	p0 := fail(0, fmt.Errorf("%w: offsetgate: the ledger did not answer", kerr.RequestTimedOut))
	if s := state(p0); !strings.HasPrefix(s, "resuming in 1s") {
		t.Fatalf("after a timed-out write: %q, want resuming", s)
	}
	p1 := fail(1, fmt.Errorf("%w: offsetgate: batch at 0 overlaps what is mirrored with different content", kerr.OutOfOrderSequenceNumber))
	if s := state(p1); !strings.HasPrefix(s, stoppedPrefix) {
		t.Fatalf("after a content mismatch: %q, want stopped", s)
	}
	// Moved to another process after it stopped here: no longer counted as stopped here.
	e.release("t", []int32{1}, "mirror group moved it to another process")
	if s := state(p1); !strings.HasPrefix(s, "released: mirror group moved it") || !strings.Contains(s, "it had stopped here") {
		t.Fatalf("a stopped partition released: %q", s)
	}
	p2 := fail(2, errors.New("reading from 127.0.0.1:9092: connection reset by peer"))
	if out := e.release("t", []int32{2}, "assigned to another process"); len(out) != 1 {
		t.Fatalf("release of a resuming partition: %v", out)
	}

	time.Sleep(2500 * time.Millisecond)
	e.mu.Lock()
	defer e.mu.Unlock()
	if q := e.parts[partKey{"t", 0}]; q == p0 || q.finished || q.st != p0.st {
		t.Fatalf("partition 0 not taken up again after its pause: %q", state(q))
	}
	if q := e.parts[partKey{"t", 1}]; q != p1 || !q.finished {
		t.Fatal("partition 1, stopped on a refusal, was taken up again")
	}
	if q := e.parts[partKey{"t", 2}]; q != p2 || !strings.HasPrefix(state(q), "released") {
		t.Fatalf("partition 2, released while it waited, was taken up again: %q", state(q))
	}
	if e.open != 2 { // the run's own hold, and partition 0
		t.Fatalf("%d partitions counted open, want 2", e.open)
	}
	var m dto.Metric
	if err := e.tr.resumed.WithLabelValues("t", "0").Write(&m); err != nil || m.GetCounter().GetValue() != 1 {
		t.Fatalf("resumes of partition 0: %v (%v), want 1", m.GetCounter().GetValue(), err)
	}
}

// A partition the mirror group moves to another process while its write waits for another
// offsetgate instance's lease is released at once: the wait ends (it is not this process's any
// more), rather than holding the group's rebalance for up to three minutes while the process
// stays out of the group (the two-instance fault campaign found a member that had lost its
// session blocked that way).
func TestReleaseEndsLeaseWait(t *testing.T) {
	c, cl := kfaketest.Cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, "t"); err != nil {
		t.Fatal(err)
	}
	// The "offsetgate" here answers every write: another instance owns the partition.
	c.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := r.(*kmsg.ProduceRequest)
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		resp.Version = req.Version
		for _, rt := range req.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				msg := `offsetgate: partition owned by offsetgate instance "other" until later; one instance writes a mirror partition`
				sp.Partition, sp.ErrorCode, sp.ErrorMessage = rp.Partition, kerr.PolicyViolation.Code, &msg
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	cfg := Config{MaxBytes: 1 << 20, Parallel: 1, follow: true}
	e := newEngine(cfg, cl, cl, newConnPool(cfg), newTracker(nil))
	if err := e.addParts(ctx, "t", prepared{parts: 1}, []int32{0}); err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	p := e.parts[partKey{"t", 0}]
	p.writing = true
	e.mu.Unlock()
	wrote := make(chan error, 1)
	go func() {
		_, hs, err := batch.Split(batchAt(0))
		if err != nil {
			wrote <- err
			return
		}
		ch := &chunk{data: batchAt(0), hs: hs, from: 0}
		err = e.writeChunk(ctx, p, ch)
		e.mu.Lock()
		e.landedLocked(p, ch, err)
		e.endLocked(ctx, p, err)
		e.mu.Unlock()
		wrote <- err
	}()
	for !strings.HasPrefix(p.st.state.Load().(string), leaseWait) {
		if ctx.Err() != nil {
			t.Fatalf("the write never waited for the lease: %q", p.st.state.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	released := make(chan map[int32]int64, 1)
	go func() { released <- e.release("t", []int32{0}, "mirror group moved it to another process") }()
	select {
	case out := <-released:
		if len(out) != 1 {
			t.Fatalf("released %v", out)
		}
	case <-ctx.Done():
		t.Fatal("release waited for the write's lease wait (three minutes) instead of ending it")
	}
	if err := <-wrote; !errors.Is(err, errGaveUp) {
		t.Fatalf("the write ended with %v, want %v", err, errGaveUp)
	}
	if s := p.st.state.Load().(string); !strings.HasPrefix(s, "released") {
		t.Fatalf("state after the release: %q", s)
	}
}
