package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"offsetgate/internal/testkafka"
)

// RunHeader opens every report of a run against offsetgate: which bench and mode, when, on
// what machine, with which versions. Embedded, its fields stay at the top of the JSON.
type RunHeader struct {
	Tool     string    `json:"tool"`
	Mode     string    `json:"mode"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Machine  Machine   `json:"machine"`
	Versions Versions  `json:"versions"`
}

// newHeader starts a report's header now, for the offsetgate binary at bin.
func newHeader(tool, mode, bin string) RunHeader {
	return RunHeader{Tool: tool, Mode: mode, Started: time.Now().UTC(), Machine: machineInfo(),
		Versions: versions(testkafka.KafkaVersion, bin)}
}

// The targets a run is evaluated against (printed PASS or MISS, never asserted by tests).
const (
	TargetAddedP99Ms      = 1.0   // added produce p99 at the fixed load, ms
	TargetSaturationRatio = 0.90  // offsetgate saturation throughput / direct
	TargetIdleBytes       = 65536 // resident memory per idle connection, bytes
)

// Evaluate checks offsetgate's numbers in rep against the targets.
func Evaluate(rep *Report) []Target {
	var out []Target
	for _, c := range rep.Cases {
		if c.FixedLoad != nil {
			for _, l := range c.FixedLoad.Paths {
				if l.Path == PathOffsetgate {
					out = append(out, Target{Name: "added p99 at fixed load", Case: c.Name, Value: l.AddedP99Ms,
						Limit: TargetAddedP99Ms, Unit: "ms", Pass: l.AddedP99Ms < TargetAddedP99Ms})
				}
			}
		}
	}
	for _, c := range rep.Cases {
		for _, t := range c.Saturation {
			if t.Path == PathOffsetgate {
				out = append(out, Target{Name: "saturation throughput vs direct", Case: c.Name, Value: 100 * t.RatioToDirect,
					Limit: 100 * TargetSaturationRatio, Unit: "%", Pass: t.RatioToDirect >= TargetSaturationRatio})
			}
		}
	}
	// Against the peer proxy (issue 19): throughput at least its, CPU per GB at most its and
	// within 1.3x of the relay's, resident memory under load within 2x of its.
	for _, c := range rep.Cases {
		for _, m := range []struct {
			what string
			ts   []Throughput
		}{{"saturation", c.Saturation}, {"consume", c.Consume}} {
			o, ok1 := find(m.ts, tpath, PathOffsetgate)
			p, ok2 := find(m.ts, tpath, PathPeer)
			r, ok3 := find(m.ts, tpath, PathRelay)
			if !ok1 || !ok2 || p.MBps <= 0 || p.ProxyCPUPerGB <= 0 {
				continue
			}
			out = append(out, Target{Name: m.what + " throughput vs kafka-proxy", Case: c.Name, Value: 100 * o.MBps / p.MBps,
				Limit: 100, Unit: "%", Pass: o.MBps >= p.MBps})
			out = append(out, Target{Name: m.what + " CPU/GB vs kafka-proxy", Case: c.Name, Value: o.ProxyCPUPerGB / p.ProxyCPUPerGB,
				Limit: 1, Unit: "x", Pass: o.ProxyCPUPerGB <= p.ProxyCPUPerGB})
			if ok3 && r.ProxyCPUPerGB > 0 {
				out = append(out, Target{Name: m.what + " CPU/GB vs relay", Case: c.Name, Value: o.ProxyCPUPerGB / r.ProxyCPUPerGB,
					Limit: 1.3, Unit: "x", Pass: o.ProxyCPUPerGB <= 1.3*r.ProxyCPUPerGB})
			}
		}
	}
	if o, ok := find(rep.Memory, mproc, PathOffsetgate); ok {
		if p, ok := find(rep.Memory, mproc, PathPeer); ok && p.PeakRSSKiB > 0 {
			out = append(out, Target{Name: "peak RSS vs kafka-proxy", Case: "all cases", Value: float64(o.PeakRSSKiB) / float64(p.PeakRSSKiB),
				Limit: 2, Unit: "x", Pass: o.PeakRSSKiB <= 2*p.PeakRSSKiB})
		}
	}
	if rep.Idle != nil && rep.Idle.Opened > 0 {
		out = append(out, Target{Name: "memory per idle connection", Case: fmt.Sprintf("%d connections", rep.Idle.Opened),
			Value: rep.Idle.BytesPerConn / 1024, Limit: TargetIdleBytes / 1024, Unit: "KiB", Pass: rep.Idle.BytesPerConn < TargetIdleBytes})
	}
	return out
}

// WriteJSON writes the report as indented JSON, creating the folder.
func WriteJSON(path string, rep *Report) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// ReadJSON reads a report written by WriteJSON.
func ReadJSON(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &rep, nil
}

func find[T any](xs []T, path func(T) string, p string) (T, bool) {
	for _, x := range xs {
		if path(x) == p {
			return x, true
		}
	}
	var zero T
	return zero, false
}

func tpath(t Throughput) string { return t.Path }
func mproc(m ProcMemory) string { return m.Process }
func lpath(l Latency) string    { return l.Path }

// WriteTable prints the report for people.
func WriteTable(w io.Writer, rep *Report) {
	m, v, s := rep.Machine, rep.Versions, rep.Settings
	fmt.Fprintf(w, "offsetgate pass-through benchmark, %s run, %s\n", rep.Mode, rep.Started.Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(w, "machine: %d CPUs (%s), kernel %s, load %s at start, %s at end\n", m.Nproc, m.CPUModel, m.Kernel, m.LoadAvgStart, m.LoadAvgEnd)
	commit := v.OffsetgateCommit
	if commit == "" {
		commit = "unknown"
	}
	data := ""
	if s.KafkaData != "" {
		data = ", data on " + s.KafkaData
	}
	fmt.Fprintf(w, "software: %s, Kafka %s (%d brokers, RF %d%s), franz-go %s, %s built from commit %s\n",
		v.Go, v.Kafka, s.Brokers, s.ReplicationFactor, data, v.FranzGo, v.Offsetgate, commit)
	fmt.Fprintf(w, "data set: %s of record payload per case and path, %d round(s), medians shown; MB = 1e6 bytes\n",
		sizeString(s.BytesPerCase), s.Rounds)
	fmt.Fprintf(w, "producer: %s\n", s.Producer)
	if q := rep.Quiet; q != nil && q.MeasuredSeconds > 0 {
		fmt.Fprintf(w, "other processes during the %.0f s measured: %.0f%% of one CPU on average (hypervisor steal %.0f%%)\n",
			q.MeasuredSeconds, 100*q.OtherCPUSeconds/q.MeasuredSeconds, 100*q.StealCPUSeconds/q.MeasuredSeconds)
	}

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	throughputTable := func(title string, get func(Case) []Throughput) {
		fmt.Fprintf(w, "\n%s\n", title)
		fmt.Fprintln(tw, "case\tdirect MB/s\trelay MB/s\trelay/direct\trelay CPU s/GB\toffsetgate MB/s\tog/direct\toffsetgate CPU s/GB\t")
		for _, c := range rep.Cases {
			ts := get(c)
			d, _ := find(ts, tpath, PathDirect)
			r, _ := find(ts, tpath, PathRelay)
			o, _ := find(ts, tpath, PathOffsetgate)
			fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.0f%%\t%.2f\t%.1f\t%.0f%%\t%.2f\t\n", c.Name, d.MBps, r.MBps, 100*r.RatioToDirect,
				r.ProxyCPUPerGB, o.MBps, 100*o.RatioToDirect, o.ProxyCPUPerGB)
		}
		tw.Flush()
	}
	throughputTable("Produce saturation (acks=all, as fast as possible)", func(c Case) []Throughput { return c.Saturation })

	fmt.Fprintf(w, "\nProduce at a fixed load (%.0f%% of the direct saturation rate), latency per record, send to ack, ms\n", 100*s.LoadFraction)
	fmt.Fprintln(tw, "case\toffered MB/s\tdirect p50\tp99\trelay p50\tp99\tadded p99\toffsetgate p50\tp99\tadded p50\tadded p99\tog CPU s/GB\t")
	for _, c := range rep.Cases {
		if c.FixedLoad == nil {
			continue
		}
		ls := c.FixedLoad.Paths
		d, _ := find(ls, lpath, PathDirect)
		r, _ := find(ls, lpath, PathRelay)
		o, _ := find(ls, lpath, PathOffsetgate)
		fmt.Fprintf(tw, "%s\t%.1f\t%.3f\t%.3f\t%.3f\t%.3f\t%+.3f\t%.3f\t%.3f\t%+.3f\t%+.3f\t%.2f\t\n", c.Name, c.FixedLoad.OfferedMBps,
			d.P50Ms, d.P99Ms, r.P50Ms, r.P99Ms, r.AddedP99Ms, o.P50Ms, o.P99Ms, o.AddedP50Ms, o.AddedP99Ms, o.ProxyCPUPerGB)
	}
	tw.Flush()

	throughputTable("Consume (read the direct path's data set back from the start)", func(c Case) []Throughput { return c.Consume })

	baselineTables(w, rep)
	peerTables(w, rep)

	if len(rep.Memory) > 0 {
		fmt.Fprintf(w, "\nMemory after the throughput cases:")
		for i, m := range rep.Memory {
			sep := ","
			if i == 0 {
				sep = ""
			}
			fmt.Fprintf(w, "%s %s RSS %s (peak %s, 5 s later %s)", sep, m.Process, sizeString(m.RSSKiB<<10), sizeString(m.PeakRSSKiB<<10), sizeString(m.QuietRSSKiB<<10))
		}
		fmt.Fprintln(w)
		if vb := rep.OffsetgateMetrics["offsetgate_view_page_bytes"]; vb > 0 {
			// Clusters shared with tests or earlier runs hold mirror topics, whose source views
			// offsetgate loads at start: memory a pass-through proxy in front of the same
			// destination does not have, and which a destination of the run's own lacks.
			fmt.Fprintf(w, "note: the destination holds mirror topics; offsetgate's RSS includes about %s of their source view index (%.0f pages); clusters of the run's own have none\n",
				sizeString(int64(vb)), rep.OffsetgateMetrics["offsetgate_view_pages_resident"])
		}
		peakTable(w, rep)
	}

	if id := rep.Idle; id != nil {
		fmt.Fprintf(w, "\nIdle connections to offsetgate (one ApiVersions round trip each, then idle)\n")
		fmt.Fprintf(w, "  %d of %d opened (%d sessions reported, fds %d -> %d); RSS %s -> %s; %.1f KiB per connection (Go heap in use %s -> %s)\n",
			id.Opened, id.Requested, int(id.SessionsOpen), id.FDsBefore, id.FDsAfter,
			sizeString(id.RSSBeforeKiB<<10), sizeString(id.RSSAfterKiB<<10), id.BytesPerConn/1024,
			sizeString(int64(id.HeapBeforeKiB)<<10), sizeString(int64(id.HeapAfterKiB)<<10))
		if id.Note != "" {
			fmt.Fprintf(w, "  note: %s\n", id.Note)
		}
		if id.Error != "" {
			fmt.Fprintf(w, "  opening stopped early: %s\n", id.Error)
		}
	}

	fmt.Fprintf(w, "\nTargets (offsetgate)\n")
	for _, t := range rep.Targets {
		verdict := "MISS"
		if t.Pass {
			verdict = "PASS"
		}
		op := "<"
		if t.Unit == "%" {
			op = ">="
		}
		fmt.Fprintf(w, "  %s  %-33s %-18s %8.3f %s (target %s %g %s)\n", verdict, t.Name, t.Case, t.Value, t.Unit, op, t.Limit, t.Unit)
	}
}

// peakTable shows each process's peak RSS during each measurement (samples taken before the
// bench measured per sample show nothing).
func peakTable(w io.Writer, rep *Report) {
	var procs []string
	for _, m := range rep.Memory {
		procs = append(procs, m.Process)
	}
	type row struct {
		name  string
		peaks map[string]int64
	}
	var rows []row
	for _, c := range rep.Cases {
		sat, cons, fixed := map[string]int64{}, map[string]int64{}, map[string]int64{}
		for _, t := range c.Saturation {
			sat[t.Path] = t.PeakRSSKiB
		}
		for _, t := range c.Consume {
			cons[t.Path] = t.PeakRSSKiB
		}
		if c.FixedLoad != nil {
			for _, l := range c.FixedLoad.Paths {
				for _, s := range l.Samples {
					fixed[l.Path] = max(fixed[l.Path], s.PeakRSSKiB)
				}
			}
		}
		rows = append(rows, row{c.Name + " saturation", sat}, row{c.Name + " fixed load", fixed}, row{c.Name + " consume", cons})
	}
	measured := false
	for _, r := range rows {
		for _, v := range r.peaks {
			measured = measured || v > 0
		}
	}
	if !measured {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "\nPeak RSS during each measurement (the largest of its rounds)\n")
	fmt.Fprintf(tw, "measurement\t%s\t\n", strings.Join(procs, "\t"))
	for _, r := range rows {
		fmt.Fprintf(tw, "%s", r.name)
		for _, p := range procs {
			fmt.Fprintf(tw, "\t%s", sizeString(r.peaks[p]<<10))
		}
		fmt.Fprintf(tw, "\t\n")
	}
	tw.Flush()
}

func sizeString(b int64) string {
	switch {
	case b >= 1<<30 && b%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", b>>30)
	case b >= 1<<20:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", float64(b)/(1<<20)), ".0") + " MiB"
	case b >= 1<<10:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", float64(b)/(1<<10)), ".0") + " KiB"
	default:
		return fmt.Sprintf("%d B", b)
	}
}

// baselineTables compares offsetgate with the baseline binary, when the run measured one.
func baselineTables(w io.Writer, rep *Report) {
	versusTables(w, rep, PathBaseline, "base", false, fmt.Sprintf(
		"Offsetgate against the baseline binary (%s), same run; og/base > 100%% is faster, CPU ratio < 100%% is cheaper", rep.Settings.Baseline))
}

// peerTables compares offsetgate with kafka-proxy and the relay, when the run measured the peer.
func peerTables(w io.Writer, rep *Report) {
	versusTables(w, rep, PathPeer, "peer", true, fmt.Sprintf(
		"Offsetgate against %s, same run; og/peer >= 100%% is as fast, CPU og/peer <= 100%% as cheap", rep.Settings.Peer))
}

// versusTables prints offsetgate against another path of the run (short names it in the
// ratio columns), and against the relay's CPU too when relay is set; nothing when the run did
// not measure that path.
func versusTables(w io.Writer, rep *Report, path, short string, relay bool, title string) {
	if len(rep.Cases) == 0 {
		return
	}
	if _, ok := find(rep.Cases[0].Saturation, tpath, path); !ok {
		return
	}
	fmt.Fprintf(w, "\n%s\n", title)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := fmt.Sprintf("case\tmeasure\t%[1]s MB/s\toffsetgate MB/s\tog/%[2]s\t%[1]s CPU s/GB\toffsetgate CPU s/GB\tCPU og/%[2]s\t", path, short)
	if relay {
		head += "CPU og/relay\t"
	}
	fmt.Fprintln(tw, head)
	row := func(c Case, what string, ts []Throughput) {
		x, _ := find(ts, tpath, path)
		o, _ := find(ts, tpath, PathOffsetgate)
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.1f\t%s\t%.2f\t%.2f\t%s\t", c.Name, what, x.MBps, o.MBps, pct(o.MBps, x.MBps),
			x.ProxyCPUPerGB, o.ProxyCPUPerGB, pct(o.ProxyCPUPerGB, x.ProxyCPUPerGB))
		if relay {
			r, _ := find(ts, tpath, PathRelay)
			fmt.Fprintf(tw, "%s\t", pct(o.ProxyCPUPerGB, r.ProxyCPUPerGB))
		}
		fmt.Fprintln(tw)
	}
	for _, c := range rep.Cases {
		row(c, "saturation", c.Saturation)
		row(c, "consume", c.Consume)
	}
	tw.Flush()
	fmt.Fprintf(tw, "case\t%[1]s p50\tp99\tCPU s/GB\toffsetgate p50\tp99\tCPU s/GB\t\n", path)
	for _, c := range rep.Cases {
		if c.FixedLoad == nil {
			continue
		}
		x, _ := find(c.FixedLoad.Paths, lpath, path)
		o, _ := find(c.FixedLoad.Paths, lpath, PathOffsetgate)
		fmt.Fprintf(tw, "%s\t%.3f\t%.3f\t%.2f\t%.3f\t%.3f\t%.2f\t\n", c.Name, x.P50Ms, x.P99Ms, x.ProxyCPUPerGB, o.P50Ms, o.P99Ms, o.ProxyCPUPerGB)
	}
	tw.Flush()
}

func pct(a, b float64) string {
	if b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*a/b)
}
