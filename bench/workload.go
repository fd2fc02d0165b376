package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// producerSettings describes the producer options every path uses, for the report.
func producerSettings(linger time.Duration) string {
	return fmt.Sprintf("franz-go, acks=all, idempotent, no compression, linger %v, default partitioner, max 32 MiB buffered, metadata min age 100 ms", linger)
}

// consumerSettings describe the consumer.
const consumerSettings = "franz-go, no group, from the start, default fetch sizes (50 MiB per fetch, 1 MiB per partition), fetch max wait 50 ms, metadata min age 100 ms"

func producerOpts(linger time.Duration) []kgo.Opt {
	return []kgo.Opt{
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.ProducerLinger(linger),
		kgo.MaxBufferedBytes(32 << 20),
		kgo.RecordRetries(3),
	}
}

// redirectDialer sends every dial of a broker address to the relay listener standing for it,
// so the relay needs no protocol knowledge: the client keeps the brokers' own addresses.
func redirectDialer(m map[string]string) kgo.Opt {
	var d net.Dialer
	return kgo.Dialer(func(ctx context.Context, network, host string) (net.Conn, error) {
		to, ok := m[host]
		if !ok {
			return nil, fmt.Errorf("relay: no listener for broker %s", host)
		}
		return d.DialContext(ctx, network, to)
	})
}

// produceResult is one producer run.
type produceResult struct {
	records int64
	bytes   int64
	dur     time.Duration
	lat     []time.Duration // per record, send to acknowledgement (paced runs only)
}

// warmProducer produces small keyed records until every partition of topic has had one, so
// that metadata is loaded and the producer's connection to every leader is open before the
// clock starts. It returns how many records it wrote.
func warmProducer(ctx context.Context, cl *kgo.Client, topic string, partitions int) (int64, error) {
	seen := map[int32]bool{}
	var n int64
	for i := 0; len(seen) < partitions; i++ {
		if i >= 64 {
			return n, fmt.Errorf("warm-up: %d of %d partitions reached", len(seen), partitions)
		}
		var rs []*kgo.Record
		for j := 0; j < 2*partitions; j++ {
			rs = append(rs, &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "warm-%d-%d", i, j), Value: []byte("warm-up")})
		}
		res := cl.ProduceSync(ctx, rs...)
		for _, r := range res {
			switch {
			case r.Err == nil:
				seen[r.Record.Partition] = true
				n++
			case errors.Is(r.Err, kerr.UnknownTopicID), errors.Is(r.Err, kerr.UnknownTopicOrPartition),
				errors.Is(r.Err, kerr.NotLeaderForPartition), errors.Is(r.Err, kerr.LeaderNotAvailable):
				// A topic just created is not yet known to every broker (seen with Kafka 4.1:
				// UNKNOWN_TOPIC_ID, NOT_LEADER_FOR_PARTITION): such a record was not written;
				// try again.
			default:
				return n, fmt.Errorf("warm-up produce: %w", r.Err)
			}
		}
		if len(seen) < partitions {
			time.Sleep(50 * time.Millisecond)
		}
	}
	return n, nil
}

// produce writes n records of payload to topic. With rate > 0 (bytes per second) records are
// sent on a fixed schedule and each record's latency, from the Produce call to its
// acknowledgement, is kept; otherwise records are sent as fast as the client takes them.
func produce(ctx context.Context, cl *kgo.Client, topic string, payload []byte, n int, rate float64) (produceResult, error) {
	var (
		wg      sync.WaitGroup
		acked   atomic.Int64
		errOnce sync.Once
		failed  error
	)
	var lat []time.Duration
	if rate > 0 {
		lat = make([]time.Duration, n)
	}
	interval := 0.0
	if rate > 0 {
		interval = float64(len(payload)) / rate * float64(time.Second)
	}
	wg.Add(n)
	start := time.Now()
	for i := 0; i < n; i++ {
		if rate > 0 {
			// Sleep only when at least 100 µs ahead of the schedule: small records then go
			// out in bursts of up to 100 µs worth, not with a timer per record.
			due := start.Add(time.Duration(float64(i) * interval))
			if d := time.Until(due); d > 100*time.Microsecond {
				time.Sleep(d)
			}
		}
		t0 := time.Now()
		cl.Produce(ctx, &kgo.Record{Topic: topic, Value: payload}, func(r *kgo.Record, err error) {
			if err != nil {
				errOnce.Do(func() { failed = err })
			} else {
				acked.Add(1)
				if lat != nil {
					lat[i] = time.Since(t0)
				}
			}
			wg.Done()
		})
	}
	wg.Wait()
	res := produceResult{dur: time.Since(start), records: acked.Load(), lat: lat}
	res.bytes = res.records * int64(len(payload))
	if failed != nil {
		return res, fmt.Errorf("produce to %s: %w", topic, failed)
	}
	return res, nil
}

// consumeResult is one consumer run.
type consumeResult struct {
	records, bytes int64
	dur            time.Duration
}

// consume reads topic from the start until want records have arrived. The client first reads
// warmTopic (warmCount records, a partition on every broker), so that its metadata and its
// fetch connection to every broker are up; the clock starts when it then adds topic, and
// stops at the last record.
func consume(ctx context.Context, opts []kgo.Opt, warmTopic string, warmCount int64, topic string, want int64) (consumeResult, error) {
	var res consumeResult
	// A fetch with nothing to return waits up to FetchMaxWait for data; once the warm-up
	// topic is read, the data topic is only fetched after that wait, so it is kept short (it
	// changes nothing while data is there to read).
	cl, err := kgo.NewClient(append(slices.Clone(opts), kgo.ConsumeTopics(warmTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond))...)
	if err != nil {
		return res, err
	}
	defer cl.Close()
	poll := func(topic string, want int64, count *int64, bytes *int64) error {
		for *count < want {
			fs := cl.PollFetches(ctx)
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("consume %s: %d of %d records: %w", topic, *count, want, err)
			}
			var ferr error
			fs.EachError(func(t string, p int32, err error) {
				if ferr == nil {
					ferr = fmt.Errorf("fetch %s[%d]: %w", t, p, err)
				}
			})
			if ferr != nil {
				return ferr
			}
			fs.EachRecord(func(r *kgo.Record) {
				if r.Topic == topic {
					*count++
					*bytes += int64(len(r.Value))
				}
			})
		}
		if *count != want {
			return fmt.Errorf("consume %s: read %d records, want %d", topic, *count, want)
		}
		return nil
	}
	var wn, wb int64
	if err := poll(warmTopic, warmCount, &wn, &wb); err != nil {
		return res, fmt.Errorf("consumer warm-up: %w", err)
	}
	start := time.Now()
	cl.AddConsumeTopics(topic)
	if err := poll(topic, want, &res.records, &res.bytes); err != nil {
		return res, err
	}
	res.dur = time.Since(start)
	return res, nil
}

// percentile returns the p-th percentile (0..100) of sorted durations, nearest rank.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p/100*float64(len(sorted))+0.999999) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(sorted) {
		i = len(sorted) - 1
	}
	return sorted[i]
}
