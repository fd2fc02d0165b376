// Package atoffset is produce-at-offset: it makes a stock destination hold every source record
// at its source offset, or at a recorded constant shift.
//
// offsetgate is the only writer of a mirror partition, so it decides D's next offset. For each
// partition it keeps a shift table (D offset = source offset - Delta, constant over long
// segments), fills small holes in the source offsets with filler records so Delta holds, and
// starts a new segment for a large hole. It writes as an idempotent producer of its own
// (acks=all; a retry reuses the same producer id, epoch and sequence, so D drops what it
// already has), writes the ledger entry of every batch before the batch (write-ahead), checks
// the base offset D answers against the one expected, and halts the partition on any mismatch.
//
// Writes are blocking and run on the session's asynchronous goroutines, never on an event
// loop. One write at a time per partition; partitions are independent.
package atoffset

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"offsetgate/batch"
	"offsetgate/catalog"
	"offsetgate/ledger"
	"offsetgate/rawread"
	"offsetgate/rules"
	"offsetgate/sink"
	"offsetgate/wire"
)

// Error codes of produce-at-offset answers: rules' one table (docs/PROTOCOL.md).
var (
	ErrInvalidRecord = rules.ErrInvalidRecord
	ErrOutOfOrder    = rules.ErrOutOfOrder
	ErrFencedEpoch   = rules.ErrFencedEpoch
	ErrHalted        = rules.ErrHalted
	ErrOwned         = rules.ErrOwned
	ErrRetriable     = rules.ErrTimedOut
)

const (
	DefaultMaxFill        = 10000
	DefaultAlign          = 1_000_000
	DefaultLease          = 30 * time.Second
	recentEntries         = 4096
	defaultRequestTimeout = 30 * time.Second
	// snapshotGrace is how long Close waits for snapshots still being stored.
	snapshotGrace = 5 * time.Second
)

// Config tunes the writer.
type Config struct {
	// MaxFill is the largest hole filled with filler records; a larger one starts a new
	// shift segment.
	MaxFill int64
	// Align is the most offsets filled at a mirror partition's start so that D's offsets are
	// the source's (Options.Align); the fillers are deleted from D once written. 0: the
	// default (DefaultAlign); negative: never (the mirror starts with a shift).
	Align int64
	// Instance names this offsetgate for partition ownership.
	Instance string
	// Lease is how long an ownership claim holds without renewal.
	Lease time.Duration
	// Dial, when set, opens a connection to a destination broker (with offsetgate's own TLS
	// and SASL) for pipelined writes: up to five batches of a partition in flight at once, the
	// idempotent producer's limit for ordered retries. Without it, batches go one at a time.
	Dial func(ctx context.Context, addr string) (*wire.Conn, error)
	// OnEntries, when set, hears every batch of entries once it is in the ledger, so the
	// source view of this process follows without reading them back.
	// first is the ledger offset of es[0]; the others follow it.
	OnEntries func(id catalog.TopicID, partition int32, first int64, es []ledger.Entry)
	// Find, when set, looks up a mirrored batch by source offset beyond the entries a
	// partition keeps in memory (the source view holds them all): a compacted source is sent
	// again from its log start to record what its cleaner changed.
	// An error (the history could not be read) refuses the write, retriably.
	Find func(id catalog.TopicID, partition int32, src int64) (ledger.Entry, bool, error)
	// LedgerLeaderAcks: a write's ledger entries are appended with acks=1 (the ledger
	// partition's leader checks the claim's epoch, so a stale holder is fenced as before), its
	// data sent once the leader has them, and the write answered only once both its data and
	// its entries are replicated (Fenced.Replication). It saves a following write one
	// replication round trip. The cost: a ledger leader that fails before its follower has the
	// entries loses them while the data may be on D. Nothing is guessed then: the partition is
	// read again, and D holding offsets beyond its ledger halts it (load); each takeover
	// writes with a producer id of its own, so that D cannot take a resend for a batch of the
	// earlier producer it holds unreplicated. A fresh partition's first plan, a takeover's
	// first, and a write of more than maxUnreplicated batches append with acks=all. Needs Dial.
	LedgerLeaderAcks bool
	// ReplicationClient carries the checks of LedgerLeaderAcks (nil: the writer's client). A
	// broker answers a connection's requests in turn, and a check is a Fetch the ledger's
	// leader holds until its follower has the entries: on a client of its own it holds no
	// ledger read (a takeover's, the source view's) queued behind it on the same connection.
	ReplicationClient *kgo.Client
	// DataLanes is how many connections to each destination broker carry data (0:
	// DefaultDataLanes, at most MaxDataLanes), a partition always on the same one. Several
	// lanes let the partitions' acks=all requests wait for their replication side by side
	// instead of in turn on one connection, which lowers a following mirror's lag on a
	// replicated destination (docs/benchmarks.md, "Data lanes").
	DataLanes int
	// SnapshotEvery is how many ledger entries a partition's writer appends between two
	// snapshots of its state (a takeover reads the newest and the ledger after it). 0: the
	// default (DefaultSnapshotEvery); negative: never (a takeover reads the whole ledger).
	SnapshotEvery int64
	// BeforeAppend, when set, runs after a write is planned and before its ledger entries are
	// appended (tests pause an instance there).
	BeforeAppend func(topic string, partition int32)
	// AfterSnapshot, when set, hears that a snapshot of a partition's state covering the
	// ledger before ledger offset at was stored: the ledger below at is no longer needed for
	// a takeover (the source view decides what else it needs: state.Open trims the ledger).
	AfterSnapshot func(ctx context.Context, id catalog.TopicID, topic string, partition int32, at int64)
	// Between, when set, lists the mirrored batches starting in [from, to) (Options.Between).
	// An error refuses the write, retriably.
	Between func(id catalog.TopicID, partition int32, from, to int64) ([]ledger.Entry, error)
}

// Result is the answer for one partition of a produce-at-offset request.
type Result struct {
	Code int16
	Msg  string
	// BaseOffset is the source offset of the first batch of the request.
	BaseOffset int64
}

// Segment is one stretch of the shift table: from source offset Src on, D = S - Delta.
type Segment struct {
	Src   int64
	Delta int64
}

// Writer writes mirror partitions.
type Writer struct {
	cfg    Config
	cl     *kgo.Client
	ledger *ledger.Ledger
	log    *zap.Logger
	m      *metrics
	// meta shares metadata lookups with the other takeovers and writes (the ledger's).
	meta *rawread.Meta

	mu    sync.Mutex
	parts map[key]*part
	sinks map[sinkKey]*sink.Sink

	// bg runs the snapshots (and the ledger trims after them) off the partitions' write
	// paths; Close waits for them (up to snapshotGrace), then cancels what is left.
	bgCtx  context.Context
	bgStop context.CancelFunc
	bg     sync.WaitGroup
	// closed (under mu): Close has begun. No snapshot starts after it (the WaitGroup is not
	// added to while Close waits on it), and a write that comes late gets a closed sink, whose
	// batches fail unsent, rather than a new connection nothing would close.
	closed bool
}

// sinkKey names one batch sender: a destination broker and a lane of its.
type sinkKey struct {
	addr string
	lane int
}

// Lanes of a destination broker: ledger appends have connections of their own, so that a
// write's ledger entry never queues behind other partitions' data (a broker answers a
// connection's requests one at a time, acks=all replication included); data goes on
// Config.DataLanes connections by partition (DefaultDataLanes), each request of a lane
// carrying a batch of each of its partitions that has one waiting: a broker holds a
// connection while an acks=all request waits for its followers, so on one connection the
// partitions' confirmations waited for each other's replication in turn, and four lanes cut a
// following mirror's median lag by a quarter on a destination of replication factor 2, with
// the write benchmark's throughput unchanged (docs/benchmarks.md, "Data lanes"). Ledger
// appends go on ledgerLanes connections by partition: an append waits for its replication,
// and the appends of partitions on one connection waited for each other's (one request at a
// time, sink.OneAtATime), while they rarely shared a request at a steady rate (a partition has
// one append in flight at most); four lanes cut a following mirror's lag on a loaded
// destination (docs/benchmarks.md, "Ledger lanes").
const (
	ledgerLanes = 4
	// maxUnreplicated is the most batches of a partition written with their ledger entries
	// not yet known replicated (Config.LedgerLeaderAcks): a following mirror's writes, not a
	// catch-up's many batches (which gain nothing from it), are what a lost append can halt.
	maxUnreplicated = 5
	// DefaultDataLanes and MaxDataLanes: Config.DataLanes, a broker connection each.
	DefaultDataLanes = 4
	MaxDataLanes     = 16
)

// ledgerResult is a ledger append's outcome from a sink: a closed sink (the writer is closing)
// fails the append at once (ledger.ErrSenderClosed), other errors are tried again by the ledger.
func ledgerResult(r sink.Result) (kmsg.ProduceResponseTopicPartition, error) {
	if errors.Is(r.Err, sink.ErrClosed) {
		return r.Answer, fmt.Errorf("%w: %w", ledger.ErrSenderClosed, r.Err)
	}
	return r.Answer, r.Err
}

// sink is the batch sender of a lane of the destination broker at addr, shared by the
// partitions it leads: concurrent partitions' batches share its requests.
func (w *Writer) sink(addr string, lane int) *sink.Sink {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sinks == nil {
		w.sinks = map[sinkKey]*sink.Sink{}
	}
	k := sinkKey{addr, lane}
	if w.closed {
		sk := sink.New(addr, w.cfg.Dial, defaultRequestTimeout, w.m.sent("data"))
		sk.Close()
		return sk
	}
	sk := w.sinks[k]
	if sk == nil {
		if lane < 0 {
			// Ledger appends of concurrent partitions share a request (one replication wait)
			// rather than waiting for each other's replication in turn on the connection.
			opts := []sink.Option{sink.OneAtATime(), sink.OnAnswer(w.m.took("ledger"))}
			if lane < -ledgerLanes {
				opts = append(opts, sink.LeaderAcks()) // Config.LedgerLeaderAcks
			}
			sk = sink.New(addr, w.cfg.Dial, defaultRequestTimeout, w.m.sent("ledger"), opts...)
		} else {
			// A partition's data move in runs (several batches per replication round trip):
			// a write is answered only once D confirmed its batches replicated, as before.
			sk = sink.New(addr, w.cfg.Dial, defaultRequestTimeout, w.m.sent("data"), sink.Runs(), sink.OnQuick(w.m.quick.Inc), sink.OnAnswer(w.m.took("data")))
		}
		w.sinks[k] = sk
	}
	return sk
}

// dataLane is the lane of a partition's data: the same one for all its batches, so they stay in order.
func (w *Writer) dataLane(p *part, partition int32) int {
	return 1 + int(laneHash(p.tid, partition)%uint32(w.cfg.DataLanes))
}

// ledgerLane is the lane of a partition's ledger appends (negative: ledger lanes).
func ledgerLane(tid [16]byte, partition int32) int {
	return -1 - int(laneHash(tid, partition)%ledgerLanes)
}

// ledgerLeaderLane is the lane of a partition's ledger appends sent with acks=1
// (Config.LedgerLeaderAcks): connections of their own, so no request mixes the two.
func ledgerLeaderLane(tid [16]byte, partition int32) int {
	return ledgerLane(tid, partition) - ledgerLanes
}

func laneHash(tid [16]byte, partition int32) uint32 {
	h := fnv.New32a()
	h.Write(tid[:])
	return h.Sum32() + uint32(partition)
}

// Close lets the snapshots being stored finish (for up to snapshotGrace; then they are
// cancelled), so that the next takeover starts from the newest, stops the writer's batch
// senders and closes their connections.
func (w *Writer) Close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	stored := make(chan struct{})
	go func() {
		defer close(stored)
		w.bg.Wait()
	}()
	select {
	case <-stored:
	case <-time.After(snapshotGrace):
	}
	w.bgStop()
	<-stored
	w.mu.Lock()
	sinks := w.sinks
	w.sinks = nil
	w.mu.Unlock()
	for _, sk := range sinks {
		sk.Close()
	}
}

func (w *Writer) isClosed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closed
}

type key struct {
	topic     catalog.TopicID
	partition int32
}

// New makes a writer that uses offsetgate's own client (acks=all).
func New(cfg Config, cl *kgo.Client, l *ledger.Ledger, log *zap.Logger, m *metrics) *Writer {
	if cfg.MaxFill <= 0 {
		cfg.MaxFill = DefaultMaxFill
	}
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.SnapshotEvery == 0 {
		cfg.SnapshotEvery = DefaultSnapshotEvery
	}
	if cfg.DataLanes <= 0 {
		cfg.DataLanes = DefaultDataLanes
	}
	cfg.DataLanes = min(cfg.DataLanes, MaxDataLanes)
	switch {
	case cfg.Align == 0:
		cfg.Align = DefaultAlign
	case cfg.Align < 0:
		cfg.Align = 0
	}
	if m == nil {
		m = nopMetrics()
	}
	meta := rawread.NewMeta(cl)
	if l != nil {
		meta = l.Meta()
	}
	bgCtx, bgStop := context.WithCancel(context.Background())
	return &Writer{cfg: cfg, cl: cl, ledger: l, log: log, m: m, meta: meta, parts: map[key]*part{}, bgCtx: bgCtx, bgStop: bgStop}
}

// part is one mirror partition: its planning state and what the writer keeps for I/O. mu
// serializes its writes.
type part struct {
	mu     sync.Mutex
	loaded bool
	topic  string
	tid    catalog.TopicID
	id     string // topic id, hex

	st        State
	compacted bool // the source topic is compacted (its mark's source settings)
	halted    string
	until     time.Time // our ownership lease
	// ledgerNext is the ledger offset after the last entry this process read or appended:
	// entries from there on were appended by another instance.
	ledgerNext int64
	leader     int32  // cached leader of the partition on D; -1: unknown
	leaderAddr string // its address, for pipelined writes ("": look it up)
	// aligned is the D offset this process deleted D's records below (alignment fillers).
	aligned int64
	// snapAt is the ledger offset the newest snapshot this process took covers; snapReady:
	// the snapshot topic exists (this process made sure). snapDone is closed once the snapshot
	// being stored in the background is stored (or failed); nil: none taken yet.
	snapAt    int64
	snapReady atomic.Bool
	snapDone  chan struct{}
	counts    Counts // of the whole ledger, for snapshots
	// app appends to the partition's ledger as the holder of its latest claim: the
	// destination refuses the appends of an instance whose claim was taken over since.
	app *ledger.Fenced
	// flying holds the source offsets of pending entries whose data are queued to D by a
	// write not yet landed: the partition's next write may be planned after them. gen counts
	// unloads, so a write that lands after one does not touch the state read again.
	flying map[int64]bool
	gen    uint64
	// landed is closed when the last flying write lands (nil while nothing flies): a resend of
	// a flying batch waits on it (Plan.awaitFlying).
	landed chan struct{}
	// fails counts failed writes: a write that succeeds clears the resync only when no
	// write failed since it was planned.
	fails uint64
	// pidDurable: the data producer's id is in a replicated ledger entry (not so for a fresh
	// partition, or a takeover's new producer, before its first append with acks=all).
	// unrepl counts the batches of writes whose entries are not yet known replicated
	// (Config.LedgerLeaderAcks).
	pidDurable bool
	unrepl     int
	// adoptTo, above st.DNext, is D's high watermark at a takeover that found D holding offsets
	// the ledger does not account for (Config.LedgerLeaderAcks: an append the ledger's leader
	// answered, lost with its data on D): the mirror's resend of them is compared with what D
	// holds and recorded, not written again (adopt).
	adoptTo int64
}

// unload forgets what this process holds of the partition: the next write reads the ledger
// and claims the partition again.
func (p *part) unload() {
	p.loaded, p.until, p.halted, p.app = false, time.Time{}, "", nil
	p.leaderAddr = ""
	// Writes in flight land on the state read again: they confirm what D answered them, and
	// nothing of theirs counts as flying any more.
	p.gen++
	p.flying = nil
	p.noneFlying()
	p.unrepl = 0
	p.adoptTo = 0
}

// noneFlying wakes the writes waiting for the partition's flying writes to land.
func (p *part) noneFlying() {
	if p.landed != nil {
		close(p.landed)
		p.landed = nil
	}
}

func (w *Writer) part(t catalog.Topic, partition int32) *part {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := key{t.ID, partition}
	p := w.parts[k]
	if p == nil {
		p = &part{topic: strings.Clone(t.Name), // kept for good; the caller's may be borrowed
			tid: t.ID, id: catalog.IDString(t.ID), st: State{Next: -1, Epoch: -1}, leader: -1}
		if t.Mark != nil {
			p.compacted = strings.Contains(t.Mark.Source["cleanup.policy"], "compact")
		}
		w.parts[k] = p
	}
	return p
}

// load reads the partition's ledger (takeover) the first time it is used by this process.
func (w *Writer) load(ctx context.Context, p *part, partition int32) error {
	if p.loaded {
		return nil
	}
	start := time.Now()
	// The ledger topic has the mirror topic's partition count: partition p's history is
	// ledger partition p.
	lp, err := w.meta.Lookup(ctx, p.topic, partition)
	if err != nil {
		return err
	}
	count := lp.Partitions
	phases := loadPhases{start: start}
	phases.mark(&phases.lookup)
	if err := w.ledger.Ensure(ctx, p.id, count); err != nil {
		return err
	}
	phases.mark(&phases.ensure)
	// final: the replay cannot use a snapshot, for as long as this configuration and these
	// snapshots stand (none taken, or none this offsetgate reads); a snapshot that is only
	// absent (or not read) may be there on the next look.
	p.snapshotStored()
	base, from, final, snapErr := w.lastSnapshot(ctx, p, partition)
	// read replays the ledger onto base (into rp) from a snapshot's offset on, or whole, as it
	// arrives; a whole read proves by itself that the ledger still starts at 0
	// (ledger.ScanWhole), and only one that finds it trimmed asks where it starts, to say
	// whether reading again can help.
	var rp *Replayer
	add := func(_ int64, e ledger.Entry) error {
		rp.Add(e)
		return nil
	}
	read := func(base Replayed, from int64) (int64, error) {
		rp = NewReplayer(base)
		if from > 0 {
			return w.ledger.Scan(ctx, p.id, partition, from, -1, add)
		}
		next, err := w.ledger.ScanWhole(ctx, p.id, partition, add)
		switch {
		case err != nil && snapErr != nil:
			// A ledger never trimmed is enough alone; one trimmed needs the snapshot, so the
			// load fails (retriably) until it can be read, and a read that fails otherwise
			// was only the way around the snapshot.
			err = snapErr
		case errors.Is(err, rawread.ErrGone):
			if werr := w.wholeLedger(ctx, p, partition, final); werr != nil {
				err = werr
			}
		case err == nil && snapErr != nil:
			w.log.Warn("snapshot not read: the whole ledger was read", zap.String("topic", p.topic), zap.Int32("partition", partition), zap.Error(snapErr))
		}
		return next, err
	}
	phases.mark(&phases.snapshot)
	next, err := read(base, from)
	if err == nil && from > 0 && next < from {
		err = BeyondEnd(ctx, w.cl, p.id, partition, from, next)
		if err == nil {
			// A snapshot past the ledger's end is not of this ledger: read it all.
			w.log.Warn("snapshot beyond the ledger's end: reading the whole ledger", zap.String("topic", p.topic),
				zap.Int32("partition", partition), zap.Int64("snapshot_at", from), zap.Int64("ledger_end", next))
			base, from, final = Replayed{State: State{Next: -1, Epoch: -1}}, 0, true
			next, err = read(base, 0)
		}
	}
	if err != nil {
		return err
	}
	phases.mark(&phases.read)
	p.snapAt = from
	r := rp.Result()
	if r.Owner != "" && r.Owner != w.cfg.Instance && time.Now().Before(r.OwnerUntil) {
		return &ownedError{owner: r.Owner, until: r.OwnerUntil}
	}
	// D's high watermark, and for a partition never written a producer id for its data, are
	// asked for now, while the claim and the owner entry below go (each a replicated write):
	// neither needs the claim. A watermark read earlier can only be lower, which makes more
	// entries pending (retried with their own producer values, and confirmed from D again when
	// D refuses a resend); a partition that turns out not to be fresh after all leaves its
	// producer id unused.
	// With LedgerLeaderAcks every takeover writes with a producer of its own on D (below).
	ahead := w.readAhead(ctx, p.topic, partition, len(r.Segments) == 0 && r.Next < 0 || w.leaderAcks())
	defer ahead.stop()
	// Claim: the partition's ledger producer gets a new epoch, and this process's first append
	// (the owner entry) makes the destination refuse every earlier holder's appends. What an
	// earlier holder appended before that is read now, so nothing it planned goes unseen.
	app, err := w.ledger.Claim(ctx, p.id, partition)
	if err != nil {
		return err
	}
	if w.cfg.Dial != nil {
		// Appends of partitions written at the same time share requests, as their data does.
		app.SendWith(func(ctx context.Context, addr, topic string, id [16]byte, partition int32, data []byte) (kmsg.ProduceResponseTopicPartition, error) {
			return ledgerResult(w.sink(addr, ledgerLane(id, partition)).Send(ctx, topic, id, partition, [][]byte{data})[0])
		})
		app.SendLeaderWith(func(ctx context.Context, addr, topic string, id [16]byte, partition int32, data []byte) (kmsg.ProduceResponseTopicPartition, error) {
			return ledgerResult(w.sink(addr, ledgerLeaderLane(id, partition)).Send(ctx, topic, id, partition, [][]byte{data})[0])
		})
	}
	until := time.Now().Add(w.cfg.Lease)
	at, after, err := app.Append(ctx, []ledger.Entry{{Kind: ledger.KindOwner, Src: -1, Owner: w.cfg.Instance, Until: until}})
	if err != nil {
		return err
	}
	if at != next {
		tnext, err := w.ledger.Scan(ctx, p.id, partition, next, -1, add)
		if err != nil {
			return err
		}
		after = tnext
		if r = rp.Result(); r.Owner != w.cfg.Instance && time.Now().Before(r.OwnerUntil) {
			return &ownedError{owner: r.Owner, until: r.OwnerUntil}
		}
	}
	phases.mark(&phases.claim)
	p.app, p.until, p.ledgerNext = app, until, after
	p.st, p.halted, p.counts = r.State, r.Halted, r.Counts
	p.aligned = 0 // deleting again below the same offset is harmless
	// What D holds for sure is below its high watermark; entries at or beyond it may or may not
	// be written, and are retried with their own producer values before anything new.
	hwm, err := ahead.highWatermark()
	if err != nil {
		return err
	}
	for _, e := range p.st.Recent {
		if e.D+int64(e.Count) > hwm {
			p.st.Pending = append(p.st.Pending, e)
		}
	}
	// A partition whose ledger holds no segment yet (only claims, or nothing) was never
	// written by offsetgate.
	fresh := len(r.Segments) == 0 && r.Next < 0
	if fresh && hwm > 0 {
		// A mirror partition with no ledger entry is one offsetgate never wrote: anything D
		// holds there came from elsewhere, and mirroring after it would not be exact.
		if err := w.haltLoaded(ctx, p, partition, fmt.Sprintf("the destination holds %d offsets that no ledger entry accounts for (a write that did not come through offsetgate?)", hwm)); err != nil {
			return err
		}
	}
	p.pidDurable = !fresh
	if !fresh && w.leaderAcks() && p.halted == "" {
		// An append the ledger's leader answered may have been lost with its data on D
		// (Config.LedgerLeaderAcks). What D holds beyond the ledger is never planned on nor
		// written over: the mirror's resend of those offsets is compared with D's batches and
		// recorded as D holds them if identical, and halts the partition if not (adopt). And a
		// producer of this takeover's own writes from here, so that D cannot take a resend for
		// a batch of the earlier producer it holds beyond its high watermark (D recognises a
		// resend by its sequence, not its content): such a batch, once replicated, puts the
		// next write past the offset planned, which halts the partition too. Pending entries
		// are resent with their recorded producer.
		if hwm > p.st.DNext {
			p.adoptTo = hwm
			w.log.Warn("the destination holds offsets beyond the mirror partition's ledger (a ledger append answered by its leader was lost); the mirror's resend of them is compared with them",
				zap.String("topic", p.topic), zap.Int32("partition", partition), zap.Int64("from", p.st.DNext), zap.Int64("to", hwm))
		}
		pid, epoch, err := ahead.producer(ctx)
		if err != nil {
			return err
		}
		p.st.PID, p.st.PEpoch, p.st.Seq = pid, epoch, 0
		p.pidDurable = false // its first plan appends with acks=all
	}
	if fresh {
		// A fresh mirror partition: D's end is where the first segment starts.
		p.st.DNext = hwm
		pid, epoch, err := ahead.producer(ctx)
		if err != nil {
			return err
		}
		p.st.PID, p.st.PEpoch, p.st.Seq = pid, epoch, 0
	}
	phases.mark(&phases.ahead)
	p.loaded = true
	w.m.load(time.Since(start), from > 0)
	phases.log(w.log, p.topic, partition)
	w.log.Info("mirror partition loaded", zap.String("topic", p.topic), zap.Int32("partition", partition),
		zap.Int64("snapshot_at", from), zap.Int("ledger_entries_read", r.Entries-base.Entries), zap.Int64("next", p.st.Next), zap.Int("pending", len(p.st.Pending)))
	return nil
}

// adopt records what D holds beyond the ledger (p.adoptTo) as the plan's leading writes, when
// they are the same batches: each of D's batches there must be the plan's write at its offset,
// byte for byte but for the producer fields (batch.SameContent). Those writes' entries are
// appended with D's producer fields and nothing is written; ok then says the request is to be
// planned again. A write that straddles what D holds, or differs from it, halts the partition:
// D holds records the mirror cannot account for. Otherwise (ok false) res answers the request.
// checked refuses a plan the planner refused or made on a failed lookup (begin's).
func (w *Writer) adopt(ctx context.Context, p *part, partition int32, sets [][]byte, hs []batch.Header, o Options, plan Plan, checked func(Plan) (Result, bool)) (res Result, ok bool) {
	halt := func(why string) (Result, bool) {
		reason := fmt.Sprintf("the destination holds offsets %d-%d beyond what the ledger accounts for (a ledger append answered by its leader, ledger_acks: leader, lost with its data on the destination, or a write that did not come through offsetgate), and %s",
			p.st.DNext, p.adoptTo-1, why)
		if err := w.haltLoaded(ctx, p, partition, reason); err != nil {
			p.unload()
			return Result{Code: ErrRetriable, Msg: "offsetgate: ledger write failed, nothing was written to the destination: " + err.Error()}, false
		}
		return Result{Code: ErrHalted, Msg: "offsetgate: mirror partition halted: " + reason + " (docs/operations.md)"}, false
	}
	// The source batches whose writes all fall below adoptTo.
	j := 0
	for _, wr := range plan.Writes {
		end := wr.Entry.D + int64(wr.Entry.Count)
		if wr.Entry.D >= p.adoptTo {
			break
		}
		if end > p.adoptTo || wr.Retry {
			return halt(fmt.Sprintf("the mirror's batch at source offset %d (destination %d-%d) does not end where it does", wr.Entry.Src, wr.Entry.D, end-1))
		}
		if wr.Entry.Kind == ledger.KindFiller {
			continue // held before the batch it precedes, adopted with it
		}
		for j < len(hs) && hs[j].BaseOffset <= wr.Entry.Src {
			j++
		}
	}
	if j == 0 {
		return halt(fmt.Sprintf("the mirror's request at source offset %d starts no batch there", hs[0].BaseOffset))
	}
	sub := p.st.Plan(sets[:j], hs[:j], o)
	if res, ok := checked(sub); !ok {
		return res, false
	}
	if len(sub.Writes) == 0 {
		return Result{Code: ErrRetriable, Msg: fmt.Sprintf("offsetgate: the destination holds offsets %d-%d beyond the ledger, and the request at source offset %d plans no write there; resend from the mirrored end %d",
			p.st.DNext, p.adoptTo-1, hs[0].BaseOffset, p.st.MirroredEnd())}, false
	}
	last := sub.Writes[len(sub.Writes)-1].Entry
	held := map[int64][]byte{}
	rd := rawread.New(w.cl, p.topic, partition)
	for at := p.st.DNext; at < last.D+int64(last.Count); {
		got, _, err := rd.Fetch(ctx, at, 1<<20)
		if err != nil {
			return Result{Code: ErrRetriable, Msg: fmt.Sprintf("offsetgate: reading the destination at %d to compare with the mirror's resend: %v", at, err)}, false
		}
		moved := false
		for _, b := range got {
			h, err := batch.ReadHeader(b)
			if err != nil {
				return halt(fmt.Sprintf("its batch there cannot be read: %v", err))
			}
			held[h.BaseOffset] = b
			if h.LastOffset()+1 > at {
				at, moved = h.LastOffset()+1, true
			}
		}
		if !moved {
			return Result{Code: ErrRetriable, Msg: fmt.Sprintf("offsetgate: the destination returned nothing at %d, below its high watermark %d; retry", at, p.adoptTo)}, false
		}
	}
	onD := map[int64]batch.Header{} // by D offset
	for _, wr := range sub.Writes {
		b := held[wr.Entry.D]
		if wr.Entry.D+int64(wr.Entry.Count) > p.adoptTo || b == nil || !batch.SameContent(wr.Data, b) {
			return halt(fmt.Sprintf("its batch at %d is not the mirror's batch at source offset %d", wr.Entry.D, wr.Entry.Src))
		}
		onD[wr.Entry.D], _ = batch.ReadHeader(b)
	}
	// The entries record D's batches as they are; this takeover's producer wrote none of them.
	sub.seq = p.st.Seq
	sub.Entries = append([]ledger.Entry(nil), sub.Entries...)
	for i, e := range sub.Entries {
		if h, found := onD[e.D]; found && e.Data() {
			sub.Entries[i].PID, sub.Entries[i].PEpoch, sub.Entries[i].Seq = h.ProducerID, h.ProducerEpoch, h.BaseSequence
		}
	}
	if _, res, ok := w.record(ctx, p, partition, sub.Entries, sub, false); !ok {
		return res, false
	}
	p.st.ConfirmHeld(p.adoptTo) // D holds them: not pending
	w.m.adopted.Add(float64(len(sub.Writes)))
	w.log.Info("batches the destination held beyond the ledger adopted: identical to the mirror's resend", zap.String("topic", p.topic),
		zap.Int32("partition", partition), zap.Int64("from", sub.Writes[0].Entry.D), zap.Int64("to", p.st.DNext), zap.Int64("held_to", p.adoptTo))
	if p.st.DNext >= p.adoptTo {
		p.adoptTo = 0
	}
	return Result{}, true
}

// haltLoaded halts a partition being taken over (load, which has claimed it): the reason
// goes to the ledger, so the halt survives restarts and other instances.
func (w *Writer) haltLoaded(ctx context.Context, p *part, partition int32, reason string) error {
	p.halted = reason
	w.log.Error("mirror partition halted", zap.String("topic", p.topic), zap.Int32("partition", partition), zap.String("reason", reason))
	_, after, err := p.app.Append(ctx, []ledger.Entry{{Kind: ledger.KindHalt, Src: -1, Reason: reason}})
	if err != nil {
		return err
	}
	p.ledgerNext = after
	return nil
}

// stillOwned: when this process's lease on a loaded partition has run out (it was paused, or
// the partition was idle), another instance may have taken the partition and written since,
// and what this process holds in memory would be stale: it plans nothing before it has read
// what the ledger gained meanwhile. Nothing gained: it goes on (and renews). Anything gained:
// the partition is loaded again, which refuses the write while the other instance's lease
// holds and starts from what the ledger says otherwise.
func (w *Writer) stillOwned(ctx context.Context, p *part, partition int32) error {
	if !p.loaded || p.until.IsZero() || time.Now().Before(p.until) {
		return nil
	}
	es, next, err := w.ledger.ReadFrom(ctx, p.id, partition, p.ledgerNext)
	if err != nil {
		return err
	}
	if len(es) == 0 {
		p.ledgerNext = next
		return nil
	}
	w.log.Info("mirror partition written by another instance since our lease ran out: reloading",
		zap.String("topic", p.topic), zap.Int32("partition", partition), zap.Int("entries_since", len(es)))
	p.unload()
	return nil
}

// loadPhases times a takeover's steps, for the debug log: where a partition's first write
// waits (a new mirror topic's ledger topic is created on its first write, for one).
type loadPhases struct {
	start, last                                  time.Time
	lookup, ensure, snapshot, read, claim, ahead time.Duration
}

// mark sets *d to the time since the previous mark (or the start).
func (l *loadPhases) mark(d *time.Duration) {
	now := time.Now()
	if l.last.IsZero() {
		l.last = l.start
	}
	*d, l.last = now.Sub(l.last), now
}

func (l *loadPhases) log(log *zap.Logger, topic string, partition int32) {
	if ce := log.Check(zap.DebugLevel, "mirror partition load"); ce != nil {
		ce.Write(zap.String("topic", topic), zap.Int32("partition", partition),
			zap.Duration("lookup", l.lookup), zap.Duration("ensure", l.ensure), zap.Duration("snapshot", l.snapshot),
			zap.Duration("read", l.read), zap.Duration("claim", l.claim), zap.Duration("ahead", l.ahead),
			zap.Duration("total", time.Since(l.start)))
	}
}

type ownedError struct {
	owner string
	until time.Time
}

func (e *ownedError) Error() string {
	return fmt.Sprintf("owned by offsetgate instance %q until %s", e.owner, e.until.Format(time.RFC3339))
}

// takeoverReads are a takeover's reads that need no ownership, run while it claims the
// partition (Writer.load). Its goroutine is the takeover's: stop ends and waits for it.
type takeoverReads struct {
	w      *Writer
	cancel context.CancelFunc
	done   chan struct{}

	hwm    int64
	hwmErr error

	asked bool // a producer id was asked for
	pid   int64
	epoch int16
	pErr  error
}

func (w *Writer) readAhead(ctx context.Context, topic string, partition int32, fresh bool) *takeoverReads {
	ctx, cancel := context.WithCancel(ctx)
	t := &takeoverReads{w: w, cancel: cancel, done: make(chan struct{}), asked: fresh}
	go func() {
		defer close(t.done)
		var pidDone chan struct{}
		if fresh {
			pidDone = make(chan struct{})
			go func() {
				defer close(pidDone)
				t.pid, t.epoch, t.pErr = w.initProducer(ctx)
			}()
		}
		t.hwm, t.hwmErr = w.highWatermark(ctx, topic, partition)
		if pidDone != nil {
			<-pidDone
		}
	}()
	return t
}

// highWatermark waits for the read of D's high watermark.
func (t *takeoverReads) highWatermark() (int64, error) {
	<-t.done
	return t.hwm, t.hwmErr
}

// producer is the data producer id asked for ahead, or one asked for now when the partition
// did not look fresh before the claim.
func (t *takeoverReads) producer(ctx context.Context) (int64, int16, error) {
	<-t.done
	if !t.asked {
		return t.w.initProducer(ctx)
	}
	return t.pid, t.epoch, t.pErr
}

// stop cancels what is still asked and waits for it.
func (t *takeoverReads) stop() {
	t.cancel()
	<-t.done
}

func (w *Writer) highWatermark(ctx context.Context, topic string, partition int32) (int64, error) {
	return rawread.ListOffset(ctx, w.cl, topic, partition, rawread.Latest)
}

func (w *Writer) initProducer(ctx context.Context) (int64, int16, error) {
	req := kmsg.NewPtrInitProducerIDRequest()
	req.TransactionTimeoutMillis = 60000
	resp, err := req.RequestWith(ctx, w.cl)
	if err != nil {
		return 0, 0, fmt.Errorf("producer id from the destination: %w", err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return 0, 0, fmt.Errorf("producer id from the destination: %w", err)
	}
	return resp.ProducerID, resp.ProducerEpoch, nil
}

// Write mirrors one partition's record set (one or more source batches in offset order).
//
// from is the source offset the request continues from (the magic header's; -1: not given):
// the client read the source from there, so on a compacted source the batches mirrored
// between it and the request's first batch are gone. follows: the client sent the request
// behind an earlier one for the partition before that one's answer (Options.Follows).
//
// A partition's writes are planned one after the other, but the next may be planned while the
// data of the one before are still on their way to D: queued, when not nil, is called once
// this write holds its place (its ledger entries appended and its data queued behind the
// earlier writes', or it was answered), and the caller may then start the partition's next
// write. Every write gets its answer once D confirmed its own data.
func (w *Writer) Write(ctx context.Context, t catalog.Topic, partition int32, records []byte, from int64, follows bool, queued func()) Result {
	start := time.Now()
	p := w.part(t, partition)
	p.mu.Lock()
	fails := p.fails
	res, f := w.begin(ctx, p, partition, records, from, follows)
	if f != nil {
		p.mu.Unlock()
		if queued != nil {
			queued()
			queued = nil
		}
		done := f.wait()
		var replErr error
		if f.replicated != nil {
			t0 := time.Now()
			replErr = f.replicated()
			w.m.replWait.Observe(time.Since(t0).Seconds())
		}
		t0 := time.Now()
		p.mu.Lock()
		w.m.landWait.Observe(time.Since(t0).Seconds())
		res = w.land(ctx, p, partition, f, done, replErr)
	}
	switch {
	case res.Code != 0:
		p.st.Resync = true
		p.fails++
	case fails == p.fails:
		// A failure of an earlier write found after this one was planned keeps the resync
		// (its pending entries, not flying any more, hold the partition too).
		p.st.Resync = false
	}
	w.m.observe(p.topic, partition, res, len(records), time.Since(start), p.halted != "")
	p.mu.Unlock()
	if queued != nil {
		queued()
	}
	return res
}

// flight is a write whose ledger entries are appended and whose data are queued to D.
type flight struct {
	plan Plan
	gen  uint64 // the partition's load generation when planned
	wait func() []sink.Result
	srcs []int64 // the pending entries it carries (flying until it lands)
	// replicated, with Config.LedgerLeaderAcks, waits for the write's ledger entries to be
	// replicated (nil: appended with acks=all); unrepl is its batches counted in part.unrepl.
	replicated func() error
	unrepl     int
}

// begin loads the partition, plans the request (Plan: no I/O), stores the plan in the ledger
// and queues the data. It returns the answer when the write ends there (refused, or nothing
// to write), else the write in flight.
func (w *Writer) begin(ctx context.Context, p *part, partition int32, records []byte, from int64, follows bool) (Result, *flight) {
	if w.isClosed() {
		return Result{Code: ErrRetriable, Msg: "offsetgate: the mirror writer is shut down (offsetgate is stopping); nothing was written"}, nil
	}
	if err := w.stillOwned(ctx, p, partition); err != nil {
		return Result{Code: ErrRetriable, Msg: "offsetgate: reading the partition's ledger: " + err.Error()}, nil
	}
	if err := w.load(ctx, p, partition); err != nil {
		var oe *ownedError
		if errors.As(err, &oe) {
			return Result{Code: ErrOwned, Msg: "offsetgate: partition " + oe.Error() + "; one instance writes a mirror partition"}, nil
		}
		var te *trimmedError
		if errors.As(err, &te) {
			return Result{Code: ErrHalted, Msg: "offsetgate: " + te.Error()}, nil
		}
		return Result{Code: ErrRetriable, Msg: "offsetgate: loading the partition's ledger: " + err.Error()}, nil
	}
	if p.halted != "" {
		return Result{Code: ErrHalted, Msg: "offsetgate: mirror partition halted: " + p.halted + " (docs/operations.md)"}, nil
	}
	sets, hs, err := batch.Split(records)
	if err != nil {
		return Result{Code: ErrInvalidRecord, Msg: "offsetgate: " + err.Error()}, nil
	}
	o := Options{MaxFill: w.cfg.MaxFill, Align: w.cfg.Align, Compacted: p.compacted, HasFrom: from >= 0, From: from, Follows: follows}
	if len(p.flying) > 0 {
		o.Flying = func(src int64) bool { return p.flying[src] }
	}
	// The planner does no I/O and cannot fail on a lookup: the first lookup error is kept and
	// refuses the plan, which is never carried out on a history that could not be read.
	var lookErr error
	if w.cfg.Find != nil {
		o.Find = func(src int64) (ledger.Entry, bool) {
			e, ok, err := w.cfg.Find(p.tid, partition, src)
			if err != nil && lookErr == nil {
				lookErr = err
			}
			return e, ok
		}
	}
	if w.cfg.Between != nil {
		o.Between = func(from, to int64) []ledger.Entry {
			es, err := w.cfg.Between(p.tid, partition, from, to)
			if err != nil && lookErr == nil {
				lookErr = err
			}
			return es
		}
	}
	plan := p.st.Plan(sets, hs, o)
	if (plan.Refusal.Code == ErrOutOfOrder || plan.retries()) && len(p.st.Pending) > 0 && len(p.flying) == 0 {
		// A write whose answer was lost (its client went away mid-request) may have reached D
		// all the same, and a client that resumes from the end D shows starts after it: what
		// D holds is confirmed, as at takeover, and the request planned again. So is a resend
		// of unconfirmed writes: a write that timed out may have landed with writes of the
		// partition queued behind it, and D recognises a resend only among a producer's five
		// newest batches.
		if hwm, err := w.highWatermark(ctx, p.topic, partition); err == nil && p.st.ConfirmHeld(hwm) {
			w.log.Info("unconfirmed writes found on the destination", zap.String("topic", p.topic), zap.Int32("partition", partition),
				zap.Int64("high_watermark", hwm), zap.Int("still_pending", len(p.st.Pending)))
			plan = p.st.Plan(sets, hs, o)
		}
	}
	if plan.awaitFlying && p.landed != nil {
		// The request resends a batch an earlier write is still carrying to D (its client
		// lost that answer): answered after the earlier write lands, as planned then (the
		// batch acknowledged, or retried when that write failed), rather than refused with
		// an answer the client can only retry blindly.
		return w.afterFlying(ctx, p, partition, records, from, follows)
	}
	// checked refuses a plan the planner refused, or made on a lookup that failed.
	checked := func(plan Plan) (Result, bool) {
		if lookErr != nil {
			return Result{Code: ErrRetriable, Msg: "offsetgate: reading the mirror partition's history failed, nothing was written: " + lookErr.Error()}, false
		}
		return plan.Refusal, plan.Refusal.Code == 0
	}
	if res, ok := checked(plan); !ok {
		return res, nil
	}
	if p.adoptTo > p.st.DNext && len(plan.Writes) > 0 {
		if res, ok := w.adopt(ctx, p, partition, sets, hs, o, plan, checked); !ok {
			return res, nil
		}
		// What D held is recorded: the request is planned again on it (the adopted batches
		// are then acknowledged as mirrored, the rest written).
		plan = p.st.Plan(sets, hs, o)
		if res, ok := checked(plan); !ok {
			return res, nil
		}
	}
	entries := plan.Entries
	// Ownership: claim or renew before writing.
	if time.Until(p.until) < w.cfg.Lease/2 {
		until := time.Now().Add(w.cfg.Lease)
		entries = append([]ledger.Entry{{Kind: ledger.KindOwner, Src: -1, Owner: w.cfg.Instance, Until: until}}, entries...)
		p.until = until
	}
	// Write-ahead: the ledger holds the plan before D gets a byte of it.
	if w.cfg.BeforeAppend != nil {
		w.cfg.BeforeAppend(p.topic, partition)
	}
	// Config.LedgerLeaderAcks: the data go once the ledger's leader has the entries, and
	// the write is answered once they are replicated too. Not for the first append of a
	// producer (a fresh partition's, a takeover's) nor beyond maxUnreplicated batches.
	leaderOnly := w.leaderAcks() && len(entries) > 0 && len(plan.Writes) > 0 &&
		p.pidDurable && p.unrepl+len(plan.Writes) <= maxUnreplicated
	var replicated func() error
	if len(entries) > 0 {
		next, res, ok := w.record(ctx, p, partition, entries, plan, leaderOnly)
		if !ok {
			return res, nil
		}
		if leaderOnly {
			replicated = w.awaitReplicated(ctx, p.app.Replication(w.cfg.ReplicationClient, next))
		} else if len(plan.Writes) > 0 {
			p.pidDurable = true // the plan's entries carry the producer, replicated
		}
	}
	if len(plan.Writes) == 0 {
		return w.settled(ctx, p, partition, plan), nil
	}
	// Data, in order, one batch per Produce request (what a stock broker takes), queued behind
	// the partition's earlier writes in the sink of its leader.
	f := &flight{plan: plan, gen: p.gen, replicated: replicated}
	if replicated != nil {
		f.unrepl = len(plan.Writes)
		p.unrepl += f.unrepl
	}
	if p.flying == nil {
		p.flying = map[int64]bool{}
	}
	if p.landed == nil {
		p.landed = make(chan struct{})
	}
	for _, wr := range plan.Writes {
		f.srcs = append(f.srcs, wr.Entry.Src)
		p.flying[wr.Entry.Src] = true
	}
	f.wait = w.enqueue(ctx, p, partition, plan.Writes)
	return Result{}, f
}

// flyingWait bounds how long a resend waits for the earlier write of its batches to land: the
// earlier write's requests to D time out well before.
const flyingWait = defaultRequestTimeout + 5*time.Second

// afterFlying waits (p.mu held, released meanwhile) until none of the partition's writes flies,
// then begins the request again; a write still flying after flyingWait leaves the request
// refused as retriable.
func (w *Writer) afterFlying(ctx context.Context, p *part, partition int32, records []byte, from int64, follows bool) (Result, *flight) {
	deadline := time.Now().Add(flyingWait)
	for p.landed != nil {
		landed := p.landed
		p.mu.Unlock()
		t := time.NewTimer(time.Until(deadline))
		select {
		case <-landed:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		p.mu.Lock()
		if p.landed != nil && (ctx.Err() != nil || !time.Now().Before(deadline)) {
			return Result{Code: ErrRetriable, Msg: fmt.Sprintf("offsetgate: an earlier request's write of this request's batches did not land in %s; retry from offset %d", flyingWait, p.st.MirroredEnd())}, nil
		}
	}
	w.m.flyingWaits.Inc()
	return w.begin(ctx, p, partition, records, from, follows)
}

// land checks what D answered for a write's data (done: the sink's outcomes, in order) and
// sends whatever the sink did not confirm again one by one with the same bytes, which D
// recognises, when no later write of the partition is queued behind it.
func (w *Writer) land(ctx context.Context, p *part, partition int32, f *flight, done []sink.Result, replErr error) Result {
	if f.gen == p.gen {
		for _, src := range f.srcs {
			delete(p.flying, src)
		}
		p.unrepl -= f.unrepl
		if len(p.flying) == 0 {
			p.noneFlying()
		}
	}
	if replErr != nil {
		// The ledger entries may be lost (their leader failed before its follower had them)
		// while the data reached D: the write is not answered, and the partition is read from
		// the ledger again (load: it halts if D holds offsets beyond the ledger).
		if f.gen == p.gen {
			p.unload()
		}
		w.log.Warn("ledger entries of a write not confirmed replicated: the partition is read again before its next write",
			zap.String("topic", p.topic), zap.Int32("partition", partition), zap.Error(replErr))
		return Result{Code: ErrRetriable, Msg: "offsetgate: the write's ledger entries were not confirmed replicated (" + replErr.Error() + "); retry"}
	}
	todo := f.plan.Writes
	for i, wr := range todo {
		if i < len(done) {
			r := done[i]
			if r.Err == nil && r.Answer.ErrorCode == 0 {
				if res, halted := w.check(p, partition, wr, r.Answer.BaseOffset); halted {
					return res
				}
				continue
			}
			if r.Err == nil && r.Answer.ErrorCode == 6 {
				p.leader, p.leaderAddr = -1, "" // NOT_LEADER_OR_FOLLOWER: find the leader again
			}
			done = done[:i] // the rest were not sent or are out of sequence behind it
		}
		if f.gen != p.gen || len(p.flying) > 0 || len(p.st.Pending) == 0 || p.st.Pending[0].Src != wr.Entry.Src {
			// A later write of the partition is on its way behind this one (or the partition
			// was read again meanwhile): sending from here would race it. The client resends
			// from the mirrored end, with the same bytes.
			return Result{Code: ErrRetriable, Msg: fmt.Sprintf("offsetgate: writing offset %d to the destination did not complete; retry from offset %d", wr.Entry.Src, p.st.MirroredEnd())}
		}
		base, err := w.produce(ctx, p, partition, wr.Data)
		if err != nil {
			return Result{Code: ErrRetriable, Msg: fmt.Sprintf("offsetgate: writing offset %d to the destination: %v; retry from offset %d", wr.Entry.Src, err, p.st.MirroredEnd())}
		}
		if res, halted := w.check(p, partition, wr, base); halted {
			return res
		}
	}
	return w.settled(ctx, p, partition, f.plan)
}

// leaderAcks: ledger appends may be answered by the ledger's leader (Config.LedgerLeaderAcks).
func (w *Writer) leaderAcks() bool { return w.cfg.LedgerLeaderAcks && w.cfg.Dial != nil }

// record stores a plan in the partition's ledger (entries: the plan's, after a lease renewal
// when due; leaderOnly: acks=1, Config.LedgerLeaderAcks) and makes the partition's state what
// the ledger then says. It returns the ledger offset after the entries, or (ok false) the answer
// to the request when the append failed: the partition is then read again before its next
// write, and nothing of the plan reached D.
func (w *Writer) record(ctx context.Context, p *part, partition int32, entries []ledger.Entry, plan Plan, leaderOnly bool) (next int64, res Result, ok bool) {
	lctx, cancel := context.WithTimeout(ctx, defaultRequestTimeout)
	t0 := time.Now()
	var base int64
	var err error
	if leaderOnly {
		base, next, err = p.app.AppendLeader(lctx, entries)
		w.m.leaderAppends.Inc()
	} else {
		base, next, err = p.app.Append(lctx, entries)
	}
	w.m.appends.Observe(time.Since(t0).Seconds())
	cancel()
	if err != nil {
		// Fenced: another instance claimed the partition since. Any other failure: the
		// entries may or may not be in the ledger. Either way the partition is read from
		// the ledger again (and claimed again, which fences this process's own append if
		// it is still on its way) before the next write; nothing reached D.
		p.unload()
		if errors.Is(err, ledger.ErrFenced) {
			w.log.Warn("mirror partition taken over by another instance", zap.String("topic", p.topic), zap.Int32("partition", partition), zap.Error(err))
			return 0, Result{Code: ErrRetriable, Msg: "offsetgate: another offsetgate instance took the partition over; nothing was written: " + err.Error()}, false
		}
		w.log.Warn("ledger append failed: the partition is read again before its next write", zap.String("topic", p.topic),
			zap.Int32("partition", partition), zap.Error(err))
		return 0, Result{Code: ErrRetriable, Msg: "offsetgate: ledger write failed, nothing was written to the destination: " + err.Error()}, false
	}
	if base != p.ledgerNext {
		// Entries this process did not write precede ours: only a holder of a newer claim
		// could append, and then this append would have been refused. Never planned on:
		// the partition is read again, and the plan retried from the ledger.
		w.log.Error("ledger entries of another writer found before this process's append: reloading",
			zap.String("topic", p.topic), zap.Int32("partition", partition), zap.Int64("expected_at", p.ledgerNext), zap.Int64("appended_at", base))
		p.unload()
		return 0, Result{Code: ErrRetriable, Msg: fmt.Sprintf("offsetgate: the partition's ledger gained entries of another writer (at %d, this process expected %d); retry", base, p.ledgerNext)}, false
	}
	p.ledgerNext = next
	p.st.Apply(plan)
	for _, e := range plan.Entries {
		p.counts.add(e)
	}
	if w.cfg.OnEntries != nil {
		// Every entry appended (the lease renewal too): the view follows ledger offsets.
		w.cfg.OnEntries(p.tid, partition, base, entries)
	}
	return next, Result{}, true
}

// awaitReplicated starts waiting for a write's ledger entries to be replicated (wait, from
// Fenced.Replication) beside its data's writing, and returns what gives the outcome. Its
// goroutine is the write's: Write always takes the outcome.
func (w *Writer) awaitReplicated(ctx context.Context, wait func(context.Context) error) func() error {
	out := make(chan error, 1)
	go func() {
		rctx, cancel := context.WithTimeout(ctx, defaultRequestTimeout)
		defer cancel()
		out <- wait(rctx)
	}()
	return func() error { return <-out }
}

// settled ends a write whose data D confirmed: alignment fillers deleted and a snapshot taken
// when due (both only with nothing pending).
func (w *Writer) settled(ctx context.Context, p *part, partition int32, plan Plan) Result {
	w.deleteAligned(ctx, p, partition)
	w.maybeSnapshot(p, partition)
	return Result{BaseOffset: plan.Base}
}

// wholeLedger checks that a partition's ledger is whole, for a takeover without a snapshot: a
// ledger trimmed below a snapshot cannot be replayed without it (the replay would start in the
// middle of the history and plan on a guess). final: no snapshot will do (trimmedError, not
// retried); else the snapshot was only not found, which a trimmed ledger says is wrong (one is
// written before any trim), so the load is refused retriably.
func (w *Writer) wholeLedger(ctx context.Context, p *part, partition int32, final bool) error {
	start, err := rawread.ListOffset(ctx, w.cl, ledger.Topic(p.id), partition, rawread.Earliest)
	if err != nil {
		return err
	}
	switch {
	case start > 0 && final:
		return &trimmedError{fmt.Sprintf("the ledger of %s[%d] was trimmed below ledger offset %d, and no usable snapshot covers it (snapshot_every -1, or a snapshot this offsetgate cannot read): refusing to plan on part of the history", p.topic, partition, start)}
	case start > 0:
		return fmt.Errorf("the ledger of %s[%d] was trimmed below ledger offset %d but no snapshot was found: read again", p.topic, partition, start)
	}
	return nil
}

// trimmedError is a load refused for good by this instance's configuration: retrying changes
// nothing until an instance that can read the snapshots takes the partition.
type trimmedError struct{ msg string }

func (e *trimmedError) Error() string { return e.msg }

// lastSnapshot is the replay of the partition's newest snapshot and the ledger offset to read
// on from; without a usable one, an empty replay and 0 (the whole ledger), and final when none
// will be usable (snapshots off, or the newest one undecodable). A snapshot that could not be
// read is an error, not "none": the whole ledger is trimmed below the snapshots, and reading it
// instead would refuse the partition on a leader election.
func (w *Writer) lastSnapshot(ctx context.Context, p *part, partition int32) (Replayed, int64, bool, error) {
	none := Replayed{State: State{Next: -1, Epoch: -1}}
	if w.cfg.SnapshotEvery < 0 {
		return none, 0, true, nil
	}
	b, err := w.ledger.LastSnapshot(ctx, p.id, partition)
	if err != nil {
		return none, 0, false, fmt.Errorf("reading the newest snapshot: %w", err)
	}
	if b == nil {
		return none, 0, false, nil
	}
	s, err := decodeSnapshot(b)
	if err != nil {
		// The ledger is the truth; a snapshot only saves reading it. One this offsetgate cannot
		// decode (another version's) is as if there were none.
		w.log.Warn("snapshot not used: reading the whole ledger", zap.String("topic", p.topic), zap.Int32("partition", partition), zap.Error(err))
		return none, 0, true, nil
	}
	return s.replayed(), s.At, false, nil
}

// BeyondEnd tells a snapshot at ledger offset at that is really past the end of ledger
// partition partition of topic id (not of this ledger: nil, the whole ledger is to be read)
// from a read that ended early at read because the ledger partition's new leader does not know
// its high watermark yet (an error, to read again). A takeover and the status both ask it.
func BeyondEnd(ctx context.Context, cl *kgo.Client, id string, partition int32, at, read int64) error {
	end, err := rawread.ListOffset(ctx, cl, ledger.Topic(id), partition, rawread.Latest)
	if err != nil {
		return fmt.Errorf("the ledger read ended at %d, before the snapshot at %d, and its end could not be read: %w", read, at, err)
	}
	if end >= at {
		return fmt.Errorf("the ledger read ended at %d, before the snapshot at %d, but the ledger ends at %d (a leader just elected?)", read, at, end)
	}
	return nil
}

// maybeSnapshot takes a snapshot of the partition's state once SnapshotEvery ledger entries
// were appended since the last one, when nothing is pending, and stores it in the background:
// the write that took it is answered, and the partition's next writes planned, without
// waiting for the snapshot's replicated write, the ledger trim after it, or, the first time,
// the snapshot topic's creation (which held a partition's writes for up to two seconds).
// One snapshot of a partition is stored at a time, so they land in order. A failure is only
// logged: the next snapshot is tried an interval later, and the ledger alone is always enough.
func (w *Writer) maybeSnapshot(p *part, partition int32) {
	if w.cfg.SnapshotEvery < 0 || p.ledgerNext-p.snapAt < w.cfg.SnapshotEvery || len(p.st.Pending) > 0 || p.halted != "" {
		return
	}
	if p.snapDone != nil {
		select {
		case <-p.snapDone:
		default:
			return // the one before is still being stored: the next write tries again
		}
	}
	w.mu.Lock()
	closed := w.closed
	if !closed {
		w.bg.Add(1) // before Close can wait: it sets closed under the same lock first
	}
	w.mu.Unlock()
	if closed {
		return // the writer is closing: the ledger alone is enough for the next takeover
	}
	at := p.ledgerNext
	p.snapAt = at
	// Encoded now, under the partition's lock: the state is exactly the ledger before at.
	b, err := snapshotOf(p.st, p.counts, at, w.cfg.Instance, p.until).encode()
	if err != nil {
		w.bg.Done()
		w.log.Warn("snapshot of a mirror partition not taken; the next one is tried later", zap.String("topic", p.topic),
			zap.Int32("partition", partition), zap.Int64("ledger_offset", at), zap.Error(err))
		return
	}
	done := make(chan struct{})
	p.snapDone = done
	topic, id, tid := p.topic, p.id, p.tid
	go func() {
		defer w.bg.Done()
		err := w.storeSnapshot(p, topic, id, partition, b)
		close(done)
		if err != nil {
			if w.bgCtx.Err() == nil {
				w.log.Warn("snapshot of a mirror partition not written; the next one is tried later", zap.String("topic", topic),
					zap.Int32("partition", partition), zap.Int64("ledger_offset", at), zap.Error(err))
			}
			return
		}
		w.m.snapshot(topic)
		if w.cfg.AfterSnapshot != nil {
			tctx, cancel := context.WithTimeout(w.bgCtx, defaultRequestTimeout)
			defer cancel()
			w.cfg.AfterSnapshot(tctx, tid, topic, partition, at)
		}
	}()
}

// storeSnapshot writes an encoded snapshot of a partition, creating the snapshot topic first
// when this process has not made sure it exists.
func (w *Writer) storeSnapshot(p *part, topic, id string, partition int32, b []byte) error {
	ctx, cancel := context.WithTimeout(w.bgCtx, defaultRequestTimeout)
	defer cancel()
	if !p.snapReady.Load() {
		lp, err := w.meta.Lookup(ctx, topic, partition)
		if err != nil {
			return err
		}
		if err := w.ledger.EnsureSnapshots(ctx, id, lp.Partitions); err != nil {
			return err
		}
		p.snapReady.Store(true)
	}
	return w.ledger.WriteSnapshot(ctx, id, partition, b)
}

// snapshotStored waits until the partition's snapshot being stored in the background, if any,
// is stored (or failed): a takeover reads the newest snapshot, and one still on its way could
// be passed over for an older one while the ledger below the newer is trimmed.
func (p *part) snapshotStored() {
	if p.snapDone != nil {
		<-p.snapDone
	}
}

// deleteAligned removes the alignment fillers from D once they are confirmed there, so D's log
// start is the source's and a client reading D directly never meets them. A failure is only
// logged: the next write of the partition tries again, and through offsetgate the fillers are
// never served anyway.
func (w *Writer) deleteAligned(ctx context.Context, p *part, partition int32) {
	if p.st.AlignTo <= p.aligned || len(p.st.Pending) > 0 && p.st.Pending[0].D < p.st.AlignTo {
		return
	}
	dctx, cancel := context.WithTimeout(ctx, defaultRequestTimeout)
	defer cancel()
	req := kmsg.NewPtrDeleteRecordsRequest()
	req.TimeoutMillis = int32(defaultRequestTimeout / time.Millisecond)
	rt := kmsg.NewDeleteRecordsRequestTopic()
	rt.Topic = p.topic
	rp := kmsg.NewDeleteRecordsRequestTopicPartition()
	rp.Partition, rp.Offset = partition, p.st.AlignTo
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	err := errors.New("no answer")
	for _, sh := range w.cl.RequestSharded(dctx, req) {
		if sh.Err != nil {
			err = sh.Err
			break
		}
		for _, t := range sh.Resp.(*kmsg.DeleteRecordsResponse).Topics {
			for _, rp := range t.Partitions {
				if rp.Partition == partition {
					err = kerr.ErrorForCode(rp.ErrorCode)
				}
			}
		}
	}
	if err != nil {
		w.log.Warn("deleting the alignment fillers from the destination failed; the next write tries again",
			zap.String("topic", p.topic), zap.Int32("partition", partition), zap.Int64("below", p.st.AlignTo), zap.Error(err))
		return
	}
	w.log.Info("alignment fillers deleted: the destination's offsets are the source's", zap.String("topic", p.topic),
		zap.Int32("partition", partition), zap.Int64("log_start", p.st.AlignTo))
	p.aligned = p.st.AlignTo
}

// check compares the base offset D answered with the one planned; a mismatch halts the
// partition for good.
func (w *Writer) check(p *part, partition int32, wr Write, base int64) (Result, bool) {
	if base != wr.Entry.D {
		reason := fmt.Sprintf("the destination put source offset %d at %d, expected %d (a write that did not come through offsetgate?)", wr.Entry.Src, base, wr.Entry.D)
		p.halted = reason
		w.log.Error("mirror partition halted", zap.String("topic", p.topic), zap.Int32("partition", partition), zap.String("reason", reason))
		hctx, cancel := context.WithTimeout(context.Background(), defaultRequestTimeout)
		if p.app != nil {
			if _, after, err := p.app.Append(hctx, []ledger.Entry{{Kind: ledger.KindHalt, Src: wr.Entry.Src, Reason: reason}}); err == nil {
				p.ledgerNext = after
			}
		}
		cancel()
		return Result{Code: ErrHalted, Msg: "offsetgate: mirror partition halted: " + reason}, true
	}
	p.st.confirm(wr.Entry.Src)
	return Result{}, false
}

// enqueue queues a write's batches in the sink of the partition's leader (up to five requests
// in flight, sharing requests with the other partitions written at the same time, behind the
// partition's earlier writes) and returns the wait for their outcomes. Without a sink (no
// leader found, no dialer) the wait returns nothing and the data go one by one.
func (w *Writer) enqueue(ctx context.Context, p *part, partition int32, todo []Write) func() []sink.Result {
	none := func() []sink.Result { return nil }
	if w.cfg.Dial == nil {
		return none
	}
	if p.leaderAddr == "" {
		lp, err := w.meta.LookupLeader(ctx, p.topic, partition)
		if err != nil {
			return none
		}
		p.leader, p.leaderAddr = lp.Leader, lp.Addr
	}
	data := make([][]byte, len(todo))
	for i, wr := range todo {
		data[i] = wr.Data
	}
	q := w.sink(p.leaderAddr, w.dataLane(p, partition)).Enqueue(p.topic, p.tid, partition, data)
	return func() []sink.Result {
		rctx, cancel := context.WithTimeout(ctx, defaultRequestTimeout+5*time.Second)
		defer cancel()
		return q.Wait(rctx)
	}
}

func (w *Writer) produceRequest(p *part, partition int32, data []byte, version int16) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	if version > 0 {
		req.SetVersion(version)
	}
	req.Acks, req.TimeoutMillis = -1, int32(defaultRequestTimeout/time.Millisecond)
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic, rt.TopicID = p.topic, p.tid
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = partition, data
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

// produce sends one batch to the partition's leader as an idempotent, acks=all Produce and
// returns the base offset D assigned. Retriable errors are retried with the same bytes (and so
// the same producer values), which D recognises as duplicates.
func (w *Writer) produce(ctx context.Context, p *part, partition int32, data []byte) (int64, error) {
	topic := p.topic
	var last error
	for attempt := 0; attempt < 10; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-time.After(time.Duration(attempt*100) * time.Millisecond):
			}
		}
		if p.leader < 0 || attempt > 0 {
			lp, err := w.meta.LookupLeader(ctx, topic, partition)
			if err != nil {
				last = err
				continue
			}
			p.leader = lp.Leader
		}
		leader := p.leader
		// kgo negotiates the version; v13 names topics by id, so the request carries both.
		req := w.produceRequest(p, partition, data, 0)
		rctx, cancel := context.WithTimeout(ctx, defaultRequestTimeout+5*time.Second)
		kr, err := w.cl.Broker(int(leader)).Request(rctx, req)
		cancel()
		if err != nil {
			last = err
			continue
		}
		resp := kr.(*kmsg.ProduceResponse)
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			return 0, errors.New("malformed produce response")
		}
		pr := resp.Topics[0].Partitions[0]
		err = kerr.ErrorForCode(pr.ErrorCode)
		if err == nil {
			return pr.BaseOffset, nil
		}
		if !kerr.IsRetriable(err) {
			return 0, brokerSaid(err, pr)
		}
		last = err
	}
	return 0, last
}

// brokerSaid adds what the destination said about a refused write (its message, and the
// first records it named) to the error code, which alone does not say which rule refused it.
func brokerSaid(err error, pr kmsg.ProduceResponseTopicPartition) error {
	var why []string
	if pr.ErrorMessage != nil && *pr.ErrorMessage != "" {
		why = append(why, *pr.ErrorMessage)
	}
	for i, re := range pr.ErrorRecords {
		if i == 3 {
			why = append(why, fmt.Sprintf("and %d more record errors", len(pr.ErrorRecords)-3))
			break
		}
		msg := ""
		if re.ErrorMessage != nil {
			msg = ": " + *re.ErrorMessage
		}
		why = append(why, fmt.Sprintf("record %d%s", re.RelativeOffset, msg))
	}
	if len(why) == 0 {
		return err
	}
	return fmt.Errorf("%w (%s)", err, strings.Join(why, "; "))
}
