package mirror_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/batch"
	"offsetgate/internal/testkafka"
	"offsetgate/mirror"
	"offsetgate/proxy"
	"offsetgate/wire"
)

// writeBench is one measurement of produce-at-offset against plain produce of the same bytes
// through the same offsetgate, in the same run.
type writeBench struct {
	Bytes      int64
	MirrorMBps float64
	PlainMBps  float64
	Ratio      float64
	MirrorTime time.Duration
	PlainTime  time.Duration
	// The limit: a stock idempotent producer writing the same batches (same boundaries, one
	// batch per partition per request, five requests in flight per broker) straight to D.
	StockMBps  float64
	StockTime  time.Duration
	LimitRatio float64 // produce-at-offset / the limit
	// Each path's two runs (limit, mirror, mirror, limit); the rates above are of their means.
	MirrorRuns, StockRuns [2]time.Duration
	Batches               int
	Partitions            int
	RecordBytes           int
}

// runWriteBench fills a source topic, reads its raw batches into memory, then times (a) sending
// them through offsetgate as produce-at-offset requests into a mirror topic and (b) producing
// the same records with franz-go (acks=all, no compression) through offsetgate into an
// ordinary topic. Only the writes are timed; (a) and the limit write each partition's first
// batch before their clocks start (a mirror partition's load, the stock producer's setup) and
// report the rest.
//
// depth is how many produce-at-offset requests of a partition are in flight on its connection
// (1: each waits for the answer to the one before; more: pipelined, with from offsets).
func runWriteBench(ctx context.Context, t testing.TB, e *env, prefix string, totalBytes int64, partitions, recordBytes, depth int) writeBench {
	s := e.pair.Source
	src := prefix + "-src"
	if err := s.CreateTopic(ctx, src, int32(partitions), 1, nil); err != nil {
		t.Fatal(err)
	}
	n := int(totalBytes) / recordBytes
	val := make([]byte, recordBytes)
	for i := range val {
		val[i] = byte(i)
	}
	// The source's batches are at most 16 KiB, the Java producer's default batch.size (a record
	// larger than that is a batch of its own): the shape a mirror of a typical topic meets.
	pcl, err := kgo.NewClient(kgo.SeedBrokers(s.Addrs()...), kgo.DefaultProduceTopic(src), kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.ProducerBatchMaxBytes(int32(max(16<<10, recordBytes+512))), kgo.ProducerLinger(5*time.Millisecond), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		pcl.Produce(ctx, &kgo.Record{Value: val}, func(_ *kgo.Record, err error) {
			if err != nil {
				t.Error(err)
			}
		})
	}
	if err := pcl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	pcl.Close()

	// Raw batches of every partition, in memory.
	ends := count(ctx, t, s, src)
	sets := make([][][]byte, partitions)
	froms := make([][]int64, partitions)   // each request's from offset (the fetch's)
	single := make([][][]byte, partitions) // the same bytes, batch by batch
	var raw int64
	scl, err := kgo.NewClient(kgo.SeedBrokers(s.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer scl.Close()
	for p := 0; p < partitions; p++ {
		var off int64
		for {
			bs, err := mirror.FetchRaw(ctx, scl, src, int32(p), off, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			if len(bs) == 0 {
				break
			}
			var req []byte
			for _, b := range bs {
				req = append(req, b...)
				single[p] = append(single[p], b)
			}
			sets[p] = append(sets[p], req)
			froms[p] = append(froms[p], off)
			raw += int64(len(req))
			last, _ := batch.ReadHeader(bs[len(bs)-1])
			off = last.LastOffset() + 1
			if off >= ends[int32(p)][1] {
				break
			}
		}
	}

	// Each path writes every partition's first batch before its clock starts, as the stock
	// producer's setup (its producer id, the leaders settled) is not timed either: a mirror
	// partition's first write is its load (the ledger read, the claim), once per partition per
	// process. Both time the same bytes, the rest.
	first := make([][]byte, partitions)
	tsets := make([][][]byte, partitions)
	tfroms := make([][]int64, partitions)
	var firstBytes int64
	for p := range partitions {
		first[p] = single[p][0]
		firstBytes += int64(len(first[p]))
		h, _ := batch.ReadHeader(first[p])
		if rest := sets[p][0][len(first[p]):]; len(rest) > 0 {
			tsets[p], tfroms[p] = append(tsets[p], rest), append(tfroms[p], h.LastOffset()+1)
		}
		tsets[p], tfroms[p] = append(tsets[p], sets[p][1:]...), append(tfroms[p], froms[p][1:]...)
	}

	// (a) produce-at-offset and (c) the limit, a stock idempotent producer writing the same
	// batches straight to D, each twice in the order limit, mirror, mirror, limit: brokers
	// under a run's load change speed over its first seconds (a topic just created, the
	// page cache of the source's fill being written out), and a path always measured first
	// or last would carry that alone.
	mirrorOnce := func(mtopic string) time.Duration {
		e.createMirrorTopic(ctx, mtopic, int32(partitions))
		// A connection per partition to the offsetgate broker leading it, looked up once, as
		// the mirroring client pipelines partitions and caches leaders.
		conns := make([]*wire.Conn, partitions)
		for p := 0; p < partitions; p++ {
			conns[p] = e.hand(mtopic).leaderConn(ctx, int32(p))
		}
		var wg sync.WaitGroup
		for p := 0; p < partitions; p++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if r, err := atOffset(ctx, conns[p], mtopic, int32(p), first[p]); err != nil || r.ErrorCode != 0 {
					t.Errorf("partition %d: first write: %v %d %s", p, err, r.ErrorCode, msg(r))
				}
			}()
		}
		wg.Wait()
		start := time.Now()
		for p := 0; p < partitions; p++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				reqs := tsets[p]
				n, err := conns[p].WindowAtOffset(ctx, len(reqs), depth,
					func(i int) kmsg.Request { return atOffsetRequest(mtopic, int32(p), reqs[i]) },
					func(i int) int64 { return tfroms[p][i] },
					func(int) kmsg.Response { return kmsg.NewPtrProduceResponse() },
					func(i int, r kmsg.Response) bool {
						pr := r.(*kmsg.ProduceResponse).Topics[0].Partitions[0]
						if pr.ErrorCode != 0 {
							t.Errorf("at-offset write: %d %s", pr.ErrorCode, msg(pr))
							return false
						}
						return true
					})
				if err != nil || n != len(reqs) {
					t.Errorf("partition %d: %d of %d requests written: %v", p, n, len(reqs), err)
				}
			}()
		}
		wg.Wait()
		return time.Since(start)
	}
	stockOnce := func(stopic string) time.Duration {
		if err := e.pair.Dest.CreateTopic(ctx, stopic, int32(partitions), 2, nil); err != nil {
			t.Fatal(err)
		}
		return stockWrite(ctx, t, e.pair.Dest, stopic, single)
	}
	// Each timed write starts with the page cache clean: the source's fill and each write before
	// it leave hundreds of MiB for the kernel to write out, which slowed whichever path came next.
	stockOnce = settled(stockOnce)
	mirrorOnce = settled(mirrorOnce)
	st1 := stockOnce(prefix + "-stock")
	mt1 := mirrorOnce(prefix + "-mirror")
	mt2 := mirrorOnce(prefix + "-mirror2")
	st2 := stockOnce(prefix + "-stock2")
	mt, st := (mt1+mt2)/2, (st1+st2)/2

	// (b) plain produce of the same records through offsetgate.
	ptopic := prefix + "-plain"
	if err := e.pair.Dest.CreateTopic(ctx, ptopic, int32(partitions), 2, nil); err != nil { // as the mirror topic's
		t.Fatal(err)
	}
	plain, err := kgo.NewClient(kgo.SeedBrokers(e.addr), kgo.DialTLSConfig(e.certs.ClientTLS(e.client)), kgo.DefaultProduceTopic(ptopic),
		kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerBatchMaxBytes(1<<20), kgo.ProducerLinger(5*time.Millisecond),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	start := time.Now()
	for i := 0; i < n; i++ {
		plain.Produce(ctx, &kgo.Record{Value: val}, func(_ *kgo.Record, err error) {
			if err != nil {
				t.Error(err)
			}
		})
	}
	if err := plain.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	pt := time.Since(start)
	w := writeBench{Bytes: raw, MirrorTime: mt, PlainTime: pt, StockTime: st, Partitions: partitions, RecordBytes: recordBytes,
		MirrorRuns: [2]time.Duration{mt1, mt2}, StockRuns: [2]time.Duration{st1, st2}}
	for _, b := range single {
		w.Batches += len(b)
	}
	timed := float64(raw-firstBytes) / (1 << 20) // the first batches are written before the clocks start
	w.MirrorMBps = timed / mt.Seconds()
	w.PlainMBps = float64(raw) / (1 << 20) / pt.Seconds()
	w.StockMBps = timed / st.Seconds()
	w.Ratio = w.MirrorMBps / w.PlainMBps
	w.LimitRatio = w.MirrorMBps / w.StockMBps
	return w
}

// The write benchmark runs end to end on a small data set (CI keeps it from rotting): both
// paths move every byte and the numbers exist. Speed is reported, never asserted.
func TestWriteBenchSmall(t *testing.T) {
	prefix := testkafka.Names(t, "wb")
	e := newEnv(t, prefix, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	w := runWriteBench(ctx, t, e, prefix, 4<<20, 2, 1024, 3) // pipelined, so CI writes that way too
	if w.Bytes < 4<<20 || w.MirrorMBps <= 0 || w.PlainMBps <= 0 || w.StockMBps <= 0 {
		t.Fatalf("write bench: %+v", w)
	}
	for _, topic := range []string{prefix + "-mirror", prefix + "-mirror2", prefix + "-stock", prefix + "-stock2"} {
		var got int64
		for _, o := range count(ctx, t, e.pair.Dest, topic) {
			got += o[1]
		}
		if got != int64(4<<20)/1024 {
			t.Fatalf("%s holds %d records, want %d", topic, got, (4<<20)/1024)
		}
	}
	if w.MirrorRuns[0] <= 0 || w.MirrorRuns[1] <= 0 || w.StockRuns[0] <= 0 || w.StockRuns[1] <= 0 {
		t.Fatalf("write bench runs: %+v", w)
	}
	t.Logf("produce-at-offset %.1f MB/s, plain produce %.1f MB/s through offsetgate: ratio %.2f; the same batches by a stock idempotent producer straight to D %.1f MB/s: %.2f of it",
		w.MirrorMBps, w.PlainMBps, w.Ratio, w.StockMBps, w.LimitRatio)
}

// benchDepth is the write benchmark's default number of a partition's requests in flight.
const benchDepth = 1

// BenchmarkMirrorWrite reports produce-at-offset throughput as a ratio to plain produce of the
// same bytes through offsetgate, both measured in the same run:
//
//	go test -run XXX -bench MirrorWrite -benchtime 1x ./mirror/
func BenchmarkMirrorWrite(b *testing.B) {
	size := int64(128 << 20)
	if v, err := strconv.ParseInt(os.Getenv("OG_BENCH_BYTES"), 10, 64); err == nil {
		size = v
	}
	// Requests of a partition in flight at once (OG_BENCH_DEPTH; 1: each waits for its answer).
	depth := benchDepth
	if v, err := strconv.Atoi(os.Getenv("OG_BENCH_DEPTH")); err == nil && v > 0 {
		depth = v
	}
	// Connections per destination broker for data (OG_BENCH_DATA_LANES; offsetgate's data_lanes).
	lanes := 0
	if v, err := strconv.Atoi(os.Getenv("OG_BENCH_DATA_LANES")); err == nil && v > 0 {
		lanes = v
	}
	withLanes := func(c *proxy.Config) { c.DataLanes = lanes }
	// A warm-up case first, unmeasured: brokers that have just started made the first case
	// measured (produce-at-offset runs first in each) twice as slow as it is.
	{
		prefix := testkafka.Names(b, "warm")
		e := newEnv(b, prefix, withLanes)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		runWriteBench(ctx, b, e, prefix, 8<<20, 4, 1024, depth)
		cancel()
	}
	for _, c := range []struct{ parts, rec int }{{1, 1024}, {4, 1024}, {4, 64 << 10}, {16, 1024}} {
		b.Run(fmt.Sprintf("%dp-%dB", c.parts, c.rec), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				prefix := testkafka.Names(b, "bench") + strconv.Itoa(i)
				e := newEnv(b, prefix, withLanes)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				w := runWriteBench(ctx, b, e, prefix, size, c.parts, c.rec, depth)
				cancel()
				b.ReportMetric(w.MirrorMBps, "mirror-MB/s")
				b.ReportMetric(w.PlainMBps, "plain-MB/s")
				b.ReportMetric(w.Ratio, "ratio")
				b.ReportMetric(w.StockMBps, "limit-MB/s")
				b.ReportMetric(w.LimitRatio, "of-limit")
				b.ReportMetric(float64(w.Batches), "batches")
				// Each adjacent pair on its own (limit then mirror, mirror then limit): how far
				// the run's order moved the figures.
				b.ReportMetric(w.StockRuns[0].Seconds()/w.MirrorRuns[0].Seconds(), "of-limit-first-pair")
				b.ReportMetric(w.StockRuns[1].Seconds()/w.MirrorRuns[1].Seconds(), "of-limit-second-pair")
			}
		})
	}
}

// settled runs sync(2) before the timed write.
func settled(write func(topic string) time.Duration) func(topic string) time.Duration {
	return func(topic string) time.Duration {
		syscall.Sync()
		return write(topic)
	}
}

// leaderConn is a connection to the offsetgate broker listener leading the partition.
func (h *handClient) leaderConn(ctx context.Context, part int32) *wire.Conn {
	h.t.Helper()
	md, err := kadm.NewClient(h.px).Metadata(ctx, h.topic)
	if err != nil {
		h.t.Fatal(err)
	}
	leader := md.Topics[h.topic].Partitions[part].Leader
	for _, br := range md.Brokers {
		if br.NodeID == leader {
			c, err := wire.Dial(ctx, fmt.Sprintf("%s:%d", br.Host, br.Port), h.e.certs.ClientTLS(h.e.client), nil, "bench")
			if err != nil {
				h.t.Fatal(err)
			}
			h.t.Cleanup(func() { c.Close() })
			return c
		}
	}
	h.t.Fatalf("no broker %d in offsetgate's metadata", leader)
	return nil
}

// atOffsetRequest is a Produce request of one partition's record set, acks=all.
var atOffsetRequest = mirror.AtOffsetRequest

// atOffset sends one produce-at-offset request of one partition on c.
func atOffset(ctx context.Context, c *wire.Conn, topic string, part int32, records []byte) (kmsg.ProduceResponseTopicPartition, error) {
	req := atOffsetRequest(topic, part, records)
	resp := kmsg.NewPtrProduceResponse()
	if err := c.RoundTrip(ctx, req, resp, true); err != nil {
		return kmsg.ProduceResponseTopicPartition{}, err
	}
	return resp.Topics[0].Partitions[0], nil
}

// stockWrite writes each partition's batches to D's topic as a stock idempotent producer does
// (its sink): one producer id, sequences by record count, each Produce request carrying at most
// one batch of each partition the broker leads, five requests in flight per broker. Only the
// writes after each partition's first batch are timed.
func stockWrite(ctx context.Context, t testing.TB, d *testkafka.Cluster, topic string, batches [][][]byte) time.Duration {
	cl, err := d.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ipid := kmsg.NewPtrInitProducerIDRequest()
	ipid.ProducerID, ipid.ProducerEpoch = -1, -1
	pr, err := ipid.RequestWith(ctx, cl)
	if err != nil || pr.ErrorCode != 0 {
		t.Fatalf("InitProducerId: %v %v", err, pr)
	}
	// Every leader knows it leads (a topic just created answers NOT_LEADER for a moment): the
	// client's own retries see to it.
	adm := kadm.NewClient(cl)
	for deadline := time.Now().Add(30 * time.Second); ; {
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err == nil && ends.Error() == nil && len(ends[topic]) == len(batches) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the topic's leaders did not settle: %v %v", err, ends.Error())
		}
		time.Sleep(100 * time.Millisecond)
	}
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	// Every batch as D must get it, built before the clock starts, as a producer's are.
	byBroker := map[int32][]int32{}
	ready := make([][][]byte, len(batches))
	for p, bs := range batches {
		leader := md.Topics[topic].Partitions[int32(p)].Leader
		byBroker[leader] = append(byBroker[leader], int32(p))
		var seq int32
		for _, b := range bs {
			h, _ := batch.ReadHeader(b)
			ready[p] = append(ready[p], batch.ForDestination(b, batch.Producer{ID: pr.ProducerID, Epoch: pr.ProducerEpoch, Sequence: seq}))
			seq += h.RecordCount
		}
	}
	conns := map[int32]*wire.Conn{}
	for _, br := range md.Brokers {
		if _, ok := byBroker[br.NodeID]; !ok {
			continue
		}
		c, err := wire.Dial(ctx, fmt.Sprintf("%s:%d", br.Host, br.Port), nil, nil, "stock")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns[br.NodeID] = c
	}
	build := func(parts []int32, i int) kmsg.Request {
		req := kmsg.NewPtrProduceRequest()
		req.SetVersion(11)
		req.Acks, req.TimeoutMillis = -1, 30000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = topic
		for _, p := range parts {
			if i < len(ready[p]) {
				rp := kmsg.NewProduceRequestTopicPartition()
				rp.Partition, rp.Records = p, ready[p][i]
				rt.Partitions = append(rt.Partitions, rp)
			}
		}
		req.Topics = append(req.Topics, rt)
		return req
	}
	// Every partition's first batch before the clock starts (the caller times the rest).
	for leader, parts := range byBroker {
		resp := kmsg.NewPtrProduceResponse()
		if err := conns[leader].RoundTrip(ctx, build(parts, 0), resp, true); err != nil {
			t.Fatalf("stock first write to broker %d: %v", leader, err)
		}
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				if rp.ErrorCode != 0 {
					t.Fatalf("stock first write of partition %d: error %d", rp.Partition, rp.ErrorCode)
				}
			}
		}
	}
	start := time.Now()
	var wg sync.WaitGroup
	for leader, parts := range byBroker {
		n := 0
		for _, p := range parts {
			n = max(n, len(ready[p]))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Batches 1 on: the first went before the clock started.
			got, err := conns[leader].Window(ctx, n-1, 5, func(i int) kmsg.Request { return build(parts, i+1) },
				func(int) kmsg.Response { return kmsg.NewPtrProduceResponse() },
				func(i int, r kmsg.Response) bool {
					for _, rt := range r.(*kmsg.ProduceResponse).Topics {
						for _, rp := range rt.Partitions {
							if rp.ErrorCode != 0 {
								t.Errorf("stock write %d of partition %d: error %d", i+1, rp.Partition, rp.ErrorCode)
								return false
							}
						}
					}
					return true
				})
			if err != nil || got != n-1 {
				t.Errorf("stock writes to broker %d: %d of %d answered: %v", leader, got, n-1, err)
			}
		}()
	}
	wg.Wait()
	return time.Since(start)
}
