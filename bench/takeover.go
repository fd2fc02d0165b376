package bench

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"offsetgate/atoffset"
	"offsetgate/batch"
	"offsetgate/catalog"
	"offsetgate/internal/testkafka"
	"offsetgate/ledger"
	"offsetgate/view"
)

// TakeoverConfig sizes the takeover benchmark.
type TakeoverConfig struct {
	Dest *testkafka.Cluster
	// Entries is how many batch entries the mirror partition's ledger holds (one offset each).
	Entries int
	// Topic names the mirror topic (a fresh one per run).
	Topic    string
	Progress io.Writer
}

// TakeoverRun is one takeover: the first write of a writer that has never seen the partition.
type TakeoverRun struct {
	Name         string  `json:"name"`
	Seconds      float64 `json:"seconds"`
	PeakHeapMiB  float64 `json:"peak_heap_mib"`  // the most heap in use while it ran
	AfterHeapMiB float64 `json:"after_heap_mib"` // heap in use once done, after a collection
	// FromSnapshot: the writer's load metric says it started from a snapshot.
	FromSnapshot bool `json:"from_snapshot"`
}

// ViewRun is one source view of the partition, built from its ledger with a page budget, then
// walked from the first batch to the last as a consumer reading the whole history would (every
// batch's entry looked up, cold pages read back).
type ViewRun struct {
	Name         string  `json:"name"`
	BudgetMiB    float64 `json:"budget_mib"` // negative: unbounded
	LoadSeconds  float64 `json:"load_seconds"`
	WalkSeconds  float64 `json:"walk_seconds"`
	PeakHeapMiB  float64 `json:"peak_heap_mib"`
	AfterHeapMiB float64 `json:"after_heap_mib"` // with the view kept, after a collection
	PagesRead    int64   `json:"pages_read"`
}

// TakeoverReport is the benchmark's result.
type TakeoverReport struct {
	Entries       int           `json:"entries"`
	GenerateSecs  float64       `json:"generate_seconds"`
	Runs          []TakeoverRun `json:"runs"`
	Views         []ViewRun     `json:"views"`
	SnapshotEvery int64         `json:"snapshot_every"`
}

// RunTakeover measures what taking a mirror partition over costs, in time and memory, when its
// ledger holds cfg.Entries batches: a generator writes the ledger entries (and as many one-record
// batches to the mirror partition, so the destination holds what they describe) directly, then
//
//   - "whole ledger": a writer with no snapshot to start from takes the partition over and
//     writes the next batch (it reads and replays every entry; then it stores a snapshot);
//   - "snapshot": a second writer (a restart of the same instance) takes it over from that
//     snapshot and the ledger after it, and writes the next batch.
//
// Both writers run in this process, one after the other; memory is the Go heap in use, sampled
// every 10 ms.
func RunTakeover(ctx context.Context, cfg TakeoverConfig) (*TakeoverReport, error) {
	logf := func(format string, a ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, format+"\n", a...)
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Dest.Addrs()...), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(5*time.Millisecond), kgo.ProducerBatchMaxBytes(1<<20), kgo.MaxBufferedRecords(1<<20))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, cfg.Topic); err != nil {
		return nil, fmt.Errorf("creating %s: %w", cfg.Topic, err)
	}
	td, err := adm.ListTopics(ctx, cfg.Topic)
	for i := 0; i < 20 && err == nil && td[cfg.Topic].Err != nil; i++ {
		time.Sleep(250 * time.Millisecond) // created a moment ago: not yet in every broker's metadata
		td, err = adm.ListTopics(ctx, cfg.Topic)
	}
	if err != nil || td[cfg.Topic].Err != nil {
		return nil, fmt.Errorf("topic id of %s: %v %v", cfg.Topic, err, td[cfg.Topic].Err)
	}
	topic := catalog.Topic{Name: cfg.Topic, ID: td[cfg.Topic].ID}
	id := catalog.IDString(topic.ID)

	start := time.Now()
	logf("takeover: generating %d ledger entries and destination records", cfg.Entries)
	pid, epoch, err := initProducer(ctx, cl)
	if err != nil {
		return nil, err
	}
	l := ledger.New(cl)
	if err := l.Ensure(ctx, id, 1); err != nil {
		return nil, err
	}
	// The generator's own client writes ledger batches of some hundred entries, as a busy
	// writer appends them (the writers' client keeps the default batch size: a snapshot is one
	// large record).
	gen, err := kgo.NewClient(kgo.SeedBrokers(cfg.Dest.Addrs()...), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(5*time.Millisecond), kgo.ProducerBatchMaxBytes(64<<10), kgo.MaxBufferedRecords(1<<20))
	if err != nil {
		return nil, err
	}
	err = generate(ctx, gen, l, cfg.Topic, id, cfg.Entries, pid, epoch)
	gen.Close()
	if err != nil {
		return nil, err
	}
	rep := &TakeoverReport{Entries: cfg.Entries, GenerateSecs: time.Since(start).Seconds(), SnapshotEvery: atoffset.DefaultSnapshotEvery}
	logf("takeover: generated in %.1fs", rep.GenerateSecs)

	for i, name := range []string{"whole ledger", "snapshot"} {
		next := int64(cfg.Entries + i)
		run, err := takeover(ctx, cl, l, topic, next, name)
		if err != nil {
			return rep, fmt.Errorf("%s: %w", name, err)
		}
		logf("takeover %-12s %7.2fs, peak heap %7.1f MiB, after %6.1f MiB, from a snapshot: %v", name, run.Seconds, run.PeakHeapMiB, run.AfterHeapMiB, run.FromSnapshot)
		rep.Runs = append(rep.Runs, run)
	}
	for _, b := range []struct {
		name   string
		budget int64
	}{{"unbounded", -1}, {"default", view.DefaultMemory}, {"16 MiB", 16 << 20}} {
		run, err := viewRun(ctx, cl, l, topic, cfg.Entries+len(rep.Runs), b.name, b.budget) // one batch each writer wrote
		if err != nil {
			return rep, fmt.Errorf("view %s: %w", b.name, err)
		}
		logf("view %-10s load %7.2fs, walk %7.2fs, peak heap %7.1f MiB, after %6.1f MiB, pages read back %d", b.name,
			run.LoadSeconds, run.WalkSeconds, run.PeakHeapMiB, run.AfterHeapMiB, run.PagesRead)
		rep.Views = append(rep.Views, run)
	}
	return rep, nil
}

// viewRun builds the partition's source view with a page budget and walks it, measured.
func viewRun(ctx context.Context, cl *kgo.Client, l *ledger.Ledger, topic catalog.Topic, n int, name string, budget int64) (ViewRun, error) {
	m := startHeap()
	v := view.New(ctx, l, cl, zap.NewNop(), budget)
	start := time.Now()
	pv, err := v.Load(ctx, topic, 0)
	if err != nil {
		m.stop()
		return ViewRun{}, err
	}
	loaded := time.Since(start)
	if pv.Len() != n {
		m.stop()
		return ViewRun{}, fmt.Errorf("the view holds %d entries, the ledger %d", pv.Len(), n)
	}
	start = time.Now()
	for d := int64(0); d < int64(n); d++ {
		if pv.Cold(d) {
			if err := pv.LoadAt(ctx, d); err != nil {
				m.stop()
				return ViewRun{}, err
			}
		}
		if e, ok := pv.At(d); !ok || e.Src != d {
			m.stop()
			return ViewRun{}, fmt.Errorf("no entry at destination offset %d after reading its page back", d)
		}
	}
	walked := time.Since(start)
	peak, after := m.stop()
	runtime.KeepAlive(v)
	budgetMiB := float64(budget) / (1 << 20)
	return ViewRun{Name: name, BudgetMiB: budgetMiB, LoadSeconds: loaded.Seconds(), WalkSeconds: walked.Seconds(),
		PeakHeapMiB: peak, AfterHeapMiB: after, PagesRead: v.Stats().Loads}, nil
}

// heapMeter samples the Go heap in use every 10 ms above what it was at the start.
type heapMeter struct {
	base, peak uint64
	done       chan struct{}
	wg         sync.WaitGroup
}

func startHeap() *heapMeter {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m := &heapMeter{base: ms.HeapInuse, done: make(chan struct{})}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			m.peak = max(m.peak, ms.HeapInuse)
			select {
			case <-m.done:
				return
			case <-t.C:
			}
		}
	}()
	return m
}

// stop ends the sampling and gives the peak and, after a collection, the heap in use, in MiB
// above the start. What the caller keeps alive after it counts in the second.
func (m *heapMeter) stop() (peak, after float64) {
	close(m.done)
	m.wg.Wait()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	mib := func(b uint64) float64 {
		if b < m.base {
			return 0
		}
		return float64(b-m.base) / (1 << 20)
	}
	return mib(m.peak), mib(ms.HeapInuse)
}

// takeover is one new writer's first write to the partition (a takeover), measured.
func takeover(ctx context.Context, cl *kgo.Client, l *ledger.Ledger, topic catalog.Topic, src int64, name string) (TakeoverRun, error) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapInuse)
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	reg := prometheus.NewRegistry()
	w := atoffset.New(atoffset.Config{Instance: "bench"}, cl, l, zap.NewNop(), atoffset.NewMetrics(reg))
	start := time.Now()
	res := w.Write(ctx, topic, 0, sourceBatch(src), -1, false, nil)
	elapsed := time.Since(start)
	close(stop)
	wg.Wait()
	// The snapshot the write made due is stored in the background; Close waits for it, so the
	// next run can start from it.
	w.Close()
	if res.Code != 0 {
		return TakeoverRun{}, fmt.Errorf("write at %d: %s", src, res.Msg)
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	after := ms.HeapInuse
	runtime.KeepAlive(w)
	mib := func(b uint64, base uint64) float64 {
		if b < base {
			return 0
		}
		return float64(b-base) / (1 << 20)
	}
	return TakeoverRun{Name: name, Seconds: elapsed.Seconds(), PeakHeapMiB: mib(peak, base), AfterHeapMiB: mib(after, base),
		FromSnapshot: loadedFromSnapshot(reg)}, nil
}

// loadedFromSnapshot reads the writer's load metric: did its takeover start from a snapshot?
func loadedFromSnapshot(reg *prometheus.Registry) bool {
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "offsetgate_mirror_partition_load_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "snapshot" && lp.GetValue() == "true" && m.GetHistogram().GetSampleCount() > 0 {
					return true
				}
			}
		}
	}
	return false
}

// generate writes n batch entries (source offset i at destination offset i, one record each)
// to the ledger, and n one-record batches to the mirror partition.
func generate(ctx context.Context, cl *kgo.Client, l *ledger.Ledger, topic, id string, n int, pid int64, epoch int16) error {
	var (
		mu    sync.Mutex
		first error
	)
	done := func(_ *kgo.Record, err error) {
		if err != nil {
			mu.Lock()
			first = err
			mu.Unlock()
		}
	}
	h, err := batchHeader(0)
	if err != nil {
		return err
	}
	seg := ledger.Entry{V: 1, Kind: ledger.KindSegment, Src: 0}
	cl.Produce(ctx, ledgerRecord(id, seg), done)
	for i := 0; i < n; i++ {
		e := ledger.Entry{V: 1, Kind: ledger.KindBatch, Src: int64(i), Last: int64(i), D: int64(i), Count: 1,
			CRC: h.CRC, Len: h.Length, Records: 1, MaxTS: h.MaxTimestamp, PID: pid, PEpoch: epoch, Seq: int32(i)}
		cl.Produce(ctx, ledgerRecord(id, e), done)
		cl.Produce(ctx, &kgo.Record{Topic: topic, Value: []byte("v")}, done)
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	return first
}

func ledgerRecord(id string, e ledger.Entry) *kgo.Record {
	b, _ := json.Marshal(e)
	return &kgo.Record{Topic: ledger.Topic(id), Partition: 0, Key: []byte(e.Kind + ":" + strconv.FormatInt(e.Src, 10)),
		Value: b, Timestamp: time.UnixMilli(max(e.Src, 0))}
}

// sourceBatch is a one-record source batch at base.
func sourceBatch(base int64) []byte {
	r := kmsg.Record{Key: []byte("k"), Value: []byte("v")}
	r.Length = int32(len(r.AppendTo(nil)) - 1)
	b := kmsg.RecordBatch{FirstOffset: base, PartitionLeaderEpoch: 0, Magic: 2, FirstTimestamp: 1000, MaxTimestamp: 1000,
		ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: 1, Records: r.AppendTo(nil)}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[8:], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[17:], batch.CRC(out))
	return out
}

func batchHeader(base int64) (batch.Header, error) {
	_, hs, err := batch.Split(sourceBatch(base))
	if err != nil || len(hs) != 1 {
		return batch.Header{}, fmt.Errorf("source batch: %v", err)
	}
	return hs[0], nil
}

func initProducer(ctx context.Context, cl *kgo.Client) (int64, int16, error) {
	req := kmsg.NewPtrInitProducerIDRequest()
	req.TransactionTimeoutMillis = 60000
	resp, err := req.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("producer id: %w", err)
	}
	return resp.ProducerID, resp.ProducerEpoch, nil
}
