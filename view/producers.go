package view

import (
	"sort"
	"time"

	"offsetgate/batch"
	"offsetgate/ledger"
)

// ProducerExpiry is how long a source broker keeps a producer's state after its last write
// when no transaction of it is open: Kafka's producer.id.expiration.ms, at its default. The
// source view forgets producers as the source does, so DescribeProducers lists the same ones.
const ProducerExpiry = 24 * time.Hour

// Producer is a source producer's state in a partition, as the source's broker keeps it and
// DescribeProducers shows it: rebuilt from the mirrored batches and markers, in source terms.
type Producer struct {
	ID               int64
	Epoch            int16
	LastSequence     int32 // -1: none in this epoch (a marker bumped it)
	LastTimestamp    int64
	CoordinatorEpoch int32 // -1: no marker seen
	// TxnStart is the first source offset of its open transaction, -1 when none is open.
	TxnStart int64
}

// producerState is a producer's state between two answers: what the source's broker updates
// on each batch and marker it appends.
type producerState struct {
	epoch      int16
	lastSeq    int32
	lastTS     int64
	coordEpoch int32
}

// minPrune is the fewest producers a partition holds before expired ones are dropped.
const minPrune = 1024

// noteProducerLocked applies one mirrored data entry to the producer states, as a broker
// applies an appended batch (Kafka's ProducerAppendInfo): a data batch sets the producer's
// epoch, last sequence and timestamp; a marker its epoch (transactions v2 bump it; a new epoch
// has no sequence yet), coordinator epoch and timestamp. Batches without a producer are not
// tracked. It also notes the destination producer offsetgate wrote the entry with, which a
// promoted partition's answer leaves out. Called under the write lock.
func (p *Partition) noteProducerLocked(e *Entry, le *ledger.Entry) {
	if le.PID >= 0 && (p.writers == nil || le.PID != p.lastWriter) {
		if p.writers == nil {
			p.writers = map[int64]struct{}{}
		}
		p.writers[le.PID], p.lastWriter = struct{}{}, le.PID
	}
	if e.Filler || e.SrcPID < 0 {
		return
	}
	if p.producers == nil {
		p.producers = map[int64]*producerState{}
	}
	st := p.producers[e.SrcPID]
	if st == nil {
		st = &producerState{epoch: -1, lastSeq: -1, lastTS: -1, coordEpoch: -1}
		p.producers[e.SrcPID] = st
	}
	if st.epoch != e.SrcPEpoch {
		st.epoch, st.lastSeq = e.SrcPEpoch, -1
	}
	if e.Control {
		if m, err := batch.ReadMarker(e.Raw); err == nil {
			st.coordEpoch, st.lastTS = m.CoordinatorEpoch, m.Timestamp
		}
	} else {
		st.lastSeq, st.lastTS = nextSequence(e.SrcSeq, int32(e.Last-e.Src)), e.MaxTS
	}
	if len(p.producers) >= max(p.pruneAt, minPrune) {
		p.pruneProducersLocked(time.Now())
		p.pruneAt = 2 * len(p.producers)
	}
}

// nextSequence is a batch's last sequence: its base sequence plus its last offset delta,
// wrapping past the largest int32 to 0 as producers' sequences do.
func nextSequence(base, delta int32) int32 {
	if base > (1<<31-1)-delta {
		return base - ((1<<31 - 1) - delta) - 1
	}
	return base + delta
}

// expired reports whether a producer's state is one a broker has dropped: no open transaction
// and nothing written for ProducerExpiry.
func (p *Partition) expired(pid int64, st *producerState, now time.Time) bool {
	if _, open := p.open[pid]; open {
		return false
	}
	return now.UnixMilli()-st.lastTS >= ProducerExpiry.Milliseconds()
}

func (p *Partition) pruneProducersLocked(now time.Time) {
	for pid, st := range p.producers {
		if p.expired(pid, st, now) {
			delete(p.producers, pid)
		}
	}
}

// Producers lists the source producers of the partition that a source broker would still
// hold at now, by producer id, with their open transactions' first offsets.
func (p *Partition) Producers(now time.Time) []Producer {
	p.mu.RLock()
	defer p.mu.RUnlock()
	out := make([]Producer, 0, len(p.producers))
	for pid, st := range p.producers {
		if p.expired(pid, st, now) {
			continue
		}
		txn, open := p.open[pid]
		if !open {
			txn = -1
		}
		out = append(out, Producer{ID: pid, Epoch: st.epoch, LastSequence: st.lastSeq, LastTimestamp: st.lastTS,
			CoordinatorEpoch: st.coordEpoch, TxnStart: txn})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Writer reports whether offsetgate wrote any entry of the index with destination producer
// id pid: on D that producer is offsetgate's, not a client's.
func (p *Partition) Writer(pid int64) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	_, ok := p.writers[pid]
	return ok
}
