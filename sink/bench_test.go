package sink

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/batch"
	"offsetgate/internal/testkafka"
	"offsetgate/wire"
)

func TestMain(m *testing.M) { testkafka.Main(m) }

// BenchmarkSinkRuns writes the same batches to a replicated topic of a real destination with
// and without Runs, in the order plain, runs, runs, plain, and reports each mode's rate (the
// mean of its two times) and runs/plain: what writing a partition's batches with acks=1 until a
// later acks=all confirms them buys against a batch per replication round trip.
//
//	go test -run XXX -bench SinkRuns -benchtime 1x ./sink/
//
// OG_BENCH_BYTES sets the bytes per write (32 MiB); batches are 16 KiB (sixteen 1 KiB
// records), written in Sends of 64 batches, two Sends of a partition queued at a time (as
// produce-at-offset writes arrive from offsetgate mirror).
func BenchmarkSinkRuns(b *testing.B) {
	size := int64(32 << 20)
	if v, err := strconv.ParseInt(os.Getenv("OG_BENCH_BYTES"), 10, 64); err == nil {
		size = v
	}
	for _, parts := range []int32{1, 4, 16} {
		b.Run(fmt.Sprintf("%dp", parts), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				var plain, runs time.Duration
				for k, withRuns := range []bool{false, true, true, false} {
					d := writeRuns(b, testkafka.Names(b, strconv.Itoa(k)), parts, size, withRuns)
					if withRuns {
						runs += d
					} else {
						plain += d
					}
				}
				mbps := func(d time.Duration) float64 { return float64(2*size) / d.Seconds() / 1e6 }
				b.ReportMetric(mbps(plain), "plain-MB/s")
				b.ReportMetric(mbps(runs), "runs-MB/s")
				b.ReportMetric(plain.Seconds()/runs.Seconds(), "runs/plain")
			}
		})
	}
}

// writeRuns creates a topic (replication factor 2) and times writing size bytes over its
// partitions through one sink per leader.
func writeRuns(b *testing.B, topic string, parts int32, size int64, withRuns bool) time.Duration {
	b.Helper()
	pair := testkafka.Shared(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := pair.Dest.CreateTopic(ctx, topic, parts, 2, nil); err != nil {
		b.Fatal(err)
	}
	cl, err := pair.Dest.Client()
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ipr := kmsg.NewPtrInitProducerIDRequest()
	ipr.ProducerID, ipr.ProducerEpoch = -1, -1
	ip, err := ipr.RequestWith(ctx, cl)
	if err != nil || ip.ErrorCode != 0 {
		b.Fatalf("InitProducerId: %v %v", err, ip)
	}
	sinks := map[int32]*Sink{}
	leaders := make([]*Sink, parts)
	for p := int32(0); p < parts; p++ {
		leader, _, err := pair.Dest.Leader(ctx, topic, p)
		if err != nil {
			b.Fatal(err)
		}
		if sinks[leader] == nil {
			var opts []Option
			if withRuns {
				opts = append(opts, Runs())
			}
			dial := func(ctx context.Context, addr string) (*wire.Conn, error) {
				return wire.Dial(ctx, addr, nil, nil, "sink-bench")
			}
			sinks[leader] = New(pair.Dest.Node(leader).Addr(), dial, 30*time.Second, nil, opts...)
			defer sinks[leader].Close()
		}
		leaders[p] = sinks[leader]
	}
	const batchBytes, perSend = 16 << 10, 64
	batches := int(size / int64(parts) / batchBytes)
	value := make([]byte, 1024)
	// Each partition's batches, built before the clock starts.
	data := make([][][]byte, parts)
	for p := range data {
		for i := 0; i < batches; i++ {
			data[p] = append(data[p], benchBatch(ip.ProducerID, ip.ProducerEpoch, int32(i*16), value, 16))
		}
	}
	// Every partition's first batch (sequence 0) goes before the clock: a producer's start.
	for p := int32(0); p < parts; p++ {
		if r := leaders[p].Send(ctx, topic, [16]byte{}, p, data[p][:1])[0]; r.Err != nil || r.Answer.ErrorCode != 0 {
			b.Fatalf("partition %d, first batch: %v code %d", p, r.Err, r.Answer.ErrorCode)
		}
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, parts)
	for p := int32(0); p < parts; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var prev *Queued
			wait := func(q *Queued) bool {
				for _, r := range q.Wait(ctx) {
					if r.Err != nil || r.Answer.ErrorCode != 0 {
						errs <- fmt.Errorf("partition %d: %v code %d", p, r.Err, r.Answer.ErrorCode)
						return false
					}
				}
				return true
			}
			for i := 1; i < batches; i += perSend {
				q := leaders[p].Enqueue(topic, [16]byte{}, p, data[p][i:min(i+perSend, batches)])
				if prev != nil && !wait(prev) {
					return
				}
				prev = q
			}
			if prev != nil {
				wait(prev)
			}
		}()
	}
	wg.Wait()
	d := time.Since(start)
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return d
}

// benchBatch is an uncompressed batch of n records holding value, with the producer's fields.
func benchBatch(pid int64, epoch int16, seq int32, value []byte, n int) []byte {
	var recs []byte
	for i := 0; i < n; i++ {
		r := kmsg.Record{OffsetDelta: int32(i), Value: value}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		recs = r.AppendTo(recs)
	}
	rb := kmsg.RecordBatch{PartitionLeaderEpoch: -1, Magic: 2, LastOffsetDelta: int32(n - 1),
		FirstTimestamp: time.Now().UnixMilli(), MaxTimestamp: time.Now().UnixMilli(), ProducerID: pid,
		ProducerEpoch: epoch, FirstSequence: seq, NumRecords: int32(n), Records: recs}
	out := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(out[8:], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[17:], batch.CRC(out))
	return out
}
