package bench

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The chart of a mirroring run shows each tool's lag (p50 and p99) and first record, not only
// the copy's throughput, and says when the lag rounds ran on a busy machine.
func TestMM2ChartDrawsLag(t *testing.T) {
	rep := &MM2Report{Bytes: 256e6, Partitions: 4, RecordBytes: 1024, LagRateMBps: 2, ReplicationFactor: 2,
		Results: []MirrorResult{
			{Tool: "offsetgate", MBps: 70.5, CPUPerGB: 40, FirstSeconds: 0.71, LagP50Ms: 12.4, LagP99Ms: 245.6, LagRecords: 1000,
				LagRoundLoad: []RoundLoad{{Kafka: 1.2}, {Kafka: 1.4}}},
			{Tool: "mirrormaker2", MBps: 10.9, CPUPerGB: 900, FirstSeconds: 7.97, LagP50Ms: 11.8, LagP99Ms: 71.2, LagRecords: 1000,
				LagRoundLoad: []RoundLoad{{Kafka: 1.1}, {Other: 0.5}}},
		}}
	rep.Machine.Nproc = 2
	svg := mm2SVG(rep)
	for _, want := range []string{
		"replication factor 2", "lag at 2 MB/s", ">12 ms<", ">246 ms<", ">12 ms<", ">71 ms<",
		">0.71 s<", ">7.97 s<", ">70.5 MB/s<", ">10.9 MB/s<",
		"offsetgate&#39;s 2 lag rounds: brokers 1.30 of 2 CPUs",
		"mirrormaker2&#39;s 2 lag rounds: brokers 0.55 of 2 CPUs on average, other processes and steal at most 0.50; rounds [2] on a busy machine",
	} {
		if !strings.Contains(svg, want) {
			t.Errorf("chart lacks %q:\n%s", want, svg)
		}
	}
	if strings.Contains(svg, "offsetgate&#39;s 2 lag rounds: brokers 1.30 of 2 CPUs on average, other processes and steal at most 0.00; rounds") {
		t.Error("a quiet tool's rounds are called busy")
	}
	rep.Results[0].LagRecords, rep.Results[1].LagRecords = 0, 0
	if svg := mm2SVG(rep); !strings.Contains(svg, "no lag rounds in this run") || strings.Contains(svg, " p50<") {
		t.Errorf("a run without lag rounds draws lag bars:\n%s", svg)
	}
}

// ogbench chart redraws a mirroring run from its JSON, and leaves other reports to the
// pass-through chart.
func TestReadMM2JSON(t *testing.T) {
	dir := t.TempDir()
	rep := MM2Report{RunHeader: RunHeader{Tool: "ogbench mm2"}, Partitions: 4, Results: []MirrorResult{{Tool: "offsetgate", LagP50Ms: 12.5}}}
	b, _ := json.Marshal(rep)
	mm2 := filepath.Join(dir, "mm2.json")
	other := filepath.Join(dir, "run.json")
	if err := os.WriteFile(mm2, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(other, []byte(`{"tool":"ogbench","cases":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	got, ok, err := ReadMM2JSON(mm2)
	if err != nil || !ok || got.Partitions != 4 || got.Results[0].LagP50Ms != 12.5 {
		t.Fatalf("a mirroring report: %+v %v %v", got, ok, err)
	}
	if _, ok, err := ReadMM2JSON(other); ok || err != nil {
		t.Fatalf("a pass-through report read as a mirroring one (%v, %v)", ok, err)
	}
}
