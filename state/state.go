// Package state opens offsetgate's state in the destination and what is built on it, in one
// place: the mirror marks (catalog), the ledgers, the source views read from them, and the
// produce-at-offset writer that appends to them. `offsetgate serve` opens it before it takes a
// client (proxy.Server.Run calls Open), so no request is judged before the marks are read.
//
// Everything here lives in the destination (offsetgate's own topics): a second instance with
// no local state opens the same state.
package state

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"offsetgate/atoffset"
	"offsetgate/catalog"
	"offsetgate/ledger"
	"offsetgate/rawread"
	"offsetgate/view"
	"offsetgate/wire"
)

// Config is how to reach the destination as offsetgate and how to write mirror partitions.
type Config struct {
	// ClientOpts are offsetgate's own client options towards the destination (seeds, TLS,
	// SASL).
	ClientOpts []kgo.Opt
	// Instance names this offsetgate for partition ownership.
	Instance string
	// MaxFill is the largest hole filled with filler records (atoffset.Config).
	MaxFill int64
	// Align is the most offsets filled at a mirror partition's start to keep D's offsets the
	// source's (atoffset.Config; zero: 1,000,000; negative: never).
	Align int64
	// DataLanes is atoffset.Config's (zero: atoffset.DefaultDataLanes).
	DataLanes int
	// LedgerLeaderAcks is atoffset.Config's.
	LedgerLeaderAcks bool
	// SnapshotEvery is atoffset.Config's (zero: 10000; negative: never).
	SnapshotEvery int64
	// ViewMemory bounds the source view's cached index pages, in bytes (view.New: zero, the
	// default; negative, unbounded).
	ViewMemory int64
	// BeforeAppend is atoffset.Config's test seam.
	BeforeAppend func(topic string, partition int32)
	// Lease is how long an ownership claim holds without renewal (atoffset.Config; zero: 30s).
	Lease time.Duration
	// Dial opens offsetgate's own connections to a destination broker (pipelined writes).
	Dial func(ctx context.Context, addr string) (*wire.Conn, error)
	// OpenTimeout bounds reading the marks at start (60 s when zero).
	OpenTimeout time.Duration
	Metrics     prometheus.Registerer
	Log         *zap.Logger
}

// State is the opened state. Its parts are safe for concurrent use.
type State struct {
	Catalog *catalog.Catalog
	Ledger  *ledger.Ledger
	View    *view.View
	Writer  *atoffset.Writer

	cl      *kgo.Client // offsetgate's writer client: acks=all, no linger
	repl    *kgo.Client // the checks of ledger replication (LedgerLeaderAcks), nil without
	done    chan struct{}
	guarded chan struct{} // closed when the guarded settings' check (guard.go) ended
}

// Open reads every mirror mark (within ctx and OpenTimeout), then builds the ledger, the
// source views (loading every mirror topic's in the background) and the writer. The marks are
// followed, and background work runs, until run ends; Close waits for it then.
func Open(ctx, run context.Context, cfg Config) (*State, error) {
	if cfg.OpenTimeout <= 0 {
		cfg.OpenTimeout = 60 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	octx, cancel := context.WithTimeout(ctx, cfg.OpenTimeout)
	defer cancel()
	cat, err := catalog.Open(octx, cfg.ClientOpts, cfg.Log.Named("catalog"))
	if err != nil {
		return nil, err
	}
	st := &State{Catalog: cat, done: make(chan struct{})}
	go func() { defer close(st.done); cat.Run(run) }()
	select {
	case <-cat.Ready():
		err = cat.Refresh(octx, nil)
	case <-octx.Done():
		err = fmt.Errorf("reading mirror marks: %w", octx.Err())
	}
	if err != nil {
		return nil, err // the follower ends with run
	}
	cfg.Log.Info("mirror marks loaded", zap.Int("mirror_topics", len(cat.Marks())))
	st.cl, err = kgo.NewClient(append(append([]kgo.Opt{}, cfg.ClientOpts...), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ClientID("offsetgate-writer"))...)
	if err != nil {
		return nil, err
	}
	if cfg.LedgerLeaderAcks {
		// The writer's checks of ledger replication, on connections of their own
		// (atoffset.Config.ReplicationClient).
		if st.repl, err = kgo.NewClient(append(append([]kgo.Opt{}, cfg.ClientOpts...), kgo.ClientID("offsetgate-replication"))...); err != nil {
			st.cl.Close()
			return nil, err
		}
	}
	st.guarded = make(chan struct{})
	go func() { defer close(st.guarded); guardLater(run, st.cl, cat, cfg.Log.Named("guard")) }()
	st.Ledger = ledger.New(st.cl)
	st.View = view.New(run, st.Ledger, st.cl, cfg.Log.Named("view"), cfg.ViewMemory)
	if cfg.Metrics != nil {
		view.RegisterMetrics(cfg.Metrics, st.View)
	}
	// Warm every mirror topic's source view, so the first requests for them do not wait.
	st.View.Prefetch(cat.Mirrors())
	// A batch sent again from a compacted source's log start is compared with what the source
	// view holds of it (the writer keeps only the latest entries in memory).
	partView := func(id catalog.TopicID, partition int32) (*view.Partition, error) {
		pv := st.View.Get(id, partition)
		if pv == nil || pv.NeedsRefresh() {
			t, ok := cat.ByID(id)
			if !ok {
				return nil, fmt.Errorf("source view: mirror topic %s is not known", catalog.IDString(id))
			}
			return st.View.Load(run, t, partition)
		}
		return pv, nil
	}
	find := func(id catalog.TopicID, partition int32, src int64) (ledger.Entry, bool, error) {
		pv, err := partView(id, partition)
		if err != nil {
			return ledger.Entry{}, false, err
		}
		return pv.BySrc(run, src)
	}
	between := func(id catalog.TopicID, partition int32, from, to int64) ([]ledger.Entry, error) {
		pv, err := partView(id, partition)
		if err != nil {
			return nil, err
		}
		return pv.Batches(run, from, to)
	}
	// The ledger is trimmed after each snapshot below what neither a takeover (the snapshot)
	// nor a source view (the entries of what D still holds, and where their transactions
	// began) needs: it holds about one entry per batch D holds, not every batch ever mirrored.
	trim := func(ctx context.Context, id catalog.TopicID, topic string, partition int32, at int64) {
		pv, err := partView(id, partition)
		if err != nil {
			return
		}
		logStart, err := rawread.ListOffset(ctx, st.cl, topic, partition, rawread.Earliest)
		if err != nil {
			return
		}
		pv.TrimBelow(logStart)
		need := pv.LedgerNeeded(logStart)
		if need < 0 {
			return
		}
		below := min(at, need)
		tid := catalog.IDString(id)
		start, err := rawread.ListOffset(ctx, st.cl, ledger.Topic(tid), partition, rawread.Earliest)
		if err != nil || below <= start {
			return
		}
		if err := st.Ledger.Trim(ctx, tid, partition, below); err != nil {
			cfg.Log.Warn("trimming a mirror partition's ledger failed; the next snapshot tries again", zap.String("topic", topic),
				zap.Int32("partition", partition), zap.Error(err))
			return
		}
		cfg.Log.Info("mirror partition's ledger trimmed", zap.String("topic", topic), zap.Int32("partition", partition),
			zap.Int64("below_ledger_offset", below), zap.Int64("destination_log_start", logStart))
	}
	st.Writer = atoffset.New(atoffset.Config{AfterSnapshot: trim, MaxFill: cfg.MaxFill, Align: cfg.Align, SnapshotEvery: cfg.SnapshotEvery, DataLanes: cfg.DataLanes, LedgerLeaderAcks: cfg.LedgerLeaderAcks, ReplicationClient: st.repl, Lease: cfg.Lease, Instance: cfg.Instance, Dial: cfg.Dial, BeforeAppend: cfg.BeforeAppend, OnEntries: st.View.Record, Find: find, Between: between},
		st.cl, st.Ledger, cfg.Log.Named("atoffset"), atoffset.NewMetrics(cfg.Metrics))
	return st, nil
}

// Close waits for the background work (the marks follower, the writer's snapshots and the
// ledger trims after them, view loads) to end with run, and closes offsetgate's writer client.
// The writer goes first: a trim after a snapshot may load a partition's view.
func (st *State) Close() {
	<-st.done
	<-st.guarded
	st.Writer.Close()
	st.View.Wait()
	st.cl.Close()
	if st.repl != nil {
		st.repl.Close()
	}
}
