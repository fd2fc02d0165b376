package mirror_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"offsetgate/catalog"
	"offsetgate/internal/testkafka"
	"offsetgate/ledger"
	"offsetgate/mirror"
	"offsetgate/rawread"
)

// txnCost is what mirroring one topic cost: the run's time for its source bytes, and the
// ledger the destination holds for it.
type txnCost struct {
	records, txns int
	sourceBytes   int64
	took          time.Duration
	ledgerBytes   int64
	ledgerEntries int
}

// mirrorCost fills a 2-partition source topic with n records of size bytes, produced chunk
// records at a time (the same batches either way), each chunk a transaction when txn is set,
// mirrors it once and measures.
func mirrorCost(ctx context.Context, t testing.TB, e *env, topic string, n, size, chunk int, txn bool) txnCost {
	s := e.pair.Source
	if err := s.CreateTopic(ctx, topic, 2, 1, nil); err != nil {
		t.Fatal(err)
	}
	opts := []kgo.Opt{kgo.SeedBrokers(s.Addrs()...), kgo.DefaultProduceTopic(topic), kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()), kgo.ProducerLinger(time.Millisecond)}
	if txn {
		opts = append(opts, kgo.TransactionalID(topic+"-tx"))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	val := make([]byte, size)
	c := txnCost{records: n}
	for i := 0; i < n; {
		k := min(n-i, chunk)
		if txn {
			if err := cl.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
		}
		var rs []*kgo.Record
		for j := 0; j < k; j++ {
			rs = append(rs, &kgo.Record{Value: val})
		}
		if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if txn {
			if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
				t.Fatal(err)
			}
			c.txns++
		}
		i += k
	}
	start := time.Now()
	sum, err := mirror.Once(ctx, e.mirrorConfig(topic))
	if err != nil {
		t.Fatal(err)
	}
	c.took = time.Since(start)
	for _, p := range sum.Partitions {
		c.sourceBytes += p.Bytes
	}
	md, err := kgo.NewClient(kgo.SeedBrokers(e.pair.Dest.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer md.Close()
	lp, err := rawread.Lookup(ctx, md, topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	for p := int32(0); p < 2; p++ {
		recs, _, err := rawread.Records(ctx, md, ledger.Topic(catalog.IDString(lp.TopicID)), p, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			c.ledgerBytes += int64(len(r.Key) + len(r.Value))
			c.ledgerEntries++
		}
	}
	return c
}

// BenchmarkMirrorTransactional reports what transactions cost the mirror: throughput of a
// transactional topic (10 records per transaction) against a dense one of the same records,
// and the ledger bytes per transaction, in one run:
//
//	go test -run XXX -bench MirrorTransactional -benchtime 1x ./mirror/
func BenchmarkMirrorTransactional(b *testing.B) {
	const n, size, perTxn = 20000, 512, 10
	for i := 0; i < b.N; i++ {
		prefix := testkafka.Names(b, "tb") + fmt.Sprint(i)
		e := newEnvB(b, prefix)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		dense := mirrorCost(ctx, b, e, prefix+"-dense", n, size, perTxn, false)
		txn := mirrorCost(ctx, b, e, prefix+"-txn", n, size, perTxn, true)
		cancel()
		dMBps := float64(dense.sourceBytes) / 1e6 / dense.took.Seconds()
		tMBps := float64(txn.sourceBytes) / 1e6 / txn.took.Seconds()
		perTxnLedger := float64(txn.ledgerBytes-dense.ledgerBytes) / float64(txn.txns)
		b.ReportMetric(dMBps, "dense-MB/s")
		b.ReportMetric(tMBps, "txn-MB/s")
		b.ReportMetric(tMBps/dMBps, "txn/dense")
		b.ReportMetric(perTxnLedger, "ledger-B/txn")
		b.Logf("dense: %d records, %.1f MB in %v (%.1f MB/s), ledger %d entries, %d bytes", dense.records, float64(dense.sourceBytes)/1e6, dense.took.Round(time.Millisecond), dMBps, dense.ledgerEntries, dense.ledgerBytes)
		b.Logf("transactional: %d records in %d transactions of %d, %.1f MB in %v (%.1f MB/s), ledger %d entries, %d bytes",
			txn.records, txn.txns, perTxn, float64(txn.sourceBytes)/1e6, txn.took.Round(time.Millisecond), tMBps, txn.ledgerEntries, txn.ledgerBytes)
		b.Logf("transactional/dense throughput %.2f; ledger bytes per transaction beyond the dense topic's: %.0f", tMBps/dMBps, perTxnLedger)
	}
}
