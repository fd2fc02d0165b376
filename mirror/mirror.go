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
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"

	"offsetgate/batch"
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
	// Parallel is how many partitions are mirrored at once.
	Parallel int
	// Progress, when set, gets one line per partition as it finishes.
	Progress io.Writer
	// Dial, when set, opens the connections to offsetgate (a seam for fault-injection tests).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// follow keeps mirroring new records until the context ends (Follow sets it).
	follow bool
	// ProgressEvery is how often a following run prints each partition's position.
	ProgressEvery time.Duration
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
	if cfg.Parallel <= 0 {
		cfg.Parallel = 1 << 20 // every partition at once: each waits on the source most of the time
	}
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
		cfg.Parallel = 4
	}
	if cfg.ReplicationFactor == 0 {
		cfg.ReplicationFactor = -1
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

	type job struct {
		topic string
		part  int32
	}
	topics, err := resolveTopics(ctx, sadm, cfg.Topics, cfg.TopicRegex)
	if err != nil {
		return Summary{}, &InputError{err}
	}
	cfg.Topics = topics
	var jobs []job
	for _, topic := range cfg.Topics {
		var n int32
		err := retry(ctx, func() error {
			var err error
			n, err = prepareTopic(ctx, sadm, padm, topic, cfg.ReplicationFactor)
			return err
		})
		if err != nil {
			return Summary{}, &InputError{err}
		}
		for p := int32(0); p < n; p++ {
			jobs = append(jobs, job{topic, p})
		}
	}
	conns := newConnPool(cfg)
	defer conns.close()
	// mirrored is the topics being mirrored; with --topic-regex a following run adds to it
	// (on its group loop, which alone reads it while partitions run).
	mirrored := cfg.Topics
	lastSkip := map[string]string{} // print a group's skip reason once, not every pass
	copyGroups := func(cctx context.Context) error {
		if cfg.Groups == nil {
			return nil
		}
		res, err := CopyGroups(cctx, src, px, cfg.Groups, mirrored)
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

	// Partitions run on goroutines of their own; out is written as they finish (under outMu,
	// since a following run with --topic-regex adds partitions while others run).
	var outMu sync.Mutex
	var out []PartitionSummary
	sem := make(chan struct{}, cfg.Parallel)
	var wg sync.WaitGroup
	startJob := func(j job) {
		st := tr.add(j.topic, j.part)
		outMu.Lock()
		i := len(out)
		out = append(out, PartitionSummary{Topic: j.topic, Partition: j.part})
		outMu.Unlock()
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			s := mirrorPartition(ctx, src, px, padm, conns, cfg, j.topic, j.part, st)
			outMu.Lock()
			out[i] = s
			outMu.Unlock()
			if s.Err != nil {
				st.state.Store("stopped: " + s.Err.Error())
			} else {
				st.state.Store("done")
			}
			if cfg.Progress != nil && !cfg.Live {
				status := "ok"
				if s.Err != nil {
					status = "error: " + s.Err.Error()
				}
				fmt.Fprintf(cfg.Progress, "%s[%d]: offsets %d..%d, %d batches, %d records, %d bytes: %s\n",
					s.Topic, s.Partition, s.From, s.To, s.Batches, s.Records, s.Bytes, status)
			}
		}()
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
		for _, t := range mirrored {
			known[t] = true
		}
		for _, topic := range found {
			if known[topic] {
				continue
			}
			n, err := prepareTopic(dctx, sadm, padm, topic, cfg.ReplicationFactor)
			if err != nil {
				if dctx.Err() == nil && cfg.Progress != nil && refusedNew[topic] != err.Error() {
					fmt.Fprintf(cfg.Progress, "%s: new source topic not mirrored: %v\n", topic, err)
				}
				refusedNew[topic] = err.Error()
				continue
			}
			delete(refusedNew, topic)
			mirrored = append(mirrored, topic)
			if cfg.Progress != nil {
				fmt.Fprintf(cfg.Progress, "%s: new source topic, %d partitions: mirroring\n", topic, n)
			}
			for p := int32(0); p < n; p++ {
				startJob(job{topic, p})
			}
		}
	}

	for _, j := range jobs {
		startJob(j)
	}
	stopGroups := func() {}
	if cfg.follow {
		interval := cfg.GroupInterval
		if interval <= 0 {
			interval = 5 * time.Second
		}
		// The group, log-start and discovery loop ends with the run, or when every partition
		// stopped. With --topic-regex it
		// counts as a partition of its own: the run then lasts until ctx ends, ready for new
		// topics, and the loop may start partitions while the run waits for them.
		gctx, gcancel := context.WithCancel(ctx)
		stopGroups = gcancel
		gdone := make(chan struct{})
		defer func() { gcancel(); <-gdone }()
		discovering := cfg.TopicRegex != nil
		if discovering {
			wg.Add(1)
		}
		go func() {
			defer close(gdone)
			if discovering {
				defer wg.Done()
			}
			t := time.NewTicker(interval)
			defer t.Stop()
			for {
				select {
				case <-gctx.Done():
					return
				case <-t.C:
					if discovering {
						discover(gctx)
					}
					if err := copyGroups(gctx); err != nil && gctx.Err() == nil && cfg.Progress != nil {
						fmt.Fprintf(cfg.Progress, "copying group offsets: %v\n", err)
					}
					// The source's retention moves its log start: the mirror's follows.
					moved, err := FollowLogStart(gctx, src, px, mirrored)
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
	wg.Wait()
	stopGroups()
	outMu.Lock()
	sum := Summary{Partitions: out, Elapsed: time.Since(start)}
	outMu.Unlock()
	if err := sum.Err(); err != nil {
		return sum, err
	}
	if !cfg.follow {
		// The mirror starts where the source's first batch starts, which may hold offsets
		// below the source's log start: the mirror's log start is set to the source's.
		if _, err := FollowLogStart(ctx, src, px, cfg.Topics); err != nil {
			return sum, fmt.Errorf("following the source's log start: %w", err)
		}
		if err := copyGroups(ctx); err != nil {
			return sum, err
		}
	}
	return sum, nil
}

// InputError is a run refused before anything was written: an unreachable cluster, a missing
// topic, a destination topic that is not a mirror topic or has another partition count, a
// source recreated since the mirror began.
type InputError struct{ Err error }

func (e *InputError) Error() string { return e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

// retry runs an administrative call again after connection failures (a lost connection to
// offsetgate or the source must not end a long mirroring run); refusals are not retried.
func retry(ctx context.Context, fn func() error) error {
	var err error
	for attempt := 0; attempt < 8; attempt++ {
		if err = fn(); err == nil {
			return nil
		}
		var ke *kerr.Error
		if errors.As(err, &ke) && !ke.Retriable {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(attempt+1) * 200 * time.Millisecond):
		}
	}
	return err
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

// prepareTopic checks the source topic and creates the mirror topic through offsetgate (with
// the mark and the source's settings) when it does not exist; it returns the partition count.
func prepareTopic(ctx context.Context, sadm, padm *kadm.Client, topic string, rf int16) (int32, error) {
	md, err := sadm.Metadata(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("source metadata: %w", err)
	}
	st, ok := md.Topics[topic]
	if !ok || st.Err != nil {
		return 0, fmt.Errorf("source topic %s: %v", topic, st.Err)
	}
	n := int32(len(st.Partitions))
	rc, err := sadm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("source configs of %s: %w", topic, err)
	}
	source := map[string]string{}
	for _, c := range rc[0].Configs {
		if c.Value == nil {
			continue
		}
		switch c.Key {
		case "retention.ms", "retention.bytes", "cleanup.policy", "max.message.bytes", "message.timestamp.type":
			source[c.Key] = *c.Value
		}
	}
	if strings.Contains(source["cleanup.policy"], "compact") {
		return 0, fmt.Errorf("source topic %s is compacted: this version mirrors dense topics only", topic)
	}
	pmd, err := padm.Metadata(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("offsetgate metadata: %w", err)
	}
	if dt, ok := pmd.Topics[topic]; ok && dt.Err == nil {
		if int32(len(dt.Partitions)) != n {
			return 0, fmt.Errorf("topic %s has %d partitions on the destination and %d on the source", topic, len(dt.Partitions), n)
		}
		return n, checkMark(ctx, padm, topic, hex.EncodeToString(st.ID[:]))
	}
	cfg := map[string]*string{rules.MarkKey: kmsg.StringPtr("true"), rules.SourcePrefix + "topic.id": kmsg.StringPtr(hex.EncodeToString(st.ID[:]))}
	for k, v := range source {
		cfg[rules.SourcePrefix+k] = kmsg.StringPtr(v)
	}
	resps, err := padm.CreateTopics(ctx, n, rf, cfg, topic)
	if err != nil {
		return 0, fmt.Errorf("creating mirror topic %s: %w", topic, err)
	}
	if r := resps[topic]; r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
		return 0, fmt.Errorf("creating mirror topic %s: %w (%s)", topic, r.Err, r.ErrMessage)
	}
	return n, nil
}

func checkMark(ctx context.Context, padm *kadm.Client, topic, sourceID string) error {
	rc, err := padm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return fmt.Errorf("configs of %s through offsetgate: %w", topic, err)
	}
	marked, mirroredID := false, ""
	for _, c := range rc[0].Configs {
		if c.Key == rules.MarkKey && c.Value != nil && *c.Value == "true" {
			marked = true
		}
		if c.Key == rules.SourcePrefix+"topic.id" && c.Value != nil {
			mirroredID = *c.Value
		}
	}
	if !marked {
		return fmt.Errorf("topic %s exists on the destination and is not a mirror topic; nothing was written", topic)
	}
	if mirroredID != "" && mirroredID != sourceID {
		return fmt.Errorf("%w: source topic %s has id %s, the mirror was made from %s (deleted and recreated); nothing was written", ErrSourceBackwards, topic, sourceID, mirroredID)
	}
	return nil
}

func mirrorPartition(ctx context.Context, src, px *kgo.Client, padm *kadm.Client, conns *connPool, cfg Config, topic string, part int32, st *partStats) PartitionSummary {
	s := PartitionSummary{Topic: topic, Partition: part}
	fail := func(err error) PartitionSummary { s.Err = err; return s }
	sadm := kadm.NewClient(src)
	ends, err := sadm.ListEndOffsets(ctx, topic)
	if err != nil {
		return fail(fmt.Errorf("source end offset: %w", err))
	}
	end, _ := ends.Lookup(topic, part)
	starts, err := sadm.ListStartOffsets(ctx, topic)
	if err != nil {
		return fail(fmt.Errorf("source start offset: %w", err))
	}
	logStart, _ := starts.Lookup(topic, part)
	var me kadm.ListedOffset
	err = retry(ctx, func() error {
		mirrored, err := padm.ListEndOffsets(ctx, topic)
		if err != nil {
			return err
		}
		me, _ = mirrored.Lookup(topic, part)
		return me.Err
	})
	if err != nil {
		return fail(fmt.Errorf("mirrored end through offsetgate: %w", err))
	}
	offset := me.Offset
	if offset < logStart.Offset {
		if offset > 0 {
			return fail(fmt.Errorf("the source's log starts at %d, beyond the mirrored end %d: records were lost to retention before they were mirrored", logStart.Offset, offset))
		}
		offset = logStart.Offset
	}
	if offset > end.Offset {
		return fail(fmt.Errorf("the mirror ends at %d, beyond the source's end %d: the source went backwards (truncated or recreated)", offset, end.Offset))
	}
	s.From, s.To = offset, offset
	st.offset.Store(offset)
	st.sourceEnd.Store(end.Offset)
	if cfg.follow {
		end.Offset = 1<<63 - 1
	}
	rd := NewReader(src, topic, part)
	for offset < end.Offset {
		if ctx.Err() != nil {
			return s
		}
		sets, hwm, err := rd.Fetch(ctx, offset, cfg.MaxBytes)
		if err != nil {
			if ctx.Err() != nil {
				return s
			}
			return fail(err)
		}
		st.sourceEnd.Store(hwm)
		if cfg.follow && len(sets) == 0 {
			if hwm < offset {
				// The fetch answered, but the source ends below what is mirrored.
				if err := rd.outOfRange(ctx, offset); err != nil {
					return fail(err)
				}
			}
			continue // nothing new: the fetch long-polled
		}
		var send []byte
		var hs []batch.Header
		for _, b := range sets {
			h, _ := batch.ReadHeader(b)
			if h.LastOffset() < offset || h.BaseOffset >= end.Offset {
				continue
			}
			if h.Attributes&(batch.AttrTransactional|batch.AttrControl) != 0 {
				// Refused before anything of it is sent: offsetgate would refuse it too, less
				// clearly.
				return fail(fmt.Errorf("transactional batch at offset %d: this version mirrors dense, non-transactional topics only; everything before it is mirrored, nothing after", h.BaseOffset))
			}
			send = append(send, b...)
			hs = append(hs, h)
		}
		if len(hs) == 0 {
			return fail(fmt.Errorf("the source returned no batch at offset %d", offset))
		}
		if err := produceAtOffset(ctx, px, conns, topic, part, send); err != nil {
			if cfg.follow && ctx.Err() != nil {
				return s // stopped on purpose: the next run resumes from the mirrored end
			}
			return fail(fmt.Errorf("at offset %d: %w", hs[0].BaseOffset, err))
		}
		for _, h := range hs {
			s.Batches++
			s.Records += int64(h.RecordCount)
		}
		s.Bytes += int64(len(send))
		offset = hs[len(hs)-1].LastOffset() + 1
		s.To = offset
		st.offset.Store(offset)
		st.records.Store(s.Records)
		st.bytes.Store(s.Bytes)
	}
	return s
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
	sets, _, err := NewReader(src, topic, part).Fetch(ctx, offset, maxBytes)
	return sets, err
}

// produceAtOffset sends one partition's batches with the magic header to the partition's
// leader through offsetgate, retrying retriable answers with the same batches.
func produceAtOffset(ctx context.Context, px *kgo.Client, conns *connPool, topic string, part int32, records []byte) error {
	var last error
	for attempt := 0; attempt < 20; attempt++ {
		if attempt > 0 {
			time.Sleep(time.Duration(min(attempt, 10)) * 100 * time.Millisecond)
		}
		addr, err := leaderAddr(ctx, px, topic, part)
		if err != nil {
			last = err
			continue
		}
		key := connKey(addr, topic, part)
		c, err := conns.get(ctx, addr, key)
		if err != nil {
			last = err
			continue
		}
		req := kmsg.NewPtrProduceRequest()
		req.SetVersion(11) // flexible (header tags), topics by name
		req.Acks, req.TimeoutMillis = -1, 30000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition, rp.Records = part, records
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp := kmsg.NewPtrProduceResponse()
		rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		err = c.RoundTrip(rctx, req, resp, true)
		cancel()
		if err != nil {
			conns.drop(key)
			last = err
			continue
		}
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
		if !kerr.IsRetriable(kerr.ErrorForCode(pr.ErrorCode)) || pr.ErrorCode == 56 {
			return err
		}
		last = err
	}
	return last
}

func leaderAddr(ctx context.Context, px *kgo.Client, topic string, part int32) (string, error) {
	md, err := kadm.NewClient(px).Metadata(ctx, topic)
	if err != nil {
		return "", err
	}
	t, ok := md.Topics[topic]
	if !ok || t.Err != nil {
		return "", fmt.Errorf("metadata of %s through offsetgate: %v", topic, t.Err)
	}
	p, ok := t.Partitions[part]
	if !ok || p.Leader < 0 {
		return "", fmt.Errorf("no leader for %s[%d]", topic, part)
	}
	for _, b := range md.Brokers {
		if b.NodeID == p.Leader {
			return fmt.Sprintf("%s:%d", b.Host, b.Port), nil
		}
	}
	return "", fmt.Errorf("broker %d not in metadata", p.Leader)
}

// connPool keeps one magic-header connection per partition being mirrored.
type connPool struct {
	cfg   Config
	mu    sync.Mutex
	conns map[string]*poolConn
}

type poolConn struct {
	mu sync.Mutex
	c  *wire.Conn
}

func newConnPool(cfg Config) *connPool { return &connPool{cfg: cfg, conns: map[string]*poolConn{}} }

// get returns the connection to addr, locked for one round trip at a time by the caller's
// partition: round trips on one connection are serialized.
// connKey names the connection of one partition: offsetgate handles a connection's
// produce-at-offset requests one at a time, so partitions get connections of their own.
func connKey(addr, topic string, part int32) string {
	return addr + "/" + topic + "/" + strconv.Itoa(int(part))
}

func (p *connPool) get(ctx context.Context, addr, key string) (*lockedConn, error) {
	p.mu.Lock()
	pc := p.conns[key]
	if pc == nil {
		pc = &poolConn{}
		p.conns[key] = pc
	}
	p.mu.Unlock()
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.c == nil {
		var tc *tls.Config
		if p.cfg.ProxyTLS != nil {
			tc = p.cfg.ProxyTLS.Clone()
		}
		dial := (&net.Dialer{Timeout: 10 * time.Second}).DialContext
		if p.cfg.Dial != nil {
			dial = p.cfg.Dial
		}
		c, err := wire.DialWith(ctx, dial, addr, tc, p.cfg.ProxySASL, "offsetgate-mirror")
		if err != nil {
			return nil, err
		}
		pc.c = c
	}
	return &lockedConn{pc}, nil
}

func (p *connPool) drop(key string) {
	p.mu.Lock()
	pc := p.conns[key]
	p.mu.Unlock()
	if pc == nil {
		return
	}
	pc.mu.Lock()
	if pc.c != nil {
		pc.c.Close()
		pc.c = nil
	}
	pc.mu.Unlock()
}

func (p *connPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pc := range p.conns {
		if pc.c != nil {
			pc.c.Close()
		}
	}
}

type lockedConn struct{ pc *poolConn }

func (l *lockedConn) RoundTrip(ctx context.Context, req kmsg.Request, resp kmsg.Response, magic bool) error {
	l.pc.mu.Lock()
	defer l.pc.mu.Unlock()
	if l.pc.c == nil {
		return errors.New("connection dropped")
	}
	return l.pc.c.RoundTrip(ctx, req, resp, magic)
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
