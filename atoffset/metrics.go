package atoffset

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	writes  *prometheus.CounterVec
	bytes   *prometheus.CounterVec
	halted  *prometheus.GaugeVec
	latency prometheus.Observer
	snaps   *prometheus.CounterVec
	loads   *prometheus.HistogramVec
	// Requests to D's brokers and the batches they carried, by lane (ledger, data): their
	// ratio is how much concurrent partitions share requests.
	requests *prometheus.CounterVec
	batches  *prometheus.CounterVec
	// Data requests sent with acks=1, their batches confirmed by a later acks=all request of
	// their partitions (sink.Runs).
	quick prometheus.Counter
	// Time from a request's writing to its answer, by lane and acks; and a write's ledger
	// append. Where a mirror write's time goes (offsetgate_mirror_write_seconds).
	answered *prometheus.HistogramVec
	appends  prometheus.Observer
	// Time a write whose data D answered waits for its partition before it lands: the
	// partition's lock is held by the next write's planning and ledger append meanwhile.
	landWait prometheus.Observer
	// With Config.LedgerLeaderAcks: ledger appends answered by the leader alone, and how long
	// a write's data waited for its ledger entries' replication once D had answered them.
	leaderAppends prometheus.Counter
	replWait      prometheus.Observer
	// Batches D held beyond a partition's ledger, found identical to the mirror's resend and
	// recorded rather than halting the partition.
	adopted prometheus.Counter
	// flyingWaits counts resends answered after the earlier write of their batches landed.
	flyingWaits prometheus.Counter
}

// NewMetrics registers the produce-at-offset metrics.
func NewMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "offsetgate_mirror_writes_total",
			Help: "Produce-at-offset partition writes, by topic, partition and result code."}, []string{"topic", "partition", "code"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "offsetgate_mirror_bytes_total",
			Help: "Source record-set bytes mirrored, by topic and partition."}, []string{"topic", "partition"}),
		halted: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "offsetgate_mirror_partition_halted",
			Help: "1 while a mirror partition is halted (D did not hold what was expected)."}, []string{"topic", "partition"}),
	}
	lat := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "offsetgate_mirror_write_seconds",
		Help: "Time to mirror one partition's record set: ledger write and data writes.", Buckets: prometheus.DefBuckets})
	m.latency = lat
	m.snaps = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "offsetgate_mirror_snapshots_total",
		Help: "Snapshots of mirror partitions' state written (a takeover reads the newest and the ledger after it), by topic."}, []string{"topic"})
	m.loads = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "offsetgate_mirror_partition_load_seconds",
		Help:    "Time to take a mirror partition over (snapshot, ledger tail, claim), by whether a snapshot was used.",
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 14)}, []string{"snapshot"})
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "offsetgate_mirror_produce_requests_total",
		Help: "Produce requests sent to the destination for mirror writes, by lane (ledger appends, data)."}, []string{"lane"})
	m.batches = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "offsetgate_mirror_produce_batches_total",
		Help: "Record batches those requests carried (one per partition per request at most), by lane."}, []string{"lane"})
	m.quick = prometheus.NewCounter(prometheus.CounterOpts{Name: "offsetgate_mirror_produce_leader_acks_requests_total",
		Help: "Data requests sent with acks=1 (counted in offsetgate_mirror_produce_requests_total too): their batches are reported once a later acks=all request of their partition is answered."})
	m.answered = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "offsetgate_mirror_produce_request_seconds",
		Help:    "Time from writing a mirror write's Produce request to the destination to its answer (the broker's work on requests ahead of it on the connection included), by lane and acks.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}, []string{"lane", "acks"})
	appends := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "offsetgate_mirror_ledger_append_seconds",
		Help:    "Time of a mirror write's ledger append (its plan stored before its data go to the destination).",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)})
	m.appends = appends
	landWait := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "offsetgate_mirror_land_wait_seconds",
		Help:    "Time a mirror write whose data the destination answered waits for its partition before it is checked and answered (the partition's next write holds it while it plans and appends to the ledger).",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)})
	m.landWait = landWait
	m.leaderAppends = prometheus.NewCounter(prometheus.CounterOpts{Name: "offsetgate_mirror_ledger_leader_appends_total",
		Help: "Ledger appends answered by the ledger partition's leader (ledger_acks: leader), their replication confirmed before the write is answered."})
	replWait := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "offsetgate_mirror_ledger_replication_wait_seconds",
		Help:    "Time a mirror write waited, once the destination had answered its data, for its ledger entries' replication (ledger_acks: leader).",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)})
	m.replWait = replWait
	m.adopted = prometheus.NewCounter(prometheus.CounterOpts{Name: "offsetgate_mirror_adopted_batches_total",
		Help: "Batches the destination held beyond a mirror partition's ledger at a takeover (ledger_acks: leader, an append lost with its data on the destination), found identical to the mirror's resend and recorded instead of halting the partition."})
	m.flyingWaits = prometheus.NewCounter(prometheus.CounterOpts{Name: "offsetgate_mirror_resends_waited_total",
		Help: "Produce-at-offset requests that resent batches an earlier request was still writing (its answer lost to the client), answered once that write landed."})
	reg.MustRegister(m.writes, m.bytes, m.halted, lat, m.snaps, m.loads, m.requests, m.batches, m.quick, m.answered, appends, landWait, m.leaderAppends, replWait, m.adopted, m.flyingWaits)
	return m
}

func nopMetrics() *metrics { return NewMetrics(prometheus.NewRegistry()) }

func (m *metrics) observe(topic string, partition int32, r Result, n int, d time.Duration, halted bool) {
	ps := strconv.Itoa(int(partition))
	m.writes.WithLabelValues(topic, ps, strconv.Itoa(int(r.Code))).Inc()
	if r.Code == 0 {
		m.bytes.WithLabelValues(topic, ps).Add(float64(n))
	}
	if halted {
		m.halted.WithLabelValues(topic, ps).Set(1)
	}
	m.latency.Observe(d.Seconds())
}

// sent counts one request of a lane to D and its batches.
func (m *metrics) sent(lane string) func(batches int) {
	r, b := m.requests.WithLabelValues(lane), m.batches.WithLabelValues(lane)
	return func(n int) {
		r.Inc()
		b.Add(float64(n))
	}
}

// took observes the answer times of a lane's requests.
func (m *metrics) took(lane string) func(acks int16, d time.Duration) {
	one, all := m.answered.WithLabelValues(lane, "1"), m.answered.WithLabelValues(lane, "all")
	return func(acks int16, d time.Duration) {
		if acks == 1 {
			one.Observe(d.Seconds())
		} else {
			all.Observe(d.Seconds())
		}
	}
}

func (m *metrics) snapshot(topic string) { m.snaps.WithLabelValues(topic).Inc() }

func (m *metrics) load(d time.Duration, fromSnapshot bool) {
	m.loads.WithLabelValues(strconv.FormatBool(fromSnapshot)).Observe(d.Seconds())
}
