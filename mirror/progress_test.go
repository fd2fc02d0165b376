package mirror

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"offsetgate/batch"
)

func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	return family(t, reg, name).GetMetric()[0].GetGauge().GetValue()
}

// family is the metric family name of reg; the test fails without it.
func family(t *testing.T, reg *prometheus.Registry, name string) *dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf
		}
	}
	t.Fatalf("no metric %s", name)
	return nil
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// The live table redraws in place (cursor up, clear) with lag and rate per partition; the
// gauges follow the partitions' numbers.
func TestTrackerLiveAndMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	tr := newTracker(reg)
	p := tr.add("orders", 3)
	p.offset.Store(100)
	p.sourceEnd.Store(250)
	var out syncBuf
	stop := make(chan struct{})
	done := make(chan struct{})
	tick := make(chan time.Time)
	go func() { tr.report(&out, true, 0, tick, stop); close(done) }()
	t0 := time.Now()
	tick <- t0
	p.records.Store(1000)
	p.offset.Store(200)
	tick <- t0.Add(time.Second)
	tick <- t0.Add(2 * time.Second) // taken once the second tick was reported
	close(stop)
	<-done
	s := out.String()
	if !strings.Contains(s, "orders[3]") || !strings.Contains(s, "\033[") || strings.Count(s, "PARTITION") < 2 {
		t.Fatalf("live output:\n%q", s)
	}
	if !strings.Contains(s, " 50 ") { // lag after the second update: 250 - 200
		t.Fatalf("no lag of 50 in:\n%s", s)
	}
	if v := gauge(t, reg, "offsetgate_mirror_client_lag_records"); v != 50 {
		t.Fatalf("lag gauge %v, want 50", v)
	}
	if v := gauge(t, reg, "offsetgate_mirror_client_records"); v != 1000 {
		t.Fatalf("records gauge %v, want 1000", v)
	}
}

// A partition whose ends are not known yet is shown as not started, with the reason, never
// with a lag of 0; its lag gauge is absent until it is known.
func TestTrackerUnknownEnds(t *testing.T) {
	reg := prometheus.NewRegistry()
	tr := newTracker(reg)
	p := tr.add("wide", 7)
	p.state.Store("waiting for the source's leader")
	var out syncBuf
	stop := make(chan struct{})
	done := make(chan struct{})
	tick := make(chan time.Time)
	go func() { tr.report(&out, false, time.Second, tick, stop); close(done) }()
	tick <- time.Now()
	close(stop)
	<-done
	s := out.String()
	if !strings.Contains(s, "wide[7]: not started: waiting for the source's leader") {
		t.Fatalf("progress for unknown ends:\n%s", s)
	}
	if strings.Contains(s, "lag 0") || strings.Contains(s, "-1") {
		t.Fatalf("unknown ends shown as numbers:\n%s", s)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "offsetgate_mirror_client_lag_records" && len(mf.GetMetric()) > 0 {
			t.Fatalf("a lag gauge for unknown ends: %v", mf.GetMetric()[0].GetGauge().GetValue())
		}
	}
}

// A following run's lines say how many records were mirrored since the last line (the first
// line: since the partition was taken), never 0 while records were mirrored.
func TestTrackerLinesCountTheInterval(t *testing.T) {
	tr := newTracker(nil)
	p := tr.add("orders", 0)
	p.added = time.Now().Add(-10 * time.Second)
	p.offset.Store(0)
	p.sourceEnd.Store(500)
	var out syncBuf
	stop := make(chan struct{})
	done := make(chan struct{})
	tick := make(chan time.Time)
	go func() { tr.report(&out, false, 10*time.Second, tick, stop); close(done) }()
	p.records.Store(300)
	p.offset.Store(300)
	t0 := time.Now()
	tick <- t0
	// The reporter took the tick; wait until it has written its line before moving on.
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(out.String(), "\n"); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no line after the first tick")
		}
	}
	p.records.Store(500)
	p.offset.Store(500)
	tick <- t0.Add(10 * time.Second)
	close(stop)
	<-done
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want two lines:\n%s", out.String())
	}
	for i, want := range []string{"300 records in the last 10s (30 records/s", "200 records in the last 10s (20 records/s"} {
		if !strings.Contains(lines[i], want) {
			t.Fatalf("line %d %q lacks %q", i, lines[i], want)
		}
	}
}

// The stopped gauge is 1 for a partition stopped on an error and for nothing else: not while
// it starts, mirrors, retries or waits for a leader, and not once it is done.
func TestTrackerStoppedGauge(t *testing.T) {
	reg := prometheus.NewRegistry()
	tr := newTracker(reg)
	p := tr.add("orders", 0)
	for _, c := range []struct {
		state string
		want  float64
	}{
		{"", 0},
		{"starting: reading the mirrored end and the source's offsets", 0},
		{"mirroring", 0},
		{"retrying (3): connection refused", 0},
		{"waiting for the source's leader", 0},
		{"done", 0},
		{"stopped: the source went backwards", 1},
	} {
		p.state.Store(c.state)
		tr.update()
		if v := gauge(t, reg, "offsetgate_mirror_client_stopped"); v != c.want {
			t.Errorf("state %q: stopped gauge %v, want %v", c.state, v, c.want)
		}
	}
}

func histogram(t *testing.T, reg *prometheus.Registry, name string) (count uint64, sum float64) {
	t.Helper()
	h := family(t, reg, name).GetMetric()[0].GetHistogram()
	return h.GetSampleCount(), h.GetSampleSum()
}

// The lag stages: a batch's age at its fetch and at its confirmation by its newest record's
// timestamp, a write's time queued and on its way; batches without a timestamp are left out and
// a timestamp from the future counts as no time.
func TestTrackerLagStages(t *testing.T) {
	reg := prometheus.NewRegistry()
	tr := newTracker(reg)
	now := time.UnixMilli(1_000_000)
	hs := []batch.Header{
		{MaxTimestamp: now.Add(-300 * time.Millisecond).UnixMilli()},
		{MaxTimestamp: -1},
		{MaxTimestamp: now.Add(time.Second).UnixMilli()},
	}
	tr.fetched(now.Add(-200*time.Millisecond), hs)
	tr.landed(now, now.Add(-200*time.Millisecond), now.Add(-150*time.Millisecond), hs)
	tr.landed(now, time.Time{}, time.Time{}, nil) // never sent: no write observed
	for _, c := range []struct {
		name  string
		count uint64
		sum   float64
	}{
		{"offsetgate_mirror_client_fetch_age_seconds", 2, 0.1},
		{"offsetgate_mirror_client_lag_seconds", 2, 0.3},
		{"offsetgate_mirror_client_queue_seconds", 1, 0.05},
		{"offsetgate_mirror_client_write_seconds", 1, 0.15},
	} {
		n, s := histogram(t, reg, c.name)
		if n != c.count || s < c.sum-1e-9 || s > c.sum+1e-9 {
			t.Errorf("%s: %d observations summing to %v, want %d and %v", c.name, n, s, c.count, c.sum)
		}
	}
}
