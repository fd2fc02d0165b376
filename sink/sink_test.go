package sink

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/batch"
	"offsetgate/wire"
)

type fixture struct {
	c     *kfake.Cluster
	addr  string
	pid   int64
	epoch int16

	mu       sync.Mutex
	requests int // Produce requests the broker saw
	widest   int // most partitions in one of them
}

func newFixture(t *testing.T, partitions int32) *fixture {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, "t"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	f := &fixture{c: c, addr: c.ListenAddrs()[0]}
	c.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		n := 0
		for _, rt := range r.(*kmsg.ProduceRequest).Topics {
			n += len(rt.Partitions)
		}
		f.mu.Lock()
		f.requests++
		f.widest = max(f.widest, n)
		f.mu.Unlock()
		time.Sleep(time.Millisecond) // a broker's round trip, so that writers overlap
		return nil, nil, false
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrInitProducerIDRequest()
	req.ProducerID, req.ProducerEpoch = -1, -1
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil || resp.ErrorCode != 0 {
		t.Fatalf("InitProducerId: %v %v", err, resp)
	}
	f.pid, f.epoch = resp.ProducerID, resp.ProducerEpoch
	return f
}

func (f *fixture) dial(ctx context.Context, addr string) (*wire.Conn, error) {
	return wire.Dial(ctx, addr, nil, nil, "sink-test")
}

// batches are n one-record batches of the fixture's producer, from sequence seq.
func (f *fixture) batches(n int, seq int32) [][]byte {
	var out [][]byte
	for i := 0; i < n; i++ {
		out = append(out, batch.Filler(1, 1000, batch.Producer{ID: f.pid, Epoch: f.epoch, Sequence: seq + int32(i)}, false))
	}
	return out
}

func TestSinkSharesRequests(t *testing.T) {
	const parts, per = 8, 30
	f := newFixture(t, parts)
	s := New(f.addr, f.dial, 10*time.Second, nil)
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	results := make([][]Result, parts)
	for p := int32(0); p < parts; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Two sends in a row per partition, as a writer's ledger append and data are.
			results[p] = append(s.Send(ctx, "t", [16]byte{}, p, f.batches(per/2, 0)),
				s.Send(ctx, "t", [16]byte{}, p, f.batches(per/2, per/2))...)
		}()
	}
	wg.Wait()
	for p, rs := range results {
		if len(rs) != per {
			t.Fatalf("partition %d: %d results, want %d", p, len(rs), per)
		}
		for i, r := range rs {
			if r.Err != nil || r.Answer.ErrorCode != 0 {
				t.Fatalf("partition %d batch %d: %v code %d", p, i, r.Err, r.Answer.ErrorCode)
			}
			if r.Answer.BaseOffset != int64(i) {
				t.Fatalf("partition %d batch %d landed at %d: out of order", p, i, r.Answer.BaseOffset)
			}
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.widest < 2 || f.requests > parts*per/2 {
		t.Fatalf("%d batches of %d partitions took %d requests (widest %d partitions): not shared", parts*per, parts, f.requests, f.widest)
	}
	t.Logf("%d batches of %d partitions in %d requests, widest %d partitions", parts*per, parts, f.requests, f.widest)
}

func TestSinkStopsAPartitionAtItsFailure(t *testing.T) {
	f := newFixture(t, 2)
	s := New(f.addr, f.dial, 10*time.Second, nil)
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bad := f.batches(5, 0)
	bad = append(bad, f.batches(10, 50)...) // batch 5 skips sequences: the broker refuses it
	var wg sync.WaitGroup
	var good []Result
	wg.Add(1)
	go func() {
		defer wg.Done()
		good = s.Send(ctx, "t", [16]byte{}, 1, f.batches(15, 0))
	}()
	rs := s.Send(ctx, "t", [16]byte{}, 0, bad)
	wg.Wait()
	for i, r := range rs {
		ok := r.Err == nil && r.Answer.ErrorCode == 0
		switch {
		case i < 5 && !ok:
			t.Fatalf("batch %d failed: %v %d", i, r.Err, r.Answer.ErrorCode)
		case i == 5 && ok:
			t.Fatalf("batch 5 skips sequences but was taken")
		case i > 5 && ok:
			t.Fatalf("batch %d after the failure was taken at %d", i, r.Answer.BaseOffset)
		}
	}
	notSent := 0
	for _, r := range rs[6:] {
		if errors.Is(r.Err, ErrNotSent) {
			notSent++
		}
	}
	if notSent == 0 {
		t.Fatalf("every batch after the failure was sent (at most %d can be in flight)", Depth-1)
	}
	for i, r := range good {
		if r.Err != nil || r.Answer.ErrorCode != 0 || r.Answer.BaseOffset != int64(i) {
			t.Fatalf("the other partition's batch %d: %v %d at %d", i, r.Err, r.Answer.ErrorCode, r.Answer.BaseOffset)
		}
	}
}

func TestSinkClosed(t *testing.T) {
	f := newFixture(t, 1)
	s := New(f.addr, f.dial, 10*time.Second, nil)
	rs := s.Send(context.Background(), "t", [16]byte{}, 0, f.batches(2, 0))
	if rs[1].Err != nil || rs[1].Answer.ErrorCode != 0 {
		t.Fatalf("before Close: %v %d", rs[1].Err, rs[1].Answer.ErrorCode)
	}
	s.Close()
	rs = s.Send(context.Background(), "t", [16]byte{}, 0, f.batches(1, 2))
	if !errors.Is(rs[0].Err, ErrClosed) {
		t.Fatalf("after Close: %v, want ErrClosed", rs[0].Err)
	}
}

func TestSinkConnectionLost(t *testing.T) {
	f := newFixture(t, 1)
	var dials int
	var mu sync.Mutex
	var last *wire.Conn
	dial := func(ctx context.Context, addr string) (*wire.Conn, error) {
		c, err := f.dial(ctx, addr)
		mu.Lock()
		dials++
		last = c
		mu.Unlock()
		return c, err
	}
	s := New(f.addr, dial, 10*time.Second, nil)
	defer s.Close()
	ctx := context.Background()
	if r := s.Send(ctx, "t", [16]byte{}, 0, f.batches(1, 0))[0]; r.Err != nil || r.Answer.ErrorCode != 0 {
		t.Fatalf("first send: %v %d", r.Err, r.Answer.ErrorCode)
	}
	mu.Lock()
	last.Close()
	mu.Unlock()
	// The broken connection fails what is sent on it; a later send dials again.
	deadline := time.Now().Add(10 * time.Second)
	for seq := int32(1); ; {
		r := s.Send(ctx, "t", [16]byte{}, 0, f.batches(1, seq))[0]
		if r.Err == nil && r.Answer.ErrorCode == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no send succeeded after the connection was lost: %v %d", r.Err, r.Answer.ErrorCode)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if dials < 2 {
		t.Fatalf("dialled %d times, want a new connection after the loss", dials)
	}
}

// Batches queued behind a connection that fails go out on a new connection at once, without
// waiting for another Send to wake the sink.
func TestSinkQueuedBatchesSurviveALostConnection(t *testing.T) {
	f := newFixture(t, 2)
	var first sync.Once
	f.c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		f.c.KeepControl()
		first.Do(func() { time.Sleep(400 * time.Millisecond) }) // the first answer is late
		return nil, nil, false
	})
	var mu sync.Mutex
	var conns []*wire.Conn
	dial := func(ctx context.Context, addr string) (*wire.Conn, error) {
		c, err := f.dial(ctx, addr)
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
		return c, err
	}
	s := New(f.addr, dial, 10*time.Second, nil)
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Partition 0 fills every request slot; partition 1 waits in the queue.
	go s.Send(ctx, "t", [16]byte{}, 0, f.batches(20, 0))
	time.Sleep(100 * time.Millisecond)
	done := make(chan []Result, 1)
	go func() { done <- s.Send(ctx, "t", [16]byte{}, 1, f.batches(3, 0)) }()
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	conns[0].Close()
	mu.Unlock()
	rs := <-done
	for i, r := range rs {
		if r.Err != nil || r.Answer.ErrorCode != 0 || r.Answer.BaseOffset != int64(i) {
			t.Fatalf("queued batch %d after the connection was lost: %v code %d at %d", i, r.Err, r.Answer.ErrorCode, r.Answer.BaseOffset)
		}
	}
}

// A partition's Sends queued one behind the other leave in order and share nothing but the
// order: the second is written while the first is still on its way, never in the same
// request as a batch of the first.
func TestSinkChainsAPartitionsSends(t *testing.T) {
	f := newFixture(t, 1)
	s := New(f.addr, f.dial, 10*time.Second, nil)
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const sends, per = 6, 7
	var qs []*Queued
	for i := 0; i < sends; i++ {
		qs = append(qs, s.Enqueue("t", [16]byte{}, 0, f.batches(per, int32(i*per))))
	}
	for i, q := range qs {
		for k, r := range q.Wait(ctx) {
			if want := int64(i*per + k); r.Err != nil || r.Answer.ErrorCode != 0 || r.Answer.BaseOffset != want {
				t.Fatalf("send %d batch %d: %v code %d at %d, want %d", i, k, r.Err, r.Answer.ErrorCode, r.Answer.BaseOffset, want)
			}
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.widest != 1 || f.requests != sends*per {
		t.Fatalf("%d requests, widest %d partitions: want one batch per request (%d)", f.requests, f.widest, sends*per)
	}
}

// When a partition's batch fails, the partition's Sends queued behind it are not sent; an
// earlier Send whose waiter gives up takes only the Sends behind it along.
func TestSinkFailureStopsTheSendsBehind(t *testing.T) {
	f := newFixture(t, 1)
	s := New(f.addr, f.dial, 10*time.Second, nil)
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bad := append(f.batches(2, 0), f.batches(1, 40)...) // the third skips sequences
	first := s.Enqueue("t", [16]byte{}, 0, bad)
	second := s.Enqueue("t", [16]byte{}, 0, f.batches(50, 3))
	rs := first.Wait(ctx)
	if r := rs[2]; r.Err == nil && r.Answer.ErrorCode == 0 {
		t.Fatalf("the batch that skips sequences was taken at %d", r.Answer.BaseOffset)
	}
	notSent := 0
	for _, r := range second.Wait(ctx) {
		if r.Err == nil && r.Answer.ErrorCode == 0 {
			t.Fatalf("a batch queued behind the failure was taken at %d", r.Answer.BaseOffset)
		}
		if errors.Is(r.Err, ErrNotSent) {
			notSent++
		}
	}
	if notSent < 50-Depth {
		t.Fatalf("%d of the 50 batches behind the failure were not sent, want at least %d", notSent, 50-Depth)
	}

	// A waiter that gives up drops its own unsent batches and those behind, not those before.
	g := newFixture(t, 1)
	s2 := New(g.addr, g.dial, 10*time.Second, nil)
	defer s2.Close()
	a := s2.Enqueue("t", [16]byte{}, 0, g.batches(30, 0))
	b := s2.Enqueue("t", [16]byte{}, 0, g.batches(30, 30))
	c := s2.Enqueue("t", [16]byte{}, 0, g.batches(30, 60))
	gone, stop := context.WithCancel(ctx)
	stop()
	b.Wait(gone)
	for k, r := range a.Wait(ctx) {
		if r.Err != nil || r.Answer.ErrorCode != 0 || r.Answer.BaseOffset != int64(k) {
			t.Fatalf("the Send before the one given up, batch %d: %v %d at %d", k, r.Err, r.Answer.ErrorCode, r.Answer.BaseOffset)
		}
	}
	for k, r := range c.Wait(ctx) {
		if !errors.Is(r.Err, ErrNotSent) {
			t.Fatalf("the Send behind the one given up, batch %d: %v code %d (want not sent)", k, r.Err, r.Answer.ErrorCode)
		}
	}
}

// produceLog records, per Produce request a fixture's broker saw, its acks and the sequence
// of each partition-0 batch it carried.
type produceLog struct {
	mu   sync.Mutex
	reqs []sentReq
}

type sentReq struct {
	acks int16
	seq  int32 // partition 0's batch; -1 when the request had none
}

func (l *produceLog) record(r kmsg.Request) sentReq {
	req := r.(*kmsg.ProduceRequest)
	sr := sentReq{acks: req.Acks, seq: -1}
	for _, rt := range req.Topics {
		for _, rp := range rt.Partitions {
			if rp.Partition == 0 {
				h, err := batch.ReadHeader(rp.Records)
				if err == nil {
					sr.seq = h.BaseSequence
				}
			}
		}
	}
	l.mu.Lock()
	l.reqs = append(l.reqs, sr)
	l.mu.Unlock()
	return sr
}

// With Runs a partition's batches go with acks=1 while later ones are queued, and every run
// of them ends in an acks=all batch of the partition within Depth batches: a batch with
// sequence 0 and the last one queued go with acks=all.
func TestSinkRunsConfirmEveryBatch(t *testing.T) {
	f := newFixture(t, 3)
	var log produceLog
	f.c.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		f.c.KeepControl()
		log.record(r)
		time.Sleep(time.Millisecond)
		return nil, nil, false
	})
	var quick int
	var answers struct {
		sync.Mutex
		quick, all int
		shortest   time.Duration
	}
	answers.shortest = time.Hour
	s := New(f.addr, f.dial, 10*time.Second, nil, Runs(), OnQuick(func() { quick++ }), OnAnswer(func(acks int16, d time.Duration) {
		answers.Lock()
		defer answers.Unlock()
		if acks == 1 {
			answers.quick++
		} else {
			answers.all++
		}
		answers.shortest = min(answers.shortest, d)
	}))
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const per = 41
	var wg sync.WaitGroup
	results := make([][]Result, 3)
	for p := int32(0); p < 3; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := s.Enqueue("t", [16]byte{}, p, f.batches(per/2, 0))
			b := s.Enqueue("t", [16]byte{}, p, f.batches(per-per/2, per/2))
			results[p] = append(a.Wait(ctx), b.Wait(ctx)...)
		}()
	}
	wg.Wait()
	for p, rs := range results {
		for i, r := range rs {
			if r.Err != nil || r.Answer.ErrorCode != 0 || r.Answer.BaseOffset != int64(i) {
				t.Fatalf("partition %d batch %d: %v code %d at %d", p, i, r.Err, r.Answer.ErrorCode, r.Answer.BaseOffset)
			}
		}
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	run, quicks := 0, 0
	for _, sr := range log.reqs {
		if sr.seq < 0 {
			continue
		}
		if sr.acks == 1 {
			quicks++
			if sr.seq == 0 {
				t.Fatalf("the batch with sequence 0 went with acks=1")
			}
			if run++; run >= Depth {
				t.Fatalf("%d batches of partition 0 in a row with acks=1 (at most %d)", run, Depth-1)
			}
			continue
		}
		run = 0
	}
	if run != 0 {
		t.Fatalf("partition 0's last %d batches went with acks=1: nothing confirmed them", run)
	}
	if quicks == 0 || quick == 0 {
		t.Fatalf("no batch went with acks=1 (%d requests, %d counted)", len(log.reqs), quick)
	}
	// Every request's answer is timed, under its acks; the broker here takes a millisecond.
	answers.Lock()
	defer answers.Unlock()
	if answers.quick != quick || answers.all == 0 || answers.shortest < time.Millisecond {
		t.Fatalf("answers timed: %d with acks=1 (%d written), %d with acks=all, shortest %v (the broker takes 1ms)",
			answers.quick, quick, answers.all, answers.shortest)
	}
	t.Logf("%d requests, %d of partition 0's %d batches with acks=1", len(log.reqs), quicks, per)
}

// A run whose confirming batch fails reports its acks=1 batches unconfirmed, not written:
// the broker took them, but nothing says they are replicated.
func TestSinkRunFailsUnconfirmed(t *testing.T) {
	f := newFixture(t, 1)
	var log produceLog
	var failed sync.Once
	f.c.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		f.c.KeepControl()
		sr := log.record(r)
		time.Sleep(time.Millisecond)
		fail := false
		if sr.acks == -1 && sr.seq > 0 {
			failed.Do(func() { fail = true })
		}
		if !fail {
			return nil, nil, false
		}
		req := r.(*kmsg.ProduceRequest)
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		resp.SetVersion(req.GetVersion())
		for _, rt := range req.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition, sp.ErrorCode, sp.BaseOffset = rp.Partition, 19, -1 // NOT_ENOUGH_REPLICAS
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	s := New(f.addr, f.dial, 10*time.Second, nil, Runs())
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rs := s.Send(ctx, "t", [16]byte{}, 0, f.batches(12, 0))

	log.mu.Lock()
	reqs := append([]sentReq(nil), log.reqs...)
	log.mu.Unlock()
	fail := -1 // the sequence of the refused acks=all batch
	for _, sr := range reqs {
		if sr.acks == -1 && sr.seq > 0 {
			fail = int(sr.seq)
			break
		}
	}
	if fail < 0 {
		t.Fatalf("no confirming batch was sent: %+v", reqs)
	}
	if r := rs[fail]; r.Answer.ErrorCode != 19 {
		t.Fatalf("the refused batch %d: %v code %d", fail, r.Err, r.Answer.ErrorCode)
	}
	unconfirmed := 0
	for i := 1; i < fail; i++ { // batch 0 went alone with acks=all
		if !errors.Is(rs[i].Err, ErrUnconfirmed) {
			t.Fatalf("batch %d, taken with acks=1 before the refused confirmation: %v code %d at %d, want unconfirmed", i, rs[i].Err, rs[i].Answer.ErrorCode, rs[i].Answer.BaseOffset)
		}
		unconfirmed++
	}
	if unconfirmed == 0 {
		t.Fatalf("no batch went with acks=1 before the confirming one: %+v", reqs)
	}
	for i := fail + 1; i < len(rs); i++ {
		if rs[i].Err == nil && rs[i].Answer.ErrorCode == 0 {
			t.Fatalf("batch %d after the refused one reported written at %d", i, rs[i].Answer.BaseOffset)
		}
	}
}

// A waiter that gives up while the partition's earlier batches wait for a confirmation that
// its own batches were to bring does not leave the earlier Send waiting forever.
func TestSinkRunGivenUpBehind(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for round := 0; round < 5; round++ {
		f := newFixture(t, 1)
		f.c.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
			f.c.KeepControl()
			if r.(*kmsg.ProduceRequest).Acks == -1 {
				time.Sleep(50 * time.Millisecond) // replication is slow: acks=1 answers come first
			}
			return nil, nil, false
		})
		s := New(f.addr, f.dial, 10*time.Second, nil, Runs())
		first := s.Send(ctx, "t", [16]byte{}, 0, f.batches(1, 0)) // sequence 0 goes alone
		if r := first[0]; r.Err != nil || r.Answer.ErrorCode != 0 {
			t.Fatalf("round %d, the first batch: %v %d", round, r.Err, r.Answer.ErrorCode)
		}
		a := s.Enqueue("t", [16]byte{}, 0, f.batches(3, 1))
		b := s.Enqueue("t", [16]byte{}, 0, f.batches(3, 4))
		gone, stop := context.WithTimeout(ctx, time.Duration(round*15)*time.Millisecond)
		b.Wait(gone)
		stop()
		rs := a.Wait(ctx)
		if ctx.Err() != nil {
			t.Fatalf("round %d: the Send before the one given up never ended", round)
		}
		for k, r := range rs {
			if r.Err != nil && !errors.Is(r.Err, ErrUnconfirmed) && !errors.Is(r.Err, ErrNotSent) {
				t.Fatalf("round %d batch %d: %v", round, k, r.Err)
			}
		}
		s.Close()
	}
}

// With Runs, partitions written at once confirm together: a batch that must be confirmed waits
// for the others' batches that need not, so most requests go with acks=1 and each acks=all
// request confirms many partitions, not one.
func TestSinkRunsLineUp(t *testing.T) {
	const parts, per = 8, 40
	f := newFixture(t, parts)
	var mu sync.Mutex
	var all, quick, batches int
	f.c.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		f.c.KeepControl()
		req := r.(*kmsg.ProduceRequest)
		mu.Lock()
		if req.Acks == 1 {
			quick++
		} else {
			all++
		}
		for _, rt := range req.Topics {
			batches += len(rt.Partitions)
		}
		mu.Unlock()
		time.Sleep(time.Millisecond)
		return nil, nil, false
	})
	s := New(f.addr, f.dial, 10*time.Second, nil, Runs())
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for p := int32(0); p < parts; p++ { // sequence 0 goes alone, before the runs
		if r := s.Send(ctx, "t", [16]byte{}, p, f.batches(1, 0))[0]; r.Err != nil || r.Answer.ErrorCode != 0 {
			t.Fatalf("partition %d, first batch: %v %d", p, r.Err, r.Answer.ErrorCode)
		}
	}
	mu.Lock()
	all, quick, batches = 0, 0, 0
	mu.Unlock()
	// The partitions start one after the other, as writes arrive: their runs start out of step.
	var qs []*Queued
	for p := int32(0); p < parts; p++ {
		qs = append(qs, s.Enqueue("t", [16]byte{}, p, f.batches(per, 1)))
		time.Sleep(2 * time.Millisecond)
	}
	for p, q := range qs {
		for i, r := range q.Wait(ctx) {
			if r.Err != nil || r.Answer.ErrorCode != 0 || r.Answer.BaseOffset != int64(i+1) {
				t.Fatalf("partition %d batch %d: %v code %d at %d", p, i, r.Err, r.Answer.ErrorCode, r.Answer.BaseOffset)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	// Lined up, a partition's five batches take four acks=1 requests and one acks=all shared by
	// all: about a fifth of the requests wait for replication. Each partition on its own
	// schedule would put a confirming batch in nearly every request.
	if all*3 > all+quick {
		t.Fatalf("%d of %d requests went with acks=all (%d batches): the partitions' confirmations are not lined up", all, all+quick, batches)
	}
	t.Logf("%d requests, %d with acks=all, %d batches", all+quick, all, batches)
}

// With OneAtATime, partitions that each write one batch at a time (ledger appends) share
// requests: one is in flight, and everything queued meanwhile goes in the next.
func TestSinkOneAtATimeShares(t *testing.T) {
	const parts, per = 8, 10
	f := newFixture(t, parts)
	var (
		mu           sync.Mutex
		flying, most int
	)
	s := New(f.addr, f.dial, 10*time.Second, func(int) {
		mu.Lock()
		flying++
		most = max(most, flying)
		mu.Unlock()
	}, OneAtATime(), OnAnswer(func(int16, time.Duration) {
		mu.Lock()
		flying--
		mu.Unlock()
	}))
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for p := int32(0); p < parts; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				r := s.Send(ctx, "t", [16]byte{}, p, f.batches(1, int32(i)))[0]
				if r.Err != nil || r.Answer.ErrorCode != 0 || r.Answer.BaseOffset != int64(i) {
					t.Errorf("partition %d batch %d: %v code %d at %d", p, i, r.Err, r.Answer.ErrorCode, r.Answer.BaseOffset)
					return
				}
			}
		}()
	}
	wg.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	if most != 1 {
		t.Fatalf("%d requests in flight at once, want 1", most)
	}
	if f.requests > parts*per/2 || f.widest < 4 {
		t.Fatalf("%d one-batch writes of %d partitions took %d requests (widest %d partitions): not shared", parts*per, parts, f.requests, f.widest)
	}
	t.Logf("%d batches in %d requests, widest %d partitions", parts*per, f.requests, f.widest)
}
