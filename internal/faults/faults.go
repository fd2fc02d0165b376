// Package faults is offsetgate's fault campaign (scripts/faults): it starts a source and a
// destination cluster of its own, runs offsetgate (`offsetgate serve`) and a following mirror
// (`offsetgate mirror`) as processes, writes to the source and reads through offsetgate all the
// time, and injects faults at random points: processes killed or stopped, destination brokers
// restarted, leaders moved, links cut or stalled, writes refused. After each fault it lets the
// system recover and checks that everything held:
//
//   - `offsetgate verify`: identical over the range both sides hold, nothing lost at the head,
//     for the dense topic and for a second one written by a transactional producer;
//   - a consumer through offsetgate at read_committed saw every committed record of the
//     transactional topic once, in order, and none of an aborted transaction;
//   - the consumers through offsetgate (one with its own positions, one consumer group
//     committing after every poll) saw every record once, in source order, as the source holds
//     it;
//   - no mirror partition halted (a halted one says why), the mirror runs and stopped none;
//   - no goroutine, connection or file descriptor leaked in the processes that lived through
//     the fault.
//
// With Config.Instances above one the campaign runs that many offsetgate instances in front of
// the destination and as many mirror processes in one mirror group, and its process faults hit
// one of them: ownership moves between live instances when the group moves partitions.
//
// Every fault has a seed of its own, which picks its kind and its parameters; the campaign's
// seed picks the faults' seeds. A report (docs/reliability.md) gives, per kind, how often it
// ran, how long recovery took, what held, what failed, and the seeds to replay a failure.
package faults

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// Config is one campaign.
type Config struct {
	// Seed picks the faults' seeds (and the records written).
	Seed uint64
	// Count is the number of faults to inject; Budget stops injecting once it has passed
	// (the fault under way finishes). Whichever comes first ends the campaign.
	Count  int
	Budget time.Duration
	// Kinds limits the campaign to these fault kinds (empty: all).
	Kinds []string
	// Replay runs exactly these fault seeds, in order, instead of drawing faults.
	Replay []uint64
	// Cycle takes the kinds in turn (fault i is kind i mod len) instead of letting each
	// fault's seed pick one: every kind runs in a short campaign.
	Cycle bool
	// Bin is the offsetgate binary.
	Bin string
	// Dir holds the clusters' data, the configurations and the processes' logs; empty: a
	// temporary folder, removed afterwards unless a fault failed.
	Dir string
	// Lease is offsetgate's ownership_lease (default 5 s): stops last longer than it.
	Lease time.Duration
	// Partitions of the mirrored topic (default 4) and the records a second written to the
	// source (default 200).
	Partitions int32
	Rate       int
	// Instances is the number of offsetgate instances in front of the destination and of
	// mirror processes (default 1). With more than one, mirror i writes through instance i,
	// the mirrors share the partitions as a mirror group (--mirror-group), the consumers read
	// through different instances, and the process faults hit one of them at random.
	Instances int
	// MirrorsAll gives every mirror process all instances' addresses (mirror i's own first),
	// as docs/operations.md advises: a mirror whose instance is killed or stopped goes on
	// through another, which waits out the lease and takes the partitions over.
	MirrorsAll bool
	// Compacted adds a third mirrored topic, compacted on the source and cleaned every few
	// seconds while it is written (a quarter of Rate, from 128 keys), read through offsetgate
	// by a consumer of its own; the mirror sends it again every 10 s (--resync), and after each
	// fault its writes pause until `offsetgate verify` finds it identical (campaign.check).
	Compacted bool
	// ServeYAML is more lines of offsetgate's configuration (for instance
	// "ledger_acks: leader"), appended to the campaign's own.
	ServeYAML string
	// Recovery is how long the system may take to recover from a fault before it counts
	// as a failure (default 3 minutes).
	Recovery time.Duration
	// Log hears what happens (default: discarded).
	Log io.Writer
	// Command is the command line the report names.
	Command string
}

func (c *Config) defaults() {
	if c.Lease <= 0 {
		c.Lease = 5 * time.Second
	}
	if c.Partitions <= 0 {
		c.Partitions = 4
	}
	if c.Rate <= 0 {
		c.Rate = 200
	}
	if c.Instances <= 0 {
		c.Instances = 1
	}
	if c.Recovery <= 0 {
		c.Recovery = 3 * time.Minute
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	if c.Count <= 0 && len(c.Replay) == 0 {
		c.Count = 10
	}
	if c.Budget <= 0 {
		c.Budget = 24 * time.Hour
	}
}

// Outcome is one fault: what was done, how long recovery took, what failed.
type Outcome struct {
	Index    int
	Kind     string
	Seed     uint64
	What     string
	Duration time.Duration // from injection to the fault being undone
	// Recovery is from the fault being undone until the consumers through offsetgate had
	// read everything the source held then; negative: it did not recover.
	Recovery time.Duration
	// Held lists the checks that passed, Failures what failed.
	Held     []string
	Failures []string
}

// Report is a campaign's result.
type Report struct {
	Config   Config
	Started  time.Time
	Elapsed  time.Duration
	Outcomes []Outcome
	// Produced, Direct and Group are record counts; Redelivered is what the group read again
	// after a commit that did not go through (allowed: never counted as processed).
	Produced, ProduceFailed int64
	Direct, Group           int64
	// The transactional topic: transactions committed, aborted and of unknown end, records
	// committed, and records its read_committed consumer read.
	TxnCommits, TxnAborts, TxnUnknown int64
	TxnCommitted, TxnRead             int64
	// The compacted topic (Config.Compacted): records written, read through offsetgate, and at
	// the end the records the source still held and the offsets they spanned.
	CompactProduced, CompactRead int64
	CompactLeft, CompactSpanned  int64
	Redelivered                  int64
	GroupRestarts                int
	ConsumerErrors               []string
	Leaks                        map[string]*leakSeries
	// Writes is, per offsetgate instance, the mirror writes it made in its last life (from
	// offsetgate_mirror_writes_total at the end): with several instances, each carried its
	// share.
	Writes  map[string]float64
	Dir     string
	Aborted string
}

// Failed reports whether any fault failed or the campaign was cut short.
func (r *Report) Failed() bool {
	if r.Aborted != "" {
		return true
	}
	for _, o := range r.Outcomes {
		if len(o.Failures) > 0 {
			return true
		}
	}
	return false
}

// faultSeed is the seed of the i-th fault of a campaign.
func faultSeed(seed uint64, i int) uint64 {
	r := rand.New(rand.NewPCG(seed, uint64(i)))
	return r.Uint64()
}

// Run runs a campaign.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.defaults()
	if cfg.Bin == "" {
		return nil, errors.New("faults: Config.Bin (the offsetgate binary) is required")
	}
	all := kinds()
	byName := map[string]kind{}
	for _, k := range all {
		byName[k.name] = k
	}
	var use []kind
	if len(cfg.Kinds) == 0 {
		use = all
	}
	for _, n := range cfg.Kinds {
		k, ok := byName[n]
		if !ok {
			return nil, fmt.Errorf("faults: unknown fault kind %q (known: %s)", n, strings.Join(KindNames(), ", "))
		}
		use = append(use, k)
	}
	dir, own := cfg.Dir, false
	if dir == "" {
		d, err := os.MkdirTemp("", "offsetgate-faults-")
		if err != nil {
			return nil, err
		}
		dir, own = d, true
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	rep := &Report{Config: cfg, Started: time.Now(), Dir: dir, Leaks: map[string]*leakSeries{}}
	e, err := setup(ctx, cfg, dir)
	if err != nil {
		return nil, fmt.Errorf("faults: setting up: %w", err)
	}
	defer func() {
		e.close()
		if own && !rep.Failed() {
			os.RemoveAll(dir)
		}
	}()

	// Traffic: producers on the source, two consumers through offsetgate.
	w := &written{hashes: map[int32][]uint64{}}
	wt := newTxnWritten()
	direct, group, txn := newTally("direct consumer"), newTally("group consumer"), newTally("read_committed consumer")
	direct.log, group.log, txn.log = e.logf, e.logf, e.logf
	c := &campaign{e: e, w: w, wt: wt, direct: direct, group: group, txn: txn, rep: rep}
	tctx, stopTraffic := context.WithCancel(ctx)
	var wg sync.WaitGroup
	traffic := []func(context.Context) error{
		func(c context.Context) error { return e.produce(c, w, cfg.Rate, cfg.Seed) },
		func(c context.Context) error { return e.readDirect(c, w, direct) },
		func(c context.Context) error { return e.readGroup(c, w, group) },
		func(c context.Context) error { return e.produceTxn(c, wt, cfg.Seed) },
		func(c context.Context) error { return e.readTxn(c, wt, txn) },
	}
	if e.compactTopic != "" {
		c.cw = &written{hashes: map[int32][]uint64{}}
		c.compact = newTally("compacted-topic consumer")
		c.compact.log = e.logf
		traffic = append(traffic,
			func(ctx context.Context) error {
				return e.produceCompact(ctx, c.cw, max(cfg.Rate/4, 1), cfg.Seed, &c.compactPaused)
			},
			func(ctx context.Context) error { return e.readCompact(ctx, c.cw, c.compact) })
	}
	for _, f := range traffic {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(tctx); err != nil && tctx.Err() == nil {
				e.logf("traffic: %v", err)
			}
		}()
	}
	defer func() {
		stopTraffic()
		wg.Wait()
	}()
	e.logf("campaign: seed %d, %d faults at most, budget %s, lease %s, %d instance(s) and mirror(s), kinds %s", cfg.Seed, cfg.Count, cfg.Budget, cfg.Lease, cfg.Instances, names(use))
	// Everything flows before the first fault: the baseline.
	if _, err := c.recover(ctx, time.Now()); err != nil {
		rep.Aborted = "the system did not settle before the first fault: " + err.Error()
		return c.finish(), nil
	}
	c.sampleLeaks(ctx, "baseline", nil)
	c.warmBaseline(ctx)

	start := time.Now()
	n := cfg.Count
	if len(cfg.Replay) > 0 {
		n = len(cfg.Replay)
	}
	for i := 0; i < n && time.Since(start) < cfg.Budget && ctx.Err() == nil; i++ {
		seed := faultSeed(cfg.Seed, i)
		if len(cfg.Replay) > 0 {
			seed = cfg.Replay[i]
		}
		rng := rand.New(rand.NewPCG(seed, 0xfa017))
		k := use[rng.IntN(len(use))]
		if cfg.Cycle && len(cfg.Replay) == 0 {
			k = use[i%len(use)]
		}
		o := c.fault(ctx, i, k, seed, rng)
		rep.Outcomes = append(rep.Outcomes, o)
		status := "held"
		if len(o.Failures) > 0 {
			status = "FAILED: " + strings.Join(o.Failures, "; ")
		}
		e.logf("fault %d %s (seed %d): %s; recovered in %s; %s", i, k.name, seed, o.What, o.Recovery.Round(time.Millisecond), status)
		if c.wedged {
			rep.Aborted = fmt.Sprintf("the system did not recover from fault %d (%s, seed %d), even with offsetgate and the mirror restarted", i, k.name, seed)
			break
		}
		if i%10 == 9 {
			c.trim(ctx)
		}
	}
	return c.finish(), nil
}

func names(ks []kind) string {
	var s []string
	for _, k := range ks {
		s = append(s, k.name)
	}
	return strings.Join(s, ",")
}

// campaign is a run's state.
type campaign struct {
	e                  *env
	w                  *written
	wt                 *txnWritten
	direct, group, txn *tally
	rep                *Report
	wedged             bool

	// The compacted topic (Config.Compacted): what was written, its consumer, and whether its
	// writes pause (while a check waits for the mirror to record the source's cleaning).
	cw            *written
	compact       *tally
	compactPaused atomic.Bool
}

func (c *campaign) finish() *Report {
	r := c.rep
	r.Elapsed = time.Since(r.Started)
	r.Produced, r.ProduceFailed = c.w.produced.Load(), c.w.failed.Load()
	c.direct.mu.Lock()
	r.Direct = c.direct.records
	c.direct.mu.Unlock()
	c.group.mu.Lock()
	r.Group, r.Redelivered, r.GroupRestarts = c.group.records, c.group.redelivery, c.group.restarts
	c.group.mu.Unlock()
	c.txn.mu.Lock()
	r.TxnRead = c.txn.records
	c.txn.mu.Unlock()
	r.TxnCommits, r.TxnAborts, r.TxnUnknown, r.TxnCommitted = c.wt.commits.Load(), c.wt.aborts.Load(), c.wt.unknown.Load(), c.wt.committed.Load()
	r.Writes = map[string]float64{}
	for _, og := range c.e.ogs {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		m, err := scrape(ctx, og.metrics)
		cancel()
		if err != nil {
			c.e.logf("the writes of %s: %v", og.name, err)
			continue
		}
		for k, v := range m {
			if strings.HasPrefix(k, "offsetgate_mirror_writes_total") {
				r.Writes[og.name] += v
			}
		}
	}
	r.ConsumerErrors = append(append(c.direct.topErrs(8), c.group.topErrs(8)...), c.txn.topErrs(8)...)
	if c.compact != nil {
		r.CompactProduced = c.cw.produced.Load()
		c.compact.mu.Lock()
		r.CompactRead = c.compact.records
		c.compact.mu.Unlock()
		r.ConsumerErrors = append(r.ConsumerErrors, c.compact.topErrs(8)...)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		var err error
		if r.CompactLeft, r.CompactSpanned, err = c.e.compactedAway(ctx); err != nil {
			c.e.logf("reading the compacted topic on the source: %v", err)
		}
		cancel()
	}
	return r
}

// fault injects one fault, waits for recovery and checks.
func (c *campaign) fault(ctx context.Context, i int, k kind, seed uint64, rng *rand.Rand) Outcome {
	e := c.e
	o := Outcome{Index: i, Kind: k.name, Seed: seed}
	// A random point in the traffic.
	if err := sleep(ctx, between(rng, 0, 4*time.Second)); err != nil {
		o.Failures = append(o.Failures, err.Error())
		return o
	}
	e.logf("fault %d: %s (seed %d)", i, k.name, seed)
	lives := map[*proc]int{}
	for _, p := range e.procs() {
		lives[p] = p.life()
	}
	t0 := time.Now()
	fctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	what, err := k.inject(fctx, e, rng)
	cancel()
	o.What, o.Duration = what, time.Since(t0)
	if err != nil {
		o.Failures = append(o.Failures, "injecting or undoing the fault: "+err.Error())
	}
	healed := time.Now()
	rec, err := c.recover(ctx, healed)
	if err != nil {
		o.Recovery = -1
		o.Failures = append(o.Failures, "did not recover: "+err.Error())
		// Restart both processes once; a system that does not recover then is wedged.
		e.logf("fault %d: no recovery (%v); restarting offsetgate and the mirror", i, err)
		for _, p := range e.procs() {
			p.kill()
		}
		for _, og := range e.ogs {
			if serr := e.startOG(ctx, og); serr != nil {
				o.Failures = append(o.Failures, "restarting "+og.name+": "+serr.Error())
			}
		}
		for _, m := range e.mrs {
			if serr := e.startMirror(ctx, m); serr != nil {
				o.Failures = append(o.Failures, "restarting "+m.name+": "+serr.Error())
			}
		}
		if _, err := c.recover(ctx, time.Now()); err != nil {
			c.wedged = true
			return o
		}
	} else {
		o.Recovery = rec
		o.Held = append(o.Held, "recovered")
	}
	c.check(ctx, &o)
	// Leaks, in the processes that lived through the fault.
	var survivors []*proc
	for p, life := range lives {
		if p.life() == life && p.running() {
			survivors = append(survivors, p)
		}
	}
	sort.Slice(survivors, func(i, j int) bool { return survivors[i].name < survivors[j].name })
	if leaks := c.sampleLeaks(ctx, fmt.Sprintf("fault %d", i), survivors); len(leaks) > 0 {
		o.Failures = append(o.Failures, leaks...)
	} else if len(survivors) > 0 {
		o.Held = append(o.Held, "no leak")
	}
	return o
}

// sourceEnds reads the source's high watermarks.
func (c *campaign) sourceEnds(ctx context.Context) (map[int32]int64, error) {
	ends, err := c.e.srcAdm.ListEndOffsets(ctx, c.e.topic)
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	var ferr error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			ferr = o.Err
		}
		out[o.Partition] = o.Offset
	})
	if ferr == nil && int32(len(out)) != c.e.cfg.Partitions {
		ferr = fmt.Errorf("%d partitions answered", len(out))
	}
	return out, ferr
}

// recover waits until the consumers through offsetgate have read everything the source held
// when it was called (the read_committed one: every transaction committed by then), and
// returns how long that took from since.
func (c *campaign) recover(ctx context.Context, since time.Time) (time.Duration, error) {
	deadline := time.Now().Add(c.e.cfg.Recovery)
	var target map[int32]int64
	txnTarget := c.wt.ends()
	var last string
	nextLog := time.Now().Add(30 * time.Second)
	for {
		if target == nil {
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			t, err := c.sourceEnds(rctx)
			cancel()
			if err == nil {
				target = t
			} else {
				last = "source ends: " + err.Error()
			}
		}
		if target != nil {
			done := true
			var behind []string
			for p, end := range target {
				d, g := c.direct.position(p), c.group.position(p)
				if d < end || g < end {
					done = false
					behind = append(behind, fmt.Sprintf("%d: source %d, direct %d, group %d", p, end, d, g))
				}
			}
			for p, end := range txnTarget {
				if x := c.txn.position(p); x < end {
					done = false
					behind = append(behind, fmt.Sprintf("%s[%d]: committed to %d, read_committed %d", c.e.txnTopic, p, end, x))
				}
			}
			if done {
				return time.Since(since), nil
			}
			sort.Strings(behind)
			last = "behind: " + strings.Join(behind, "; ")
		}
		for _, p := range c.e.procs() {
			if !p.running() {
				return 0, fmt.Errorf("%s is not running (%s)", p.name, p.exited())
			}
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("not recovered after %s: %s", c.e.cfg.Recovery, last)
		}
		if time.Now().After(nextLog) {
			c.e.logf("recovering for %s: %s", time.Since(since).Round(time.Second), last)
			nextLog = time.Now().Add(30 * time.Second)
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return 0, err
		}
	}
}

// trim moves the source's log start up (as retention would), below what both consumers have
// read, keeping a few thousand records per partition: verify's work stays bounded, and the
// mirror's log-start following is exercised.
func (c *campaign) trim(ctx context.Context) {
	const keep = 3000
	offs := kadm.Offsets{}
	for p := int32(0); p < c.e.cfg.Partitions; p++ {
		at := min(c.direct.position(p), c.group.position(p)) - keep
		if at > 0 {
			offs.Add(kadm.Offset{Topic: c.e.topic, Partition: p, At: at})
		}
	}
	if len(offs) == 0 {
		return
	}
	if _, err := c.e.srcAdm.DeleteRecords(ctx, offs); err != nil {
		c.e.logf("trimming the source: %v", err)
		return
	}
	c.e.logf("source trimmed to %d records a partition", keep)
}

// Write writes the report as markdown to path.
func (r *Report) Write(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(r.Markdown()), 0o644)
}
