package mirror

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"offsetgate/batch"
)

// partStats is one partition's live numbers, written by its goroutine and read by the
// reporter and the metrics.
type partStats struct {
	topic     string
	partition int32
	offset    atomic.Int64 // next source offset to mirror
	sourceEnd atomic.Int64 // the source's high watermark at the last fetch
	records   atomic.Int64
	bytes     atomic.Int64
	state     atomic.Value // string: "", "done", or the error that stopped the partition
	added     time.Time    // when the run took the partition (records counts from there)
	// resumes counts the write failures in a row a following run took the partition up again
	// after (guarded by engine.mu): its pause before the next doubles.
	resumes int
}

// tracker holds every partition's stats and reports them: a live table on a terminal, a line per
// partition every ProgressEvery otherwise, and Prometheus gauges.
type tracker struct {
	mu    sync.Mutex
	parts []*partStats
	start time.Time

	records, bytes, offset, end, lag, stopped *prometheus.GaugeVec
	resumed                                   *prometheus.CounterVec

	// Where a following mirror's lag goes, by the batches' own timestamps (timeLag).
	lagTime, fetchAge, queued, written prometheus.Histogram
}

// timeBuckets double from half a millisecond to about 70 minutes: a following mirror's
// milliseconds and a first copy's hours of history fall in the same histogram.
var timeBuckets = prometheus.ExponentialBuckets(0.0005, 2, 24)

func newTracker(reg prometheus.Registerer) *tracker {
	t := &tracker{start: time.Now()}
	labels := []string{"topic", "partition"}
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "offsetgate_mirror_client_" + name, Help: help}, labels)
	}
	t.records = gauge("records", "Records mirrored by this run.")
	t.bytes = gauge("bytes", "Record batch bytes mirrored by this run.")
	t.offset = gauge("mirrored_offset", "Next source offset to mirror (the mirrored end).")
	t.end = gauge("source_end_offset", "The source partition's high watermark at the last fetch.")
	t.lag = gauge("lag_records", "Source offsets not mirrored yet.")
	t.stopped = gauge("stopped", "1 when the partition stopped on an error (see the log).")
	t.resumed = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "offsetgate_mirror_client_resumes_total",
		Help: "Times a following run took the partition up again from the mirrored end after a write failed with an error a later attempt can get past (see the log)."}, labels)
	hist := func(name, help string) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: "offsetgate_mirror_client_" + name, Help: help, Buckets: timeBuckets})
	}
	t.lagTime = hist("lag_seconds", "Per batch: from its newest record's timestamp on the source to offsetgate's confirmation that the destination holds it (a producer's clock and linger show in it).")
	t.fetchAge = hist("fetch_age_seconds", "Per batch: from its newest record's timestamp to its arrival in a fetch from the source.")
	t.queued = hist("queue_seconds", "Per write: from the fetch that began its chunk to its sending to offsetgate (waiting for a writer or a free slot of the pipeline).")
	t.written = hist("write_seconds", "Per write: from its sending to offsetgate's answer (retries included).")
	if reg != nil {
		for _, g := range []*prometheus.GaugeVec{t.records, t.bytes, t.offset, t.end, t.lag, t.stopped} {
			_ = reg.Register(g)
		}
		_ = reg.Register(t.resumed)
		for _, h := range []prometheus.Histogram{t.lagTime, t.fetchAge, t.queued, t.written} {
			_ = reg.Register(h)
		}
	}
	return t
}

// releasedAs shows the partition with state as mirrored elsewhere: no lag is shown for it.
func (p *partStats) releasedAs(state string) {
	p.state.Store(state)
	p.offset.Store(-1)
	p.sourceEnd.Store(-1)
}

func (t *tracker) add(topic string, partition int32) *partStats {
	p := &partStats{topic: topic, partition: partition, added: time.Now()}
	p.offset.Store(-1)
	p.sourceEnd.Store(-1)
	p.state.Store("")
	t.mu.Lock()
	t.parts = append(t.parts, p)
	t.mu.Unlock()
	return p
}

// sinceStamp is the time from a batch's timestamp (milliseconds since the epoch) to now, false
// for a batch without one. A timestamp ahead of this machine's clock counts as no time.
func sinceStamp(now time.Time, ms int64) (float64, bool) {
	if ms < 0 {
		return 0, false
	}
	return max(now.Sub(time.UnixMilli(ms)).Seconds(), 0), true
}

// fetched observes the age of batches that arrived in a fetch.
func (t *tracker) fetched(now time.Time, hs []batch.Header) {
	if t == nil {
		return
	}
	for _, h := range hs {
		if s, ok := sinceStamp(now, h.MaxTimestamp); ok {
			t.fetchAge.Observe(s)
		}
	}
}

// landed observes a write confirmed at now: its batches' lag, its time queued and on its way.
func (t *tracker) landed(now, fetched, sent time.Time, hs []batch.Header) {
	if t == nil {
		return
	}
	for _, h := range hs {
		if s, ok := sinceStamp(now, h.MaxTimestamp); ok {
			t.lagTime.Observe(s)
		}
	}
	if !sent.IsZero() {
		if !fetched.IsZero() {
			t.queued.Observe(max(sent.Sub(fetched).Seconds(), 0))
		}
		t.written.Observe(now.Sub(sent).Seconds())
	}
}

// stoppedPrefix begins the state of a partition stopped on an error.
const stoppedPrefix = "stopped: "

// update refreshes the gauges from the stats.
func (t *tracker) update() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.parts {
		l := []string{p.topic, strconv.Itoa(int(p.partition))}
		t.records.WithLabelValues(l...).Set(float64(p.records.Load()))
		t.bytes.WithLabelValues(l...).Set(float64(p.bytes.Load()))
		t.offset.WithLabelValues(l...).Set(float64(p.offset.Load()))
		t.end.WithLabelValues(l...).Set(float64(p.sourceEnd.Load()))
		if lag, ok := lagOf(p); ok {
			t.lag.WithLabelValues(l...).Set(float64(lag))
		} else {
			t.lag.DeleteLabelValues(l...) // unknown is not zero
		}
		// Only a partition stopped on an error: mirroring, retrying, waiting for a leader
		// and done are not stopped.
		stopped := 0.0
		if strings.HasPrefix(p.state.Load().(string), stoppedPrefix) {
			stopped = 1
		}
		t.stopped.WithLabelValues(l...).Set(stopped)
	}
}

// lagOf is the source offsets not mirrored yet; false while either end is unknown (the
// partition's state then says why).
func lagOf(p *partStats) (int64, bool) {
	o, e := p.offset.Load(), p.sourceEnd.Load()
	if o < 0 || e < 0 {
		return 0, false
	}
	return max(e-o, 0), true
}

type snapshot struct {
	records, bytes int64
	at             time.Time
}

// run reports until stop is closed, once a second: the gauges at every tick, and lines every
// interval (live redraws a table in place on a terminal; otherwise one line per partition).
func (t *tracker) run(w io.Writer, live bool, interval time.Duration, stop <-chan struct{}) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	t.report(w, live, interval, tick.C, stop)
}

// report is run with the ticks given (a test sends its own, with the times it wants).
func (t *tracker) report(w io.Writer, live bool, interval time.Duration, tick <-chan time.Time, stop <-chan struct{}) {
	if live || interval <= 0 {
		interval = time.Second
	}
	prev := map[*partStats]snapshot{}
	drawn := 0
	var last time.Time
	for {
		var now time.Time
		select {
		case <-stop:
			t.update()
			return
		case now = <-tick:
		}
		t.update()
		if w == nil || (!last.IsZero() && now.Sub(last) < interval-50*time.Millisecond) {
			continue
		}
		last = now
		t.mu.Lock()
		parts := append([]*partStats(nil), t.parts...)
		t.mu.Unlock()
		sort.Slice(parts, func(i, j int) bool {
			if parts[i].topic != parts[j].topic {
				return parts[i].topic < parts[j].topic
			}
			return parts[i].partition < parts[j].partition
		})
		var b strings.Builder
		if live && drawn > 0 {
			fmt.Fprintf(&b, "\033[%dA\033[J", drawn) // back to the table's first line, clear below
		}
		lines := 0
		if live {
			fmt.Fprintf(&b, "%-40s %12s %12s %10s %12s %10s  %s\n", "PARTITION", "MIRRORED", "SOURCE END", "LAG", "RECORDS/S", "MB/S", "STATE")
			lines++
		}
		for _, p := range parts {
			s := snapshot{p.records.Load(), p.bytes.Load(), now}
			// What was mirrored since the last report (or since the partition was taken,
			// for its first): the count, and the rate over that time.
			q, ok := prev[p]
			if !ok {
				q = snapshot{at: p.added}
			}
			since := now.Sub(q.at)
			n := s.records - q.records
			rr, br := 0.0, 0.0
			if since > 0 {
				rr = float64(n) / since.Seconds()
				br = float64(s.bytes-q.bytes) / since.Seconds() / 1e6
			}
			prev[p] = s
			state := p.state.Load().(string)
			if state == "" {
				state = "waiting to start"
			}
			name := fmt.Sprintf("%s[%d]", p.topic, p.partition)
			lag, known := lagOf(p)
			switch {
			case live && known:
				fmt.Fprintf(&b, "%-40s %12d %12d %10d %12.0f %10.1f  %s\n", name, p.offset.Load(), p.sourceEnd.Load(), lag, rr, br, state)
			case live:
				fmt.Fprintf(&b, "%-40s %12s %12s %10s %12s %10s  not started: %s\n", name, "-", "-", "-", "-", "-", state)
			case known:
				fmt.Fprintf(&b, "%s: mirrored to %d, source end %d, lag %d, %d records in the last %s (%.0f records/s, %.1f MB/s), %s\n",
					name, p.offset.Load(), p.sourceEnd.Load(), lag, n, roundSince(since), rr, br, state)
			default:
				fmt.Fprintf(&b, "%s: not started: %s\n", name, state)
			}
			lines++
		}
		drawn = lines
		_, _ = io.WriteString(w, b.String())
	}
}

// roundSince shows an interval as the reports' clock saw it: whole seconds from a second up.
func roundSince(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(time.Second)
	}
	return d.Round(10 * time.Millisecond)
}
