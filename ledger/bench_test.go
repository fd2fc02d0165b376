package ledger

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"offsetgate/internal/procstat"
	"offsetgate/internal/testkafka"
)

// BenchmarkFencedAppend times fenced ledger appends on the shared destination, one after
// another on one partition (the ledger's replication factor: its brokers, at most 3), with the
// records in the ledger topic's codec (zstd) against uncompressed (which the broker
// recompresses), in the same run: zstd, none, none, zstd. It reports each codec's time per
// append and the destination brokers' CPU per append (leader and followers, from /proc).
//
//	go test -run XXX -bench FencedAppend -benchtime 1x ./ledger/
//
// OG_BENCH_APPENDS sets the appends per phase (2,000); each append holds four batch entries,
// a write of four source batches.
func BenchmarkFencedAppend(b *testing.B) {
	n := 2000
	if v, err := strconv.Atoi(os.Getenv("OG_BENCH_APPENDS")); err == nil && v > 0 {
		n = v
	}
	pair := testkafka.Shared(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cl, err := pair.Dest.Client()
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	l := New(cl)
	zstd := l.zstd
	for i := 0; i < b.N; i++ {
		id := make([]byte, 16)
		_, _ = rand.Read(id)
		topicID := hex.EncodeToString(id)
		if err := l.Ensure(ctx, topicID, 1); err != nil {
			b.Fatal(err)
		}
		f, err := l.Claim(ctx, topicID, 0)
		if err != nil {
			b.Fatal(err)
		}
		src := int64(0)
		appendN := func() (time.Duration, float64) {
			cpu0 := brokersCPU(b, pair.Dest)
			start := time.Now()
			for k := 0; k < n; k++ {
				es := make([]Entry, 4)
				for j := range es {
					es[j] = Entry{Kind: KindBatch, Src: src, Last: src + 15, D: src, Count: 16, Epoch: 3, CRC: uint32(src), Len: 16600, PID: 4711}
					src += 16
				}
				if _, _, err := f.Append(ctx, es); err != nil {
					b.Fatal(err)
				}
			}
			return time.Since(start), brokersCPU(b, pair.Dest) - cpu0
		}
		// Phase k uses codecs[k]: 0 zstd, 1 uncompressed (no compressor).
		codecs := []kgo.Compressor{zstd, nil}
		// One append of each before the clocks: the claim's first append, the topic's leader.
		for _, c := range codecs {
			l.zstd = c
			if _, _, err := f.Append(ctx, []Entry{{Kind: KindSegment, Src: src}}); err != nil {
				b.Fatal(err)
			}
		}
		var wall [2]time.Duration
		var cpu [2]float64
		for _, k := range []int{0, 1, 1, 0} {
			l.zstd = codecs[k]
			w, c := appendN()
			wall[k] += w
			cpu[k] += c
		}
		l.zstd = zstd
		per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(2*n) }
		b.ReportMetric(per(wall[0]), "zstd-µs/append")
		b.ReportMetric(per(wall[1]), "none-µs/append")
		b.ReportMetric(wall[0].Seconds()/wall[1].Seconds(), "zstd/none")
		b.ReportMetric(cpu[0]*1e6/float64(2*n), "zstd-broker-cpu-µs/append")
		b.ReportMetric(cpu[1]*1e6/float64(2*n), "none-broker-cpu-µs/append")
	}
}

// brokersCPU is the CPU seconds the cluster's broker processes have used so far.
func brokersCPU(b *testing.B, c *testkafka.Cluster) float64 {
	b.Helper()
	var sum float64
	for _, n := range c.Nodes {
		v, err := procstat.CPUSeconds(n.Pid())
		if err != nil {
			b.Fatalf("broker %d's CPU: %v", n.ID, err)
		}
		sum += v
	}
	return sum
}
