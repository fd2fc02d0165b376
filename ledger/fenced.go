package ledger

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/batch"
)

// ErrFenced is an append the destination refused because another holder claimed the ledger
// partition since (its producer epoch is newer).
var ErrFenced = errors.New("another offsetgate instance claimed the partition's ledger since (the destination fenced this one)")

// TransactionalID names the producer that appends to one ledger partition. No transaction is
// ever opened with it: the id only gives the partition a producer whose epoch the destination
// bumps at every claim.
func TransactionalID(topicID string, partition int32) string {
	return Topic(topicID) + "-" + strconv.Itoa(int(partition))
}

// Fenced appends to one ledger partition with broker-side fencing. A claim bumps the epoch of
// the partition's own producer (InitProducerId with TransactionalID); once the new holder has
// appended, the destination refuses every append of an earlier holder (INVALID_PRODUCER_EPOCH
// or PRODUCER_FENCED) by itself, so an instance paused past its lease cannot add a stale plan
// to the ledger when it wakes up. Appends are idempotent: a retry resends the same bytes with
// the same sequence, which the destination recognises.
//
// A Fenced is used by one goroutine at a time (the writer holds the partition's lock). After
// an append that failed for a reason other than a retriable one it is broken: claim again.
type Fenced struct {
	l         *Ledger
	topic     string
	topicID   string
	tid       [16]byte
	partition int32
	pid       int64
	epoch     int16
	seq       int32
	leader    int32
	addr      string // the leader's address, for send
	broken    error
	send      Sender
	// sendLeader, when set, sends AppendLeader's batches (acks=1).
	sendLeader Sender
}

// Sender sends one batch of a partition to the broker at addr and returns the broker's answer
// for that partition.
type Sender func(ctx context.Context, addr, topic string, id [16]byte, partition int32, data []byte) (kmsg.ProduceResponseTopicPartition, error)

// ErrSenderClosed, wrapped in a Sender's error, says the sender is closed for good: an append
// that meets it fails at once instead of being tried again.
var ErrSenderClosed = errors.New("the ledger's sender is closed")

// SendWith makes appends go through s (a sender that shares requests with other partitions'
// writes) instead of a request of their own on the ledger's client.
func (f *Fenced) SendWith(s Sender) { f.send = s }

// SendLeaderWith is SendWith for AppendLeader: s must send with acks=1.
func (f *Fenced) SendLeaderWith(s Sender) { f.sendLeader = s }

// Claim takes a ledger partition over: it bumps the epoch of the partition's producer, which
// fences every earlier holder from the moment this one appends.
func (l *Ledger) Claim(ctx context.Context, topicID string, partition int32) (*Fenced, error) {
	f := &Fenced{l: l, topic: Topic(topicID), topicID: topicID, partition: partition, leader: -1}
	req := kmsg.NewPtrInitProducerIDRequest()
	req.TransactionalID = kmsg.StringPtr(TransactionalID(topicID, partition))
	req.TransactionTimeoutMillis = 60000
	req.ProducerID, req.ProducerEpoch = -1, -1
	var last error
	for attempt := 0; attempt < 20; attempt++ {
		if attempt > 0 {
			if err := sleep(ctx, time.Duration(min(attempt, 10))*100*time.Millisecond); err != nil {
				return nil, fmt.Errorf("ledger: claiming %s[%d]: %w (last: %v)", f.topic, partition, err, last)
			}
		}
		resp, err := req.RequestWith(ctx, l.cl)
		if err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
		}
		if err == nil {
			f.pid, f.epoch = resp.ProducerID, resp.ProducerEpoch
			return f, nil
		}
		last = err
		// A claim while the coordinator loads, or moves, is retried; so is one that meets
		// the previous holder's claim still being completed (CONCURRENT_TRANSACTIONS).
		var ke *kerr.Error
		if errors.As(err, &ke) && !ke.Retriable && !errors.Is(err, kerr.ConcurrentTransactions) {
			break // not allowed (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), or not supported
		}
	}
	return nil, fmt.Errorf("ledger: claiming %s[%d] (InitProducerId of %s): %w", f.topic, partition, TransactionalID(topicID, partition), last)
}

// Append writes entries to the claimed ledger partition, durably (acks=all), in order, and
// returns the ledger offset of the first and the offset after the last. ErrFenced: another
// holder claimed the partition since; nothing was written.
func (f *Fenced) Append(ctx context.Context, es []Entry) (base, next int64, err error) {
	return f.append(ctx, es, false)
}

// AppendLeader is Append answered once the ledger partition's leader appended the entries,
// before they are replicated (acks=1): the leader checks the producer's epoch, so an earlier
// holder is fenced all the same, but the entries are durable only once Replicated says so
// (a new leader elected meanwhile may not have them).
func (f *Fenced) AppendLeader(ctx context.Context, es []Entry) (base, next int64, err error) {
	return f.append(ctx, es, true)
}

func (f *Fenced) append(ctx context.Context, es []Entry, leaderOnly bool) (base, next int64, err error) {
	if f.broken != nil {
		return 0, 0, fmt.Errorf("ledger: %s[%d]: an earlier append failed (%v); claim the partition again", f.topic, f.partition, f.broken)
	}
	if len(es) == 0 {
		return 0, 0, errors.New("ledger: nothing to append")
	}
	data, err := f.batch(es)
	if err != nil {
		return 0, 0, err
	}
	base, err = f.produce(ctx, data, leaderOnly)
	if err != nil {
		f.broken = err
		return 0, 0, err
	}
	f.seq = nextSequence(f.seq, int32(len(es)))
	return base, base + int64(len(es)), nil
}

// Replication returns what waits until the ledger partition's high watermark reaches next,
// that is until every entry appended before next is on all its in-sync replicas (when an
// acks=all append would have been answered). It takes the leader that answered the appends
// now, under the caller's hold of the Fenced, and may then run beside later appends. It asks
// with a Fetch at next-1 that the leader holds until its high watermark passes that offset,
// so it is answered the moment the entries are replicated, without polling. An error (a new
// leader, the entries gone, ctx done): they are not known to be replicated.
func (f *Fenced) Replication(cl *kgo.Client, next int64) func(ctx context.Context) error {
	if cl == nil {
		cl = f.l.cl
	}
	topic, tid, partition, leader := f.topic, f.tid, f.partition, f.leader
	return func(ctx context.Context) error {
		for {
			req := kmsg.NewPtrFetchRequest()
			req.MaxWaitMillis, req.MinBytes, req.MaxBytes, req.ReplicaID = 5000, 1, 1, -1
			ft := kmsg.NewFetchRequestTopic()
			ft.Topic, ft.TopicID = topic, tid
			fp := kmsg.NewFetchRequestTopicPartition()
			fp.Partition, fp.FetchOffset, fp.PartitionMaxBytes, fp.CurrentLeaderEpoch, fp.LogStartOffset = partition, next-1, 1, -1, -1
			ft.Partitions = append(ft.Partitions, fp)
			req.Topics = append(req.Topics, ft)
			kr, err := cl.Broker(int(leader)).Request(ctx, req)
			if err != nil {
				return fmt.Errorf("ledger: replication of %s[%d] below %d: %w", topic, partition, next, err)
			}
			resp := kr.(*kmsg.FetchResponse)
			if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
				return fmt.Errorf("ledger: replication of %s[%d] below %d: %w", topic, partition, next, err)
			}
			if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
				return fmt.Errorf("ledger: replication of %s[%d] below %d: malformed fetch response", topic, partition, next)
			}
			p := resp.Topics[0].Partitions[0]
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return fmt.Errorf("ledger: replication of %s[%d] below %d (leader %d): %w", topic, partition, next, leader, err)
			}
			if p.HighWatermark >= next {
				return nil
			}
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("ledger: replication of %s[%d] below %d (high watermark %d): %w", topic, partition, next, p.HighWatermark, err)
			}
		}
	}
}

// batch encodes entries as one record batch of the partition's producer at its next sequence,
// keyed and timestamped as AppendNext does (a record's timestamp is its entry's source offset).
func (f *Fenced) batch(es []Entry) ([]byte, error) {
	type enc struct {
		key, value []byte
		ts         int64
	}
	encs := make([]enc, len(es))
	first, last := int64(math.MaxInt64), int64(math.MinInt64)
	for i, e := range es {
		e.V = VersionOf(e)
		b, err := json.Marshal(e)
		if err != nil {
			return nil, err
		}
		ts := max(e.Src, 0)
		encs[i] = enc{[]byte(e.Kind + ":" + strconv.FormatInt(e.Src, 10)), b, ts}
		first, last = min(first, ts), max(last, ts)
	}
	var recs []byte
	for i, e := range encs {
		r := kmsg.Record{OffsetDelta: int32(i), TimestampDelta64: e.ts - first, Key: e.key, Value: e.value}
		r.Length = int32(len(r.AppendTo(nil)) - 1) // AppendTo writes Length as given (0: one byte)
		recs = r.AppendTo(recs)
	}
	// The records go compressed in zstd, the ledger topic's compression.type: a batch in
	// any other codec is recompressed by the broker before it can answer, which cost the
	// destination's brokers 5-8% more CPU per append (BenchmarkFencedAppend;
	// docs/benchmarks.md, "Ledger appends in the topic's codec").
	var attrs int16
	if f.l.zstd != nil {
		// buf is this call's own, so the compressed records can stay in it.
		var buf bytes.Buffer
		if z, codec := f.l.zstd.Compress(&buf, recs); codec == kgo.CodecZstd {
			recs, attrs = z, int16(codec)
		}
	}
	b := kmsg.RecordBatch{FirstOffset: 0, PartitionLeaderEpoch: -1, Magic: 2, Attributes: attrs, LastOffsetDelta: int32(len(es) - 1),
		FirstTimestamp: first, MaxTimestamp: last, ProducerID: f.pid, ProducerEpoch: f.epoch,
		FirstSequence: f.seq, NumRecords: int32(len(es)), Records: recs}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[8:], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[17:], batch.CRC(out))
	return out, nil
}

// produce sends the batch to the partition's leader, retrying retriable failures with the same
// bytes, and returns the base offset the destination gave it.
func (f *Fenced) produce(ctx context.Context, data []byte, leaderOnly bool) (int64, error) {
	send := f.send
	if leaderOnly {
		send = f.sendLeader
	}
	var last error
	for attempt := 0; attempt < 10; attempt++ {
		if attempt > 0 {
			if err := sleep(ctx, time.Duration(attempt)*100*time.Millisecond); err != nil {
				return 0, fmt.Errorf("ledger: appending to %s[%d]: %w (last: %v)", f.topic, f.partition, err, last)
			}
		}
		if f.leader < 0 || attempt > 0 {
			lp, err := f.l.meta.LookupLeader(ctx, f.topic, f.partition)
			if err != nil {
				last = err
				continue
			}
			f.leader, f.tid, f.addr = lp.Leader, lp.TopicID, lp.Addr
		}
		var pr kmsg.ProduceResponseTopicPartition
		var err error
		if send != nil && f.addr != "" {
			rctx, cancel := context.WithTimeout(ctx, 35*time.Second)
			pr, err = send(rctx, f.addr, f.topic, f.tid, f.partition, data)
			cancel()
		} else {
			pr, err = f.request(ctx, data, leaderOnly)
		}
		if errors.Is(err, ErrSenderClosed) {
			// Shutting down: the sender will not come back, and another try would only delay
			// the write's answer.
			return 0, fmt.Errorf("ledger: appending to %s[%d]: %w", f.topic, f.partition, err)
		}
		if err != nil {
			last = err
			continue
		}
		err = kerr.ErrorForCode(pr.ErrorCode)
		switch {
		case err == nil:
			return pr.BaseOffset, nil
		case errors.Is(err, kerr.InvalidProducerEpoch), errors.Is(err, kerr.ProducerFenced):
			return 0, fmt.Errorf("ledger: appending to %s[%d]: %w (%v)", f.topic, f.partition, ErrFenced, err)
		case kerr.IsRetriable(err):
			last = err
			continue
		}
		msg := ""
		if pr.ErrorMessage != nil {
			msg = ": " + *pr.ErrorMessage
		}
		return 0, fmt.Errorf("ledger: appending to %s[%d]: %w%s", f.topic, f.partition, err, msg)
	}
	return 0, fmt.Errorf("ledger: appending to %s[%d]: %w", f.topic, f.partition, last)
}

// request sends the batch as a Produce request of its own on the ledger's client.
func (f *Fenced) request(ctx context.Context, data []byte, leaderOnly bool) (kmsg.ProduceResponseTopicPartition, error) {
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = -1, 30000
	if leaderOnly {
		req.Acks = 1
	}
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic, rt.TopicID = f.topic, f.tid // v13 names topics by id
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = f.partition, data
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	rctx, cancel := context.WithTimeout(ctx, 35*time.Second)
	kr, err := f.l.cl.Broker(int(f.leader)).Request(rctx, req)
	cancel()
	if err != nil {
		return kmsg.ProduceResponseTopicPartition{}, err
	}
	resp := kr.(*kmsg.ProduceResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return kmsg.ProduceResponseTopicPartition{}, errors.New("malformed produce response")
	}
	return resp.Topics[0].Partitions[0], nil
}

// nextSequence is a producer's sequence after n records; it wraps to 0 past the largest int32,
// as the destination's does.
func nextSequence(seq, n int32) int32 {
	if seq > math.MaxInt32-n {
		return n - (math.MaxInt32 - seq) - 1
	}
	return seq + n
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
