package bench

import (
	"errors"
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
)

var pathColors = map[string]string{PathDirect: "#4c72b0", PathRelay: "#9a9a9a", PathOffsetgate: "#dd8452", PathPeer: "#55a868"}

// chartPaths are the paths drawn: the standard three, and the peer proxy when the run measured
// it (the comparison users ask for; the baseline stays in the table).
func chartPaths(rep *Report) []string {
	paths := append([]string(nil), Paths...)
	for _, c := range rep.Cases {
		if _, ok := find(c.Saturation, tpath, PathPeer); ok {
			return append(paths, PathPeer)
		}
	}
	return paths
}

// panel is one grouped bar chart: a group per case, a bar per path.
type panel struct {
	title  string
	unit   string
	format string
	groups []string
	values [][]float64 // [group][path]
}

// WriteSVGFile writes the report's chart to path, creating the folder.
func WriteSVGFile(path string, rep *Report) error {
	if path == "-" {
		// Every ogbench command takes "-" for "no chart"; a caller that forgot must not leave a
		// file of that name behind.
		return errors.New("chart: \"-\" means no chart, not a file name")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := WriteSVG(f, rep); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// WriteSVG draws the report as bar charts: produce saturation, consume throughput, and
// produce latency (p50, p99) at the fixed load, each case with a bar per path.
func WriteSVG(w io.Writer, rep *Report) error {
	var groups []string
	var sat, cons, p50, p99 [][]float64
	paths := chartPaths(rep)
	for _, c := range rep.Cases {
		groups = append(groups, c.Name)
		var s, k, l, h []float64
		for _, p := range paths {
			t, _ := find(c.Saturation, tpath, p)
			s = append(s, t.MBps)
			t, _ = find(c.Consume, tpath, p)
			k = append(k, t.MBps)
			var x Latency
			if c.FixedLoad != nil {
				x, _ = find(c.FixedLoad.Paths, lpath, p)
			}
			h = append(h, x.P50Ms)
			l = append(l, x.P99Ms)
		}
		sat, cons, p50, p99 = append(sat, s), append(cons, k), append(p50, h), append(p99, l)
	}
	load := 100 * rep.Settings.LoadFraction
	panels := []panel{
		{title: "Produce, saturation (acks=all)", unit: "MB/s", format: "%.0f", groups: groups, values: sat},
		{title: "Consume, read back from the start", unit: "MB/s", format: "%.0f", groups: groups, values: cons},
		{title: fmt.Sprintf("Produce latency p50 at a fixed load (%.0f%% of direct saturation), send to ack", load), unit: "ms", format: "%.2f", groups: groups, values: p50},
		{title: fmt.Sprintf("Produce latency p99 at a fixed load (%.0f%% of direct saturation), send to ack", load), unit: "ms", format: "%.2f", groups: groups, values: p99},
	}

	const (
		width   = 960
		top     = 70
		panelH  = 230
		gap     = 40
		left    = 70
		right   = 20
		plotTop = 30
		plotBot = 40
	)
	height := top + len(panels)*(panelH+gap) + 40
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	m, v := rep.Machine, rep.Versions
	title := "offsetgate pass-through: direct vs TCP relay vs offsetgate"
	if len(paths) > len(Paths) {
		title += " vs " + PathPeer + " " + PeerVersion
	}
	text(&b, left, 22, 16, "bold", "start", title)
	text(&b, left, 42, 11, "normal", "start", fmt.Sprintf("%s run %s, %d CPUs (%s), %s, Kafka %s, %s per case, %d round(s), medians",
		rep.Mode, rep.Started.Format("2006-01-02"), m.Nproc, m.CPUModel, v.Go, v.Kafka, sizeString(rep.Settings.BytesPerCase), rep.Settings.Rounds))
	// Legend.
	lx := width - right - len(paths)*110
	for i, p := range paths {
		x := lx + i*110
		fmt.Fprintf(&b, `<rect x="%d" y="52" width="12" height="12" fill="%s"/>`+"\n", x, pathColors[p])
		text(&b, x+16, 62, 12, "normal", "start", p)
	}

	for i, p := range panels {
		y0 := top + i*(panelH+gap)
		drawPanel(&b, p, paths, left, y0, width-left-right, panelH, plotTop, plotBot)
	}
	foot := height - 16
	if id := rep.Idle; id != nil && id.Opened > 0 {
		text(&b, left, foot, 12, "normal", "start", fmt.Sprintf("Idle connections: %d open, offsetgate RSS %s -> %s, %.1f KiB per connection (target < %d KiB)",
			id.Opened, sizeString(id.RSSBeforeKiB<<10), sizeString(id.RSSAfterKiB<<10), id.BytesPerConn/1024, TargetIdleBytes/1024))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func drawPanel(b *strings.Builder, p panel, paths []string, x0, y0, w, h, plotTop, plotBot int) {
	text(b, x0, y0+16, 13, "bold", "start", p.title)
	ph := h - plotTop - plotBot
	py := y0 + plotTop
	maxV := 0.0
	for _, g := range p.values {
		for _, v := range g {
			maxV = math.Max(maxV, v)
		}
	}
	top, step := niceScale(maxV * 1.12)
	// Grid and y labels.
	for v := 0.0; v <= top+step/2; v += step {
		y := py + ph - int(v/top*float64(ph))
		fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#e0e0e0"/>`+"\n", x0, y, x0+w, y)
		text(b, x0-6, y+4, 11, "normal", "end", trimFloat(v))
	}
	text(b, x0-44, py+ph/2, 11, "normal", "middle", p.unit, fmt.Sprintf(`transform="rotate(-90 %d %d)"`, x0-44, py+ph/2))
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#555"/>`+"\n", x0, py+ph, x0+w, py+ph)
	if len(p.groups) == 0 {
		return
	}
	gw := float64(w) / float64(len(p.groups))
	bw := gw * 0.8 / float64(len(paths))
	for gi, g := range p.groups {
		gx := float64(x0) + gw*float64(gi) + gw*0.1
		for pi, path := range paths {
			v := 0.0
			if pi < len(p.values[gi]) {
				v = p.values[gi][pi]
			}
			bh := 0.0
			if top > 0 {
				bh = v / top * float64(ph)
			}
			x := gx + bw*float64(pi)
			y := float64(py+ph) - bh
			fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s: %s %s</title></rect>`+"\n",
				x+1, y, bw-2, bh, pathColors[path], html.EscapeString(g), path, fmt.Sprintf(p.format, v), p.unit)
			text(b, int(x+bw/2), int(y)-4, 10, "normal", "middle", fmt.Sprintf(p.format, v))
		}
		text(b, int(gx+gw*0.4), py+ph+18, 12, "normal", "middle", g)
	}
}

func text(b *strings.Builder, x, y, size int, weight, anchor, s string, extra ...string) {
	fmt.Fprintf(b, `<text x="%d" y="%d" font-size="%d" font-weight="%s" text-anchor="%s"%s>%s</text>`+"\n",
		x, y, size, weight, anchor, attrs(extra), html.EscapeString(s))
}

func attrs(extra []string) string {
	if len(extra) == 0 {
		return ""
	}
	return " " + strings.Join(extra, " ")
}

// niceScale returns an axis top at or above v and a tick step (1, 2 or 5 times a power of 10).
func niceScale(v float64) (top, step float64) {
	if v <= 0 {
		return 1, 0.2
	}
	raw := v / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	return math.Ceil(v/step) * step, step
}

func trimFloat(v float64) string {
	s := fmt.Sprintf("%.3f", v)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}
