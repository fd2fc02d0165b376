package mirror

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A mirror group: several following runs started with the same Config.MirrorGroup share the
// partitions of their topics. Kafka's consumer-group protocol assigns them (a member of the
// group on the source cluster, cooperative-sticky, so a rebalance moves only the partitions it
// must); a process that dies or leaves loses its partitions to the others once its session
// times out. The member never fetches through the group: the engine reads raw batches as in a
// run of one, and the group's committed offsets are not used (where a partition resumes is
// what offsetgate says its mirror holds, as for any restart).

// DefaultGroupSessionTimeout is how long a silent member of a mirror group keeps its
// partitions: a killed process's partitions move to the others after about this long.
const DefaultGroupSessionTimeout = 10 * time.Second

// groupMember is this run's place in its mirror group. Its worker goroutine applies the
// group's decisions to the engine in the order they were made; it ends with close.
type groupMember struct {
	cfg     Config
	eng     *engine
	prepare func(ctx context.Context, topic string, need int32) (prepared, error)
	cl      *kgo.Client

	mu      sync.Mutex
	pending map[string][]int32        // assigned, not started yet (the positions could not be read)
	owned   map[string]map[int32]bool // assigned and not released: the group's word, started or not

	jobs chan func()
	stop chan struct{}
	done chan struct{}
}

// joinGroup makes this run a member of cfg.MirrorGroup for topics (and, with a regex, every
// source topic matching it) and starts the partitions the group assigns to it.
func joinGroup(ctx context.Context, cfg Config, eng *engine, topics []string,
	prepare func(ctx context.Context, topic string, need int32) (prepared, error)) (*groupMember, error) {
	m := &groupMember{cfg: cfg, eng: eng, prepare: prepare, pending: map[string][]int32{}, owned: map[string]map[int32]bool{},
		jobs: make(chan func(), 64), stop: make(chan struct{}), done: make(chan struct{})}
	session := cfg.GroupSessionTimeout
	if session <= 0 {
		session = DefaultGroupSessionTimeout
	}
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(cfg.Source...), kgo.ClientID("offsetgate-mirror-group"),
		kgo.ConsumerGroup(cfg.MirrorGroup),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.SessionTimeout(session), kgo.HeartbeatInterval(session / 5),
		kgo.DisableAutoCommit(),
		// New topics and partitions on the source are seen (and assigned) this often.
		kgo.MetadataMaxAge(metadataAge(cfg.GroupInterval)), kgo.MetadataMinAge(500 * time.Millisecond),
		kgo.OnPartitionsAssigned(m.assigned),
		kgo.OnPartitionsRevoked(func(_ context.Context, cl *kgo.Client, revoked map[string][]int32) {
			m.released(revoked, "mirror group "+cfg.MirrorGroup+" moved it to another process")
		}),
		kgo.OnPartitionsLost(func(_ context.Context, cl *kgo.Client, lost map[string][]int32) {
			m.released(lost, "this process lost its place in mirror group "+cfg.MirrorGroup+" (its session timed out); it rejoins")
		}),
	}, cfg.SourceOpts...)
	// Every source topic matching the regex is a candidate, as in a run of one (internal
	// topics are left out by the client); named topics are matched exactly.
	var patterns []string
	for _, t := range topics {
		patterns = append(patterns, "^"+regexp.QuoteMeta(t)+"$")
	}
	if cfg.TopicRegex != nil {
		patterns = append(patterns, cfg.TopicRegex.String())
	}
	opts = append(opts, kgo.ConsumeRegex(), kgo.ConsumeTopics(patterns...))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("joining mirror group %s: %w", cfg.MirrorGroup, err)
	}
	m.cl = cl
	cl.PauseFetchTopics(topics...) // the engine reads; the group's client never fetches
	go m.work(ctx)
	return m, nil
}

// assigned runs on the group client's goroutine before it would fetch: the topics are paused
// there, and the engine takes the partitions on the member's worker (reading where each
// starts takes round trips, which must not hold the group's heartbeats).
func (m *groupMember) assigned(_ context.Context, cl *kgo.Client, assigned map[string][]int32) {
	for topic := range assigned {
		cl.PauseFetchTopics(topic)
	}
	m.mu.Lock()
	for topic, nums := range assigned {
		m.pending[topic] = append(m.pending[topic], nums...)
		if m.owned[topic] == nil {
			m.owned[topic] = map[int32]bool{}
		}
		for _, n := range nums {
			m.owned[topic][n] = true
		}
	}
	m.mu.Unlock()
	m.send(func() {})
}

// released stops partitions the group took away, and returns only once the engine is no
// longer writing them: the next owner starts from what offsetgate then holds.
func (m *groupMember) released(parts map[string][]int32, why string) {
	m.mu.Lock()
	for topic, nums := range parts {
		drop := map[int32]bool{}
		for _, n := range nums {
			drop[n] = true
			delete(m.owned[topic], n)
		}
		if len(m.owned[topic]) == 0 {
			delete(m.owned, topic)
		}
		var keep []int32
		for _, n := range m.pending[topic] {
			if !drop[n] {
				keep = append(keep, n)
			}
		}
		if len(keep) == 0 {
			delete(m.pending, topic)
		} else {
			m.pending[topic] = keep
		}
	}
	m.mu.Unlock()
	finished := make(chan struct{})
	if !m.send(func() {
		defer close(finished)
		for _, topic := range sortedTopics(parts) {
			ends := m.eng.release(topic, parts[topic], why)
			if len(ends) > 0 && m.cfg.Progress != nil {
				fmt.Fprintf(m.cfg.Progress, "%s: partitions %s released (%s), mirrored to %s\n",
					topic, listParts(parts[topic]), why, listEnds(ends))
			}
		}
	}) {
		// The worker has stopped (the run is ending): release here, after it.
		for topic, nums := range parts {
			m.eng.release(topic, nums, why)
		}
		return
	}
	<-finished
}

// holds reports whether the group has this partition assigned to this process.
func (m *groupMember) holds(topic string, partition int32) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.owned[topic][partition]
}

// ownedTopics lists the topics of which this process holds partitions.
func (m *groupMember) ownedTopics() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.owned))
	for t := range m.owned {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// groupCopier says whether this process copies the consumer groups' offsets for the whole
// mirror group (Config.Groups), and for which topics: every topic the group mirrors, by the
// process that holds partition 0 of the first of them. Each process reading every source
// group on every pass multiplied the same reads, and the same idempotent commits, by the
// group's size. During a rebalance there may be no such process for a pass, or briefly two
// (the copy never moves a group backwards, so two copies are one).
func (m *groupMember) groupCopier() ([]string, bool) {
	return copierOf(m.cl.GetConsumeTopics(), m.holds)
}

func copierOf(topics []string, holds func(string, int32) bool) ([]string, bool) {
	if len(topics) == 0 {
		return nil, false
	}
	topics = append([]string(nil), topics...)
	sort.Strings(topics)
	return topics, holds(topics[0], 0)
}

// send queues a job for the worker; false once the worker has stopped.
func (m *groupMember) send(job func()) bool {
	select {
	case m.jobs <- job:
		return true
	case <-m.done:
		return false
	}
}

// work applies the group's decisions in order, and starts what is assigned and not started
// (again every second while a start fails: the source or offsetgate is away for a moment).
func (m *groupMember) work(ctx context.Context) {
	defer close(m.done)
	retry := time.NewTicker(time.Second)
	defer retry.Stop()
	for {
		select {
		case <-m.stop:
			return
		case job := <-m.jobs:
			job()
		case <-retry.C:
		}
		m.startPending(ctx)
	}
}

func (m *groupMember) startPending(ctx context.Context) {
	m.mu.Lock()
	pending := m.pending
	m.pending = map[string][]int32{}
	m.mu.Unlock()
	for _, topic := range sortedTopics(pending) {
		nums := pending[topic]
		if ctx.Err() != nil {
			return
		}
		need := int32(0)
		for _, n := range nums {
			need = max(need, n+1)
		}
		pr, err := m.prepare(ctx, topic, need)
		if err == nil && pr.parts < need {
			err = fmt.Errorf("the source topic has %d partitions, the group assigned partition %d", pr.parts, need-1)
		}
		if err == nil {
			err = m.eng.addParts(ctx, topic, pr, nums)
		}
		if err != nil {
			if ctx.Err() == nil && m.cfg.Progress != nil {
				fmt.Fprintf(m.cfg.Progress, "%s: partitions %s assigned by mirror group %s, not started (tried again): %v\n",
					topic, listParts(nums), m.cfg.MirrorGroup, err)
			}
			m.mu.Lock()
			m.pending[topic] = append(m.pending[topic], nums...)
			m.mu.Unlock()
			continue
		}
		if m.cfg.Progress != nil {
			fmt.Fprintf(m.cfg.Progress, "%s: partitions %s assigned by mirror group %s: mirroring\n", topic, listParts(nums), m.cfg.MirrorGroup)
		}
	}
}

// close leaves the group, which releases this run's partitions (waiting for the writes in
// flight), then stops the worker. Call it before the engine stops.
func (m *groupMember) close() {
	m.cl.Close()
	close(m.stop)
	<-m.done
}

// metadataAge is how often the group's client reads the source's topics: the run's group
// interval (5 s when unset), at least a second.
func metadataAge(interval time.Duration) time.Duration {
	if interval <= 0 {
		return 5 * time.Second
	}
	return max(interval, time.Second)
}

func sortedTopics(m map[string][]int32) []string {
	out := make([]string, 0, len(m))
	for t := range m {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

func listParts(nums []int32) string {
	s := append([]int32(nil), nums...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	parts := make([]string, len(s))
	for i, n := range s {
		parts[i] = fmt.Sprint(n)
	}
	return strings.Join(parts, ",")
}

func listEnds(ends map[int32]int64) string {
	nums := make([]int32, 0, len(ends))
	for n := range ends {
		nums = append(nums, n)
	}
	sort.Slice(nums, func(i, j int) bool { return nums[i] < nums[j] })
	parts := make([]string, len(nums))
	for i, n := range nums {
		parts[i] = fmt.Sprintf("[%d] %d", n, ends[n])
	}
	return strings.Join(parts, ", ")
}
