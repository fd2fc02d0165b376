package bench

import (
	"encoding/json"
	"math"
	"testing"
)

func TestStagesBetween(t *testing.T) {
	read := func(text string) map[string]histSample {
		t.Helper()
		h, err := parseStages(text)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	before := read(`# HELP offsetgate_mirror_ledger_append_seconds x
offsetgate_mirror_ledger_append_seconds_bucket{le="0.002"} 10
offsetgate_mirror_ledger_append_seconds_bucket{le="0.004"} 10
offsetgate_mirror_ledger_append_seconds_bucket{le="+Inf"} 10
offsetgate_mirror_ledger_append_seconds_sum 0.01
offsetgate_mirror_produce_request_seconds_bucket{acks="all",lane="data",le="0.002"} 5
offsetgate_mirror_produce_request_seconds_bucket{acks="all",lane="data",le="+Inf"} 5
offsetgate_mirror_produce_request_seconds_sum{acks="all",lane="data"} 0.005
`)
	after := read(`offsetgate_mirror_ledger_append_seconds_bucket{le="0.002"} 60
offsetgate_mirror_ledger_append_seconds_bucket{le="0.004"} 109
offsetgate_mirror_ledger_append_seconds_bucket{le="+Inf"} 110
offsetgate_mirror_ledger_append_seconds_sum 0.31
offsetgate_mirror_produce_request_seconds_bucket{acks="all",lane="data",le="0.002"} 5
offsetgate_mirror_produce_request_seconds_bucket{acks="all",lane="data",le="+Inf"} 5
offsetgate_mirror_produce_request_seconds_sum{acks="all",lane="data"} 0.005
offsetgate_mirror_produce_request_seconds_bucket{acks="1",lane="data",le="0.001"} 3
offsetgate_mirror_produce_request_seconds_bucket{acks="1",lane="data",le="+Inf"} 4
offsetgate_mirror_produce_request_seconds_sum{acks="1",lane="data"} 0.004
`)
	got := stagesBetween(before, after)
	la, ok := got["ledger_append"]
	if !ok {
		t.Fatalf("no ledger_append stage in %v", got)
	}
	// 100 appends between the readings: 50 within 2 ms, 49 more within 4 ms, one beyond.
	if la.Count != 100 || math.Abs(la.MeanMs-3) > 1e-9 || la.P50Ms != 2 || la.P90Ms != 4 || la.P99Ms != 4 {
		t.Errorf("ledger_append = %+v, want 100 appends, mean 3 ms, p50 2, p90 4, p99 4", la)
	}
	if _, ok := got["data_request_acks_all"]; ok {
		t.Errorf("data_request_acks_all had nothing between the readings but is reported: %+v", got["data_request_acks_all"])
	}
	q := got["data_request_acks_1"]
	if q.Count != 4 || q.P50Ms != 1 || q.P99Ms != 1 || q.Beyond != 0.25 {
		t.Errorf("data_request_acks_1 = %+v, want 4 requests, p50 and p99 at the last bound (1 ms), a quarter beyond it", q)
	}
	if _, err := json.Marshal(got); err != nil {
		t.Errorf("stages do not encode: %v", err)
	}
}
