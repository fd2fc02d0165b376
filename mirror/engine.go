package mirror

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/batch"
	"offsetgate/rawread"
	"offsetgate/rules"
	"offsetgate/wire"
)

// The engine mirrors a set of partitions that can grow while it runs (--topic-regex). Every
// partition is owned from the moment it is added until it is done or stopped, whatever
// Parallel says:
//
//   - one fetch loop per source broker reads every partition that broker leads in one Fetch
//     request (as a consumer does), so a following mirror of a thousand partitions keeps a
//     handful of requests in flight, not a thousand long polls queued on one connection;
//   - Parallel writers send what was fetched through offsetgate, one partition at a time per
//     writer: Parallel bounds the produce-at-offset requests in flight and so the connections
//     to offsetgate, not the partitions mirrored;
//   - each partition holds at most two chunks (one being written, one fetched ahead), and the
//     fetch loops stop asking while the bytes fetched and not yet written exceed the budget.
type engine struct {
	cfg    Config
	src    *kgo.Client
	px     *kgo.Client
	conns  *connPool
	tr     *tracker
	budget int64 // bytes fetched and not yet written, at most (a fetch may overshoot by one answer)

	mu        sync.Mutex
	parts     map[partKey]*part
	order     []*part // in the order they were added: fetch requests rotate over it
	fetchers  map[int32]*fetcher
	ready     []*part // partitions with a chunk waiting and no writer, oldest first
	readyWake chan struct{}
	buffered  int64
	open      int // partitions neither done nor stopped, plus one while partitions are being added
	allDone   chan struct{}
	rotate    int
	metaWake  chan struct{}
	wrote     *sync.Cond // on mu: broadcast when a write ends (release waits for its partitions')

	wg sync.WaitGroup // the fetch loops, the writers and the metadata loop
}

type partKey struct {
	topic string
	num   int32
}

// part is one partition's state; every field is guarded by engine.mu.
type part struct {
	topic  string
	id     [16]byte
	num    int32
	leader int32 // source broker leading it; -1 while unknown
	next   int64 // next source offset to fetch
	asked  int64 // the offset the partition's last fetch asked for
	target int64 // a --once run stops here (the source's end at start); -1: following
	max    int32 // partition bytes of the next fetch (more for one batch larger than MaxBytes)
	// compacted: the source's cleaner changes batches after they are mirrored, so the run
	// sends the partition again from the source's log start (offsetgate acknowledges what is
	// unchanged and records what the cleaner changed), at start and every Config.Resync.
	compacted bool

	chunk      *chunk // fetched, waiting for a writer
	writing    bool
	finished   bool
	sum        PartitionSummary
	st         *partStats
	halt       error         // stops the partition once everything before target is written
	writingEnd int64         // the source offset after the chunk being written
	more       chan struct{} // while a writer streams the partition: kicked when a chunk is fetched
	failures   int           // fetch failures in a row
	retryAt    time.Time     // not fetched before this (backing off after a failure)
	// resuming: a following run stopped the partition after a write failure a later attempt
	// can get past, and takes it up again from the mirrored end after a pause (resumeLocked).
	resuming bool
	// released says why the mirror group released the partition ("": it did not).
	released string
	// giveUp is closed when the mirror group releases the partition: a write waiting for
	// another instance's lease ends (the group waits for the partition's writes to end).
	giveUp chan struct{}
}

type chunk struct {
	data []byte
	hs   []batch.Header
	// from is the offset the fetch asked for: the source has no batch between it and the
	// chunk's first (offsetgate marks what it mirrored there gone, on a compacted topic).
	from int64
	// fetched is when the fetch that began the chunk arrived, sent when it first went to
	// offsetgate (the mirror's lag stages).
	fetched, sent time.Time
}

// sending notes when the chunk first went to offsetgate (a retry keeps the first time).
func (c *chunk) sending() {
	if c.sent.IsZero() {
		c.sent = time.Now()
	}
}

func newEngine(cfg Config, src, px *kgo.Client, conns *connPool, tr *tracker) *engine {
	budget := int64(cfg.MaxBytes) * int64(cfg.Parallel) * 4
	budget = max(budget, 16<<20, 2*int64(cfg.MaxBytes))
	budget = min(budget, max(256<<20, 2*int64(cfg.MaxBytes)))
	e := &engine{cfg: cfg, src: src, px: px, conns: conns, tr: tr, budget: budget,
		parts: map[partKey]*part{}, fetchers: map[int32]*fetcher{},
		readyWake: make(chan struct{}, 1), metaWake: make(chan struct{}, 1), allDone: make(chan struct{}),
		open: 1}
	e.wrote = sync.NewCond(&e.mu)
	return e
}

// added says that no more partitions will be added (a run without --topic-regex, once its
// topics are in): the run ends when every partition is done or stopped.
func (e *engine) added() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.releaseLocked()
}

func (e *engine) releaseLocked() {
	e.open--
	if e.open == 0 {
		close(e.allDone)
	}
}

// start runs the writers and the metadata loop until ctx ends.
func (e *engine) start(ctx context.Context) {
	for i := 0; i < e.cfg.Parallel; i++ {
		e.wg.Add(1)
		go func() { defer e.wg.Done(); e.writer(ctx) }()
	}
	e.wg.Add(1)
	go func() { defer e.wg.Done(); e.metadataLoop(ctx) }()
}

// wait returns once every partition is done or stopped, or ctx ended.
func (e *engine) wait(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-e.allDone:
	}
}

// addTopic reads where each partition of topic starts (the mirrored end through offsetgate,
// the source's log start and end) and starts mirroring them. A partition that cannot start
// (records lost to retention, a source that went backwards) is stopped with its reason; an
// error is returned only when the positions could not be read at all.
func (e *engine) addTopic(ctx context.Context, topic string, pr prepared) error {
	nums := make([]int32, pr.parts)
	for p := range nums {
		nums[p] = int32(p)
	}
	return e.addParts(ctx, topic, pr, nums)
}

// addParts starts mirroring some partitions of topic (the ones a mirror group assigned to
// this process, or all of them). A partition this run mirrored before and released is taken
// again from where offsetgate says its mirror ends now.
func (e *engine) addParts(ctx context.Context, topic string, pr prepared, nums []int32) error {
	return e.addPartsAfter(ctx, topic, pr, nums, nil)
}

// addPartsAfter is addParts; with resumed (a partition waiting to be taken up again after a
// failed write) it takes that partition only while it still waits: a mirror group that
// released it meanwhile keeps it released.
func (e *engine) addPartsAfter(ctx context.Context, topic string, pr prepared, nums []int32, resumed *part) error {
	id := pr.id
	sadm, padm := kadm.NewClient(e.src), kadm.NewClient(e.px)
	e.mu.Lock()
	var fresh []int32
	for _, pn := range nums {
		if old := e.parts[partKey{topic, pn}]; old == nil || old.finished {
			fresh = append(fresh, pn) // not an assignment repeated for a partition running here
		}
	}
	nums = fresh
	if len(nums) == 0 {
		e.mu.Unlock()
		return nil
	}
	stats := make([]*partStats, len(nums))
	for i, pn := range nums {
		if old := e.parts[partKey{topic, pn}]; old != nil {
			stats[i] = old.st // one row per partition, however often it comes back
			stats[i].offset.Store(-1)
			stats[i].sourceEnd.Store(-1)
		} else {
			stats[i] = e.tr.add(topic, pn)
		}
		stats[i].state.Store("starting: reading the mirrored end and the source's offsets")
	}
	e.mu.Unlock()
	var ends, starts, mirrored kadm.ListedOffsets
	err := retry(ctx, func() error {
		var err error
		if ends, err = sadm.ListEndOffsets(ctx, topic); err != nil {
			return fmt.Errorf("source end offsets of %s: %w", topic, err)
		}
		if starts, err = sadm.ListStartOffsets(ctx, topic); err != nil {
			return fmt.Errorf("source start offsets of %s: %w", topic, err)
		}
		if mirrored, err = padm.ListEndOffsets(ctx, topic); err != nil {
			return fmt.Errorf("mirrored ends of %s through offsetgate: %w", topic, err)
		}
		// A topic created a moment ago may not be known everywhere yet: partitions missing
		// from an answer, or answered with a retriable error, are asked for again.
		for _, pn := range nums {
			for _, l := range []struct {
				what string
				lo   kadm.ListedOffsets
			}{{"source end", ends}, {"source start", starts}, {"mirrored end through offsetgate", mirrored}} {
				o, ok := l.lo.Lookup(topic, pn)
				if !ok {
					return fmt.Errorf("%s of %s[%d]: partition missing from the answer", l.what, topic, pn)
				}
				if o.Err != nil && kerr.IsRetriable(o.Err) {
					return fmt.Errorf("%s of %s[%d]: %w", l.what, topic, pn, o.Err)
				}
			}
		}
		return nil
	})
	if err != nil {
		if resumed != nil && resumable(err) {
			return err // the caller pauses and tries again
		}
		for _, st := range stats {
			st.state.Store(stoppedPrefix + err.Error())
		}
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, pn := range nums {
		p := &part{topic: topic, id: id, num: pn, leader: -1, target: -1, max: e.cfg.MaxBytes, st: stats[i], compacted: pr.compacted,
			giveUp: make(chan struct{})}
		p.sum = PartitionSummary{Topic: topic, Partition: pn}
		if old := e.parts[partKey{topic, pn}]; old != nil {
			if !old.finished {
				continue // taken meanwhile by a repeated assignment
			}
			if resumed != nil {
				if old != resumed || !old.resuming {
					if old.released != "" {
						old.st.state.Store("released: " + old.released)
					}
					continue // released while its start was read
				}
				old.resuming = false
			}
			p.sum = old.sum // the run's summary counts both spells
			for j := range e.order {
				if e.order[j] == old {
					e.order[j] = p
				}
			}
		} else {
			e.order = append(e.order, p)
		}
		e.parts[partKey{topic, pn}] = p
		e.open++
		if err := p.place(ends, starts, mirrored, e.cfg.follow); err != nil {
			e.stopLocked(p, err)
			continue
		}
		if p.target >= 0 && p.next >= p.target {
			e.finishLocked(p)
			continue
		}
		p.st.state.Store("waiting for the source's leader")
	}
	e.kick(e.metaWake)
	return nil
}

// place sets where the partition starts and, for a --once run, where it ends.
func (p *part) place(ends, starts, mirrored kadm.ListedOffsets, follow bool) error {
	end, ok := ends.Lookup(p.topic, p.num)
	if !ok || end.Err != nil {
		return fmt.Errorf("source end offset: %v", lookupErr(ok, end.Err))
	}
	logStart, ok := starts.Lookup(p.topic, p.num)
	if !ok || logStart.Err != nil {
		return fmt.Errorf("source start offset: %v", lookupErr(ok, logStart.Err))
	}
	me, ok := mirrored.Lookup(p.topic, p.num)
	if !ok || me.Err != nil {
		return fmt.Errorf("mirrored end through offsetgate: %v", lookupErr(ok, me.Err))
	}
	offset := me.Offset
	if offset < logStart.Offset {
		if offset > 0 {
			return fmt.Errorf("the source's log starts at %d, beyond the mirrored end %d: records were lost to retention before they were mirrored", logStart.Offset, offset)
		}
		offset = logStart.Offset
	}
	if offset > end.Offset {
		return fmt.Errorf("%w: the mirror ends at %d, beyond the source's end %d (truncated or recreated)", ErrSourceBackwards, offset, end.Offset)
	}
	p.next = offset
	p.sum.From, p.sum.To = offset, offset
	if p.compacted && offset > logStart.Offset {
		p.next = logStart.Offset // again from the log start: what the cleaner changed is recorded
	}
	p.st.offset.Store(offset)
	p.st.sourceEnd.Store(end.Offset)
	if !follow {
		p.target = end.Offset
	}
	return nil
}

func lookupErr(found bool, err error) error {
	if !found {
		return errors.New("partition missing from the answer")
	}
	return err
}

// resync sends every compacted partition again from the source's log start (when it is not
// reading or writing a chunk right now; the next pass takes the others), so what the source's
// cleaner changed since it was mirrored is recorded.
func (e *engine) resync(ctx context.Context) error {
	e.mu.Lock()
	topics := map[string]bool{}
	for _, p := range e.order {
		if p.compacted && !p.finished {
			topics[p.topic] = true
		}
	}
	e.mu.Unlock()
	if len(topics) == 0 {
		return nil
	}
	var names []string
	for t := range topics {
		names = append(names, t)
	}
	starts, err := kadm.NewClient(e.src).ListStartOffsets(ctx, names...)
	if err != nil {
		return fmt.Errorf("source log starts: %w", err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range e.order {
		if !p.compacted || p.finished || p.chunk != nil || p.writing {
			continue
		}
		if o, ok := starts.Lookup(p.topic, p.num); ok && o.Err == nil && p.next > o.Offset {
			p.next = o.Offset
			e.wakeFetcherLocked(p)
		}
	}
	return nil
}

// partitions is how many partitions of topic the run has taken (the highest number plus one).
func (e *engine) partitions(topic string) int32 {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := int32(0)
	for k := range e.parts {
		if k.topic == topic {
			n = max(n, k.num+1)
		}
	}
	return n
}

// release stops mirroring partitions of topic that another process of the mirror group now
// owns, and returns once none of them is being written: the new owner starts from what
// offsetgate holds after this process's last write. It returns the partitions it released
// and where each one's mirror ended.
func (e *engine) release(topic string, nums []int32, why string) map[int32]int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[int32]int64{}
	var mine []*part
	for _, pn := range nums {
		p := e.parts[partKey{topic, pn}]
		if p != nil && p.resuming {
			// Waiting to be taken up again after a failed write: it is not, here.
			p.resuming, p.released = false, why
			p.st.releasedAs("released: " + why)
			out[p.num] = p.sum.To
			continue
		}
		if p != nil && p.finished && p.sum.Err != nil && p.released == "" {
			// Stopped here on an error: the process the group moved it to mirrors it now (and
			// meets the same error, if it lasts); this process's gauges stop counting it.
			p.released = why
			p.st.releasedAs(fmt.Sprintf("released: %s (it had stopped here: %v)", why, p.sum.Err))
			continue
		}
		if p == nil || p.finished {
			continue
		}
		mine = append(mine, p)
		if p.giveUp != nil {
			close(p.giveUp)
		}
		p.finished = true
		p.st.releasedAs("released: " + why)
		e.closeLocked(p)
	}
	for {
		writing := false
		for _, p := range mine {
			writing = writing || p.writing
		}
		if !writing {
			break
		}
		e.wrote.Wait()
	}
	for _, p := range mine {
		out[p.num] = p.sum.To
	}
	return out
}

// kick wakes a loop without blocking (a wake already pending is enough).
func (e *engine) kick(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (e *engine) stopLocked(p *part, err error) {
	if p.finished {
		return
	}
	if p.writing {
		// The chunk being written finishes first (stopping now would cancel it with the
		// run); what was fetched after it is dropped, and the writer stops the partition.
		if p.chunk != nil {
			e.buffered -= int64(len(p.chunk.data))
			p.chunk = nil
		}
		if p.halt == nil {
			p.halt = err
		}
		p.target = p.writingEnd
		return
	}
	p.finished = true
	p.sum.Err = err
	p.st.state.Store(stoppedPrefix + err.Error())
	e.closeLocked(p)
}

// resumable reports whether a following run takes a partition whose write failed with err up
// again after a pause, rather than stopping it: offsetgate or the destination unreachable or
// slow, a leader moving, a write whose outcome offsetgate could not tell yet. A refusal of what
// was sent (a halted partition, other content at the same offsets, an epoch going back, a
// batch that cannot be mirrored, a missing approval) stops it: sending it again cannot help.
func resumable(err error) bool {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Retriable && ke.Code != rules.ErrHalted && ke.Code != rules.ErrFencedEpoch
	}
	return !errors.Is(err, context.Canceled)
}

// resumeLocked stops p after a write failed with a resumable error and takes it up again after
// a pause (1 s, doubling to 30 s while its writes keep failing) from where offsetgate says its
// mirror ends, as a mirror group takes up a partition assigned to it. Its chunks are dropped:
// what they held is fetched again.
func (e *engine) resumeLocked(ctx context.Context, p *part, err error) {
	p.finished, p.resuming = true, true
	e.open++ // held while the partition waits: a following run of one partition goes on
	e.closeLocked(p)
	wait := e.pauseLocked(p, "a failed write", err)
	pr := prepared{id: p.id, compacted: p.compacted}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		defer func() {
			e.mu.Lock()
			p.resuming = false
			e.releaseLocked()
			e.mu.Unlock()
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			e.mu.Lock()
			again := p.resuming && e.parts[partKey{p.topic, p.num}] == p
			e.mu.Unlock()
			if !again {
				return // released meanwhile, or taken up by the mirror group
			}
			// Reading where to start can fail for as long as what failed the write lasts.
			err := e.addPartsAfter(ctx, p.topic, pr, []int32{p.num}, p)
			if err == nil || ctx.Err() != nil || !resumable(err) {
				return // a failure that is not resumable is the partition's state: stopped
			}
			e.mu.Lock()
			if !p.resuming {
				e.mu.Unlock()
				return
			}
			wait = e.pauseLocked(p, "a failed start", err)
			e.mu.Unlock()
		}
	}()
}

// pauseLocked counts a resume of p and returns the pause before it (1 s, doubling to 30 s while
// its attempts keep failing).
func (e *engine) pauseLocked(p *part, what string, err error) time.Duration {
	n := p.st.resumes
	p.st.resumes++
	wait := min(time.Second<<min(n, 5), 30*time.Second)
	p.st.state.Store(fmt.Sprintf("resuming in %s from the mirrored end after %s (%d in a row): %v", wait, what, n+1, err))
	e.tr.resumed.WithLabelValues(p.topic, strconv.Itoa(int(p.num))).Inc()
	return wait
}

func (e *engine) finishLocked(p *part) {
	if p.finished {
		return
	}
	p.finished = true
	p.st.state.Store("done")
	e.closeLocked(p)
}

func (e *engine) closeLocked(p *part) {
	if p.chunk != nil {
		e.buffered -= int64(len(p.chunk.data))
		p.chunk = nil
	}
	if e.cfg.Progress != nil && !e.cfg.Live && (!e.cfg.follow || p.sum.Err != nil) {
		status := "ok"
		if p.sum.Err != nil {
			status = "error: " + p.sum.Err.Error()
		}
		fmt.Fprintf(e.cfg.Progress, "%s[%d]: offsets %d..%d, %d batches, %d records, %d bytes: %s\n",
			p.topic, p.num, p.sum.From, p.sum.To, p.sum.Batches, p.sum.Records, p.sum.Bytes, status)
	}
	e.releaseLocked()
}

// report writes a line for each partition still running when a following run ends.
func (e *engine) report() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cfg.Progress == nil || e.cfg.Live {
		return
	}
	for _, p := range e.order {
		if !p.finished {
			fmt.Fprintf(e.cfg.Progress, "%s[%d]: offsets %d..%d, %d batches, %d records, %d bytes: ok\n",
				p.topic, p.num, p.sum.From, p.sum.To, p.sum.Batches, p.sum.Records, p.sum.Bytes)
		}
	}
}

// summary is every partition's result, in the order they were added.
func (e *engine) summary() []PartitionSummary {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]PartitionSummary, 0, len(e.order))
	for _, p := range e.order {
		out = append(out, p.sum)
	}
	return out
}

// metadataLoop learns the leaders of partitions that have none (at start, after a leader moved
// or a broker went away), and stops partitions whose source topic was deleted or recreated.
func (e *engine) metadataLoop(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for {
		select {
		case <-ctx.Done():
			return
		case <-e.metaWake:
		}
		for {
			missing, err := e.refreshLeaders(ctx)
			if ctx.Err() != nil {
				return
			}
			if err == nil && missing == 0 {
				backoff = 100 * time.Millisecond
				break
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
		}
	}
}

// refreshLeaders asks the source (uncached) for the topics of partitions without a leader and
// returns how many still have none.
func (e *engine) refreshLeaders(ctx context.Context) (int, error) {
	e.mu.Lock()
	topics := map[string]bool{}
	for _, p := range e.order {
		if !p.finished && p.leader < 0 {
			topics[p.topic] = true
		}
	}
	e.mu.Unlock()
	if len(topics) == 0 {
		return 0, nil
	}
	req := kmsg.NewPtrMetadataRequest()
	for t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, e.src)
	if err != nil {
		e.mu.Lock()
		for _, p := range e.order {
			if !p.finished && p.leader < 0 {
				p.st.state.Store("waiting for the source: " + err.Error())
			}
		}
		e.mu.Unlock()
		return len(topics), err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	byName := map[string]kmsg.MetadataResponseTopic{}
	for _, t := range resp.Topics {
		if t.Topic != nil {
			byName[*t.Topic] = t
		}
	}
	missing := 0
	for _, p := range e.order {
		if p.finished || p.leader >= 0 || !topics[p.topic] {
			continue // a topic added while the request was out is asked about next time
		}
		t, ok := byName[p.topic]
		terr := kerr.ErrorForCode(t.ErrorCode)
		switch {
		case !ok || errors.Is(terr, kerr.UnknownTopicOrPartition):
			e.stopLocked(p, fmt.Errorf("%w: source topic %s was deleted", ErrSourceBackwards, p.topic))
			continue
		case terr != nil:
			p.st.state.Store("waiting for the source's leader: " + terr.Error())
			missing++
			continue
		case t.TopicID != p.id:
			e.stopLocked(p, fmt.Errorf("%w: source topic %s was deleted and recreated (topic id changed)", ErrSourceBackwards, p.topic))
			continue
		}
		leader := int32(-1)
		for _, mp := range t.Partitions {
			if mp.Partition == p.num && mp.ErrorCode == 0 {
				leader = mp.Leader
			}
		}
		if leader < 0 {
			p.st.state.Store("waiting for the source's leader")
			missing++
			continue
		}
		p.leader = leader
		p.st.state.Store("mirroring")
		e.fetcherLocked(ctx, leader)
	}
	for _, p := range e.order {
		if !p.finished && p.leader < 0 && !topics[p.topic] {
			missing++
		}
	}
	return missing, nil
}

// fetcherLocked returns the fetch loop of a source broker, starting it on first use, and
// wakes it.
func (e *engine) fetcherLocked(ctx context.Context, broker int32) *fetcher {
	f := e.fetchers[broker]
	if f == nil {
		f = &fetcher{e: e, broker: broker, wake: make(chan struct{}, 1)}
		e.fetchers[broker] = f
		e.wg.Add(1)
		go func() { defer e.wg.Done(); f.run(ctx) }()
	}
	e.kick(f.wake)
	return f
}

// wakeFetcherLocked wakes the fetch loop of p's leader, if it has one.
func (e *engine) wakeFetcherLocked(p *part) {
	if f := e.fetchers[p.leader]; f != nil {
		e.kick(f.wake)
	}
}

// lostLeaderLocked sends p back to the metadata loop.
func (e *engine) lostLeaderLocked(p *part, why error) {
	p.leader = -1
	p.st.state.Store("waiting for the source's leader: " + why.Error())
	e.kick(e.metaWake)
}

// failedLocked counts a failed fetch of p: a --once run stops the partition after many in a
// row; a following run backs off and tries again for as long as it runs (the state says why).
func (e *engine) failedLocked(p *part, err error) {
	p.failures++
	if !e.cfg.follow && p.failures >= 20 {
		e.stopLocked(p, err)
		return
	}
	p.retryAt = time.Now().Add(time.Duration(min(p.failures, 20)) * 100 * time.Millisecond)
	p.st.state.Store(fmt.Sprintf("retrying (%d): %v", p.failures, err))
}

// fetcher is the fetch loop of one source broker.
type fetcher struct {
	e      *engine
	broker int32
	wake   chan struct{}
}

// busyWait is the wait of a fetch while one of the broker's partitions is being written: it
// will want its next chunk soon, and a long poll of the others would hold it back.
const busyWait = 20 * time.Millisecond

// leaseWait starts a partition's state while its writes wait for another instance's lease.
const leaseWait = "waiting for the partition's lease"

func (f *fetcher) run(ctx context.Context) {
	e := f.e
	for {
		req, asked, wait := f.request()
		if req == nil {
			timer := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case <-f.wake:
			case <-timer.C:
			}
			timer.Stop()
			continue
		}
		kr, err := e.src.Broker(int(f.broker)).Request(ctx, req)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			e.mu.Lock()
			for _, p := range asked {
				if !p.finished {
					e.failedLocked(p, fmt.Errorf("fetch from source broker %d: %w", f.broker, err))
					e.lostLeaderLocked(p, err)
				}
			}
			e.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		f.handle(ctx, asked, kr.(*kmsg.FetchResponse))
	}
}

// request builds the next Fetch of this broker's partitions that can take a chunk, or returns
// nil and how long to wait for one.
func (f *fetcher) request() (*kmsg.FetchRequest, []*part, time.Duration) {
	e := f.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.buffered >= e.budget {
		return nil, nil, time.Second // a writer wakes us when it took a chunk
	}
	now := time.Now()
	n := len(e.order)
	var asked []*part
	busy := false
	soonest := time.Second
	var big *part // a partition whose next batch is larger than MaxBytes goes first
	for i := 0; i < n; i++ {
		p := e.order[(i+e.rotate)%n]
		if p.finished || p.leader != f.broker {
			continue
		}
		if p.chunk != nil || p.writing {
			busy = true
		}
		if (p.chunk != nil && (len(p.chunk.data) >= int(e.cfg.MaxBytes) || p.max > e.cfg.MaxBytes)) || (p.target >= 0 && p.next >= p.target) {
			continue
		}
		if now.Before(p.retryAt) {
			soonest = min(soonest, p.retryAt.Sub(now))
			continue
		}
		if p.max > e.cfg.MaxBytes && big == nil {
			big = p
			continue
		}
		asked = append(asked, p)
	}
	e.rotate++
	if big != nil {
		asked = append([]*part{big}, asked...)
	}
	if len(asked) == 0 {
		return nil, nil, soonest
	}
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID, req.MinBytes, req.IsolationLevel = -1, 1, 0 // read_uncommitted: markers and open transactions are seen
	req.MaxWaitMillis = int32(rawread.FetchWait.Milliseconds())
	if busy || !e.cfg.follow {
		req.MaxWaitMillis = int32(busyWait.Milliseconds())
	}
	req.MaxBytes = int32(min(max(e.budget-e.buffered, int64(e.cfg.MaxBytes)), 50<<20))
	topics := map[string]int{}
	for _, p := range asked {
		i, ok := topics[p.topic]
		if !ok {
			i = len(req.Topics)
			topics[p.topic] = i
			ft := kmsg.NewFetchRequestTopic()
			ft.Topic, ft.TopicID = p.topic, p.id
			req.Topics = append(req.Topics, ft)
		}
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.Partition, fp.FetchOffset, fp.PartitionMaxBytes = p.num, p.next, p.max
		if p.chunk != nil {
			// A chunk waiting for its writer grows: what arrives while the partition's previous
			// chunk is written goes out with the next write, not one write later (lag).
			fp.PartitionMaxBytes = max(e.cfg.MaxBytes-int32(len(p.chunk.data)), 1)
		}
		p.asked = p.next
		fp.CurrentLeaderEpoch, fp.LogStartOffset = -1, -1
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, fp)
	}
	return req, asked, 0
}

// handle takes a Fetch answer: chunks for the writers, errors for the partitions they belong to.
func (f *fetcher) handle(ctx context.Context, asked []*part, resp *kmsg.FetchResponse) {
	e := f.e
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		e.mu.Lock()
		for _, p := range asked {
			if !p.finished {
				e.failedLocked(p, fmt.Errorf("fetch from source broker %d: %w", f.broker, err))
			}
		}
		e.mu.Unlock()
		return
	}
	type key struct {
		id   [16]byte
		name string
		num  int32
	}
	answers := map[key]*kmsg.FetchResponseTopicPartition{}
	for ti := range resp.Topics {
		t := &resp.Topics[ti]
		for pi := range t.Partitions {
			rp := &t.Partitions[pi]
			answers[key{t.TopicID, t.Topic, rp.Partition}] = rp
		}
	}
	var outOfRange []*part
	e.mu.Lock()
	for _, p := range asked {
		if p.finished || p.leader != f.broker || p.next != p.asked {
			continue // p.next moved (a new start, a rewind) while the fetch was out: stale
		}
		rp := answers[key{p.id, "", p.num}]
		if rp == nil {
			rp = answers[key{[16]byte{}, p.topic, p.num}]
		}
		if rp == nil {
			continue // not answered (the answer's byte budget ran out): asked again next time
		}
		if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
			switch {
			case errors.Is(err, kerr.OffsetOutOfRange):
				outOfRange = append(outOfRange, p)
			case errors.Is(err, kerr.NotLeaderForPartition), errors.Is(err, kerr.FencedLeaderEpoch),
				errors.Is(err, kerr.UnknownLeaderEpoch), errors.Is(err, kerr.LeaderNotAvailable),
				errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.UnknownTopicID),
				errors.Is(err, kerr.KafkaStorageError), errors.Is(err, kerr.ReplicaNotAvailable),
				errors.Is(err, kerr.InconsistentTopicID):
				e.lostLeaderLocked(p, err)
			default:
				e.failedLocked(p, fmt.Errorf("fetch from the source (broker %d) at %d: %w", f.broker, p.next, err))
			}
			continue
		}
		p.failures = 0
		// A fetch answer says the source is readable; it does not end what the partition's
		// writer waits for (another instance's lease), which the writer clears itself.
		if s, _ := p.st.state.Load().(string); s != "mirroring" && !(p.writing && strings.HasPrefix(s, leaseWait)) {
			p.st.state.Store("mirroring")
		}
		p.st.sourceEnd.Store(rp.HighWatermark)
		e.takeLocked(p, rp.RecordBatches)
	}
	e.mu.Unlock()
	for _, p := range outOfRange {
		f.checkRange(ctx, p)
	}
}

// takeLocked keeps the whole batches of a partition's answer as its next chunk.
func (e *engine) takeLocked(p *part, records []byte) {
	sets, hs, err := batch.Split(records)
	if errors.Is(err, batch.ErrTruncated) {
		sets, err = rawread.WholeBatches(records), nil
		hs = hs[:0]
		for _, b := range sets {
			h, _ := batch.ReadHeader(b)
			hs = append(hs, h)
		}
	}
	if err != nil {
		e.stopLocked(p, fmt.Errorf("the source's answer at offset %d: %w", p.next, err))
		return
	}
	if len(sets) == 0 && len(records) > 0 {
		// One batch larger than the partition's bytes: ask for it whole, first in the next fetch
		// (the broker returns a larger batch whole only to the first partition it fills).
		if h, herr := batch.ReadHeader(records); herr == nil && int32(h.Size()) > p.max {
			p.max = int32(h.Size())
		}
		return
	}
	p.max = e.cfg.MaxBytes
	// A chunk waiting for its writer grows by whole batches, up to MaxBytes (the rest is
	// fetched again); otherwise the answer is a new chunk.
	now := time.Now()
	c, growing := p.chunk, p.chunk != nil
	if !growing {
		c = &chunk{from: p.next, fetched: now}
	}
	added, before := 0, len(c.hs)
	for i, b := range sets {
		h := hs[i]
		if h.LastOffset() < p.next || (p.target >= 0 && h.BaseOffset >= p.target) {
			continue
		}
		if growing && len(c.data)+len(b) > int(e.cfg.MaxBytes) {
			// Full: the chunk stops growing until a writer takes it, and the batch that did
			// not fit is asked for whole then.
			p.max = max(e.cfg.MaxBytes+1, int32(len(b)))
			break
		}
		c.data = append(c.data, b...)
		c.hs = append(c.hs, h)
		added += len(b)
	}
	if added == 0 {
		return
	}
	e.tr.fetched(now, c.hs[before:])
	p.next = c.hs[len(c.hs)-1].LastOffset() + 1
	e.buffered += int64(added)
	if growing {
		return
	}
	c.from = min(c.from, c.hs[0].BaseOffset) // a batch that holds the fetch offset starts before it
	p.chunk = c
	if !p.writing {
		e.ready = append(e.ready, p)
		e.kick(e.readyWake)
	} else if p.more != nil {
		e.kick(p.more)
	}
}

// checkRange tells a source that went backwards (its end is below the fetch offset) from a
// moment of leader change, and a log start that passed what was mirrored.
func (f *fetcher) checkRange(ctx context.Context, p *part) {
	e := f.e
	e.mu.Lock()
	topic, num, next := p.topic, p.num, p.next
	e.mu.Unlock()
	err := rawread.New(e.src, topic, num).OutOfRange(ctx, next)
	e.mu.Lock()
	defer e.mu.Unlock()
	if p.finished {
		return // released or stopped meanwhile
	}
	if err != nil {
		e.stopLocked(p, err)
		return
	}
	e.lostLeaderLocked(p, kerr.OffsetOutOfRange)
}

// writer sends chunks through offsetgate, one partition at a time, until ctx ends.
func (e *engine) writer(ctx context.Context) {
	for {
		p, c := e.nextChunk(ctx)
		if p == nil {
			return
		}
		if e.cfg.Depth > 1 {
			e.stream(ctx, p, c)
			continue
		}
		err := e.writeChunk(ctx, p, c)
		e.mu.Lock()
		e.landedLocked(p, c, err)
		e.endLocked(ctx, p, err)
		e.mu.Unlock()
	}
}

// writeChunk sends one chunk through offsetgate and waits for its answer (retrying what is
// retriable with the same batches).
func (e *engine) writeChunk(ctx context.Context, p *part, c *chunk) error {
	waited := false
	c.sending()
	err := produceAtOffset(ctx, e.px, e.conns, p.topic, p.num, c.data, c.from, func(why string) {
		waited = true
		p.st.state.Store(why)
	}, p.giveUp)
	if s, _ := p.st.state.Load().(string); waited && err == nil && strings.HasPrefix(s, leaseWait) {
		p.st.state.Store("mirroring")
	}
	if err != nil {
		return fmt.Errorf("at offset %d: %w", c.hs[0].BaseOffset, err)
	}
	return nil
}

// landedLocked accounts for one chunk whose write ended (err: it failed).
func (e *engine) landedLocked(p *part, c *chunk, err error) {
	if e.buffered >= e.budget && e.buffered-int64(len(c.data)) < e.budget {
		for _, f := range e.fetchers {
			e.kick(f.wake) // under budget again: every fetch loop may read
		}
	}
	e.buffered -= int64(len(c.data))
	if err != nil || p.finished {
		return
	}
	e.tr.landed(time.Now(), c.fetched, c.sent, c.hs)
	p.st.resumes = 0
	for _, h := range c.hs {
		p.sum.Batches++
		p.sum.Records += int64(h.RecordCount)
	}
	p.sum.Bytes += int64(len(c.data))
	// Only forward: a compacted partition sent again from its log start moves through
	// offsets it already mirrored.
	p.sum.To = max(p.sum.To, c.hs[len(c.hs)-1].LastOffset()+1)
	p.st.offset.Store(p.sum.To)
	p.st.records.Store(p.sum.Records)
	p.st.bytes.Store(p.sum.Bytes)
}

// endLocked ends a writer's turn with a partition (err: its last write failed).
func (e *engine) endLocked(ctx context.Context, p *part, err error) {
	p.writing = false
	e.wrote.Broadcast()
	switch {
	case p.finished:
	case err != nil && ctx.Err() != nil:
		// Stopped on purpose: the next run resumes from the mirrored end.
	case err != nil && e.cfg.follow && resumable(err):
		e.resumeLocked(ctx, p, err)
	case err != nil:
		e.stopLocked(p, err)
	case p.target >= 0 && p.sum.To >= p.target && p.halt != nil:
		e.stopLocked(p, p.halt)
	case p.target >= 0 && p.sum.To >= p.target:
		e.finishLocked(p)
	case p.chunk != nil:
		e.ready = append(e.ready, p)
		e.kick(e.readyWake)
	}
	e.wakeFetcherLocked(p)
}

// stream writes a partition's chunks with up to Depth produce-at-offset requests in flight on
// one connection (each with its from offset, so offsetgate can tell a request missing between
// two): offsetgate appends a request's ledger entries while the data of the one before are on
// their way. It takes the partition's next chunk as soon as one is fetched, as long as no other
// partition waits for a writer (a writer is shared fairly, as one chunk at a time shares it).
// After a failed answer the chunks from that one on are sent again one by one, with retries,
// as the writer without pipelining sends them: offsetgate acknowledges what it already has.
func (e *engine) stream(ctx context.Context, p *part, first *chunk) {
	var sent []*chunk // in flight, oldest first
	var tail []*chunk // taken but never sent
	conn, addr, err := e.pipeConn(ctx, p)
	type request struct {
		req  kmsg.Request
		corr int32
	}
	type answer struct {
		resp *kmsg.ProduceResponse
		err  error
	}
	// At most Depth requests are in flight, so neither channel ever blocks.
	toRead := make(chan request, e.cfg.Depth)
	answers := make(chan answer, e.cfg.Depth)
	readerDone := make(chan struct{})
	if err == nil {
		// Answers come in request order; after a failed read every answer fails.
		go func() {
			defer close(readerDone)
			var err error
			for r := range toRead {
				resp := kmsg.NewPtrProduceResponse()
				if err == nil {
					_ = conn.SetReadDeadline(time.Now().Add(time.Minute))
					err = conn.Receive(r.req, resp, r.corr)
				}
				answers <- answer{resp: resp, err: err}
			}
		}()
	} else {
		close(readerDone)
	}
	send := func(c *chunk) bool {
		if conn == nil {
			return false
		}
		req := atOffsetRequest(p.topic, p.num, c.data)
		c.sending()
		corr, err := conn.SendAtOffset(req, c.from)
		if err != nil {
			return false
		}
		sent = append(sent, c)
		toRead <- request{req: req, corr: corr}
		return true
	}
	more := make(chan struct{}, 1)
	e.mu.Lock()
	p.more = more
	e.mu.Unlock()
	broken := !send(first)
	if broken {
		tail = append(tail, first)
	}
	taken := 1
	for len(sent) > 0 && !broken {
		if len(sent) < e.cfg.Depth && taken < streamChunks {
			e.mu.Lock()
			c := e.takeMoreLocked(p)
			e.mu.Unlock()
			if c != nil {
				taken++
				if !send(c) {
					tail, broken = append(tail, c), true
				}
				continue
			}
		}
		select {
		case a := <-answers:
			if a.err != nil || answerErr(a.resp) != nil {
				broken = true
				continue
			}
			c := sent[0]
			sent = sent[1:]
			e.mu.Lock()
			e.landedLocked(p, c, nil)
			e.mu.Unlock()
		case <-more:
		case <-ctx.Done():
			broken = true
		}
	}
	close(toRead)
	if conn != nil {
		if broken {
			e.conns.discard(conn) // answers still on their way are not waited for
		}
		<-readerDone
		if !broken {
			e.conns.put(addr, conn)
		}
	}
	// From the first chunk not confirmed on, one by one, with retries: what offsetgate refused
	// behind a failure is written now, what landed all the same is acknowledged.
	var werr error
	for _, c := range append(sent, tail...) {
		if werr == nil {
			werr = e.writeChunk(ctx, p, c)
		}
		e.mu.Lock()
		e.landedLocked(p, c, werr)
		e.mu.Unlock()
	}
	e.mu.Lock()
	p.more = nil
	e.endLocked(ctx, p, werr)
	e.mu.Unlock()
}

// streamChunks bounds the chunks of one stream: then it drains, and offsetgate, with none of
// the partition's writes unconfirmed for a moment, may store a snapshot of it (it stores none
// while writes are on their way).
const streamChunks = 64

// answerErr is the error of a produce-at-offset answer for one partition, nil when written.
func answerErr(resp *kmsg.ProduceResponse) error {
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return errors.New("malformed produce response")
	}
	if code := resp.Topics[0].Partitions[0].ErrorCode; code != 0 {
		return kerr.ErrorForCode(code)
	}
	return nil
}

// pipeConn is a connection of its own to the offsetgate broker leading p.
func (e *engine) pipeConn(ctx context.Context, p *part) (*wire.Conn, string, error) {
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	addr, err := e.conns.leader(lctx, e.px, p.topic, p.num, false)
	if err != nil {
		return nil, "", err
	}
	c, err := e.conns.get(lctx, addr)
	if err != nil {
		return nil, "", err
	}
	return c, addr, nil
}

// takeMoreLocked hands a streaming writer its partition's next chunk, unless the partition is
// done or stopping, or another partition waits for a writer.
func (e *engine) takeMoreLocked(p *part) *chunk {
	if p.finished || p.halt != nil || p.chunk == nil {
		return nil
	}
	for _, q := range e.ready {
		if q != p && !q.finished && !q.writing && q.chunk != nil {
			return nil
		}
	}
	return e.takeChunkLocked(p)
}

// takeChunkLocked hands p's waiting chunk to the writer that holds p.
func (e *engine) takeChunkLocked(p *part) *chunk {
	c := p.chunk
	p.chunk = nil
	p.writingEnd = c.hs[len(c.hs)-1].LastOffset() + 1
	e.wakeFetcherLocked(p) // it may fetch ahead while this chunk is written
	return c
}

// nextChunk hands a writer the oldest waiting chunk, or nil when ctx ended.
func (e *engine) nextChunk(ctx context.Context) (*part, *chunk) {
	for {
		e.mu.Lock()
		for len(e.ready) > 0 {
			p := e.ready[0]
			e.ready = e.ready[1:]
			if p.finished || p.chunk == nil || p.writing {
				continue
			}
			p.writing = true
			c := e.takeChunkLocked(p)
			if len(e.ready) > 0 {
				e.kick(e.readyWake) // another writer may take the next one
			}
			e.mu.Unlock()
			return p, c
		}
		e.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, nil
		case <-e.readyWake:
		}
	}
}
