package mirror_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/batch"
	"offsetgate/catalog"
	"offsetgate/internal/testkafka"
	"offsetgate/ledger"
	"offsetgate/mirror"
	"offsetgate/rawread"
)

// compactCost is what mirroring one single-partition topic cost.
type compactCost struct {
	offsets, records int64 // source offsets mirrored, records the source still holds
	sourceBytes      int64 // what the source served the mirror
	took             time.Duration
	sourceLog, dLog  int64 // log sizes on disk
	ledgerBytes      int64
	fillerOffsets    int64 // offsets held by filler tombstones on D (in filler batches and dense copies)
	copies           int64 // gappy or empty batches written as dense copies (kept whole in the ledger)
}

// logSize is a partition's size on disk on the cluster (the leader's replica).
func logSize(ctx context.Context, t testing.TB, c *testkafka.Cluster, topic string) int64 {
	t.Helper()
	adm, err := c.Admin()
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	dirs, err := adm.DescribeAllLogDirs(ctx, kadm.TopicsSet{topic: {0: {}}})
	if err != nil {
		t.Fatal(err)
	}
	var size int64
	dirs.Each(func(d kadm.DescribedLogDir) {
		d.Topics.Each(func(p kadm.DescribedLogDirPartition) {
			if p.Topic == topic && p.Partition == 0 {
				size = max(size, p.Size)
			}
		})
	})
	return size
}

// surviving counts the records and offsets the source partition holds.
func surviving(ctx context.Context, t testing.TB, cl *kgo.Client, topic string) (records, offsets int64) {
	t.Helper()
	rd := rawread.New(cl, topic, 0)
	var off int64
	for {
		bs, hwm, err := rd.Fetch(ctx, off, 4<<20)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bs {
			h, _ := batch.ReadHeader(b)
			records += int64(h.RecordCount)
			off = h.LastOffset() + 1
		}
		if len(bs) == 0 || off >= hwm {
			return records, hwm
		}
	}
}

// mirrorCompactCost fills a source topic with n records of size bytes over keys keys (every
// key written n/keys times), lets the source's cleaner compact it when compacted is set (keys <
// n: most offsets compacted away), mirrors it once and measures.
func mirrorCompactCost(ctx context.Context, t testing.TB, e *env, topic string, n, keys, size int, compacted bool) compactCost {
	s := e.pair.Source
	var cfg map[string]*string
	if compacted {
		cfg = map[string]*string{"cleanup.policy": kmsg.StringPtr("compact"), "segment.ms": kmsg.StringPtr("500"),
			"min.cleanable.dirty.ratio": kmsg.StringPtr("0.01"), "max.compaction.lag.ms": kmsg.StringPtr("1000")}
	}
	if err := s.CreateTopic(ctx, topic, 1, 1, cfg); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.Addrs()...), kgo.DefaultProduceTopic(topic), kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.ProducerLinger(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	val := make([]byte, size)
	// Keys drawn at random (a fixed seed): the records the cleaner keeps, each key's latest,
	// lie scattered over the log's tail, so the mirror fills holes and copies gappy batches
	// instead of starting past one compacted prefix.
	rng := rand.New(rand.NewPCG(uint64(n), uint64(keys)))
	produce := func(from, to int) {
		var rs []*kgo.Record
		for i := from; i < to; i++ {
			k := i
			if keys < n {
				k = rng.IntN(keys)
			}
			rs = append(rs, &kgo.Record{Key: []byte(fmt.Sprintf("key-%06d", k)), Value: val})
			if len(rs) == 100 || i == to-1 {
				if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
					t.Fatal(err)
				}
				rs = rs[:0]
			}
		}
	}
	produce(0, n)
	src := e.srcClient(t)
	if compacted {
		// Segments roll at the next write after segment.ms; the cleaner then leaves about one
		// record per key.
		deadline := time.Now().Add(3 * time.Minute)
		for {
			time.Sleep(time.Second)
			produce(n, n+1)
			n++
			if recs, _ := surviving(ctx, t, src, topic); recs <= int64(keys)*11/10 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the source's cleaner did not compact the topic in three minutes")
			}
		}
	}
	c := compactCost{}
	c.records, c.offsets = surviving(ctx, t, src, topic)
	start := time.Now()
	sum, err := mirror.Once(ctx, e.mirrorConfig(topic))
	if err != nil {
		t.Fatal(err)
	}
	c.took = time.Since(start)
	for _, p := range sum.Partitions {
		c.sourceBytes += p.Bytes
	}
	c.sourceLog, c.dLog = logSize(ctx, t, s, topic), logSize(ctx, t, e.pair.Dest, topic)
	md, err := kgo.NewClient(kgo.SeedBrokers(e.pair.Dest.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer md.Close()
	lp, err := rawread.Lookup(ctx, md, topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	recs, _, err := rawread.Records(ctx, md, ledger.Topic(catalog.IDString(lp.TopicID)), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		c.ledgerBytes += int64(len(r.Key) + len(r.Value))
		if le, err := ledger.Decode(r.Value); err == nil {
			switch {
			case le.Kind == ledger.KindFiller:
				c.fillerOffsets += int64(le.Count)
			case le.Kind == ledger.KindBatch && len(le.Raw) > 0:
				c.copies++
				c.fillerOffsets += int64(le.Count - le.Records) // the copy's fillers
			}
		}
	}
	return c
}

// BenchmarkMirrorCompacted reports what compaction costs: a topic with 90% of its offsets
// compacted away on the source against a dense topic of the same records, in one run. Storage
// is the destination's log and the ledger against the source's log; throughput is source
// offsets mirrored per second:
//
//	go test -run XXX -bench MirrorCompacted -benchtime 1x ./mirror/
func BenchmarkMirrorCompacted(b *testing.B) {
	const n, size = 50000, 256
	for i := 0; i < b.N; i++ {
		prefix := testkafka.Names(b, "cb") + fmt.Sprint(i)
		e := newEnvB(b, prefix)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		dense := mirrorCompactCost(ctx, b, e, prefix+"-dense", n, n, size, false)
		comp := mirrorCompactCost(ctx, b, e, prefix+"-compacted", n, n/10, size, true)
		cancel()
		rate := func(c compactCost) float64 { return float64(c.offsets) / c.took.Seconds() }
		overhead := func(c compactCost) float64 { return float64(c.dLog+c.ledgerBytes) / float64(c.sourceLog) }
		b.ReportMetric(rate(dense), "dense-offsets/s")
		b.ReportMetric(rate(comp), "compacted-offsets/s")
		b.ReportMetric(rate(comp)/rate(dense), "compacted/dense")
		b.ReportMetric(overhead(comp), "compacted-storage/source")
		b.ReportMetric(overhead(dense), "dense-storage/source")
		for name, c := range map[string]compactCost{"dense": dense, "compacted": comp} {
			b.Logf("%s: %d offsets, %d records on the source, %.2f MB served to the mirror in %v (%.0f offsets/s); source log %d B, destination log %d B, ledger %d B: (destination+ledger)/source %.2f; %d offsets held by fillers, %d dense copies",
				name, c.offsets, c.records, float64(c.sourceBytes)/1e6, c.took.Round(time.Millisecond), rate(c), c.sourceLog, c.dLog, c.ledgerBytes, overhead(c), c.fillerOffsets, c.copies)
			if c.fillerOffsets > 0 {
				b.Logf("%s: destination bytes per filler offset beyond the source's log: %.1f", name, float64(c.dLog-c.sourceLog)/float64(c.fillerOffsets))
			}
		}
	}
}
