package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// ReadMM2JSON reads a report of `ogbench mm2`; ok is false (and no error) when the file is a
// report of another kind.
func ReadMM2JSON(path string) (rep *MM2Report, ok bool, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, false, err
	}
	var r MM2Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, false, fmt.Errorf("%s: %w", path, err)
	}
	if r.Tool != "ogbench mm2" {
		return nil, false, nil
	}
	return &r, true, nil
}

// WriteMM2SVG draws a run of `ogbench mm2` as bar charts: the copy's throughput and CPU, the
// lag of the following mirrors (p50 and p99) and the time to the first record on D, each tool
// side by side, with what the machine was doing during the lag rounds underneath.
func WriteMM2SVG(path string, rep *MM2Report) error {
	return os.WriteFile(path, []byte(mm2SVG(rep)), 0o644)
}

// mm2Colors are the tools' bars; a p99 bar is its tool's colour, lighter.
var mm2Colors = map[string][2]string{
	"offsetgate":   {"#2b7bb9", "#8fbde0"},
	"mirrormaker2": {"#d9822b", "#f0bd8a"},
}

func mm2SVG(rep *MM2Report) string {
	var b strings.Builder
	const w, h = 720, 620
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	rf := max(rep.ReplicationFactor, 1)
	text(&b, w/2, 22, 15, "bold", "middle", fmt.Sprintf("offsetgate vs MirrorMaker 2: mirroring %.0f MB", float64(rep.Bytes)/1e6))
	text(&b, w/2, 40, 12, "normal", "middle", fmt.Sprintf("%d partitions, %d-byte records, replication factor %d on both clusters", rep.Partitions, rep.RecordBytes, rf))
	type bar struct {
		label string
		val   float64
		fill  string
	}
	// panel draws one chart of bars at (x0, y0): 180 px of bar height at the largest value.
	panel := func(x0, y0 int, title, unit string, format string, bars []bar) {
		text(&b, x0+160, y0, 13, "normal", "middle", title)
		top := 0.0
		for _, r := range bars {
			top = max(top, r.val)
		}
		if top == 0 {
			top = 1
		}
		bw := min(80, 300/max(len(bars), 1)-10)
		base := y0 + 210
		for j, r := range bars {
			bh := int(r.val / top * 180)
			x := x0 + 10 + j*(bw+10)
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/>`+"\n", x, base-bh, bw, bh, r.fill)
			text(&b, x+bw/2, base-bh-5, 12, "normal", "middle", fmt.Sprintf(format, r.val)+" "+unit)
			text(&b, x+bw/2, base+16, 11, "normal", "middle", r.label)
		}
	}
	var thr, cpu, lag, first []bar
	for _, r := range rep.Results {
		c, ok := mm2Colors[r.Tool]
		if !ok {
			c = [2]string{"#777777", "#bbbbbb"}
		}
		thr = append(thr, bar{r.Tool, r.MBps, c[0]})
		cpu = append(cpu, bar{r.Tool, r.CPUPerGB, c[0]})
		first = append(first, bar{r.Tool, r.FirstSeconds, c[0]})
		if r.LagRecords > 0 {
			lag = append(lag, bar{r.Tool + " p50", r.LagP50Ms, c[0]}, bar{"p99", r.LagP99Ms, c[1]})
		}
	}
	panel(20, 65, "copy throughput (MB/s, higher is better)", "MB/s", "%.1f", thr)
	panel(380, 65, "copy CPU per GB (s, lower is better)", "s", "%.1f", cpu)
	lagTitle := "lag, no lag rounds in this run"
	if len(lag) > 0 {
		lagTitle = fmt.Sprintf("lag at %.3g MB/s (ms, lower is better)", rep.LagRateMBps)
	}
	panel(20, 325, lagTitle, "ms", "%.0f", lag)
	panel(380, 325, "first record on the destination (s)", "s", "%.2f", first)
	// What the brokers and the rest of the machine did while each tool's lag was measured: a
	// lag measured on a machine near its limit, or a busy one, says so on the chart too.
	y := 580
	for _, r := range rep.Results {
		if len(r.LagRoundLoad) == 0 {
			continue
		}
		var kafka, other float64
		for _, l := range r.LagRoundLoad {
			kafka += l.Kafka
			other = max(other, l.Other+l.Steal)
		}
		kafka /= float64(len(r.LagRoundLoad))
		line := fmt.Sprintf("%s's %d lag rounds: brokers %.2f of %d CPUs on average, other processes and steal at most %.2f",
			r.Tool, len(r.LagRoundLoad), kafka, max(rep.Machine.Nproc, 1), other)
		if busy := r.BusyRounds(); len(busy) > 0 {
			line += fmt.Sprintf("; rounds %v on a busy machine", busy)
		}
		text(&b, 20, y, 11, "normal", "start", line)
		y += 16
	}
	b.WriteString("</svg>\n")
	return b.String()
}
