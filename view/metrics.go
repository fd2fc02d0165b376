package view

import "github.com/prometheus/client_golang/prometheus"

// RegisterMetrics exposes the index page cache of a view.
func RegisterMetrics(reg prometheus.Registerer, v *View) {
	stat := func(f func(Stats) float64) func() float64 { return func() float64 { return f(v.Stats()) } }
	for _, c := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "offsetgate_view_pages_resident",
			Help: "Full pages of source view index entries in memory (besides the page each mirror partition is filling)."},
			stat(func(s Stats) float64 { return float64(s.Pages) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "offsetgate_view_page_bytes",
			Help: "Estimated bytes of the source view index pages in memory, held within view_memory_mb."},
			stat(func(s Stats) float64 { return float64(s.Bytes) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "offsetgate_view_page_loads_total",
			Help: "Source view index pages read back from the ledger (a reader reached a page out of memory)."},
			stat(func(s Stats) float64 { return float64(s.Loads) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "offsetgate_view_page_evictions_total",
			Help: "Source view index pages dropped from memory to stay within view_memory_mb."},
			stat(func(s Stats) float64 { return float64(s.Evictions) })),
	} {
		reg.MustRegister(c)
	}
}
