package proxy

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// metrics are offsetgate's Prometheus metrics. Per-api-key children are resolved once, so the
// hot path is an array index and an atomic add.
type metrics struct {
	connsOpen      prometheus.Gauge
	connsTotal     prometheus.Counter
	connsClosed    *prometheus.CounterVec
	requests       [128]prometheus.Counter
	requestBytes   [128]prometheus.Counter
	responseBytes  [128]prometheus.Counter
	latency        [128]prometheus.Observer
	rewrites       [128]prometheus.Counter
	localAnswers   [128]prometheus.Counter
	waitTimeouts   [128]prometheus.Counter
	upstreamErrors prometheus.Counter
	pausedTotal    prometheus.Counter
	backlogHolds   prometheus.Counter
	directRests    prometheus.Counter
	bufferHigh     prometheus.Gauge
	inFlight       prometheus.GaugeFunc
	budgetPauses   prometheus.Counter
	memoryReleases prometheus.Counter
	refused        *prometheus.CounterVec
	upstreamDials  prometheus.Counter
	streamed       prometheus.Counter
	streamCuts     prometheus.Counter
	streamDropped  prometheus.Counter
	answersPassed  prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, inFlight func() float64) *metrics {
	m := &metrics{
		connsOpen:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "offsetgate_client_connections", Help: "Open client connections."}),
		connsTotal:  prometheus.NewCounter(prometheus.CounterOpts{Name: "offsetgate_client_connections_total", Help: "Client connections accepted."}),
		connsClosed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "offsetgate_client_connections_closed_total", Help: "Client connections closed, by reason."}, []string{"reason"}),
		upstreamErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "offsetgate_upstream_connect_errors_total",
			Help: "Failed connections to destination brokers."}),
		pausedTotal: prometheus.NewCounter(prometheus.CounterOpts{Name: "offsetgate_backpressure_pauses_total",
			Help: "Times a client's requests stopped being forwarded because its unread responses were over the high-water mark."}),
		backlogHolds: prometheus.NewCounter(prometheus.CounterOpts{Name: "offsetgate_upstream_backlog_holds_total",
			Help: "Times a client's next request was not read because its broker had not yet taken the requests written to it (the client is slowed as by its broker), or, on gnet, its upstream was being dialed or the session had not yet taken what it sent."}),
		directRests: prometheus.NewCounter(prometheus.CounterOpts{Name: "offsetgate_upstream_direct_rests_total",
			Help: "Times the rest of a large request the broker's socket did not take was kept in its own buffer until the socket had room, rather than copied (gnet transport)."}),
		bufferHigh: prometheus.NewGauge(prometheus.GaugeOpts{Name: "offsetgate_buffered_bytes_high_water",
			Help: "Largest per-connection buffered byte count seen (unconsumed input or unsent output)."}),
		inFlight: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "offsetgate_requests_in_flight",
			Help: "Requests waiting for their response, all connections."}, inFlight),
		budgetPauses: prometheus.NewCounter(prometheus.CounterOpts{Name: "offsetgate_budget_pauses_total",
			Help: "Times a connection stopped reading its upstream and its client because it held more than its share of limits.max_held_bytes."}),
		memoryReleases: prometheus.NewCounter(prometheus.CounterOpts{Name: "offsetgate_memory_releases_total",
			Help: "Times the heap's unused pages were returned to the operating system after a burst, once the proxy held nearly nothing."}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "offsetgate_client_connections_refused_total",
			Help: "Client connections closed at once because they were over a connection limit, by limit."}, []string{"limit"}),
		upstreamDials: prometheus.NewCounter(prometheus.CounterOpts{Name: "offsetgate_upstream_connections_total",
			Help: "Connections to destination brokers opened for clients (each at its client's first request that goes upstream)."}),
		streamed: prometheus.NewCounter(prometheus.CounterOpts{Name: "offsetgate_requests_streamed_total",
			Help: "Large Produce requests passed to the destination as they arrived, their last byte sent once judged (gnet transport)."}),
		streamCuts: prometheus.NewCounter(prometheus.CounterOpts{Name: "offsetgate_streamed_requests_cut_total",
			Help: "Streamed requests judged not to go on unchanged: the connection was closed before their last byte, so nothing of them was written; the client's next requests are judged whole first."}),
		streamDropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "offsetgate_streamed_bytes_dropped_total",
			Help: "Record-set bytes of streamed Produce requests dropped from memory once sent to the broker, before the request was whole."}),
		answersPassed: prometheus.NewCounter(prometheus.CounterOpts{Name: "offsetgate_answers_streamed_total",
			Help: "Large broker answers (Fetch answers with nothing to rewrite) written to their client as they arrived, never held whole (gnet transport)."}),
	}
	reqs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "offsetgate_requests_total", Help: "Client requests, by api."}, []string{"api"})
	reqBytes := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "offsetgate_request_bytes_total", Help: "Client request bytes, by api."}, []string{"api"})
	respBytes := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "offsetgate_response_bytes_total", Help: "Response bytes sent to clients, by api."}, []string{"api"})
	lat := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "offsetgate_request_duration_seconds",
		Help:    "Time from a request's arrival to its response leaving, by api.",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}}, []string{"api"})
	rw := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "offsetgate_response_rewrites_total", Help: "Responses offsetgate rewrote, by api."}, []string{"api"})
	la := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "offsetgate_local_answers_total", Help: "Requests offsetgate answered itself, by api."}, []string{"api"})
	wt := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "offsetgate_wait_timeouts_total",
		Help: "Requests refused because their wait for the destination (lookups, source views, durable writes) ran out of time, by api."}, []string{"api"})
	for k := 0; k < len(m.requests); k++ {
		name := kmsg.NameForKey(int16(k))
		if name == "Unknown" || name == "" {
			name = "key" + strconv.Itoa(k)
		}
		m.requests[k] = reqs.WithLabelValues(name)
		m.requestBytes[k] = reqBytes.WithLabelValues(name)
		m.responseBytes[k] = respBytes.WithLabelValues(name)
		m.latency[k] = lat.WithLabelValues(name)
		m.rewrites[k] = rw.WithLabelValues(name)
		m.localAnswers[k] = la.WithLabelValues(name)
		m.waitTimeouts[k] = wt.WithLabelValues(name)
	}
	reg.MustRegister(m.connsOpen, m.connsTotal, m.connsClosed, m.upstreamErrors, m.pausedTotal, m.backlogHolds, m.directRests, m.bufferHigh, m.inFlight,
		m.budgetPauses, m.memoryReleases, m.refused, m.upstreamDials, m.streamed, m.streamCuts, m.streamDropped, m.answersPassed, reqs, reqBytes, respBytes, lat, rw, la, wt)
	return m
}

// registerBudget exports the budget's state.
func registerBudget(reg prometheus.Registerer, b *budget) {
	g := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	reg.MustRegister(
		g("offsetgate_held_bytes", "Bytes held for all client connections: responses not yet sent or waiting in order, answers read from upstream and not yet handed over, requests not yet consumed or sent.",
			func() float64 { return float64(b.total.Load()) }),
		g("offsetgate_held_bytes_high_water", "Largest offsetgate_held_bytes seen.",
			func() float64 { return float64(b.high.Load()) }),
		g("offsetgate_held_bytes_budget", "limits.max_held_bytes (-1: no budget).",
			func() float64 { return float64(b.limit) }),
		g("offsetgate_budget_paused_connections", "Connections not reading their upstream and their client now because they hold more than their share of limits.max_held_bytes.",
			func() float64 { return float64(b.paused.Load()) }),
	)
}

func idx(key int16) int {
	if key < 0 || int(key) >= 128 {
		return 127
	}
	return int(key)
}

// observer adapts metrics to session.Observer.
type observer struct{ m *metrics }

func (o observer) Request(key int16, bytes int) {
	i := idx(key)
	o.m.requests[i].Inc()
	o.m.requestBytes[i].Add(float64(bytes))
}

func (o observer) Response(key int16, bytes int, d time.Duration) {
	i := idx(key)
	o.m.responseBytes[i].Add(float64(bytes))
	o.m.latency[i].Observe(d.Seconds())
}

func (o observer) Rewrite(key int16)     { o.m.rewrites[idx(key)].Inc() }
func (o observer) LocalAnswer(key int16) { o.m.localAnswers[idx(key)].Inc() }
func (o observer) WaitTimeout(key int16) { o.m.waitTimeouts[idx(key)].Inc() }
