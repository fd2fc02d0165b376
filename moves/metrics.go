package moves

import (
	"github.com/prometheus/client_golang/prometheus"

	"offsetgate/catalog"
)

// Metrics are the live moves' Prometheus metrics.
type Metrics struct {
	carried     prometheus.Counter
	carryErrors prometheus.Counter
	// Requests for promoted topics' partitions that source connections carried to the
	// destination, by api (produce.go).
	carriedPromoted *prometheus.CounterVec
}

// states are every move state, one gauge each.
var states = []catalog.MoveState{catalog.MoveDraining, catalog.MoveFinal, catalog.MoveMoved, catalog.MoveFailed,
	catalog.MoveReturning, catalog.MoveReturnFinal, catalog.MoveReturned}

// RegisterMetrics registers the moves' metrics: groups by move state (read from the catalog
// at each scrape) and the requests of moved groups carried to the destination.
func RegisterMetrics(reg prometheus.Registerer, c *catalog.Catalog) *Metrics {
	m := &Metrics{
		carried: prometheus.NewCounter(prometheus.CounterOpts{Name: "offsetgate_group_move_carried_requests_total",
			Help: "Coordinator requests of moved groups carried to the destination."}),
		carryErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "offsetgate_group_move_carry_errors_total",
			Help: "Carried requests that failed (the client connection was closed so the client retries)."}),
	}
	m.carriedPromoted = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "offsetgate_promoted_carried_requests_total",
		Help: "Requests for promoted topics' partitions that source connections carried to the destination, by api."}, []string{"api"})
	reg.MustRegister(m.carried, m.carryErrors, m.carriedPromoted)
	for _, st := range states {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "offsetgate_group_moves",
			Help: "Consumer groups by live-move state.", ConstLabels: prometheus.Labels{"state": string(st)}},
			func() float64 {
				n := 0
				for _, m := range c.Moves() {
					if m.State == st {
						n++
					}
				}
				return float64(n)
			}))
	}
	return m
}

func (m *Metrics) carry(err error) {
	if m == nil {
		return
	}
	m.carried.Inc()
	if err != nil {
		m.carryErrors.Inc()
	}
}

func (m *Metrics) carryPromoted(api string) {
	if m == nil {
		return
	}
	m.carriedPromoted.WithLabelValues(api).Inc()
}
