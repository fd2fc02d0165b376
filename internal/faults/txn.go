package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// abortedMark is the state of an offset whose transaction aborted.
const abortedMark = ^uint64(0)

// txnWritten is what the transactional producer wrote to the transactional topic: per
// partition and offset, a record's hash once its transaction committed, abortedMark once it
// aborted, 0 while it is open or when its end is unknown (an EndTransaction whose answer was
// lost: either is allowed, but all of it or none).
type txnWritten struct {
	mu           sync.Mutex
	state        map[int32][]uint64
	committedEnd map[int32]int64 // one past the highest committed record, per partition

	commits, aborts, unknown atomic.Int64
	committed                atomic.Int64 // records in committed transactions
}

func newTxnWritten() *txnWritten {
	return &txnWritten{state: map[int32][]uint64{}, committedEnd: map[int32]int64{}}
}

type txnRec struct {
	p int32
	o int64
	h uint64
}

func (w *txnWritten) end(recs []txnRec, commit bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range recs {
		s := w.state[r.p]
		for int64(len(s)) <= r.o {
			s = append(s, 0)
		}
		if commit {
			s[r.o] = r.h
			w.committedEnd[r.p] = max(w.committedEnd[r.p], r.o+1)
		} else {
			s[r.o] = abortedMark
		}
		w.state[r.p] = s
	}
}

func (w *txnWritten) at(p int32, o int64) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if s := w.state[p]; o >= 0 && o < int64(len(s)) {
		return s[o]
	}
	return 0
}

// ends is where a read_committed consumer must have read to, now.
func (w *txnWritten) ends() map[int32]int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[int32]int64, len(w.committedEnd))
	for p, o := range w.committedEnd {
		out[p] = o
	}
	return out
}

// produceTxn writes transactions of 1-8 records to the transactional topic, one about every
// 50 ms, and aborts one in ten, until ctx ends.
func (e *env) produceTxn(ctx context.Context, w *txnWritten, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 0x7a11))
	open := func() (*kgo.Client, error) {
		return e.src.Client(kgo.DefaultProduceTopic(e.txnTopic), kgo.TransactionalID("faults-txn-producer"),
			kgo.TransactionTimeout(60*time.Second), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	}
	cl, err := open()
	if err != nil {
		return err
	}
	defer func() { cl.Close() }()
	for n := 0; ; n++ {
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return nil
		}
		if err := cl.BeginTransaction(); err != nil {
			return fmt.Errorf("beginning a transaction: %w", err)
		}
		rs := make([]*kgo.Record, 1+rng.IntN(8))
		for i := range rs {
			rs[i] = &kgo.Record{Key: []byte(fmt.Sprintf("t%d", n%32)), Value: []byte(fmt.Sprintf("txn%d-%d-%x", n, i, rng.Uint64()))}
		}
		var recs []txnRec
		failed := false
		for _, r := range cl.ProduceSync(ctx, rs...) {
			if r.Err != nil {
				failed = true
				continue
			}
			recs = append(recs, txnRec{r.Record.Partition, r.Record.Offset, recordHash(r.Record.Key, r.Record.Value)})
		}
		if ctx.Err() != nil {
			return nil
		}
		commit := !failed && rng.IntN(10) != 0
		if failed {
			// kgo wants what it still buffers gone before an abort.
			_ = cl.AbortBufferedRecords(ctx)
		}
		ectx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := cl.EndTransaction(ectx, kgo.TransactionEndTry(commit))
		cancel()
		switch {
		case err != nil:
			// Its end is unknown: the records stay unchecked, and the producer starts over
			// (a new client fences the old one's transaction).
			w.unknown.Add(1)
			cl.Close()
			if cl, err = open(); err != nil {
				return err
			}
		case commit:
			w.end(recs, true)
			w.commits.Add(1)
			w.committed.Add(int64(len(recs)))
		default:
			w.end(recs, false)
			w.aborts.Add(1)
		}
	}
}

// readTxn reads the transactional topic through offsetgate at read_committed from the start,
// keeping its own positions: every committed record once, in order, as the source holds it,
// and no record of an aborted transaction.
func (e *env) readTxn(ctx context.Context, w *txnWritten, t *tally) error {
	cl, err := e.fromStart(1, e.txnTopic, kgo.ClientID("faults-txn-reader"), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return err
	}
	defer cl.Close()
	poll(ctx, cl, t, func(r *kgo.Record) {
		next := t.next[r.Partition]
		if r.Offset < next {
			t.violate("%s: %s[%d]: offset %d read again (next was %d)", t.name, r.Topic, r.Partition, r.Offset, next)
		}
		for o := next; o < r.Offset; o++ {
			if s := w.at(r.Partition, o); s != 0 && s != abortedMark {
				t.violate("%s: %s[%d]: committed record at %d skipped (read %d next)", t.name, r.Topic, r.Partition, o, r.Offset)
				break
			}
		}
		switch s := w.at(r.Partition, r.Offset); {
		case s == abortedMark:
			t.violate("%s: %s[%d]: offset %d belongs to an aborted transaction and was served at read_committed", t.name, r.Topic, r.Partition, r.Offset)
		case s != 0 && s != recordHash(r.Key, r.Value):
			t.violate("%s: %s[%d] offset %d: the record is not the source's (key %q)", t.name, r.Topic, r.Partition, r.Offset, r.Key)
		}
		t.next[r.Partition] = max(next, r.Offset+1)
		t.records++
	})
	return nil
}
