package bench

import (
	"fmt"
	"os"
	"strings"
)

// WriteMM2SVG draws the MirrorMaker 2 comparison: throughput and CPU per GB, one bar per tool.
func WriteMM2SVG(path string, rep *MM2Report) error {
	var b strings.Builder
	const w, h = 640, 300
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	text(&b, w/2, 22, 15, "bold", "middle", fmt.Sprintf("Mirroring %.0f MB (%d partitions, %d-byte records): offsetgate vs MirrorMaker 2", float64(rep.Bytes)/1e6, rep.Partitions, rep.RecordBytes))
	panels := []struct {
		title string
		val   func(MirrorResult) float64
		unit  string
	}{
		{"throughput (MB/s, higher is better)", func(r MirrorResult) float64 { return r.MBps }, "MB/s"},
		{"CPU per GB (s, lower is better)", func(r MirrorResult) float64 { return r.CPUPerGB }, "s"},
	}
	colors := map[string]string{"offsetgate": "#2b7bb9", "mirrormaker2": "#d9822b"}
	for i, p := range panels {
		x0 := 40 + i*300
		text(&b, x0+120, 55, 13, "normal", "middle", p.title)
		top := 0.0
		for _, r := range rep.Results {
			top = max(top, p.val(r))
		}
		if top == 0 {
			top = 1
		}
		for j, r := range rep.Results {
			v := p.val(r)
			bh := int(v / top * 180)
			x := x0 + 30 + j*110
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="80" height="%d" fill="%s"/>`+"\n", x, 260-bh, bh, colors[r.Tool])
			text(&b, x+40, 255-bh, 12, "normal", "middle", fmt.Sprintf("%.1f %s", v, p.unit))
			text(&b, x+40, 280, 12, "normal", "middle", r.Tool)
		}
	}
	b.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
