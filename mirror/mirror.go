// Package mirror is offsetgate's mirroring client: it reads raw record batches from the source
// cluster (read_uncommitted, kept as bytes) and sends them through offsetgate as
// produce-at-offset requests, with the magic header, starting where offsetgate says each
// partition's mirror ends.
package mirror

import (
	"context"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"

	"offsetgate/rawread"
	"offsetgate/rules"
	"offsetgate/wire"
)

// Config is one mirroring run.
type Config struct {
	Source     []string
	SourceOpts []kgo.Opt // TLS / SASL towards the source
	Proxy      []string
	ProxyTLS   *tls.Config    // TLS towards offsetgate (a client certificate proves the identity)
	ProxySASL  sasl.Mechanism // or a SASL login
	Topics     []string
	// MaxBytes bounds one fetch from the source and one produce-at-offset request.
	MaxBytes int32
	// ReplicationFactor of mirror topics this run creates; -1: the destination's default.
	ReplicationFactor int16
	// Parallel is how many produce-at-offset requests are in flight at once (and so how many
	// connections to each of offsetgate's brokers the run holds). Every partition is mirrored
	// whatever its value: a partition waits for a free writer only while it has records to
	// write. DefaultParallel when zero.
	Parallel int
	// Depth is how many produce-at-offset requests of one partition a writer keeps in flight
	// (pipelined on its connection, while no other partition waits for a writer); 1: each
	// waits for the answer to the one before. 2 when zero.
	Depth int
	// Progress, when set, gets one line per partition as it finishes.
	Progress io.Writer
	// Dial, when set, opens the connections to offsetgate (a seam for fault-injection tests).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// follow keeps mirroring new records until the context ends (Follow sets it).
	follow bool
	// ProgressEvery is how often a following run prints each partition's position.
	ProgressEvery time.Duration
	// Resync is how often a following run sends compacted partitions again from the source's
	// log start, to record what the source's cleaner changed (5 minutes when zero). Keep it
	// well below rules.CompactionMargin: the destination compacts that much later than the
	// source must have.
	Resync time.Duration
	// Groups, when set, selects the source consumer groups whose committed offsets are copied
	// to the destination (after a --once run; every GroupInterval while following).
	Groups        *regexp.Regexp
	GroupInterval time.Duration
	// TopicRegex, when set, adds every source topic whose name matches (internal topics
	// excluded), resolved when the run starts.
	TopicRegex *regexp.Regexp
	// Live redraws a table of every partition's position, lag and rate once a second on
	// Progress (a terminal); otherwise a following run writes a line per partition every
	// ProgressEvery.
	Live bool
	// MirrorGroup, when set, makes this following run one of the processes of a mirror group:
	// runs with the same MirrorGroup (and the same source) share the partitions of their
	// topics, assigned and moved by Kafka's consumer-group protocol on the source cluster.
	MirrorGroup string
	// GroupSessionTimeout is how long the group waits for a silent member before its
	// partitions move (DefaultGroupSessionTimeout when zero).
	GroupSessionTimeout time.Duration
	// Metrics, when set, receives the run's per-partition gauges (mirrored end, source end,
	// lag, records, bytes, stopped).
	Metrics prometheus.Registerer
}

// PartitionSummary is what one partition's run did.
type PartitionSummary struct {
	Topic     string
	Partition int32
	From, To  int64 // source offsets: mirrored range [From, To)
	Batches   int
	Records   int64
	Bytes     int64
	Err       error
}

// Summary is a whole run.
type Summary struct {
	Partitions []PartitionSummary
	Elapsed    time.Duration
}

// Err is the first partition error.
func (s Summary) Err() error {
	for _, p := range s.Partitions {
		if p.Err != nil {
			return fmt.Errorf("%s[%d]: %w", p.Topic, p.Partition, p.Err)
		}
	}
	return nil
}

// Follow mirrors the topics continuously, partitions in parallel, each from where offsetgate
// says its mirror ends, until ctx ends; then it returns what it did. Errors of a partition end
// the run (it can be started again: it resumes from the mirrored end).
func Follow(ctx context.Context, cfg Config) (Summary, error) {
	cfg.follow = true
	if cfg.ProgressEvery <= 0 {
		cfg.ProgressEvery = 10 * time.Second
	}
	return Once(ctx, cfg)
}

// Once mirrors every partition of the topics from where offsetgate says its mirror ends up
// to the source's end at start, and returns.
func Once(ctx context.Context, cfg Config) (Summary, error) {
	start := time.Now()
	if cfg.Progress != nil {
		cfg.Progress = &LockedWriter{W: cfg.Progress} // partitions report from their goroutines
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = 1 << 20
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = DefaultParallel
	}
	if cfg.Depth <= 0 {
		cfg.Depth = 2
	}
	if cfg.ReplicationFactor == 0 {
		cfg.ReplicationFactor = -1
	}
	if cfg.MirrorGroup != "" && !cfg.follow {
		return Summary{}, &InputError{errors.New("a mirror group shares partitions between following runs: it cannot be used with --once")}
	}
	src, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(cfg.Source...), kgo.ClientID("offsetgate-mirror")}, cfg.SourceOpts...)...)
	if err != nil {
		return Summary{}, fmt.Errorf("source: %w", err)
	}
	defer src.Close()
	// The mirror writes to topics it created a moment before: franz-go's default of 5 s
	// between metadata refreshes could hold the first write of a new topic that long.
	popts := []kgo.Opt{kgo.SeedBrokers(cfg.Proxy...), kgo.ClientID("offsetgate-mirror"), kgo.MetadataMinAge(250 * time.Millisecond)}
	switch {
	case cfg.Dial != nil:
		popts = append(popts, kgo.Dialer(tlsDialer(cfg.Dial, cfg.ProxyTLS)))
	case cfg.ProxyTLS != nil:
		popts = append(popts, kgo.DialTLSConfig(cfg.ProxyTLS))
	}
	if cfg.ProxySASL != nil {
		popts = append(popts, kgo.SASL(cfg.ProxySASL))
	}
	px, err := kgo.NewClient(popts...)
	if err != nil {
		return Summary{}, fmt.Errorf("offsetgate: %w", err)
	}
	defer px.Close()
	sadm, padm := kadm.NewClient(src), kadm.NewClient(px)

	// A wrong or unreachable address is reported at once, before anything else: the retries
	// below are for a long run's lost connections, not for a cluster that never answered.
	if err := Reachable(ctx, src, "the source cluster", cfg.Source); err != nil {
		return Summary{}, &InputError{err}
	}
	if err := CheckOffsetgate(ctx, px, cfg.Proxy, cfg.Source); err != nil {
		return Summary{}, &InputError{err}
	}

	type job struct {
		topic string
		prepared
	}
	topics, err := resolveTopics(ctx, sadm, cfg.Topics, cfg.TopicRegex)
	if err != nil {
		return Summary{}, &InputError{err}
	}
	cfg.Topics = topics
	var jobs []job
	for _, topic := range cfg.Topics {
		var j job
		err := retry(ctx, func() error {
			var err error
			j.prepared, err = prepareTopic(ctx, sadm, padm, topic, cfg.ReplicationFactor)
			return err
		})
		if err != nil {
			return Summary{}, &InputError{err}
		}
		j.topic = topic
		jobs = append(jobs, j)
	}
	conns := newConnPool(cfg)
	defer conns.close()
	tr := newTracker(cfg.Metrics)
	stopReport := make(chan struct{})
	reportDone := make(chan struct{})
	go func() {
		defer close(reportDone)
		var w io.Writer
		if cfg.Live || cfg.follow {
			w = cfg.Progress
		}
		tr.run(w, cfg.Live, cfg.ProgressEvery, stopReport)
	}()
	defer func() { close(stopReport); <-reportDone }()

	// The engine owns every partition from the start; it ends with ectx.
	ectx, ecancel := context.WithCancel(ctx)
	eng := newEngine(cfg, src, px, conns, tr)
	eng.start(ectx)
	defer func() { ecancel(); eng.wg.Wait() }()
	// mirrored is the topics being mirrored; with --topic-regex a following run adds to it
	// (on its group loop, or the mirror group's worker).
	var mirroredMu sync.Mutex
	mirrored := append([]string(nil), cfg.Topics...)
	mirroredNow := func() []string {
		mirroredMu.Lock()
		defer mirroredMu.Unlock()
		return append([]string(nil), mirrored...)
	}
	var member *groupMember // a mirror group's: which partitions this process holds
	if cfg.MirrorGroup != "" {
		// The group assigns the partitions; its member ends before the engine (deferred
		// after it), so the partitions it held are released with their writes complete.
		preparedTopics := map[string]prepared{}
		for _, j := range jobs {
			preparedTopics[j.topic] = j.prepared
		}
		prepare := func(pctx context.Context, topic string, need int32) (prepared, error) {
			pr, known := preparedTopics[topic]
			if known && pr.parts >= need {
				return pr, nil
			}
			// Unknown (matched by --topic-regex), or partitions were added to it on the source.
			if err := retry(pctx, func() error {
				var err error
				pr, err = prepareTopic(pctx, sadm, padm, topic, cfg.ReplicationFactor)
				return err
			}); err != nil {
				return pr, err
			}
			preparedTopics[topic] = pr
			if !known {
				mirroredMu.Lock()
				mirrored = append(mirrored, topic)
				mirroredMu.Unlock()
			}
			return pr, nil
		}
		var err error
		member, err = joinGroup(ectx, cfg, eng, cfg.Topics, prepare)
		if err != nil {
			return Summary{Elapsed: time.Since(start)}, err
		}
		defer member.close()
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "joined mirror group %s: waiting for the partitions it assigns to this process\n", cfg.MirrorGroup)
		}
	} else {
		for _, j := range jobs {
			if err := eng.addTopic(ectx, j.topic, j.prepared); err != nil {
				return Summary{Partitions: eng.summary(), Elapsed: time.Since(start)}, err
			}
		}
		if !cfg.follow || cfg.TopicRegex == nil {
			eng.added() // otherwise the run stays ready for new topics until ctx ends
		}
	}
	lastSkip := map[string]string{} // print a group's skip reason once, not every pass
	copyGroups := func(cctx context.Context) error {
		if cfg.Groups == nil {
			return nil
		}
		topics := mirroredNow()
		if member != nil {
			// One process of a mirror group copies for all of them.
			var copier bool
			if topics, copier = member.groupCopier(); !copier {
				return nil
			}
		}
		res, err := CopyGroups(cctx, src, px, cfg.Groups, topics)
		if cfg.Progress != nil {
			for _, g := range res {
				switch {
				case g.Skipped != "":
					if lastSkip[g.Group] != g.Skipped {
						fmt.Fprintf(cfg.Progress, "group %s: not copied: %s\n", g.Group, g.Skipped)
					}
				case g.Copied > 0:
					fmt.Fprintf(cfg.Progress, "group %s: %d partition offsets copied\n", g.Group, g.Copied)
				}
				lastSkip[g.Group] = g.Skipped
			}
		}
		return err
	}

	// discover starts the source topics that match --topic-regex and are not mirrored yet
	// (a following run picks up topics created after it started). A topic that cannot be
	// mirrored is reported once, and looked at again at every pass.
	refusedNew := map[string]string{}
	discover := func(dctx context.Context) {
		found, err := resolveTopics(dctx, sadm, nil, cfg.TopicRegex)
		if err != nil {
			return // no match yet, or the source is away for a moment: the next pass sees
		}
		known := map[string]bool{}
		for _, t := range mirroredNow() {
			known[t] = true
		}
		for _, topic := range found {
			if known[topic] {
				continue
			}
			pr, err := prepareTopic(dctx, sadm, padm, topic, cfg.ReplicationFactor)
			if err == nil {
				err = eng.addTopic(dctx, topic, pr)
			}
			if err != nil {
				if dctx.Err() == nil && cfg.Progress != nil && refusedNew[topic] != err.Error() {
					fmt.Fprintf(cfg.Progress, "%s: new source topic not mirrored: %v\n", topic, err)
				}
				refusedNew[topic] = err.Error()
				continue
			}
			delete(refusedNew, topic)
			mirroredMu.Lock()
			mirrored = append(mirrored, topic)
			mirroredMu.Unlock()
			if cfg.Progress != nil {
				fmt.Fprintf(cfg.Progress, "%s: new source topic, %d partitions: mirroring\n", topic, pr.parts)
			}
		}
	}

	// grow starts the partitions added to mirrored source topics since the run took them (a
	// mirror group's client sees them itself): the mirror topic gets them too.
	grow := func(gctx context.Context) {
		topics := mirroredNow()
		if len(topics) == 0 {
			return
		}
		md, err := sadm.Metadata(gctx, topics...)
		if err != nil {
			return // the next pass sees
		}
		for _, topic := range topics {
			st, ok := md.Topics[topic]
			if !ok || st.Err != nil {
				continue
			}
			have := eng.partitions(topic)
			n := int32(len(st.Partitions))
			if have == 0 || n <= have {
				continue
			}
			pr, err := prepareTopic(gctx, sadm, padm, topic, cfg.ReplicationFactor)
			if err == nil {
				var nums []int32
				for p := have; p < pr.parts; p++ {
					nums = append(nums, p)
				}
				err = eng.addParts(gctx, topic, pr, nums)
			}
			if cfg.Progress != nil && gctx.Err() == nil {
				if err != nil {
					fmt.Fprintf(cfg.Progress, "%s: partitions added on the source (%d, was %d), not mirrored yet: %v\n", topic, n, have, err)
				} else {
					fmt.Fprintf(cfg.Progress, "%s: partitions added on the source (%d, was %d): added to the mirror topic, mirroring\n", topic, n, have)
				}
			}
		}
	}

	if cfg.follow {
		interval := cfg.GroupInterval
		if interval <= 0 {
			interval = 5 * time.Second
		}
		// The group, log-start and discovery loop ends with the run (which, with
		// --topic-regex, lasts until ctx ends, ready for new topics; otherwise until every
		// partition stopped).
		gctx, gcancel := context.WithCancel(ectx)
		gdone := make(chan struct{})
		defer func() { gcancel(); <-gdone }()
		resyncEvery := cfg.Resync
		if resyncEvery <= 0 {
			resyncEvery = 5 * time.Minute
		}
		go func() {
			defer close(gdone)
			t := time.NewTicker(interval)
			defer t.Stop()
			lastResync := time.Now()
			for {
				select {
				case <-gctx.Done():
					return
				case <-t.C:
					if time.Since(lastResync) >= resyncEvery {
						lastResync = time.Now()
						if err := eng.resync(gctx); err != nil && gctx.Err() == nil && cfg.Progress != nil {
							fmt.Fprintf(cfg.Progress, "sending compacted partitions again: %v\n", err)
						}
					}
					if cfg.MirrorGroup == "" { // a mirror group's client finds new topics and partitions itself
						if cfg.TopicRegex != nil {
							discover(gctx)
						}
						grow(gctx)
					}
					if err := copyGroups(gctx); err != nil && gctx.Err() == nil && cfg.Progress != nil {
						fmt.Fprintf(cfg.Progress, "copying group offsets: %v\n", err)
					}
					// The source's retention moves its log start: the mirror's follows.
					topics := mirroredNow()
					var holds func(string, int32) bool // every partition
					if member != nil {
						// Each process of a mirror group follows the partitions it holds.
						topics, holds = member.ownedTopics(), member.holds
					}
					moved, err := FollowLogStart(gctx, src, px, topics, holds)
					if cfg.Progress != nil && gctx.Err() == nil {
						if err != nil {
							fmt.Fprintf(cfg.Progress, "following the source's log start: %v\n", err)
						}
						for topic, ps := range moved {
							for p, at := range ps {
								fmt.Fprintf(cfg.Progress, "%s[%d]: log start moved to %d, as on the source\n", topic, p, at)
							}
						}
					}
				}
			}
		}()
	}
	eng.wait(ctx)
	ecancel()
	eng.wg.Wait()
	eng.report()
	sum := Summary{Partitions: eng.summary(), Elapsed: time.Since(start)}
	if err := sum.Err(); err != nil {
		return sum, err
	}
	if !cfg.follow {
		// The mirror starts where the source's first batch starts, which may hold offsets
		// below the source's log start: the mirror's log start is set to the source's.
		// A destination too busy to move a log start in time (REQUEST_TIMED_OUT) is asked
		// again: moving it to the same offset twice changes nothing.
		err := retry(ctx, func() error {
			_, err := FollowLogStart(ctx, src, px, cfg.Topics, nil)
			return err
		})
		if err != nil {
			return sum, fmt.Errorf("following the source's log start: %w", err)
		}
		if err := copyGroups(ctx); err != nil {
			return sum, err
		}
	}
	return sum, nil
}

// ErrSourceBackwards stops a partition whose source went backwards: truncated below the
// mirrored end, or deleted and recreated. Mirroring on would not be exact.
var ErrSourceBackwards = rawread.ErrWentBackwards

// InputError is a run refused before anything was written: an unreachable cluster, a missing
// topic, a destination topic that is not a mirror topic or has more partitions than the source, a
// source recreated since the mirror began.
type InputError struct{ Err error }

func (e *InputError) Error() string { return e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

// refusal is an error that asking again cannot change (a topic that is not a mirror topic, a
// partition count that differs): retry returns it at once.
type refusal struct{ err error }

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

// refuse marks an error as a refusal.
func refuse(format string, a ...any) error { return &refusal{fmt.Errorf(format, a...)} }

// briefly marks an error that is asked about again only during retry's first second: a source
// topic created a moment ago may not be known to every broker yet, one that is missing is
// reported at once.
type briefly struct{ err error }

func (b *briefly) Error() string { return b.err.Error() }
func (b *briefly) Unwrap() error { return b.err }

// retry runs an administrative call again after connection failures (a lost connection to
// offsetgate or the source must not end a long mirroring run); refusals are not retried.
func retry(ctx context.Context, fn func() error) error {
	var err error
	start := time.Now()
	for attempt := 0; attempt < 8; attempt++ {
		if err = fn(); err == nil {
			return nil
		}
		var ke *kerr.Error
		var rf *refusal
		var br *briefly
		switch {
		case errors.As(err, &rf), errors.As(err, &ke) && !ke.Retriable:
			return err
		case errors.As(err, &br) && time.Since(start) > time.Second:
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(retryWait(attempt)):
		}
	}
	return err
}

// retryWait is the pause after a failed attempt of retry: short at first, because the usual
// failure at start is a topic created a moment ago whose partitions the destination's brokers
// have not all learned (the first answer through offsetgate misses one, the next has them all,
// and a first pause of 200 ms was a fifth of a run's time to its first record), then doubling,
// so that eight attempts still span over six seconds for a connection being re-established.
func retryWait(attempt int) time.Duration {
	return min(50*time.Millisecond<<attempt, 1600*time.Millisecond)
}

// tlsDialer wraps a dial function with TLS (kgo takes a dialer or a TLS config, not both).
func tlsDialer(dial func(ctx context.Context, network, addr string) (net.Conn, error), tc *tls.Config) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if tc == nil {
		return dial
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		cfg := tc.Clone()
		if cfg.ServerName == "" {
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
		t := tls.Client(c, cfg)
		if err := t.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, err
		}
		return t, nil
	}
}

// prepared is a source topic ready to be mirrored.
type prepared struct {
	parts     int32
	id        [16]byte
	compacted bool // the source is compacted: each run sends it again from its log start
}

// prepareTopic checks the source topic and creates the mirror topic through offsetgate (with
// the mark and the source's settings) when it does not exist.
func prepareTopic(ctx context.Context, sadm, padm *kadm.Client, topic string, rf int16) (prepared, error) {
	md, err := sadm.Metadata(ctx, topic)
	if err != nil {
		return prepared{}, fmt.Errorf("source metadata: %w", err)
	}
	st, ok := md.Topics[topic]
	switch {
	case !ok || errors.Is(st.Err, kerr.UnknownTopicOrPartition):
		return prepared{}, &briefly{fmt.Errorf("source topic %s does not exist on the source cluster", topic)}
	case st.Err != nil:
		return prepared{}, fmt.Errorf("source topic %s: %w", topic, st.Err)
	}
	n := int32(len(st.Partitions))
	rc, err := sadm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return prepared{}, fmt.Errorf("source configs of %s: %w", topic, err)
	}
	source := map[string]string{}
	for _, c := range rc[0].Configs {
		if c.Value == nil {
			continue
		}
		switch c.Key {
		case "retention.ms", "retention.bytes", "cleanup.policy", "max.message.bytes", "message.timestamp.type",
			"max.compaction.lag.ms", "delete.retention.ms":
			source[c.Key] = *c.Value
		}
	}
	pr := prepared{parts: n, id: st.ID, compacted: strings.Contains(source["cleanup.policy"], "compact")}
	pmd, err := padm.Metadata(ctx, topic)
	if err != nil {
		return prepared{}, fmt.Errorf("offsetgate metadata: %w", err)
	}
	if dt, ok := pmd.Topics[topic]; ok && dt.Err == nil {
		have := int32(len(dt.Partitions))
		if have > n {
			return prepared{}, refuse("topic %s has %d partitions on the destination and %d on the source", topic, have, n)
		}
		if err := checkMark(ctx, padm, topic, hex.EncodeToString(st.ID[:])); err != nil {
			return prepared{}, err
		}
		if have < n {
			// Partitions were added to the source topic: the mirror gets them too.
			if err := addPartitions(ctx, padm, topic, n); err != nil {
				return prepared{}, err
			}
		}
		return pr, nil
	}
	cfg := map[string]*string{rules.MarkKey: kmsg.StringPtr("true"), rules.SourcePrefix + "topic.id": kmsg.StringPtr(hex.EncodeToString(st.ID[:]))}
	for k, v := range source {
		cfg[rules.SourcePrefix+k] = kmsg.StringPtr(v)
	}
	resps, err := padm.CreateTopics(ctx, n, rf, cfg, topic)
	if err != nil {
		return prepared{}, fmt.Errorf("creating mirror topic %s: %w", topic, err)
	}
	if r := resps[topic]; r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
		if errors.Is(r.Err, kerr.TopicAuthorizationFailed) {
			return prepared{}, fmt.Errorf("offsetgate refused to create mirror topic %s: %w (%s); approve this run's identity (its client certificate or SASL user) for the topic in offsetgate's mirroring.clients", topic, r.Err, r.ErrMessage)
		}
		return prepared{}, fmt.Errorf("creating mirror topic %s: %w (%s)", topic, r.Err, r.ErrMessage)
	}
	return pr, nil
}

// addPartitions gives a mirror topic the source's partition count (offsetgate lets only the
// topic's approved mirroring client add them).
func addPartitions(ctx context.Context, padm *kadm.Client, topic string, n int32) error {
	resps, err := padm.UpdatePartitions(ctx, int(n), topic)
	if err != nil {
		return fmt.Errorf("adding partitions to mirror topic %s: %w", topic, err)
	}
	r, ok := resps[topic]
	if !ok {
		return fmt.Errorf("adding partitions to mirror topic %s: no answer for the topic", topic)
	}
	if r.Err != nil && !errors.Is(r.Err, kerr.InvalidPartitions) {
		return fmt.Errorf("adding partitions to mirror topic %s (to %d, as on the source): %w (%s)", topic, n, r.Err, r.ErrMessage)
	}
	// INVALID_PARTITIONS: another process of the mirror added them a moment ago (the count is
	// already n); the next metadata read says so, and a real mismatch is refused there.
	return nil
}

// markSettle is how long a topic found without its mirror mark is looked at again before it is
// refused: another process of the mirror (a mirror group's member started at the same moment)
// may have created it an instant ago, and offsetgate stores the mark just after the destination
// created the topic.
const markSettle = 5 * time.Second

func checkMark(ctx context.Context, padm *kadm.Client, topic, sourceID string) error {
	var marked bool
	var mirroredID string
	for deadline := time.Now().Add(markSettle); ; {
		rc, err := padm.DescribeTopicConfigs(ctx, topic)
		if err != nil {
			return fmt.Errorf("configs of %s through offsetgate: %w", topic, err)
		}
		for _, c := range rc[0].Configs {
			if c.Key == rules.MarkKey && c.Value != nil && *c.Value == "true" {
				marked = true
			}
			if c.Key == rules.SourcePrefix+"topic.id" && c.Value != nil {
				mirroredID = *c.Value
			}
		}
		if marked || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	if !marked {
		return refuse("topic %s exists on the destination and is not a mirror topic (it was not created by offsetgate mirror, or it was promoted)", topic)
	}
	if mirroredID != "" && mirroredID != sourceID {
		return refuse("%w: source topic %s has id %s, the mirror was made from %s (deleted and recreated)", ErrSourceBackwards, topic, sourceID, mirroredID)
	}
	return nil
}

// resolveTopics adds the source topics matching re (internal ones excluded) to the named ones.
func resolveTopics(ctx context.Context, sadm *kadm.Client, named []string, re *regexp.Regexp) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, t := range named {
		if t != "" && !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	if re != nil {
		tds, err := sadm.ListTopics(ctx)
		if err != nil {
			return nil, fmt.Errorf("listing the source's topics: %w", err)
		}
		for _, name := range tds.Names() {
			if re.MatchString(name) && !seen[name] && !strings.HasPrefix(name, "__") {
				seen[name] = true
				out = append(out, name)
			}
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no topic to mirror (none named, none matching the regular expression)")
	}
	sort.Strings(out)
	return out, nil
}

// FetchRaw reads whole record batches from the source partition's leader at offset (one
// fetch; a Reader keeps the partition's leader and topic id between fetches).
func FetchRaw(ctx context.Context, src *kgo.Client, topic string, part int32, offset int64, maxBytes int32) ([][]byte, error) {
	sets, _, err := rawread.New(src, topic, part).Fetch(ctx, offset, maxBytes)
	return sets, err
}

// produceAtOffset sends one partition's batches with the magic header to the partition's
// leader through offsetgate, retrying retriable answers with the same batches. from is the
// source offset the batches were fetched from (the header's from offset; -1: none).
//
// waiting, when set, hears why the write waits (another offsetgate instance's lease), so the
// partition's state says so while it does.
func produceAtOffset(ctx context.Context, px *kgo.Client, conns *connPool, topic string, part int32, records []byte, from int64, waiting func(why string), giveUp <-chan struct{}) error {
	var last error
	var ownedSince time.Time
	waited := false // the last attempt already waited (for another instance's lease)
	for attempt := 0; attempt < 20; attempt++ {
		if attempt > 0 && !waited {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(min(attempt, 10)) * 100 * time.Millisecond):
			}
		}
		waited = false
		// A lookup through an offsetgate that went away would be retried by the client for
		// minutes: each attempt here has a time of its own.
		lctx, lcancel := context.WithTimeout(ctx, 10*time.Second)
		addr, err := conns.leader(lctx, px, topic, part, last != nil)
		lcancel()
		if err != nil {
			last = err
			continue
		}
		c, err := conns.get(ctx, addr)
		if err != nil {
			last = err
			continue
		}
		req := atOffsetRequest(topic, part, records)
		resp := kmsg.NewPtrProduceResponse()
		rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		if from >= 0 {
			err = c.RoundTripFrom(rctx, req, resp, from)
		} else {
			err = c.RoundTrip(rctx, req, resp, true)
		}
		cancel()
		if err != nil {
			conns.discard(c)
			last = err
			continue
		}
		conns.put(addr, c)
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			return errors.New("malformed produce response")
		}
		pr := resp.Topics[0].Partitions[0]
		if pr.ErrorCode == 0 {
			return nil
		}
		msg := ""
		if pr.ErrorMessage != nil {
			msg = *pr.ErrorMessage
		}
		err = fmt.Errorf("%w: %s", kerr.ErrorForCode(pr.ErrorCode), msg)
		if owned(pr.ErrorCode, msg) {
			// Another offsetgate instance holds the partition (this run moved to another
			// instance after the one it wrote through went away): its lease runs out, then
			// this instance takes over from what the ledger says. Waiting does not use up
			// the attempts.
			if ownedSince.IsZero() {
				ownedSince = time.Now()
				if waiting != nil {
					waiting(leaseWait + ": " + strings.TrimPrefix(msg, "offsetgate: "))
				}
			}
			if time.Since(ownedSince) < ownedWait {
				attempt--
				last, waited = err, true
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-giveUp:
					return fmt.Errorf("%w (%w)", errGaveUp, err)
				case <-time.After(time.Second):
				}
				continue
			}
			return fmt.Errorf("%w (waited %v)", err, ownedWait)
		}
		if !kerr.IsRetriable(kerr.ErrorForCode(pr.ErrorCode)) || pr.ErrorCode == rules.ErrHalted {
			return err
		}
		last = err
	}
	return last
}

// atOffsetRequest is the produce-at-offset request of one partition's batches.
func atOffsetRequest(topic string, part int32, records []byte) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(11) // flexible (header tags), topics by name
	req.Acks, req.TimeoutMillis = -1, 30000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = part, records
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

// errGaveUp ends a write that waited for another instance's lease when the mirror group moved
// its partition to another process meanwhile: the wait is not for this process any more, and
// the group waits for the partition's writes to end before the new owner starts.
var errGaveUp = errors.New("the partition moved to another process of the mirror group while its write waited for the lease")

// ownedWait is how long a write waits for another offsetgate instance's lease on its
// partition to run out (offsetgate's ownership_lease is 30 s by default).
const ownedWait = 3 * time.Minute

// owned reports an answer saying another offsetgate instance owns the partition.
func owned(code int16, msg string) bool {
	return code == rules.ErrOwned && strings.Contains(msg, "owned by offsetgate instance")
}

func leaderAddr(ctx context.Context, px *kgo.Client, topic string, part int32) (string, error) {
	lp, err := rawread.Lookup(ctx, px, topic, part)
	if err != nil {
		return "", fmt.Errorf("through offsetgate: %w", err)
	}
	if lp.Leader < 0 || lp.Addr == "" {
		return "", fmt.Errorf("no leader for %s[%d] through offsetgate", topic, part)
	}
	return lp.Addr, nil
}

// DefaultParallel is the writers of a run that does not say. A following run of many partitions
// that each take a little at a time needs as many writes in flight as the destination shares in
// its requests: following 1,000 partitions at one record a second each, 4 writers left 4,483
// records behind on average, 16 left 1,691, 32 1,562 and 64 or more did worse again on two
// cores (docs/benchmarks.md, "Writers"). A writer that has nothing to write costs a goroutine;
// its connections are opened when first used.
const DefaultParallel = 16

// connPool keeps the magic-header connections to offsetgate's brokers. offsetgate handles a
// connection's produce-at-offset requests one at a time, so a writer takes a connection of its
// own for each round trip and gives it back after: there are at most as many connections per
// broker as writers (Parallel), whatever the number of partitions.
type connPool struct {
	cfg     Config
	mu      sync.Mutex
	idle    map[string][]*wire.Conn
	leaders map[partKey]string // offsetgate broker address leading a partition, as last looked up
	closed  bool
}

func newConnPool(cfg Config) *connPool {
	return &connPool{cfg: cfg, idle: map[string][]*wire.Conn{}, leaders: map[partKey]string{}}
}

// leader is the offsetgate broker address leading a partition: the one looked up last, or
// looked up now (uncached) when there is none or fresh is set (the last attempt failed). A
// lookup per write would add a round trip through offsetgate to every write.
func (p *connPool) leader(ctx context.Context, px *kgo.Client, topic string, part int32, fresh bool) (string, error) {
	k := partKey{topic, part}
	p.mu.Lock()
	addr, ok := p.leaders[k]
	p.mu.Unlock()
	if ok && !fresh {
		return addr, nil
	}
	addr, err := leaderAddr(ctx, px, topic, part)
	if err != nil {
		return "", err
	}
	p.mu.Lock()
	p.leaders[k] = addr
	p.mu.Unlock()
	return addr, nil
}

// get takes an idle connection to addr or dials one.
func (p *connPool) get(ctx context.Context, addr string) (*wire.Conn, error) {
	p.mu.Lock()
	if cs := p.idle[addr]; len(cs) > 0 {
		c := cs[len(cs)-1]
		p.idle[addr] = cs[:len(cs)-1]
		p.mu.Unlock()
		return c, nil
	}
	p.mu.Unlock()
	var tc *tls.Config
	if p.cfg.ProxyTLS != nil {
		tc = p.cfg.ProxyTLS.Clone()
	}
	dial := (&net.Dialer{Timeout: 10 * time.Second}).DialContext
	if p.cfg.Dial != nil {
		dial = p.cfg.Dial
	}
	return wire.DialWith(ctx, dial, addr, tc, p.cfg.ProxySASL, "offsetgate-mirror")
}

// put gives a connection back after a round trip that completed.
func (p *connPool) put(addr string, c *wire.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return
	}
	p.idle[addr] = append(p.idle[addr], c)
}

// discard closes a connection whose round trip failed (its state is unknown).
func (p *connPool) discard(c *wire.Conn) { c.Close() }

func (p *connPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, cs := range p.idle {
		for _, c := range cs {
			c.Close()
		}
	}
	p.idle = nil
}

// SortSummary orders partitions for printing.
func SortSummary(s *Summary) {
	sort.Slice(s.Partitions, func(i, j int) bool {
		a, b := s.Partitions[i], s.Partitions[j]
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		return a.Partition < b.Partition
	})
}

// LockedWriter serializes writes from several goroutines.
type LockedWriter struct {
	mu sync.Mutex
	W  io.Writer
}

func (l *LockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.W.Write(b)
}
