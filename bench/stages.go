package bench

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// A following mirror's write, in offsetgate's own histograms: where the lag goes inside
// offsetgate (a whole partition write, its ledger append, and the Produce requests to the
// destination by lane and acks). Read from /metrics before and after the lag rounds; the
// difference covers the lag rounds only.
var stageSeries = []struct{ name, metric, labels string }{
	{"write", "offsetgate_mirror_write_seconds", ""},
	{"ledger_append", "offsetgate_mirror_ledger_append_seconds", ""},
	{"land_wait", "offsetgate_mirror_land_wait_seconds", ""},
	{"ledger_request", "offsetgate_mirror_produce_request_seconds", `acks="all",lane="ledger"`},
	{"ledger_request_acks_1", "offsetgate_mirror_produce_request_seconds", `acks="1",lane="ledger"`},
	{"ledger_replication_wait", "offsetgate_mirror_ledger_replication_wait_seconds", ""},
	{"data_request_acks_all", "offsetgate_mirror_produce_request_seconds", `acks="all",lane="data"`},
	{"data_request_acks_1", "offsetgate_mirror_produce_request_seconds", `acks="1",lane="data"`},
	// The follower's own (`offsetgate mirror --metrics`): a batch from its source timestamp to
	// the fetch that brought it and to offsetgate's confirmation; a write from its chunk's fetch
	// to its sending, and from there to its answer.
	{"mirror_fetch_age", "offsetgate_mirror_client_fetch_age_seconds", ""},
	{"mirror_queue", "offsetgate_mirror_client_queue_seconds", ""},
	{"mirror_write", "offsetgate_mirror_client_write_seconds", ""},
	{"mirror_lag", "offsetgate_mirror_client_lag_seconds", ""},
}

// Stage is one of those histograms over the lag rounds. The percentiles are the upper bounds
// of the buckets they fall in (the histograms' resolution: bounds double from 0.5 ms, or
// Prometheus' default buckets for the whole write).
type Stage struct {
	Count  float64 `json:"count"`
	MeanMs float64 `json:"mean_ms"`
	P50Ms  float64 `json:"p50_le_ms"`
	P90Ms  float64 `json:"p90_le_ms"`
	P99Ms  float64 `json:"p99_le_ms"`
	// Beyond is the share of them above the last finite bound (a percentile that falls there
	// is reported as that bound).
	Beyond float64 `json:"beyond_last_bound,omitempty"`
}

// histSample is one histogram's cumulative buckets (upper bound in seconds to count) and sum.
type histSample struct {
	buckets map[float64]float64
	sum     float64
}

// readStages reads the stage histograms from /metrics URLs (offsetgate's admin endpoint, its
// follower's), each stage from the one that has it.
func readStages(urls ...string) (map[string]histSample, error) {
	out := map[string]histSample{}
	for _, u := range urls {
		text, err := metricsText(u)
		if err != nil {
			return nil, err
		}
		h, err := parseStages(text)
		if err != nil {
			return nil, err
		}
		maps.Copy(out, h)
	}
	return out, nil
}

// parseStages picks the stage histograms out of an exposition text.
func parseStages(text string) (map[string]histSample, error) {
	out := map[string]histSample{}
	for line := range strings.Lines(text) {
		line = strings.TrimSuffix(line, "\n")
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 || strings.HasPrefix(line, "#") {
			continue
		}
		series, val := line[:sp], line[sp+1:]
		for _, s := range stageSeries {
			labels, le, kind, ok := splitSeries(series, s.metric)
			if !ok || labels != s.labels {
				continue
			}
			v, err := strconv.ParseFloat(val, 64)
			if err != nil {
				return nil, fmt.Errorf("metrics: %q: %w", line, err)
			}
			h := out[s.name]
			if h.buckets == nil {
				h.buckets = map[float64]float64{}
			}
			switch kind {
			case "bucket":
				b, err := strconv.ParseFloat(le, 64)
				if err != nil {
					return nil, fmt.Errorf("metrics: %q: %w", line, err)
				}
				h.buckets[b] = v
			case "sum":
				h.sum = v
			}
			out[s.name] = h
		}
	}
	return out, nil
}

// splitSeries takes metric_bucket{labels,le="x"} or metric_sum{labels} apart: the labels
// without le, le, and which of the two it is.
func splitSeries(series, metric string) (labels, le, kind string, ok bool) {
	rest, found := strings.CutPrefix(series, metric+"_")
	if !found {
		return "", "", "", false
	}
	kind, braces, _ := strings.Cut(rest, "{")
	if kind != "bucket" && kind != "sum" {
		return "", "", "", false
	}
	braces = strings.TrimSuffix(braces, "}")
	var kept []string
	for _, l := range strings.Split(braces, ",") {
		if v, isLe := strings.CutPrefix(l, "le="); isLe {
			le = strings.Trim(v, `"`)
		} else if l != "" {
			kept = append(kept, l)
		}
	}
	return strings.Join(kept, ","), le, kind, true
}

// stagesBetween is every stage's histogram of what happened between two readings.
func stagesBetween(before, after map[string]histSample) map[string]Stage {
	out := map[string]Stage{}
	for name, a := range after {
		b := before[name]
		var bounds []float64
		for le := range a.buckets {
			bounds = append(bounds, le)
		}
		slices.Sort(bounds)
		if len(bounds) == 0 {
			continue
		}
		total := a.buckets[bounds[len(bounds)-1]] - b.buckets[bounds[len(bounds)-1]]
		if total <= 0 {
			continue
		}
		st := Stage{Count: total, MeanMs: (a.sum - b.sum) / total * 1e3}
		finite := bounds
		if math.IsInf(bounds[len(bounds)-1], 1) {
			finite = bounds[:len(bounds)-1]
		}
		if len(finite) == 0 {
			continue
		}
		last := finite[len(finite)-1]
		st.Beyond = 1 - (a.buckets[last]-b.buckets[last])/total
		at := func(q float64) float64 {
			for _, le := range finite {
				if a.buckets[le]-b.buckets[le] >= q*total {
					return le * 1e3
				}
			}
			return last * 1e3
		}
		st.P50Ms, st.P90Ms, st.P99Ms = at(0.50), at(0.90), at(0.99)
		out[name] = st
	}
	return out
}
