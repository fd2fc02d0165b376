package mirror_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/batch"
	"offsetgate/internal/realclients"
	"offsetgate/internal/testkafka"
	"offsetgate/mirror"
	"offsetgate/rawread"
	"offsetgate/verify"
)

// cleanedBatches counts the source partition's batches the cleaner left with fewer records
// than offsets (gappy or empty).
func cleanedBatches(ctx context.Context, t testing.TB, cl *kgo.Client, topic string) int {
	t.Helper()
	rd := rawread.New(cl, topic, 0)
	n := 0
	var off int64
	for {
		bs, hwm, err := rd.Fetch(ctx, off, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if len(bs) == 0 {
			return n
		}
		for _, b := range bs {
			h, _ := batch.ReadHeader(b)
			if h.Gappy() {
				n++
			}
			off = h.LastOffset() + 1
		}
		if off >= hwm {
			return n
		}
	}
}

// sourceBatches lists the source partition's batches (base, last offset, CRC).
func sourceBatches(ctx context.Context, t testing.TB, cl *kgo.Client, topic string) string {
	t.Helper()
	rd := rawread.New(cl, topic, 0)
	var b strings.Builder
	var off int64
	for {
		bs, hwm, err := rd.Fetch(ctx, off, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		for _, raw := range bs {
			h, _ := batch.ReadHeader(raw)
			fmt.Fprintf(&b, "%d-%d:%x ", h.BaseOffset, h.LastOffset(), h.CRC)
			off = h.LastOffset() + 1
		}
		if len(bs) == 0 || off >= hwm {
			return b.String()
		}
	}
}

// waitStable returns once the source's cleaner has left the topics alone for longer than a
// cleaning pass and a delete horizon take: a prover run against a source that compacts while
// it reads would find differences the next mirror run removes.
func waitStable(ctx context.Context, t testing.TB, cl *kgo.Client, topics []string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	prev := ""
	for {
		var cur strings.Builder
		for _, topic := range topics {
			cur.WriteString(sourceBatches(ctx, t, cl, topic))
		}
		if cur.String() == prev {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the source kept compacting for two minutes")
		}
		prev = cur.String()
		time.Sleep(6 * time.Second)
	}
}

// writeKeys writes rounds of values for a few keys, deleting some (tombstones), in small
// batches from an idempotent producer.
func writeKeys(ctx context.Context, t testing.TB, c *testkafka.Cluster, topic string, codec kgo.CompressionCodec, round, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...), kgo.DefaultProduceTopic(topic), kgo.ProducerBatchCompression(codec),
		kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := 0; i < n; i++ {
		key := fmt.Sprintf("k%d", i%12)
		r := &kgo.Record{Key: []byte(key), Value: []byte(fmt.Sprintf("%s.round%d.%d", key, round, i))}
		if i%12 == 5 && round > 0 {
			r.Value = nil // a tombstone
		}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// Compacted topics mirror exactly while the source keeps compacting: in every codec, keys
// overwritten and deleted by an idempotent producer, the real log cleaner running on the
// source between mirror runs (gappy batches, empty batches, batches removed whole, tombstones
// whose delete horizon passes). After every run the prover finds every batch through
// offsetgate identical to the source's, franz-go, the Java consumer and kcat read the source's
// records at the source's offsets, and a consumer of D finds every surviving record at its
// offset.
func TestMirrorCompacted(t *testing.T) {
	prefix := testkafka.Names(t, "cp")
	e := newEnv(t, prefix, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	s := e.pair.Source
	cfg := map[string]*string{
		"cleanup.policy":            kmsg.StringPtr("compact"),
		"segment.ms":                kmsg.StringPtr("300"),
		"min.cleanable.dirty.ratio": kmsg.StringPtr("0.01"),
		"delete.retention.ms":       kmsg.StringPtr("3000"),
		"max.compaction.lag.ms":     kmsg.StringPtr("2000"),
	}
	codecs := map[string]kgo.CompressionCodec{"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(),
		"snappy": kgo.SnappyCompression(), "lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression()}
	var topics []string
	for name := range codecs {
		topics = append(topics, prefix+"-"+name)
	}
	for _, topic := range topics {
		if err := s.CreateTopic(ctx, topic, 1, 2, cfg); err != nil {
			t.Fatal(err)
		}
	}
	src := e.srcClient(t)
	px := e.proxyClient(t)
	consumers := e.plain(t)
	round := 0
	// clean writes a round and waits until the cleaner has left gappy batches in every topic
	// (a segment rolls at the next write after segment.ms).
	clean := func() {
		for _, topic := range topics {
			writeKeys(ctx, t, s, topic, codecs[strings.TrimPrefix(topic, prefix+"-")], round, 120)
		}
		round++
		deadline := time.Now().Add(90 * time.Second)
		for _, topic := range topics {
			for cleanedBatches(ctx, t, src, topic) == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("the source's cleaner did not clean %s", topic)
				}
				time.Sleep(300 * time.Millisecond)
				writeKeys(ctx, t, s, topic, codecs[strings.TrimPrefix(topic, prefix+"-")], 99, 1) // rolls the segment
			}
		}
	}
	check := func(stage string) {
		t.Helper()
		waitStable(ctx, t, src, topics)
		if _, err := mirror.Once(ctx, e.mirrorConfig(topics...)); err != nil {
			t.Fatalf("%s: mirror: %v", stage, err)
		}
		for _, topic := range topics {
			res, err := verify.Run(ctx, verify.Config{Source: src, Proxy: px, Topic: topic}, nil)
			if err != nil {
				t.Fatalf("%s: verify %s: %v", stage, topic, err)
			}
			if r := res[0]; r.Err != nil || r.Diff != nil || r.Tail != 0 {
				t.Fatalf("%s: %s", stage, r.Line(topic))
			}
			sopts := []kgo.Opt{kgo.SeedBrokers(s.Addrs()...)}
			popts := []kgo.Opt{kgo.SeedBrokers(e.addr), kgo.DialTLSConfig(e.certs.ClientTLS(e.client))}
			want := consumeLevel(ctx, t, sopts, topic, false)
			sameRecs(t, stage+": franz-go through offsetgate, "+topic, consumeLevel(ctx, t, popts, topic, false), want)
			// D holds every surviving record at its offset (the mirror started at 0: no shift).
			onD := map[int64]txnRec{}
			for _, r := range consumeLevel(ctx, t, []kgo.Opt{kgo.SeedBrokers(e.pair.Dest.Addrs()...)}, topic, false) {
				onD[r.Offset] = r
			}
			for _, r := range want {
				if onD[r.Offset] != r {
					t.Logf("destination ends %v, source %v; %d records read on D", count(ctx, t, e.pair.Dest, topic), count(ctx, t, s, topic), len(onD))
					t.Fatalf("%s: %s[%d] offset %d on the destination is %+v, the source's %+v", stage, topic, r.Partition, r.Offset, onD[r.Offset], r)
				}
			}
		}
	}

	clean()
	check("after the first cleaning")
	clean() // overwrites and tombstones compact what was mirrored; delete horizons pass
	time.Sleep(3500 * time.Millisecond)
	clean()
	check("after the source compacted what was mirrored")

	// The Java consumer and kcat, through a second offsetgate, read what the source serves.
	topic := prefix + "-zstd"
	want := consumeLevel(ctx, t, []kgo.Opt{kgo.SeedBrokers(s.Addrs()...)}, topic, false)
	byOffset := map[int64]string{}
	for _, r := range want {
		byOffset[r.Offset] = r.Key
	}
	got, err := realclients.JavaConsumeAt(ctx, consumers, topic, len(want), 60000, "read_uncommitted")
	if err != nil {
		t.Fatalf("Java consumer: %v", err)
	}
	kc, err := realclients.KcatConsume(ctx, consumers, topic, len(want))
	if err != nil {
		t.Fatalf("kcat: %v", err)
	}
	for name, rs := range map[string][]realclients.Record{"Java": got, "kcat": kc} {
		if len(rs) != len(want) {
			t.Fatalf("%s read %d records, the source serves %d", name, len(rs), len(want))
		}
		for _, r := range rs {
			if k, ok := byOffset[r.Offset]; !ok || (k != r.Key && !(k == "" && r.Key == "null")) {
				t.Fatalf("%s read %+v; the source has %q at offset %d", name, r, k, r.Offset)
			}
		}
	}
}
