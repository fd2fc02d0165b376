package mirror_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"offsetgate/batch"
	"offsetgate/internal/testkafka"
	"offsetgate/mirror"
)

// writeBench is one measurement of produce-at-offset against plain produce of the same bytes
// through the same offsetgate, in the same run.
type writeBench struct {
	Bytes       int64
	MirrorMBps  float64
	PlainMBps   float64
	Ratio       float64
	MirrorTime  time.Duration
	PlainTime   time.Duration
	Partitions  int
	RecordBytes int
}

// runWriteBench fills a source topic, reads its raw batches into memory, then times (a) sending
// them through offsetgate as produce-at-offset requests into a mirror topic and (b) producing
// the same records with franz-go (acks=all, no compression) through offsetgate into an
// ordinary topic. Only the writes are timed.
func runWriteBench(ctx context.Context, t testing.TB, e *env, prefix string, totalBytes int64, partitions, recordBytes int) writeBench {
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
	pcl, err := kgo.NewClient(kgo.SeedBrokers(s.Addrs()...), kgo.DefaultProduceTopic(src), kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.ProducerBatchMaxBytes(1<<20), kgo.ProducerLinger(5*time.Millisecond), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
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
			}
			sets[p] = append(sets[p], req)
			raw += int64(len(req))
			last, _ := batch.ReadHeader(bs[len(bs)-1])
			off = last.LastOffset() + 1
			if off >= ends[int32(p)][1] {
				break
			}
		}
	}

	// (a) produce-at-offset.
	mtopic := prefix + "-mirror"
	e.createMirrorTopic(ctx, mtopic, int32(partitions))
	h := e.hand(mtopic)
	start := time.Now()
	var wg sync.WaitGroup
	for p := 0; p < partitions; p++ {
		hp := e.hand(mtopic) // a connection per partition, as the mirroring client pipelines partitions
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, req := range sets[p] {
				if r := hp.sendRaw(ctx, int32(p), req); r.ErrorCode != 0 {
					t.Errorf("at-offset write: %d %s", r.ErrorCode, msg(r))
					return
				}
			}
		}()
	}
	wg.Wait()
	mt := time.Since(start)
	_ = h

	// (b) plain produce of the same records through offsetgate.
	ptopic := prefix + "-plain"
	if err := e.pair.Dest.CreateTopic(ctx, ptopic, int32(partitions), 1, nil); err != nil {
		t.Fatal(err)
	}
	plain, err := kgo.NewClient(kgo.SeedBrokers(e.addr), kgo.DialTLSConfig(e.certs.ClientTLS(e.client)), kgo.DefaultProduceTopic(ptopic),
		kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerBatchMaxBytes(1<<20), kgo.ProducerLinger(5*time.Millisecond),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	start = time.Now()
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
	w := writeBench{Bytes: raw, MirrorTime: mt, PlainTime: pt, Partitions: partitions, RecordBytes: recordBytes}
	w.MirrorMBps = float64(raw) / (1 << 20) / mt.Seconds()
	w.PlainMBps = float64(raw) / (1 << 20) / pt.Seconds()
	w.Ratio = w.MirrorMBps / w.PlainMBps
	return w
}

// The write benchmark runs end to end on a small data set (CI keeps it from rotting): both
// paths move every byte and the numbers exist. Speed is reported, never asserted.
func TestWriteBenchSmall(t *testing.T) {
	prefix := testkafka.Names(t, "wb")
	e := newEnv(t, prefix, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	w := runWriteBench(ctx, t, e, prefix, 4<<20, 2, 1024)
	if w.Bytes < 4<<20 || w.MirrorMBps <= 0 || w.PlainMBps <= 0 {
		t.Fatalf("write bench: %+v", w)
	}
	d := count(ctx, t, e.pair.Dest, prefix+"-mirror")
	var total int64
	for _, o := range d {
		total += o[1]
	}
	if total != int64(4<<20)/1024 {
		t.Fatalf("the mirror topic holds %d records, want %d", total, (4<<20)/1024)
	}
	t.Logf("produce-at-offset %.1f MB/s, plain produce %.1f MB/s through offsetgate: ratio %.2f", w.MirrorMBps, w.PlainMBps, w.Ratio)
}

// BenchmarkMirrorWrite reports produce-at-offset throughput as a ratio to plain produce of the
// same bytes through offsetgate, both measured in the same run:
//
//	go test -run XXX -bench MirrorWrite -benchtime 1x ./mirror/
func BenchmarkMirrorWrite(b *testing.B) {
	size := int64(128 << 20)
	if v, err := strconv.ParseInt(os.Getenv("OG_BENCH_BYTES"), 10, 64); err == nil {
		size = v
	}
	for _, c := range []struct{ parts, rec int }{{1, 1024}, {4, 1024}, {4, 64 << 10}} {
		b.Run(fmt.Sprintf("%dp-%dB", c.parts, c.rec), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				prefix := testkafka.Names(b, "bench") + strconv.Itoa(i)
				e := newEnvB(b, prefix)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				w := runWriteBench(ctx, b, e, prefix, size, c.parts, c.rec)
				cancel()
				b.ReportMetric(w.MirrorMBps, "mirror-MB/s")
				b.ReportMetric(w.PlainMBps, "plain-MB/s")
				b.ReportMetric(w.Ratio, "ratio")
			}
		})
	}
}
