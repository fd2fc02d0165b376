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
package sink

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

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

// ErrNotSent is the outcome of a batch that was never sent: an earlier batch of its partition
// failed, or the sink closed.
var ErrNotSent = errors.New("not sent: an earlier batch of the partition failed")

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
}

// Sink is the batch sender of one broker address. It owns two goroutines per connection (a
// writer and a reader), started by the first Send and stopped by Close.
type Sink struct {
	addr    string
	dial    func(ctx context.Context, addr string) (*wire.Conn, error)
	timeout time.Duration
	sent    func(batches int) // called for every request written

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
func New(addr string, dial func(ctx context.Context, addr string) (*wire.Conn, error), timeout time.Duration, sent func(batches int)) *Sink {
	ctx, cancel := context.WithCancel(context.Background())
	if sent == nil {
		sent = func(int) {}
	}
	return &Sink{addr: addr, dial: dial, timeout: timeout, sent: sent, wake: make(chan struct{}, 1), ctx: ctx, cancel: cancel}
}

// Close stops the sink; batches waiting get ErrNotSent, those in flight the connection's error.
func (s *Sink) Close() {
	s.mu.Lock()
	s.closed = true
	jobs := s.jobs
	s.jobs = nil
	for _, j := range jobs {
		s.dropLocked(j, ErrNotSent)
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
		s.dropLocked(j, ErrNotSent)
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
	sent := make(chan inflight, Depth)
	free := make(chan struct{}, Depth)
	for i := 0; i < Depth; i++ {
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
		f.corr = corr
		s.sent(len(f.slots))
		sent <- f
	}
}

// next builds the next request: the next batch of every partition waiting, in arrival order
// (a partition's later Send waits until its earlier one has sent everything).
func (s *Sink) next() inflight {
	s.mu.Lock()
	defer s.mu.Unlock()
	var f inflight
	bytes := 0
	topics := map[tp]int{} // topic (partition 0 key) to its index in the request
	taken := map[tp]bool{} // partitions with a job met already: one batch each per request
	for _, j := range s.jobs {
		if taken[j.key] || j.next >= len(j.batches) {
			continue
		}
		taken[j.key] = true
		b := j.batches[j.next]
		if len(f.slots) > 0 && bytes+len(b) > maxRequestBytes {
			break
		}
		if f.req == nil {
			f.req = kmsg.NewPtrProduceRequest()
			f.req.SetVersion(9) // names topics; every broker offsetgate supports takes it
			f.req.Acks, f.req.TimeoutMillis = -1, int32(s.timeout/time.Millisecond)
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
		s.settleLocked(sl, r)
	}
}

// failed gives every batch of a request err.
func (s *Sink) failed(f inflight, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sl := range f.slots {
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
