// Package sink sends record batches of many partitions to one destination broker the way a
// stock producer's sink does: every Produce request carries at most one batch of each
// partition that has one waiting (the broker takes one batch per partition per request), and
// up to five requests are in flight on the broker's connection. Concurrent writers of
// different partitions therefore share round trips instead of queueing one request each
// behind the others on the broker's connection (a broker handles a connection's requests one
// at a time, acks=all replication included).
//
// A partition's batches leave in the order given and never overtake each other, across Sends
// too: a partition's next Send may be queued while the one before it is still on its way (its
// batches follow the earlier ones, request by request). After one of them fails, its batches
// not yet sent are not sent, nor are those of the partition's Sends queued behind it (the
// caller retries from the first failure with the same bytes, which the broker recognises as
// duplicates of what it has).
//
// With Runs, a partition's batches that have a later batch of theirs queued go in requests
// with acks=1, and the run is confirmed by the first acks=all request that carries a later
// batch of the partition (see Runs).
package sink

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/batch"
	"offsetgate/wire"
)

// Depth is the number of requests in flight on a sink's connection: the idempotent
// producer's limit for ordered retries (max.in.flight.requests.per.connection = 5).
const Depth = 5

// answerSlack is how long past the request timeout an answer may take before the connection
// is given up.
const answerSlack = 10 * time.Second

// maxRequestBytes bounds the record bytes of one request (a batch larger than it goes alone).
const maxRequestBytes = 8 << 20

// ErrUnconfirmed is the outcome of a batch the broker appended with acks=1 whose
// confirmation (a later batch of the partition taken with acks=all) never came: it may or may
// not be replicated, and is to be sent again, which the broker recognises as a duplicate of
// what it has.
var ErrUnconfirmed = errors.New("appended by the leader, but no later batch of the partition confirmed it replicated")

// ErrNotSent is the outcome of a batch that was never sent: an earlier batch of its partition
// failed, or the sink closed.
var ErrNotSent = errors.New("not sent: an earlier batch of the partition failed")

// ErrClosed is the outcome of a batch that was never sent because the sink was closed: sending
// it again through this sink cannot succeed.
var ErrClosed = errors.New("not sent: the sink is closed")

// Result is a batch's outcome: the broker's answer for its partition, or Err when there was
// none (the connection failed, or the batch was not sent).
type Result struct {
	Answer kmsg.ProduceResponseTopicPartition
	Err    error
}

type tp struct {
	id        [16]byte
	topic     string
	partition int32
}

// job is one Send call: a partition's batches, in order, and their outcomes.
type job struct {
	key     tp
	batches [][]byte // the partition's record batches, in order
	results []Result
	next    int // the first batch not yet sent
	left    int // batches without an outcome yet
	failed  bool
	over    bool
	done    chan struct{}
}

// finish wakes the caller once every batch has its outcome.
func (j *job) finish() {
	if j.left == 0 && !j.over {
		j.over = true
		close(j.done)
	}
}

func (j *job) settle(i int, r Result) {
	j.results[i] = r
	if r.Err != nil || r.Answer.ErrorCode != 0 {
		j.failed = true
	}
	j.left--
}

// slot is one batch of a request in flight.
type slot struct {
	j *job
	i int
}

type inflight struct {
	req   *kmsg.ProduceRequest
	corr  int32
	slots []slot
	at    time.Time // when it was written
}

// held is a batch the broker appended with acks=1, waiting for its confirmation.
type held struct {
	sl slot
	r  Result
}

// run is a partition's batches sent and not yet confirmed (Runs).
type run struct {
	flying int    // batches in requests not yet answered
	held   []held // answered with acks=1, in order, waiting for a later acks=all answer
	broken bool   // a batch failed: nothing of the run can be confirmed any more
	passed int    // acks=1 requests built without its batch that must be confirmed
}

// Option changes a sink.
type Option func(*Sink)

// Runs lets a partition's batches go with acks=1 while a later batch of the partition is
// queued, up to Depth batches unconfirmed, the last of which goes with acks=all (so does a
// batch without a sequence, or with sequence 0: see unsequenced). A batch is reported only
// once a later batch of its partition was answered with acks=all on the same connection: the
// broker answers a connection's requests in order and appends one partition's batches in
// order, so the high watermark that released the later batch covers the earlier ones; had the
// leader lost them in the meantime (a leadership that moved and came back), the later batch's
// sequence would not follow and the broker would refuse it. A batch whose confirmation fails
// gets ErrUnconfirmed and is sent again by the caller: at most Depth batches are unconfirmed,
// all within the broker's duplicate window. What this buys is throughput: a broker holds a
// connection while it waits for replication, so a stock producer's partition moves one batch
// per replication round trip; a run moves up to Depth batches per round trip.
func Runs() Option { return func(s *Sink) { s.runs = map[tp]*run{} } }

// Sink is the batch sender of one broker address. It owns two goroutines per connection (a
// writer and a reader), started by the first Send and stopped by Close.
type Sink struct {
	addr    string
	dial    func(ctx context.Context, addr string) (*wire.Conn, error)
	timeout time.Duration
	sent    func(batches int)                 // called for every request written
	runs    map[tp]*run                       // with Runs: partitions with batches sent and not confirmed
	quick   func()                            // with Runs: called for every acks=1 request written
	took    func(acks int16, d time.Duration) // called for every request answered
	depth   int                               // requests in flight at most (Depth unless OneAtATime)
	leader  bool                              // LeaderAcks: every request acks=1

	mu      sync.Mutex
	jobs    []*job // partitions with batches to send, in arrival order (one job per partition at a time)
	wake    chan struct{}
	closed  bool
	started bool
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// New makes the sink of the broker at addr; dial opens its connection (again after a failure).
// timeout is the Produce requests' timeout on the broker; sent, when not nil, is told the
// number of batches of every request written (for metrics).
func New(addr string, dial func(ctx context.Context, addr string) (*wire.Conn, error), timeout time.Duration, sent func(batches int), opts ...Option) *Sink {
	ctx, cancel := context.WithCancel(context.Background())
	if sent == nil {
		sent = func(int) {}
	}
	s := &Sink{addr: addr, dial: dial, timeout: timeout, sent: sent, quick: func() {}, took: func(int16, time.Duration) {}, depth: Depth, wake: make(chan struct{}, 1), ctx: ctx, cancel: cancel}
	for _, o := range opts {
		o(s)
	}
	return s
}

// OnQuick sets what is called for every request written with acks=1 (for metrics).
func OnQuick(f func()) Option { return func(s *Sink) { s.quick = f } }

// OneAtATime keeps one request in flight on the connection: batches queued meanwhile go
// together in the next one. For acks=all requests of partitions that are each written one
// request at a time (ledger appends): a broker works on a connection's requests one after the
// other, replication wait included, so five in flight wait five round trips in turn, where one
// request carrying the five batches waits one.
func OneAtATime() Option { return func(s *Sink) { s.depth = 1 } }

// LeaderAcks sends every request with acks=1: answered once the leader appended the batches,
// not their replication. For ledger appends whose replication the writer confirms by itself
// (atoffset.Config.LedgerLeaderAcks).
func LeaderAcks() Option { return func(s *Sink) { s.leader = true } }

// OnAnswer sets what is told, for every request answered, its acks and the time from its
// writing to its answer (for metrics: with requests in flight behind each other, that time
// includes the broker's work on the requests ahead of it on the connection).
func OnAnswer(f func(acks int16, d time.Duration)) Option { return func(s *Sink) { s.took = f } }

// Close stops the sink; batches waiting get ErrClosed, those in flight the connection's error.
func (s *Sink) Close() {
	s.mu.Lock()
	s.closed = true
	jobs := s.jobs
	s.jobs = nil
	for _, j := range jobs {
		s.dropLocked(j, ErrClosed)
	}
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
}

// Send writes a partition's batches, in order, and returns their outcomes.
func (s *Sink) Send(ctx context.Context, topic string, id [16]byte, partition int32, data [][]byte) []Result {
	return s.Enqueue(topic, id, partition, data).Wait(ctx)
}

// Queued is a Send under way: its batches are queued behind those of the partition's earlier
// Sends.
type Queued struct {
	s *Sink
	j *job
}

// Enqueue queues a partition's batches behind the partition's batches queued before (which
// leave first, in order) and returns at once; Wait gives their outcomes.
func (s *Sink) Enqueue(topic string, id [16]byte, partition int32, data [][]byte) *Queued {
	if len(data) == 0 {
		return &Queued{s: s}
	}
	j := &job{key: tp{id, topic, partition}, batches: data, results: make([]Result, len(data)), left: len(data), done: make(chan struct{})}
	s.mu.Lock()
	if s.closed {
		s.dropLocked(j, ErrClosed)
		s.mu.Unlock()
		return &Queued{s: s, j: j}
	}
	s.jobs = append(s.jobs, j)
	if !s.started {
		s.started = true
		s.wg.Add(1)
		go s.run()
	}
	s.mu.Unlock()
	s.kick()
	return &Queued{s: s, j: j}
}

// Wait returns the outcomes of the queued batches, in order. When ctx ends first, the batches
// not yet sent are not sent (nor those queued behind them for the partition) and get ctx's
// error; those sent are answered to nobody.
func (q *Queued) Wait(ctx context.Context) []Result {
	j := q.j
	if j == nil {
		return nil
	}
	select {
	case <-j.done:
	case <-ctx.Done():
		q.s.mu.Lock()
		q.s.dropBehindLocked(j)
		q.s.dropLocked(j, ctx.Err())
		q.s.mu.Unlock()
		<-j.done
	}
	return j.results
}

func (s *Sink) kick() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// dropLocked gives every batch of j not yet sent the error err and takes j off the queue.
func (s *Sink) dropLocked(j *job, err error) {
	s.breakRunLocked(j.key)
	for ; j.next < len(j.batches); j.next++ {
		j.settle(j.next, Result{Err: err})
	}
	for i, q := range s.jobs {
		if q == j {
			s.jobs = append(s.jobs[:i], s.jobs[i+1:]...)
			break
		}
	}
	j.finish()
}

// dropBehindLocked takes the partition's Sends queued behind j off the queue, unsent: their
// batches would follow one that failed or never left, out of sequence. A job leaves the queue
// once all its batches are sent, and a partition's later Send sends nothing while an earlier
// one is queued: so when j is no longer queued, every Send of its partition still queued came
// after it.
func (s *Sink) dropBehindLocked(j *job) {
	var behind []*job
	for _, q := range s.jobs {
		switch {
		case q == j:
			behind = behind[:0] // those before j are not behind it
		case q.key == j.key:
			behind = append(behind, q)
		}
	}
	for _, q := range behind {
		s.dropLocked(q, ErrNotSent)
	}
}

// run keeps a connection to the broker while there is work, redialling after a failure.
func (s *Sink) run() {
	defer s.wg.Done()
	for {
		// Batches still queued when a connection failed go out on the next one at once; only
		// a sink with nothing to send waits to be woken.
		s.mu.Lock()
		idle := len(s.jobs) == 0
		s.mu.Unlock()
		if idle {
			select {
			case <-s.ctx.Done():
				return
			case <-s.wake:
			}
			continue
		}
		if s.ctx.Err() != nil {
			return
		}
		c, err := s.dial(s.ctx, s.addr)
		if err != nil {
			s.failQueued(fmt.Errorf("connecting to %s: %w", s.addr, err))
			continue
		}
		s.serve(c)
		c.Close()
	}
}

// failQueued gives every waiting batch err.
func (s *Sink) failQueued(err error) {
	s.mu.Lock()
	for len(s.jobs) > 0 {
		s.dropLocked(s.jobs[0], err)
	}
	s.mu.Unlock()
}

// serve writes requests on c while there is work and reads their answers on a second
// goroutine, until c fails, the sink closes or it has been idle a while.
func (s *Sink) serve(c *wire.Conn) {
	sent := make(chan inflight, s.depth)
	free := make(chan struct{}, s.depth)
	for i := 0; i < s.depth; i++ {
		free <- struct{}{}
	}
	readErr := make(chan error, 1)
	dead := make(chan struct{}) // closed when the reader failed: the writer stops too
	go func() {
		var err error
		for f := range sent {
			if err == nil {
				resp := kmsg.NewPtrProduceResponse()
				// A broker answers within the request's timeout; one that does not (a
				// connection gone silent) fails the connection rather than its callers' waits.
				_ = c.SetReadDeadline(time.Now().Add(s.timeout + answerSlack))
				if err = c.Receive(f.req, resp, f.corr); err != nil {
					err = fmt.Errorf("reading from %s: %w", s.addr, err)
					c.Close() // the writer's next write fails too
					close(dead)
				} else {
					s.took(f.req.Acks, time.Since(f.at))
					s.answered(f, resp)
				}
			}
			if err != nil {
				s.failed(f, err)
			}
			free <- struct{}{}
		}
		readErr <- err
	}()
	defer func() {
		close(sent)
		<-readErr
		s.breakRuns()
	}()
	idle := time.NewTimer(time.Minute)
	defer idle.Stop()
	for {
		select {
		case <-s.ctx.Done():
			c.Close()
			return
		case <-dead:
			return
		case <-free:
		}
		var f inflight
		for f.req == nil {
			f = s.next()
			if f.req != nil {
				break
			}
			idle.Reset(time.Minute)
			select {
			case <-s.ctx.Done():
				c.Close()
				return
			case <-dead:
				return
			case <-s.wake:
			case <-idle.C:
				return // nothing to do for a minute: the connection is let go
			}
		}
		corr, err := c.Send(f.req)
		if err != nil {
			c.Close()
			s.failed(f, fmt.Errorf("writing to %s: %w", s.addr, err))
			return
		}
		f.corr, f.at = corr, time.Now()
		s.sent(len(f.slots))
		if f.req.Acks == 1 {
			s.quick()
		}
		sent <- f
	}
}

// next builds the next request: the next batch of every partition waiting, in arrival order
// (a partition's later Send waits until its earlier one has sent everything).
//
// With Runs, a batch that must be confirmed (see Runs) waits while other partitions have
// batches that need not be: they go first, with acks=1, and the batches that must be confirmed
// go together in one acks=all request, which confirms every partition it carries. So the
// partitions' runs line up, and a request waits for replication once for all of them. A
// partition passed over Depth-1 times goes at once, whatever the others have.
func (s *Sink) next() inflight {
	s.mu.Lock()
	defer s.mu.Unlock()
	type cand struct {
		j       *job
		r       *run
		confirm bool
	}
	var cands []cand
	var queued map[tp]int // with Runs: a partition's Sends with batches still to send
	if s.runs != nil {
		queued = make(map[tp]int, len(s.jobs))
		for _, j := range s.jobs {
			if j.next < len(j.batches) {
				queued[j.key]++
			}
		}
	}
	taken := map[tp]bool{} // partitions with a job met already: one batch each per request
	quick, due := 0, false // with Runs: batches that may go with acks=1; a confirmation is overdue
	for _, j := range s.jobs {
		if taken[j.key] || j.next >= len(j.batches) {
			continue
		}
		taken[j.key] = true
		c := cand{j: j}
		if s.runs != nil {
			if c.r = s.runs[j.key]; c.r != nil && (c.r.broken || c.r.flying+len(c.r.held) >= Depth) {
				continue // a failed run drains first; a full one waits for its confirmation
			}
			unconfirmed := 1
			if c.r != nil {
				unconfirmed += c.r.flying + len(c.r.held)
			}
			// A batch is the last queued of its partition unless its Send has more, or a later
			// Send of the partition does (the first Send met is the earliest).
			later := j.next+1 < len(j.batches) || queued[j.key] > 1
			c.confirm = unconfirmed >= Depth || !later || unsequenced(j.batches[j.next])
			if !c.confirm {
				quick++
			} else if c.r != nil && c.r.passed >= Depth-1 {
				due = true
			}
		}
		cands = append(cands, c)
	}
	all := s.runs == nil || quick == 0 || due
	var f inflight
	bytes := 0
	topics := map[tp]int{} // topic (partition 0 key) to its index in the request
	for _, c := range cands {
		j := c.j
		if !all && c.confirm {
			if c.r == nil {
				c.r = &run{}
				s.runs[j.key] = c.r
			}
			c.r.passed++
			continue
		}
		b := j.batches[j.next]
		if len(f.slots) > 0 && bytes+len(b) > maxRequestBytes {
			break
		}
		if f.req == nil {
			f.req = kmsg.NewPtrProduceRequest()
			f.req.SetVersion(9) // names topics; every broker offsetgate supports takes it
			f.req.Acks, f.req.TimeoutMillis = -1, int32(s.timeout/time.Millisecond)
			if !all || s.leader {
				f.req.Acks = 1
			}
		}
		tk := tp{j.key.id, j.key.topic, 0}
		ti, ok := topics[tk]
		if !ok {
			ti = len(f.req.Topics)
			topics[tk] = ti
			rt := kmsg.NewProduceRequestTopic()
			rt.Topic, rt.TopicID = j.key.topic, j.key.id
			f.req.Topics = append(f.req.Topics, rt)
		}
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition, rp.Records = j.key.partition, b
		f.req.Topics[ti].Partitions = append(f.req.Topics[ti].Partitions, rp)
		f.slots = append(f.slots, slot{j, j.next})
		j.next++
		bytes += len(b)
		if s.runs != nil {
			r := c.r
			if r == nil {
				r = &run{}
				s.runs[j.key] = r
			}
			r.flying++
			if all {
				r.passed = 0
			}
		}
	}
	// Jobs with everything sent leave the queue (their answers still come back to them).
	kept := s.jobs[:0]
	for _, j := range s.jobs {
		if j.next < len(j.batches) {
			kept = append(kept, j)
		}
	}
	clear(s.jobs[len(kept):])
	s.jobs = kept
	return f
}

// unsequenced reports whether a batch cannot stand for the batches before it: one without a
// producer id (the broker checks no sequence), or with sequence 0 (a broker that has lost
// every batch of the producer takes it whatever came before). It is confirmed itself, and so
// is a batch whose header does not read.
func unsequenced(b []byte) bool {
	h, err := batch.ReadHeader(b)
	return err != nil || h.ProducerID < 0 || h.BaseSequence <= 0
}

// answered hands each batch of a request its partition's answer.
func (s *Sink) answered(f inflight, resp *kmsg.ProduceResponse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sl := range f.slots {
		k := sl.j.key
		r := Result{Err: fmt.Errorf("the answer from %s has no partition %s[%d]", s.addr, k.topic, k.partition)}
		for _, rt := range resp.Topics {
			if rt.Topic != k.topic { // v9 answers name topics
				continue
			}
			for _, rp := range rt.Partitions {
				if rp.Partition == k.partition {
					r = Result{Answer: rp}
				}
			}
		}
		if s.runs != nil {
			s.runAnsweredLocked(sl, r, f.req.Acks == 1)
			continue
		}
		s.settleLocked(sl, r)
	}
}

// runAnsweredLocked settles an answered batch of a sink with Runs: an acks=1 success is held
// for its confirmation; an acks=all success confirms the partition's held batches before it;
// a failure fails them.
func (s *Sink) runAnsweredLocked(sl slot, r Result, quick bool) {
	// next skips a partition whose run is full or broken: an answer may free it.
	defer s.kick()
	k := sl.j.key
	ru := s.runs[k]
	if ru == nil { // cannot happen: every batch sent is counted in its run
		ru = &run{flying: 1}
		s.runs[k] = ru
	}
	ru.flying--
	ok := r.Err == nil && r.Answer.ErrorCode == 0
	switch {
	case ok && quick && !ru.broken:
		ru.held = append(ru.held, held{sl, r})
		return
	case ok && quick:
		r = Result{Err: ErrUnconfirmed}
	case ok:
		hs := ru.held
		ru.held = nil
		for _, h := range hs {
			s.settleLocked(h.sl, h.r)
		}
	default:
		s.breakRunLocked(k)
	}
	s.tidyRunLocked(k)
	s.settleLocked(sl, r)
}

// breakRunLocked fails a partition's held batches (ErrUnconfirmed) and, while some of its
// batches are still in flight, marks its run broken: their acks=1 successes cannot be
// confirmed any more, and the partition sends nothing until they are answered.
func (s *Sink) breakRunLocked(k tp) {
	if s.runs == nil {
		return
	}
	ru := s.runs[k]
	if ru == nil {
		return
	}
	hs := ru.held
	ru.held = nil
	ru.broken = ru.flying > 0
	s.tidyRunLocked(k)
	for _, h := range hs {
		s.settleLocked(h.sl, Result{Err: ErrUnconfirmed})
	}
}

// breakRuns breaks every partition's run: a connection ended, and no batch held on it will be
// confirmed.
func (s *Sink) breakRuns() {
	if s.runs == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.runs {
		s.breakRunLocked(k)
	}
}

func (s *Sink) tidyRunLocked(k tp) {
	if ru := s.runs[k]; ru != nil && ru.flying == 0 && len(ru.held) == 0 {
		delete(s.runs, k)
	}
}

// failed gives every batch of a request err.
func (s *Sink) failed(f inflight, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sl := range f.slots {
		if s.runs != nil {
			s.runAnsweredLocked(sl, Result{Err: err}, false)
			continue
		}
		s.settleLocked(sl, Result{Err: err})
	}
}

func (s *Sink) settleLocked(sl slot, r Result) {
	j := sl.j
	j.settle(sl.i, r)
	if j.failed {
		// Later batches of a partition whose batch failed are not sent, its own nor those of
		// the partition's Sends queued behind: they would be out of sequence. The caller
		// retries from the failure.
		s.dropBehindLocked(j)
		s.dropLocked(j, ErrNotSent)
		return
	}
	j.finish()
}
