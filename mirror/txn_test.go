package mirror_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"offsetgate/batch"
	"offsetgate/internal/realclients"
	"offsetgate/internal/testkafka"
	"offsetgate/mirror"
	"offsetgate/verify"
)

// txnRec is a consumed record as the transaction tests compare it.
type txnRec struct {
	Partition int32
	Offset    int64
	Key       string
	Value     string
	Headers   string
}

// consumeLevel reads every partition of topic from the start at an isolation level until no
// record came for a while.
func consumeLevel(ctx context.Context, t testing.TB, opts []kgo.Opt, topic string, committed bool) []txnRec {
	t.Helper()
	level := kgo.ReadUncommitted()
	if committed {
		level = kgo.ReadCommitted()
	}
	cl, err := kgo.NewClient(append(opts, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(level), kgo.FetchMaxWait(200*time.Millisecond))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []txnRec
	idle := 0
	for idle < 8 {
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		fs := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			t.Fatal("consuming: the test's time ran out")
		}
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			var hb bytes.Buffer
			for _, h := range r.Headers {
				fmt.Fprintf(&hb, "%s=%s;", h.Key, h.Value)
			}
			out = append(out, txnRec{r.Partition, r.Offset, string(r.Key), string(r.Value), hb.String()})
			n++
		})
		if n == 0 {
			idle++
		} else {
			idle = 0
		}
	}
	sortRecs(out)
	return out
}

func sortRecs(rs []txnRec) {
	for i := 1; i < len(rs); i++ {
		for j := i; j > 0 && (rs[j].Partition < rs[j-1].Partition || rs[j].Partition == rs[j-1].Partition && rs[j].Offset < rs[j-1].Offset); j-- {
			rs[j], rs[j-1] = rs[j-1], rs[j]
		}
	}
}

func sameRecs(t testing.TB, what string, got, want []txnRec) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d records, the source's view has %d", what, len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%s: record %d is %+v, the source's is %+v", what, i, got[i], want[i])
		}
	}
}

// lastStable is each partition's latest offset at read_committed (the last stable offset).
func lastStable(ctx context.Context, t testing.TB, cl *kgo.Client, topic string) map[int32]int64 {
	t.Helper()
	offs, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	offs.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

// Transactional topics mirror exactly: two transactional producers (gzip and zstd) committing
// and aborting across three partitions, an idempotent producer between them, and a transaction
// left open while the mirror runs. Through offsetgate every batch is the source's (verify),
// franz-go and the Java consumer read the same records as on the source at both isolation
// levels, the open transaction stays invisible to read_committed until its marker is mirrored,
// and ListOffsets at read_committed answers the source's last stable offset.
func TestMirrorTransactions(t *testing.T) {
	prefix := testkafka.Names(t, "tx")
	e := newEnv(t, prefix, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := e.pair.Source
	topic := prefix + "-t"
	if err := s.CreateTopic(ctx, topic, 3, 2, nil); err != nil {
		t.Fatal(err)
	}
	producer := func(txnID string, codec kgo.CompressionCodec) *kgo.Client {
		opts := []kgo.Opt{kgo.SeedBrokers(s.Addrs()...), kgo.ProducerBatchCompression(codec), kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.ProducerLinger(0)}
		if txnID != "" {
			// Open for minutes under a loaded machine: never aborted by its timeout mid-test.
			opts = append(opts, kgo.TransactionalID(txnID), kgo.TransactionTimeout(5*time.Minute))
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	a, b := producer(prefix+"-a", kgo.GzipCompression()), producer(prefix+"-b", kgo.ZstdCompression())
	idem := producer("", kgo.NoCompression())
	produce := func(cl *kgo.Client, who string, round int) {
		for p := int32(0); p < 3; p++ {
			for i := 0; i < 3; i++ {
				r := &kgo.Record{Topic: topic, Partition: p, Key: []byte(fmt.Sprintf("%s-%d-%d", who, round, i)),
					Value:   []byte(fmt.Sprintf("%s.round%d.record%d", who, round, i)),
					Headers: []kgo.RecordHeader{{Key: "who", Value: []byte(who)}}}
				if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for round := 0; round < 4; round++ {
		if err := a.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		produce(a, "a", round)
		if err := b.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		produce(b, "b", round)
		produce(idem, "idem", round)
		if err := a.EndTransaction(ctx, kgo.TransactionEndTry(round%2 == 0)); err != nil {
			t.Fatal(err)
		}
		produce(b, "b2", round)
		if err := b.EndTransaction(ctx, kgo.TransactionEndTry(round%3 != 0)); err != nil {
			t.Fatal(err)
		}
	}
	// A transaction left open while the mirror runs.
	if err := a.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produce(a, "open", 9)
	produce(idem, "idem", 9)

	src := e.srcClient(t)
	px := e.proxyClient(t)
	compare := func(stage string) {
		t.Helper()
		if _, err := mirror.Once(ctx, e.mirrorConfig(topic)); err != nil {
			t.Fatalf("%s: mirror: %v", stage, err)
		}
		res, err := verify.Run(ctx, verify.Config{Source: src, Proxy: px, Topic: topic}, nil)
		if err != nil {
			t.Fatalf("%s: verify: %v", stage, err)
		}
		aborted := 0
		for _, r := range res {
			if r.Err != nil || r.Diff != nil || r.Tail != 0 || !r.Transactional {
				t.Fatalf("%s: verify: %s", stage, r.Line(topic))
			}
			aborted += r.Aborted
			t.Logf("%s: %s", stage, r.Line(topic))
		}
		if aborted == 0 {
			t.Fatalf("%s: verify compared no aborted transaction", stage)
		}
		sopts := []kgo.Opt{kgo.SeedBrokers(s.Addrs()...)}
		popts := []kgo.Opt{kgo.SeedBrokers(e.addr), kgo.DialTLSConfig(e.certs.ClientTLS(e.client))}
		for _, committed := range []bool{false, true} {
			want := consumeLevel(ctx, t, sopts, topic, committed)
			got := consumeLevel(ctx, t, popts, topic, committed)
			sameRecs(t, fmt.Sprintf("%s: franz-go through offsetgate, read_committed=%v", stage, committed), got, want)
		}
		if sl, pl := lastStable(ctx, t, src, topic), lastStable(ctx, t, px, topic); fmt.Sprint(sl) != fmt.Sprint(pl) {
			t.Fatalf("%s: last stable offsets through offsetgate %v, source %v", stage, pl, sl)
		}
		sameProducers(ctx, t, stage, src, px, topic, stage == "with a transaction open")
	}
	compare("with a transaction open")

	// The Java admin client's view of the same (kafka-transactions.sh describe-producers), through
	// a plaintext offsetgate and on the source: the same table, the open transaction included
	// (its rows in any order: a broker lists its producers in its map's order).
	consumers := e.plain(t)
	rows := func(table string) string {
		lines := strings.Split(strings.TrimSpace(table), "\n")
		for i := range lines {
			lines[i] = strings.TrimRight(lines[i], " \t")
		}
		sort.Strings(lines[min(1, len(lines)):])
		return strings.Join(lines, "\n")
	}
	for p := 0; p < 3; p++ {
		want := rows(kafkaTool(ctx, t, "transactions", "--bootstrap-server", s.Addrs()[0], "describe-producers", "--topic", topic, "--partition", fmt.Sprint(p)))
		got := rows(kafkaTool(ctx, t, "transactions", "--bootstrap-server", consumers, "describe-producers", "--topic", topic, "--partition", fmt.Sprint(p)))
		if got != want || !strings.Contains(want, "ProducerId") || len(strings.Split(strings.TrimSpace(want), "\n")) < 3 {
			t.Fatalf("kafka-transactions.sh describe-producers of partition %d through offsetgate:\n%s\non the source:\n%s", p, got, want)
		}
		if p == 0 {
			t.Logf("kafka-transactions.sh describe-producers through offsetgate, as on the source:\n%s", got)
		}
	}

	// The open transaction's records are invisible to read_committed until its marker is
	// mirrored; then they appear, as on the source.
	if err := a.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	compare("after the open transaction committed")

	// The Java consumer, at both isolation levels, through a second (plaintext) offsetgate.
	for _, level := range []string{"read_committed", "read_uncommitted"} {
		want := consumeLevel(ctx, t, []kgo.Opt{kgo.SeedBrokers(s.Addrs()...)}, topic, level == "read_committed")
		got, err := realclients.JavaConsumeAt(ctx, consumers, topic, len(want), 60000, level)
		if err != nil {
			t.Fatalf("Java consumer at %s: %v", level, err)
		}
		byPart := map[string]bool{}
		for _, r := range want {
			byPart[fmt.Sprintf("%d/%d/%s", r.Partition, r.Offset, r.Key)] = true
		}
		for _, r := range got {
			if !byPart[fmt.Sprintf("%d/%d/%s", r.Partition, r.Offset, r.Key)] {
				t.Fatalf("Java at %s read %+v, which the source's view does not hold", level, r)
			}
		}
		if len(got) != len(want) {
			t.Fatalf("Java at %s read %d records, want %d", level, len(got), len(want))
		}
	}

	// What a consumer of D itself sees (docs/DESIGN.md): every data record, aborted ones too
	// (D holds them as plain batches), and filler records where the markers are.
	direct := consumeLevel(ctx, t, []kgo.Opt{kgo.SeedBrokers(e.pair.Dest.Addrs()...)}, topic, true)
	all := consumeLevel(ctx, t, []kgo.Opt{kgo.SeedBrokers(s.Addrs()...)}, topic, false)
	fillers, aborted := 0, 0
	for _, r := range direct {
		switch {
		case r.Headers == batch.FillerHeader+"=\x01;":
			fillers++
		case r.Key != "" && r.Key[0] == 'a' && r.Key[2] == '1': // round 1 of producer a aborted
			aborted++
		}
	}
	if len(direct)-fillers != len(all) || fillers == 0 || aborted == 0 {
		t.Fatalf("direct read_committed consumer of D: %d records (%d fillers, %d of an aborted transaction); the source holds %d data records",
			len(direct), fillers, aborted, len(all))
	}
}

// kafkaTool runs one of Apache Kafka's command-line tools (scripts/kafka-tool) and returns
// what it printed.
func kafkaTool(ctx context.Context, t testing.TB, args ...string) string {
	t.Helper()
	root, err := testkafka.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(root, "scripts", "kafka-tool")}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kafka-tool %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// sameProducers compares DescribeProducers through offsetgate with the source's: the same
// producers, epochs, last sequences and timestamps, coordinator epochs and open transactions'
// first offsets, partition by partition (only the leader differs). open: a transaction must
// show open somewhere.
func sameProducers(ctx context.Context, t testing.TB, stage string, src, px *kgo.Client, topic string, open bool) {
	t.Helper()
	list := func(cl *kgo.Client) []string {
		ps, err := kadm.NewClient(cl).DescribeProducers(ctx, kadm.TopicsSet{topic: {0: {}, 1: {}, 2: {}}})
		if err != nil {
			t.Fatalf("%s: DescribeProducers: %v", stage, err)
		}
		var out []string
		for _, p := range ps.SortedProducers() {
			out = append(out, fmt.Sprintf("p%d pid %d epoch %d seq %d ts %d coord %d txn %d", p.Partition, p.ProducerID,
				p.ProducerEpoch, p.LastSequence, p.LastTimestamp, p.CoordinatorEpoch, p.CurrentTxnStartOffset))
		}
		for _, tp := range ps {
			for _, pp := range tp.Partitions {
				if pp.Err != nil {
					t.Fatalf("%s: DescribeProducers of partition %d: %v", stage, pp.Partition, pp.Err)
				}
			}
		}
		return out
	}
	want, got := list(src), list(px)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s: DescribeProducers through offsetgate:\n%s\nthe source's:\n%s", stage, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	opened := 0
	for _, p := range want {
		if !strings.HasSuffix(p, " txn -1") {
			opened++
		}
	}
	if len(want) == 0 || open != (opened > 0) {
		t.Fatalf("%s: the source lists %d producers, %d with a transaction open", stage, len(want), opened)
	}
	t.Logf("%s: DescribeProducers: %d producers, the source's", stage, len(want))
}

// cuttable is a dialer whose connections a test can cut at once, and which refuses new ones
// once cut: an application "killed" mid-transaction, without the chance to abort.
type cuttable struct {
	mu    sync.Mutex
	conns []net.Conn
	cut   bool
	tc    *tls.Config
}

func (c *cuttable) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cut {
		return nil, errors.New("this process was killed")
	}
	d := &tls.Dialer{Config: c.tc}
	conn, err := d.DialContext(ctx, network, addr)
	if err == nil {
		c.conns = append(c.conns, conn)
	}
	return conn, err
}

func (c *cuttable) kill() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cut = true
	for _, conn := range c.conns {
		conn.Close()
	}
}

// A consume-transform-produce application (franz-go's GroupTransactSession: KIP-447
// TxnOffsetCommit with the group's generation and member) reads a mirror topic through
// offsetgate and writes its results through offsetgate, transactionally. Killed in the middle
// of a transaction and restarted, it ends with each input record's result exactly once in the
// output's read_committed view, and its committed offsets read back in source terms.
func TestExactlyOnceThroughOffsetgate(t *testing.T) {
	prefix := testkafka.Names(t, "eos")
	e := newEnv(t, prefix, shifted)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	in, out, group := prefix+"-in", prefix+"-out", prefix+"-app"
	if err := e.pair.Source.CreateTopic(ctx, in, 2, 2, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.pair.Dest.CreateTopic(ctx, out, 1, 2, nil); err != nil {
		t.Fatal(err)
	}
	// The source's log starts at 250: the mirror has a shift, so the commits through offsetgate
	// must be translated to be right.
	const total = 200
	produceSource(ctx, t, e.pair.Source, in, total+500, kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	sadm, err := e.pair.Source.Admin()
	if err != nil {
		t.Fatal(err)
	}
	defer sadm.Close()
	if _, err := sadm.DeleteRecords(ctx, kadm.Offsets{in: {0: {Topic: in, Partition: 0, At: 250}, 1: {Topic: in, Partition: 1, At: 250}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := mirror.Once(ctx, e.mirrorConfig(in)); err != nil {
		t.Fatal(err)
	}
	if d, s := count(ctx, t, e.pair.Dest, in)[0], count(ctx, t, e.pair.Source, in)[0]; d[1] == s[1] {
		t.Fatalf("the mirror has no shift (destination %v, source %v): the test would not show a translation", d, s)
	}
	app := func(d *cuttable) *kgo.GroupTransactSession {
		sess, err := kgo.NewGroupTransactSession(kgo.SeedBrokers(e.addr), kgo.Dialer(d.dial),
			kgo.TransactionalID(prefix+"-tx"), kgo.ConsumerGroup(group), kgo.ConsumeTopics(in),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.RequireStableFetchOffsets(),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DefaultProduceTopic(out),
			kgo.FetchMaxBytes(4000), kgo.TransactionTimeout(20*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return sess
	}
	// run processes polls, one transaction each, until stop says so; it returns the records it
	// put into committed transactions.
	run := func(sess *kgo.GroupTransactSession, stop func(done int) bool) int {
		done := 0
		for !stop(done) {
			pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
			fs := sess.PollFetches(pctx)
			pcancel()
			if ctx.Err() != nil {
				t.Fatal("the application ran out of time")
			}
			if len(fs.Records()) == 0 {
				if done > 0 || fs.Err0() == nil {
					return done
				}
				continue
			}
			if err := sess.Begin(); err != nil {
				t.Fatal(err)
			}
			for _, r := range fs.Records() {
				sess.Produce(ctx, &kgo.Record{Key: []byte(fmt.Sprintf("%d/%d", r.Partition, r.Offset)), Value: r.Value}, nil)
			}
			committed, err := sess.End(ctx, kgo.TryCommit)
			if err != nil {
				t.Fatalf("ending a transaction: %v", err)
			}
			if committed {
				done += len(fs.Records())
			}
		}
		return done
	}
	tc := e.certs.ClientTLS(e.client)
	first := &cuttable{tc: tc}
	s1 := app(first)
	run(s1, func(done int) bool { return done >= 60 })
	// One more transaction, killed before it ends.
	pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
	fs := s1.PollFetches(pctx)
	pcancel()
	if len(fs.Records()) == 0 {
		t.Fatal("nothing left to process in the transaction that is killed")
	}
	if err := s1.Begin(); err != nil {
		t.Fatal(err)
	}
	for _, r := range fs.Records() {
		s1.ProduceSync(ctx, &kgo.Record{Key: []byte(fmt.Sprintf("%d/%d", r.Partition, r.Offset)), Value: r.Value})
	}
	first.kill()
	defer s1.Close()

	s2 := app(&cuttable{tc: tc})
	defer s2.Close()
	run(s2, func(int) bool { return false })

	// The output's committed view: every input record's result once.
	results := consumeLevel(ctx, t, []kgo.Opt{kgo.SeedBrokers(e.addr), kgo.DialTLSConfig(tc)}, out, true)
	seen := map[string]int{}
	for _, r := range results {
		seen[r.Key]++
	}
	for k, n := range seen {
		if n != 1 {
			t.Fatalf("input record %s has %d results", k, n)
		}
	}
	if len(seen) != total {
		t.Fatalf("%d input records have a result, want %d", len(seen), total)
	}
	// The group's committed offsets, through offsetgate, are the source's ends.
	offs, err := kadm.NewClient(e.proxyClient(t)).FetchOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	for p, se := range count(ctx, t, e.pair.Source, in) {
		if o, ok := offs.Lookup(in, p); !ok || o.At != se[1] {
			t.Fatalf("committed offset of %s[%d] through offsetgate %v, the source's end %d", in, p, o.At, se[1])
		}
	}
}
