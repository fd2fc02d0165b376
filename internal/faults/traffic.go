package faults

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// written is what the source holds, as the producer's acknowledgements tell it: a hash of each
// record's key and value by partition and offset.
type written struct {
	mu       sync.Mutex
	hashes   map[int32][]uint64 // index: offset; 0: not known
	produced atomic.Int64
	failed   atomic.Int64
}

func recordHash(key, value []byte) uint64 {
	h := fnv.New64a()
	h.Write(key)
	h.Write([]byte{0})
	h.Write(value)
	if s := h.Sum64(); s != 0 {
		return s
	}
	return 1
}

func (w *written) add(p int32, o int64, h uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.hashes[p]
	for int64(len(s)) <= o {
		s = append(s, 0)
	}
	s[o] = h
	w.hashes[p] = s
}

func (w *written) at(p int32, o int64) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if s := w.hashes[p]; o >= 0 && o < int64(len(s)) {
		return s[o]
	}
	return 0
}

// produce writes to the source at about rate records a second until ctx ends.
func (e *env) produce(ctx context.Context, w *written, rate int, seed uint64) error {
	cl, err := e.src.Client(kgo.DefaultProduceTopic(e.topic), kgo.ProducerLinger(5*time.Millisecond),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()), kgo.MaxBufferedRecords(20000))
	if err != nil {
		return err
	}
	defer cl.Close()
	rng := rand.New(rand.NewPCG(seed, 0x70d0c3))
	const letters = "abcdefghijklmnopqrstuvwxyz"
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	perTick := max(rate/50, 1)
	for seq := 0; ; {
		select {
		case <-ctx.Done():
			cl.Flush(context.Background())
			return nil
		case <-tick.C:
		}
		for i := 0; i < perTick; i++ {
			v := make([]byte, 50+rng.IntN(200))
			for j := range v {
				v[j] = letters[rng.IntN(len(letters))]
			}
			r := &kgo.Record{Key: []byte(fmt.Sprintf("k%d", seq%64)), Value: append([]byte(fmt.Sprintf("r%d-", seq)), v...)}
			seq++
			cl.Produce(ctx, r, func(r *kgo.Record, err error) {
				if err != nil {
					if ctx.Err() == nil {
						w.failed.Add(1)
					}
					return
				}
				w.produced.Add(1)
				w.add(r.Partition, r.Offset, recordHash(r.Key, r.Value))
			})
		}
	}
}

// tally is what a consumer saw: its position per partition and every departure from
// "each record once, in source order, as the source holds it".
type tally struct {
	name string

	mu         sync.Mutex
	next       map[int32]int64 // the next offset it must see
	records    int64
	redelivery int64 // records read again after a commit that did not go through (group only)
	violations []string
	nviol      int
	errs       map[string]int
	restarts   int
	log        func(format string, a ...any)
}

func newTally(name string) *tally {
	return &tally{name: name, next: map[int32]int64{}, errs: map[string]int{}}
}

func (t *tally) violate(format string, a ...any) {
	t.nviol++
	if len(t.violations) < 50 {
		t.violations = append(t.violations, fmt.Sprintf(format, a...))
	}
}

// take returns the violations since the last call.
func (t *tally) take() ([]string, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v, n := t.violations, t.nviol
	t.violations, t.nviol = nil, 0
	return v, n
}

func (t *tally) position(p int32) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.next[p]
}

func (t *tally) noteErr(err error) {
	msg := err.Error()
	if len(msg) > 120 {
		msg = msg[:120]
	}
	t.mu.Lock()
	t.errs[msg]++
	first := t.errs[msg] == 1
	log := t.log
	t.mu.Unlock()
	if first && log != nil {
		log("%s: %s (first time)", t.name, msg)
	}
}

// topErrs lists the fetch errors it saw, most frequent first.
func (t *tally) topErrs(n int) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	type kv struct {
		k string
		v int
	}
	var all []kv
	for k, v := range t.errs {
		all = append(all, kv{k, v})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].v > all[j].v })
	var out []string
	for i := 0; i < len(all) && i < n; i++ {
		out = append(out, fmt.Sprintf("%d× %s", all[i].v, all[i].k))
	}
	return out
}

// check compares a record with what the source holds at its offset.
func (t *tally) check(w *written, r *kgo.Record) {
	if want := w.at(r.Partition, r.Offset); want != 0 && want != recordHash(r.Key, r.Value) {
		t.violate("%s: %s[%d] offset %d: the record is not the source's (key %q)", t.name, r.Topic, r.Partition, r.Offset, r.Key)
	}
}

// readDirect reads every partition through offsetgate from the start, keeping its own
// positions (no group): every offset must come once, in order.
func (e *env) readDirect(ctx context.Context, w *written, t *tally) error {
	cl, err := e.fromStart(0, e.topic, kgo.ClientID("faults-direct"))
	if err != nil {
		return err
	}
	defer cl.Close()
	poll(ctx, cl, t, func(r *kgo.Record) {
		next := t.next[r.Partition]
		switch {
		case r.Offset > next:
			t.violate("%s: %s[%d]: offsets %d to %d skipped", t.name, r.Topic, r.Partition, next, r.Offset-1)
		case r.Offset < next:
			t.violate("%s: %s[%d]: offset %d read again (next was %d)", t.name, r.Topic, r.Partition, r.Offset, next)
		}
		t.check(w, r)
		t.next[r.Partition] = max(next, r.Offset+1)
		t.records++
	})
	return nil
}

// poll reads with cl until ctx ends: its fetch errors are noted on t, and each record is
// handed to each under t's lock.
func poll(ctx context.Context, cl *kgo.Client, t *tally, each func(r *kgo.Record)) {
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachError(func(_ string, _ int32, err error) {
			if ctx.Err() == nil {
				t.noteErr(err)
			}
		})
		t.mu.Lock()
		fs.EachRecord(each)
		t.mu.Unlock()
	}
}

// readGroup reads through offsetgate as a consumer group that commits after every poll.
// Records count as processed once their commit went through; a failed commit ends the client
// and a new one resumes from the committed offsets, which must be where the last commit that
// went through left them (or the failed one, if it went through after all): anything else
// skips or repeats records.
func (e *env) readGroup(ctx context.Context, w *written, t *tally) error {
	const group = "faults-group"
	pending := map[int32]int64{} // end of records read and not yet committed
	resumed := map[int32]bool{}  // the partition's first record in this session has come
	// The group client's own log and the commits, for a failure's story.
	lf, err := os.OpenFile(filepath.Join(e.dir, "group-consumer.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer lf.Close()
	var lmu sync.Mutex
	logw := lockedWriter{mu: &lmu, w: lf}
	note := func(format string, a ...any) {
		fmt.Fprintf(logw, "%s faults: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, a...))
	}
	session := 0
	for ctx.Err() == nil {
		session++
		note("session %d starts", session)
		var revokedMu sync.Mutex
		revoked := map[int32]bool{}
		onLoss := func(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
			revokedMu.Lock()
			defer revokedMu.Unlock()
			for _, ps := range lost {
				for _, p := range ps {
					revoked[p] = true
				}
			}
		}
		cl, err := kgo.NewClient(append(e.consumerOpts(1), kgo.ClientID("faults-group"), kgo.ConsumerGroup(group),
			kgo.ConsumeTopics(e.topic), kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(),
			// A member that could not leave (its link was down) holds up the next join until
			// its session times out: keep that short.
			kgo.SessionTimeout(6*time.Second), kgo.HeartbeatInterval(time.Second), kgo.RebalanceTimeout(20*time.Second),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.WithLogger(kgo.BasicLogger(logw, kgo.LogLevelInfo, func() string { return time.Now().Format("15:04:05.000 ") })),
			kgo.OnPartitionsRevoked(onLoss), kgo.OnPartitionsLost(onLoss))...)
		if err != nil {
			return err
		}
		t.mu.Lock()
		for p := range resumed {
			delete(resumed, p)
		}
		t.mu.Unlock()
		failed := false
		for ctx.Err() == nil && !failed {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			fs := cl.PollFetches(pctx)
			cancel()
			fs.EachError(func(_ string, _ int32, err error) {
				if ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
					t.noteErr(err)
				}
			})
			t.mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				p := r.Partition
				acked := t.next[p]
				end, ok := pending[p]
				if !ok {
					end = acked
				}
				if !resumed[p] {
					note("session %d: partition %d resumes at %d (acked %d, pending %d)", session, p, r.Offset, acked, end)
					// Where the group resumed: the last commit that went through, or the
					// one whose answer was lost.
					resumed[p] = true
					switch r.Offset {
					case end:
						if end != acked {
							t.next[p], acked = end, end // the unanswered commit went through
						}
					case acked:
						if end != acked {
							t.redelivery += end - acked
						}
						end = acked
					default:
						note("VIOLATION: %d resumed at %d, acked %d, pending %d", p, r.Offset, acked, end)
						t.violate("%s: %s[%d]: the group resumed at offset %d, its commits left it at %d (or %d)", t.name, r.Topic, p, r.Offset, acked, end)
						t.next[p], end = r.Offset, r.Offset
					}
				} else if r.Offset != end {
					note("VIOLATION: %d offset %d after %d", p, r.Offset, end-1)
					t.violate("%s: %s[%d]: offset %d after %d", t.name, r.Topic, p, r.Offset, end-1)
				}
				t.check(w, r)
				pending[p] = r.Offset + 1
				t.records++
			})
			t.mu.Unlock()
			if len(fs.Records()) > 0 {
				cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
				unc := cl.UncommittedOffsets()
				err := cl.CommitUncommittedOffsets(cctx)
				cancel()
				note("session %d: commit %v: %v", session, unc, err)
				if err == nil {
					// What the commit carried went through; a partition the group lost
					// before it (a session that ended) had nothing to commit and keeps its
					// last commit.
					t.mu.Lock()
					for _, ps := range unc {
						for p, eo := range ps {
							t.next[p] = eo.Offset
						}
					}
					t.mu.Unlock()
				} else if ctx.Err() == nil {
					t.noteErr(fmt.Errorf("commit: %w", err))
					failed = true
				}
			}
			revokedMu.Lock()
			if len(revoked) > 0 {
				note("session %d: partitions revoked or lost: %v", session, revoked)
				t.mu.Lock()
				for p := range revoked {
					delete(resumed, p)
				}
				t.mu.Unlock()
				revoked = map[int32]bool{}
			}
			revokedMu.Unlock()
			cl.AllowRebalance()
		}
		cl.Close()
		if failed {
			t.mu.Lock()
			t.restarts++
			t.mu.Unlock()
		}
	}
	return nil
}

// describe is a one-line summary of a tally.
func (t *tally) describe() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var ps []string
	for p := int32(0); p < int32(len(t.next)); p++ {
		ps = append(ps, fmt.Sprintf("%d:%d", p, t.next[p]))
	}
	return fmt.Sprintf("%s: %d records, positions %s", t.name, t.records, strings.Join(ps, " "))
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
