package bench_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"offsetgate/bench"
)

// With kafka-proxy measured, the report judges offsetgate against it and the relay (issue
// 19's targets) and prints the comparison; without it, neither appears.
func TestPeerTargets(t *testing.T) {
	tp := func(path string, mbps, cpu float64) bench.Throughput {
		return bench.Throughput{Path: path, MBps: mbps, ProxyCPUPerGB: cpu}
	}
	rep := &bench.Report{
		Settings: bench.Settings{Peer: "grepplabs/kafka-proxy " + bench.PeerVersion},
		Cases: []bench.Case{{
			Name:       "1KiB x 1p",
			Saturation: []bench.Throughput{tp(bench.PathDirect, 100, 0), tp(bench.PathRelay, 95, 0.5), tp(bench.PathOffsetgate, 90, 0.6), tp(bench.PathPeer, 80, 0.8)},
			Consume:    []bench.Throughput{tp(bench.PathDirect, 100, 0), tp(bench.PathRelay, 95, 0.5), tp(bench.PathOffsetgate, 70, 0.9), tp(bench.PathPeer, 80, 0.8)},
		}},
		Memory: []bench.ProcMemory{{Process: bench.PathOffsetgate, PeakRSSKiB: 60 << 10}, {Process: bench.PathPeer, PeakRSSKiB: 20 << 10}},
	}
	got := map[string]bool{}
	for _, tg := range bench.Evaluate(rep) {
		got[tg.Name] = tg.Pass
	}
	want := map[string]bool{
		"saturation throughput vs kafka-proxy": true,
		"saturation CPU/GB vs kafka-proxy":     true,
		"saturation CPU/GB vs relay":           true, // 0.6 <= 1.3 x 0.5
		"consume throughput vs kafka-proxy":    false,
		"consume CPU/GB vs kafka-proxy":        false,
		"consume CPU/GB vs relay":              false, // 0.9 > 1.3 x 0.5
		"peak RSS vs kafka-proxy":              false, // 60 MiB > 2 x 20 MiB
	}
	for name, pass := range want {
		if p, ok := got[name]; !ok || p != pass {
			t.Errorf("target %q: present %v, pass %v; want pass %v", name, ok, p, pass)
		}
	}
	var out bytes.Buffer
	bench.WriteTable(&out, rep)
	if !strings.Contains(out.String(), "Offsetgate against grepplabs/kafka-proxy") {
		t.Fatalf("no comparison table:\n%s", out.String())
	}

	// Without the peer: no peer targets, no table.
	for i := range rep.Cases {
		rep.Cases[i].Saturation = rep.Cases[i].Saturation[:3]
		rep.Cases[i].Consume = rep.Cases[i].Consume[:3]
	}
	rep.Memory = rep.Memory[:1]
	for _, tg := range bench.Evaluate(rep) {
		if strings.Contains(tg.Name, "kafka-proxy") {
			t.Errorf("target %q without the peer measured", tg.Name)
		}
	}
	out.Reset()
	bench.WriteTable(&out, rep)
	if strings.Contains(out.String(), "Offsetgate against grepplabs") {
		t.Fatal("comparison table without the peer measured")
	}
}

// A destination holding mirror topics makes offsetgate's RSS include their source views: the
// report says so, and says nothing when there are none.
func TestViewMemoryNote(t *testing.T) {
	rep := &bench.Report{
		Memory: []bench.ProcMemory{{Process: bench.PathOffsetgate, RSSKiB: 50 << 10, PeakRSSKiB: 60 << 10}},
	}
	var out bytes.Buffer
	bench.WriteTable(&out, rep)
	if strings.Contains(out.String(), "source view index") {
		t.Fatalf("view note without views:\n%s", out.String())
	}
	rep.OffsetgateMetrics = map[string]float64{"offsetgate_view_page_bytes": 10 << 20, "offsetgate_view_pages_resident": 324}
	out.Reset()
	bench.WriteTable(&out, rep)
	if !strings.Contains(out.String(), "about 10 MiB of their source view index (324 pages)") {
		t.Fatalf("no view note:\n%s", out.String())
	}
}

// "-" is every ogbench command's "no chart": writing a chart to it is refused and leaves no file
// of that name (one was once committed by `ogbench chart --svg -`).
func TestChartDashIsNoFile(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if err := bench.WriteSVGFile("-", &bench.Report{}); err == nil {
		t.Fatal(`WriteSVGFile("-") wrote a chart`)
	}
	if _, err := os.Stat(filepath.Join(dir, "-")); !os.IsNotExist(err) {
		t.Fatalf(`a file named "-" exists after WriteSVGFile("-"): %v`, err)
	}
}

// The chart draws the peer proxy as a fourth path when the run measured it, and only then.
func TestChartDrawsPeer(t *testing.T) {
	mk := func(paths ...string) *bench.Report {
		c := bench.Case{Name: "1KiB x 16p", FixedLoad: &bench.FixedLoad{}}
		for i, p := range paths {
			c.Saturation = append(c.Saturation, bench.Throughput{Path: p, MBps: float64(100 + i)})
			c.Consume = append(c.Consume, bench.Throughput{Path: p, MBps: float64(200 + i)})
			c.FixedLoad.Paths = append(c.FixedLoad.Paths, bench.Latency{Path: p, P50Ms: 1, P99Ms: 2})
		}
		return &bench.Report{Cases: []bench.Case{c}}
	}
	var with, without bytes.Buffer
	if err := bench.WriteSVG(&with, mk(bench.PathDirect, bench.PathRelay, bench.PathOffsetgate, bench.PathPeer)); err != nil {
		t.Fatal(err)
	}
	if err := bench.WriteSVG(&without, mk(bench.PathDirect, bench.PathRelay, bench.PathOffsetgate)); err != nil {
		t.Fatal(err)
	}
	// Four panels, one bar per panel and path.
	if n := strings.Count(with.String(), " kafka-proxy: "); n != 4 {
		t.Fatalf("%d kafka-proxy bars in a run that measured it, want 4:\n%s", n, with.String())
	}
	if !strings.Contains(with.String(), "<title>1KiB x 16p kafka-proxy: 103 MB/s</title>") {
		t.Fatal("the peer's saturation bar is not its measurement")
	}
	if strings.Contains(without.String(), "kafka-proxy") {
		t.Fatal("a run without the peer draws it")
	}
}
