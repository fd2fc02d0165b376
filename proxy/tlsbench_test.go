package proxy_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"offsetgate/internal/testkafka"
	"offsetgate/proxy"
	ogtls "offsetgate/tls"
)

func tlsProduce(ctx context.Context, t testing.TB, addrs []string, tc *tls.Config, topic string, bytes int64, size int) float64 {
	opts := []kgo.Opt{kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic(topic), kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.ProducerBatchMaxBytes(1 << 20), kgo.RecordPartitioner(kgo.RoundRobinPartitioner())}
	if tc != nil {
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	val := make([]byte, size)
	n := int(bytes) / size
	// Warm up connections and metadata.
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: val}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := 0; i < n; i++ {
		cl.Produce(ctx, &kgo.Record{Value: val}, func(_ *kgo.Record, err error) {
			if err != nil {
				t.Error(err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	return float64(n*size) / (1 << 20) / time.Since(start).Seconds()
}

// tlsPaths measures the three paths on the secure cluster.
func tlsPaths(ctx context.Context, t testing.TB, e *secureEnv, bytes int64, size, partitions int) map[string]float64 {
	plain := startSecureProxy(t, e, testkafka.ListenerPlaintext, func(c *proxy.Config) { c.Transport = "gnet" })
	both := startSecureProxy(t, e, testkafka.ListenerSSL, func(c *proxy.Config) {
		c.TLS.Listener = &ogtls.ServerConfig{CertFile: e.certs.Server.CertFile, KeyFile: e.certs.Server.KeyFile}
		c.TLS.Upstream = ogtls.ClientConfig{Enabled: true, CAFile: e.certs.CA.CertFile, CertFile: e.og.CertFile, KeyFile: e.og.KeyFile}
		c.Identities.AllowSharedUpstreamIdentity = true
	})
	out := map[string]float64{}
	for i, path := range []string{"offsetgate-plaintext", "offsetgate-tls", "direct-tls"} {
		topic := fmt.Sprintf("tlsbench-%d-%d-%d-%d", size, partitions, i, time.Now().UnixNano())
		if err := e.c.CreateTopic(ctx, topic, int32(partitions), 1, nil); err != nil {
			t.Fatal(err)
		}
		switch path {
		case "offsetgate-plaintext":
			out[path] = tlsProduce(ctx, t, []string{plain.addr}, nil, topic, bytes, size)
		case "offsetgate-tls":
			out[path] = tlsProduce(ctx, t, []string{both.addr}, e.certs.ClientTLS(nil), topic, bytes, size)
		case "direct-tls":
			out[path] = tlsProduce(ctx, t, e.c.ListenerAddrs(testkafka.ListenerSSL), e.certs.ClientTLS(e.og), topic, bytes, size)
		}
	}
	return out
}

// The TLS benchmark runs end to end on a small data set, so it cannot rot; it asserts no speed.
func TestTLSBenchSmall(t *testing.T) {
	e := startSecure(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := tlsPaths(ctx, t, e, 4<<20, 1024, 2)
	for _, p := range []string{"offsetgate-plaintext", "offsetgate-tls", "direct-tls"} {
		if r[p] <= 0 {
			t.Fatalf("path %s measured %v", p, r[p])
		}
	}
	t.Logf("MB/s: %v", r)
}

// BenchmarkTLSPassThrough reports TLS pass-through throughput through offsetgate as ratios to
// plaintext pass-through and to TLS direct to the broker, measured in the same run:
//
//	go test -run XXX -bench TLSPassThrough -benchtime 1x ./proxy/
func BenchmarkTLSPassThrough(b *testing.B) {
	size := int64(256 << 20)
	if v, err := strconv.ParseInt(os.Getenv("OG_BENCH_BYTES"), 10, 64); err == nil {
		size = v
	}
	for _, c := range []struct{ rec, parts int }{{1024, 4}, {64 << 10, 4}} {
		b.Run(fmt.Sprintf("%dB-%dp", c.rec, c.parts), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				e := startSecure(b)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				r := tlsPaths(ctx, b, e, size, c.rec, c.parts)
				cancel()
				b.ReportMetric(r["offsetgate-tls"], "og-tls-MB/s")
				b.ReportMetric(r["offsetgate-plaintext"], "og-plain-MB/s")
				b.ReportMetric(r["direct-tls"], "direct-tls-MB/s")
				b.ReportMetric(r["offsetgate-tls"]/r["offsetgate-plaintext"], "tls/plain")
				b.ReportMetric(r["offsetgate-tls"]/r["direct-tls"], "tls/direct-tls")
			}
		})
	}
}
