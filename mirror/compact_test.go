package mirror_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/batch"
	"offsetgate/internal/realclients"
	"offsetgate/internal/testkafka"
	"offsetgate/mirror"
	"offsetgate/rawread"
	"offsetgate/verify"
)

// cleanedBatches counts what the source's cleaner left in the partition: batches with fewer
// records than offsets (gappy or empty) and offsets with no batch at all.
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
			if h.Gappy() || h.BaseOffset > off {
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
// With txnID set, the records go in transactions of six, every third one aborted (the
// cleaner removes aborted records, then their markers once the delete horizon passed).
func writeKeys(ctx context.Context, t testing.TB, c *testkafka.Cluster, topic string, codec kgo.CompressionCodec, txnID string, round, n int) {
	t.Helper()
	opts := []kgo.Opt{kgo.SeedBrokers(c.Addrs()...), kgo.DefaultProduceTopic(topic), kgo.ProducerBatchCompression(codec),
		kgo.ProducerLinger(0)}
	if txnID != "" {
		opts = append(opts, kgo.TransactionalID(txnID), kgo.TransactionTimeout(5*time.Minute))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := 0; i < n; i++ {
		if txnID != "" && i%6 == 0 {
			if err := cl.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
		}
		key := fmt.Sprintf("k%d", i%12)
		r := &kgo.Record{Key: []byte(key), Value: []byte(fmt.Sprintf("%s.round%d.%d", key, round, i))}
		if i%12 == 5 && round > 0 {
			r.Value = nil // a tombstone
		}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if txnID != "" && (i%6 == 5 || i == n-1) {
			commit := kgo.TryCommit
			if (i/6)%3 == 2 {
				commit = kgo.TryAbort
			}
			if err := cl.EndTransaction(ctx, commit); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// firstFrom is the offset of the first record a consumer starting at offset reads.
func firstFrom(ctx context.Context, t testing.TB, opts []kgo.Opt, topic string, offset int64, committed bool) int64 {
	t.Helper()
	level := kgo.ReadUncommitted()
	if committed {
		level = kgo.ReadCommitted()
	}
	cl, err := kgo.NewClient(append(opts, kgo.FetchIsolationLevel(level), kgo.FetchMaxWait(200*time.Millisecond),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(offset)}}))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := 0; i < 10; i++ {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollRecords(pctx, 1)
		cancel()
		if rs := fs.Records(); len(rs) > 0 {
			return rs[0].Offset
		}
	}
	return -1
}

// recordTimes lists the timestamps (milliseconds) of the topic's records, read from the source.
func recordTimes(ctx context.Context, t testing.TB, c *testkafka.Cluster, topic string) []int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...), kgo.FetchMaxWait(200*time.Millisecond),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []int64
	for idle := 0; idle < 4; {
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		fs := cl.PollFetches(pctx)
		cancel()
		n := 0
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r.Timestamp.UnixMilli()); n++ })
		if n == 0 {
			idle++
		}
	}
	return out
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
	// A transactional producer on a compacted topic: aborted records and markers the cleaner
	// removes in turn.
	txnTopic := prefix + "-txn"
	codecs["txn"] = kgo.Lz4Compression()
	topics = append(topics, txnTopic)
	for _, topic := range topics {
		if err := s.CreateTopic(ctx, topic, 1, 2, cfg); err != nil {
			t.Fatal(err)
		}
	}
	txnOf := func(topic string) string {
		if topic == txnTopic {
			return prefix + "-producer"
		}
		return ""
	}
	src := e.srcClient(t)
	px := e.proxyClient(t)
	consumers := e.plain(t)
	round := 0
	// clean writes a round and waits until the cleaner has left gappy batches in every topic
	// (a segment rolls at the next write after segment.ms).
	clean := func() {
		for _, topic := range topics {
			writeKeys(ctx, t, s, topic, codecs[strings.TrimPrefix(topic, prefix+"-")], txnOf(topic), round, 120)
		}
		round++
		deadline := time.Now().Add(90 * time.Second)
		for _, topic := range topics {
			for cleanedBatches(ctx, t, src, topic) == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("the source's cleaner did not clean %s", topic)
				}
				time.Sleep(300 * time.Millisecond)
				writeKeys(ctx, t, s, topic, codecs[strings.TrimPrefix(topic, prefix+"-")], txnOf(topic), 99, 1) // rolls the segment
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
			sameRecs(t, stage+": franz-go through offsetgate at read_committed, "+topic, consumeLevel(ctx, t, popts, topic, true),
				consumeLevel(ctx, t, sopts, topic, true))
			// A consumer whose offset lies in a gap resumes at the next surviving record, as on
			// the source, at both isolation levels.
			gaps := 0
			for i := 0; i < len(want) && gaps < 4; i++ {
				prev := int64(-1) // offsets before the first record left are a gap too
				if i > 0 {
					prev = want[i-1].Offset
				}
				if want[i].Offset == prev+1 {
					continue
				}
				gaps++
				at := prev + 1 + (want[i].Offset-prev-1)/2 // inside the gap
				for _, committed := range []bool{false, true} {
					if sf, pf := firstFrom(ctx, t, sopts, topic, at, committed), firstFrom(ctx, t, popts, topic, at, committed); sf != pf {
						t.Fatalf("%s: %s from offset %d (read_committed %v): the source's first record is at %d, through offsetgate %d", stage, topic, at, committed, sf, pf)
					}
				}
			}
			if gaps == 0 {
				t.Fatalf("%s: %s has no gap to resume in", stage, topic)
			}
			// Time lookups answer the source's offsets.
			sadm, padm := kadm.NewClient(src), kadm.NewClient(px)
			times := recordTimes(ctx, t, s, topic)
			for i := 0; i < len(times); i += max(1, len(times)/8) {
				for _, ms := range []int64{times[i], times[i] + 1} {
					so, err1 := sadm.ListOffsetsAfterMilli(ctx, ms, topic)
					po, err2 := padm.ListOffsetsAfterMilli(ctx, ms, topic)
					if err1 != nil || err2 != nil {
						t.Fatalf("time lookup: %v, %v", err1, err2)
					}
					sl, _ := so.Lookup(topic, 0)
					pl, _ := po.Lookup(topic, 0)
					if sl.Offset != pl.Offset || sl.Err != nil || pl.Err != nil {
						t.Fatalf("%s: %s: the first offset at or after %d ms is %d (%v) on the source, %d (%v) through offsetgate", stage, topic, ms, sl.Offset, sl.Err, pl.Offset, pl.Err)
					}
				}
			}
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
