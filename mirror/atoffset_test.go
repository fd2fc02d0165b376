package mirror_test

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/atoffset"
	"offsetgate/batch"
	"offsetgate/internal/testkafka"
	"offsetgate/mirror"
	"offsetgate/proxy"
	"offsetgate/rules"
	"offsetgate/wire"
)

// srcBatch builds a source batch as a source broker would hand it out.
func srcBatch(base int64, n int, epoch int32, attrs int16, ts int64) []byte {
	var recs []byte
	for i := 0; i < n; i++ {
		r := kmsg.Record{OffsetDelta: int32(i), TimestampDelta64: int64(i), Key: []byte(fmt.Sprintf("k%d", base+int64(i))),
			Value: []byte(fmt.Sprintf("v%d", base+int64(i)))}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		recs = r.AppendTo(recs)
	}
	b := kmsg.RecordBatch{FirstOffset: base, PartitionLeaderEpoch: epoch, Magic: 2, Attributes: attrs, LastOffsetDelta: int32(n - 1),
		FirstTimestamp: ts, MaxTimestamp: ts + int64(n-1), ProducerID: 7, ProducerEpoch: 1, FirstSequence: int32(base), NumRecords: int32(n), Records: recs}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[8:], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[17:], batch.CRC(out))
	return out
}

// handClient sends produce-at-offset requests with the magic header, batch sets of its own.
type handClient struct {
	t     testing.TB
	e     *env
	topic string
	conns map[int32]*wire.Conn
	px    *kgo.Client
}

func (e *env) hand(topic string) *handClient {
	px, err := kgo.NewClient(kgo.SeedBrokers(e.addr), kgo.DialTLSConfig(e.certs.ClientTLS(e.client)))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(px.Close)
	return &handClient{t: e.t, e: e, topic: topic, conns: map[int32]*wire.Conn{}, px: px}
}

func (h *handClient) send(ctx context.Context, part int32, batches ...[]byte) kmsg.ProduceResponseTopicPartition {
	h.t.Helper()
	var records []byte
	for _, b := range batches {
		records = append(records, b...)
	}
	return h.sendRaw(ctx, part, records)
}

// sendRaw sends one record set (concatenated batches) at offset.
func (h *handClient) sendRaw(ctx context.Context, part int32, records []byte) kmsg.ProduceResponseTopicPartition {
	h.t.Helper()
	md, err := kadm.NewClient(h.px).Metadata(ctx, h.topic)
	if err != nil {
		h.t.Fatal(err)
	}
	leader := md.Topics[h.topic].Partitions[part].Leader
	c := h.conns[leader]
	if c == nil {
		var addr string
		for _, br := range md.Brokers {
			if br.NodeID == leader {
				addr = fmt.Sprintf("%s:%d", br.Host, br.Port)
			}
		}
		c, err = wire.Dial(ctx, addr, h.e.certs.ClientTLS(h.e.client), nil, "hand-built")
		if err != nil {
			h.t.Fatal(err)
		}
		h.conns[leader] = c
		h.t.Cleanup(func() { c.Close() })
	}
	r, err := atOffset(ctx, c, h.topic, part, records)
	if err != nil {
		h.t.Fatal(err)
	}
	return r
}

func (e *env) createMirrorTopic(ctx context.Context, topic string, partitions int32) {
	e.t.Helper()
	px, err := kgo.NewClient(kgo.SeedBrokers(e.addr), kgo.DialTLSConfig(e.certs.ClientTLS(e.client)))
	if err != nil {
		e.t.Fatal(err)
	}
	defer px.Close()
	resps, err := kadm.NewClient(px).CreateTopics(ctx, partitions, 2, map[string]*string{rules.MarkKey: kmsg.StringPtr("true")}, topic)
	if err != nil || resps[topic].Err != nil {
		e.t.Fatalf("creating mirror topic: %v %v", err, resps[topic].Err)
	}
}

func msg(p kmsg.ProduceResponseTopicPartition) string {
	if p.ErrorMessage == nil {
		return ""
	}
	return *p.ErrorMessage
}

// Small holes are filled (the shift holds), a large hole starts a new segment; exact retries
// are acknowledged without a second write; overlaps, rewinds, lower epochs and batch kinds this
// version cannot mirror are refused with their documented codes; a destination that does not
// hold what offsetgate expects halts the partition.
func TestProduceAtOffsetRules(t *testing.T) {
	prefix := testkafka.Names(t, "r")
	e := newEnv(t, prefix, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	topic := prefix + "-t"
	e.createMirrorTopic(ctx, topic, 2)
	h := e.hand(topic)
	ts := time.Date(2021, 5, 6, 7, 8, 9, 0, time.UTC).UnixMilli()

	b0 := srcBatch(0, 10, 3, 0, ts)
	if p := h.send(ctx, 0, b0); p.ErrorCode != 0 || p.BaseOffset != 0 {
		t.Fatalf("first batch: %d %s", p.ErrorCode, msg(p))
	}
	// Exact retry: acknowledged, not written twice.
	if p := h.send(ctx, 0, b0); p.ErrorCode != 0 || p.BaseOffset != 0 {
		t.Fatalf("exact retry: %d %s", p.ErrorCode, msg(p))
	}
	// A small hole (10, 11) and two batches in one request.
	b1 := srcBatch(12, 10, 3, 0, ts+100)
	b2 := srcBatch(22, 5, 4, 0, ts+200)
	if p := h.send(ctx, 0, b1, b2); p.ErrorCode != 0 || p.BaseOffset != 12 {
		t.Fatalf("batches after a small hole: %d %s", p.ErrorCode, msg(p))
	}
	// A large hole: a new segment.
	b3 := srcBatch(100000, 5, 4, 0, ts+300)
	if p := h.send(ctx, 0, b3); p.ErrorCode != 0 {
		t.Fatalf("batch after a large hole: %d %s", p.ErrorCode, msg(p))
	}
	// Refusals.
	for name, c := range map[string]struct {
		b    []byte
		code int16
	}{
		"overlap with different content": {srcBatch(20, 4, 4, 0, ts), atoffset.ErrOutOfOrder},
		"lower leader epoch":             {srcBatch(100005, 2, 3, 0, ts), atoffset.ErrFencedEpoch},
		"control batch, not a marker":    {srcBatch(100005, 1, 4, batch.AttrControl|batch.AttrTransactional, ts), atoffset.ErrInvalidRecord},
		"bad crc":                        {append(srcBatch(100005, 2, 4, 0, ts)[:70:70], 'x'), atoffset.ErrInvalidRecord},
	} {
		if p := h.send(ctx, 0, c.b); p.ErrorCode != c.code || msg(p) == "" {
			t.Errorf("%s: code %d (%s), want %d with a message", name, p.ErrorCode, msg(p), c.code)
		}
	}

	// D holds: 0..9, fillers 10..11, 12..26, then source 100000.. at D 27.. (new segment).
	dst := count(ctx, t, e.pair.Dest, topic)[0]
	if dst != [2]int64{0, 32} {
		t.Fatalf("destination partition holds %v, want [0 32]", dst)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.pair.Dest.Addrs()...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []*kgo.Record
	for len(got) < 32 {
		got = append(got, cl.PollFetches(ctx).Records()...)
		if ctx.Err() != nil {
			t.Fatal(ctx.Err())
		}
	}
	for _, r := range got {
		switch {
		case r.Offset == 10 || r.Offset == 11:
			if r.Key != nil || r.Value != nil || len(r.Headers) != 1 || r.Headers[0].Key != batch.FillerHeader {
				t.Fatalf("offset %d is not a filler: %+v", r.Offset, r)
			}
		case r.Offset < 27:
			if string(r.Key) != fmt.Sprintf("k%d", r.Offset) {
				t.Fatalf("D offset %d holds %s (Δ = 0 expected)", r.Offset, r.Key)
			}
		default:
			if string(r.Key) != fmt.Sprintf("k%d", r.Offset-27+100000) {
				t.Fatalf("D offset %d holds %s (new segment expected)", r.Offset, r.Key)
			}
		}
	}
	// The mirrored end is told in source offsets.
	ends, err := kadm.NewClient(h.px).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := ends.Lookup(topic, 0); o.Offset != 100005 {
		t.Fatalf("mirrored end through offsetgate %d, want 100005", o.Offset)
	}

	// A write that did not come through offsetgate: the next at-offset write halts.
	direct, err := kgo.NewClient(kgo.SeedBrokers(e.pair.Dest.Addrs()...), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	if err := direct.ProduceSync(ctx, &kgo.Record{Partition: 1, Value: []byte("rogue")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if p := h.send(ctx, 1, srcBatch(0, 3, 0, 0, ts)); p.ErrorCode != atoffset.ErrHalted {
		t.Fatalf("after a rogue write: code %d (%s), want the partition halted", p.ErrorCode, msg(p))
	}
	// The write that revealed the mismatch landed where D put it; nothing is written after.
	atHalt := count(ctx, t, e.pair.Dest, topic)[1]
	if p := h.send(ctx, 1, srcBatch(3, 3, 0, 0, ts)); p.ErrorCode != atoffset.ErrHalted {
		t.Fatalf("a halted partition took a write: %d", p.ErrorCode)
	}
	mfs, _ := e.srv.Registry().Gather()
	halted := false
	for _, mf := range mfs {
		if mf.GetName() == "offsetgate_mirror_partition_halted" {
			for _, m := range mf.GetMetric() {
				halted = halted || m.GetGauge().GetValue() == 1
			}
		}
	}
	if !halted {
		t.Fatal("no halted-partition metric")
	}
	if n := count(ctx, t, e.pair.Dest, topic)[1]; n != atHalt {
		t.Fatalf("the halted partition holds %v: offsetgate wrote after the mismatch", n)
	}

	// offsetgate status reads the same from the ledger.
	st, err := mirror.Status(ctx, h.px, nil)
	if err != nil {
		t.Fatal(err)
	}
	var p0, p1 *mirror.PartitionStatus
	for i := range st {
		if st[i].Topic == topic {
			if st[i].Partition == 0 {
				p0 = &st[i]
			} else {
				p1 = &st[i]
			}
		}
	}
	if p0 == nil || p1 == nil {
		t.Fatalf("status does not list %s: %+v", topic, st)
	}
	if p0.End != 100005 || len(p0.Shifts) != 2 || p0.Fillers != 2 || p0.Epoch != 4 || p0.Halted != "" {
		t.Fatalf("status of partition 0: %+v", *p0)
	}
	if p1.Halted == "" {
		t.Fatalf("status does not show the halt: %+v", *p1)
	}

	// After a refused write, a request that does not start at the mirrored end is refused
	// rather than read as a hole (a pipelining client's next request after a failure).
	if p := h.send(ctx, 0, srcBatch(100010, 2, 4, 0, ts)); p.ErrorCode != atoffset.ErrOutOfOrder {
		t.Fatalf("a request past the mirrored end after a failure: code %d (%s)", p.ErrorCode, msg(p))
	}
	if p := h.send(ctx, 0, srcBatch(100005, 2, 4, 0, ts)); p.ErrorCode != 0 {
		t.Fatalf("resending from the mirrored end: code %d (%s)", p.ErrorCode, msg(p))
	}
}

// One offsetgate instance writes a mirror partition: a second instance (another instance id)
// is refused while the first one's lease holds, and writes nothing.
func TestSecondInstanceRefused(t *testing.T) {
	prefix := testkafka.Names(t, "o")
	first := newEnv(t, prefix, nil)
	second := newEnv(t, prefix, nil) // another listen address: another instance id
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic := prefix + "-t"
	first.createMirrorTopic(ctx, topic, 1)
	ts := time.Now().UnixMilli()
	if p := first.hand(topic).send(ctx, 0, srcBatch(0, 5, 0, 0, ts)); p.ErrorCode != 0 {
		t.Fatalf("first instance: %d %s", p.ErrorCode, msg(p))
	}
	p := second.hand(topic).send(ctx, 0, srcBatch(5, 5, 0, 0, ts))
	if p.ErrorCode != atoffset.ErrOwned || msg(p) == "" {
		t.Fatalf("second instance: code %d (%s), want POLICY_VIOLATION naming the owner", p.ErrorCode, msg(p))
	}
	if n := count(ctx, t, first.pair.Dest, topic)[0]; n != [2]int64{0, 5} {
		t.Fatalf("the partition holds %v after the refused write", n)
	}
}

// An instance whose lease ran out (paused, or idle) while another took the partition and wrote
// does not write on what it remembers: it reads what the ledger gained, refuses while the
// other's lease holds, and once that has run out too, continues exactly from where the other
// stopped (an exact retry of the other's last batch is acknowledged, the next batch lands
// after it).
func TestStaleInstanceRereadsLedger(t *testing.T) {
	prefix := testkafka.Names(t, "z")
	lease := func(c *proxy.Config) { c.OwnershipLease = 2 * time.Second }
	a := newEnv(t, prefix, lease)
	b := newEnv(t, prefix, lease)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic := prefix + "-t"
	a.createMirrorTopic(ctx, topic, 1)
	ts := time.Now().UnixMilli()
	ha, hb := a.hand(topic), b.hand(topic)
	if p := ha.send(ctx, 0, srcBatch(0, 5, 0, 0, ts)); p.ErrorCode != 0 {
		t.Fatalf("A: %d %s", p.ErrorCode, msg(p))
	}
	time.Sleep(2500 * time.Millisecond) // A's lease runs out
	if p := hb.send(ctx, 0, srcBatch(5, 5, 0, 0, ts)); p.ErrorCode != 0 {
		t.Fatalf("B after A's lease ran out: %d %s", p.ErrorCode, msg(p))
	}
	// A wakes up with a client that still thinks the mirror ends at 5.
	p := ha.send(ctx, 0, srcBatch(5, 5, 0, 0, ts))
	if p.ErrorCode != atoffset.ErrOwned {
		t.Fatalf("A while B's lease holds: code %d (%s), want POLICY_VIOLATION naming B", p.ErrorCode, msg(p))
	}
	if n := count(ctx, t, a.pair.Dest, topic)[0]; n != [2]int64{0, 10} {
		t.Fatalf("the partition holds %v, want [0 10]", n)
	}
	time.Sleep(2500 * time.Millisecond) // B's lease runs out: A may write again, from where B left
	if p := ha.send(ctx, 0, srcBatch(5, 5, 0, 0, ts)); p.ErrorCode != 0 {
		t.Fatalf("A resending B's last batch: code %d (%s), want an exact retry", p.ErrorCode, msg(p))
	}
	if p := ha.send(ctx, 0, srcBatch(10, 5, 0, 0, ts)); p.ErrorCode != 0 {
		t.Fatalf("A after B: code %d (%s)", p.ErrorCode, msg(p))
	}
	if n := count(ctx, t, a.pair.Dest, topic)[0]; n != [2]int64{0, 15} {
		t.Fatalf("the partition holds %v, want [0 15]", n)
	}
}

// An instance paused after planning a write and before appending its ledger entries, past
// its lease, wakes up after another instance took the partition over and wrote on: the
// destination itself refuses the stale append (the other instance's claim bumped the epoch of
// the ledger partition's producer), so the stale plan never enters the ledger nor reaches D,
// and a third instance that reads the ledger afterwards continues exactly after what B wrote.
// Without broker-side fencing the stale entries land after B's and the ledger's end goes back.
func TestPausedInstanceLedgerAppendFenced(t *testing.T) {
	prefix := testkafka.Names(t, "zf")
	lease := func(c *proxy.Config) { c.OwnershipLease = 2 * time.Second }
	var armed atomic.Bool
	paused, release := make(chan struct{}, 1), make(chan struct{})
	a := newEnv(t, prefix, func(c *proxy.Config) {
		lease(c)
		c.BeforeLedgerAppend = func(string, int32) {
			if armed.CompareAndSwap(true, false) {
				paused <- struct{}{}
				<-release
			}
		}
	})
	b := a.another(prefix, lease)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic := prefix + "-t"
	a.createMirrorTopic(ctx, topic, 1)
	ts := time.Now().UnixMilli()
	ha, hb := a.hand(topic), b.hand(topic)
	if p := ha.send(ctx, 0, srcBatch(0, 5, 0, 0, ts)); p.ErrorCode != 0 {
		t.Fatalf("A: %d %s", p.ErrorCode, msg(p))
	}
	armed.Store(true)
	stale := make(chan kmsg.ProduceResponseTopicPartition, 1)
	go func() { stale <- ha.send(ctx, 0, srcBatch(5, 5, 0, 0, ts)) }()
	select {
	case <-paused:
	case <-ctx.Done():
		t.Fatal("A never planned the write")
	}
	time.Sleep(2500 * time.Millisecond) // A's lease runs out while it is paused, its plan made
	for _, base := range []int64{5, 10} {
		if p := hb.send(ctx, 0, srcBatch(base, 5, 0, 0, ts)); p.ErrorCode != 0 {
			t.Fatalf("B at %d after A's lease ran out: %d %s", base, p.ErrorCode, msg(p))
		}
	}
	close(release)
	if p := <-stale; p.ErrorCode == 0 || !strings.Contains(msg(p), "took the partition over") {
		t.Fatalf("A's stale write after B took over: code %d (%s), want a refusal naming the takeover", p.ErrorCode, msg(p))
	}
	if n := count(ctx, t, a.pair.Dest, topic)[0]; n != [2]int64{0, 15} {
		t.Fatalf("the partition holds %v, want [0 15]", n)
	}
	// A third instance, once B's lease ran out, reads the ledger and goes on at 15.
	time.Sleep(2500 * time.Millisecond)
	c := a.another(prefix, lease)
	if p := c.hand(topic).send(ctx, 0, srcBatch(15, 5, 0, 0, ts)); p.ErrorCode != 0 {
		t.Fatalf("C after B: code %d (%s)", p.ErrorCode, msg(p))
	}
	if n := count(ctx, t, a.pair.Dest, topic)[0]; n != [2]int64{0, 20} {
		t.Fatalf("the partition holds %v, want [0 20]", n)
	}
}

// A takeover reads the newest snapshot and the ledger after it, not the whole ledger: A writes
// 60 batches with a snapshot every 20 ledger entries; B, once A's lease ran out, takes the
// partition over from a snapshot (its load metric says so), goes on exactly after A, and
// recognises an exact resend of A's last batch.
func TestTakeoverFromSnapshot(t *testing.T) {
	prefix := testkafka.Names(t, "sn")
	cfg := func(c *proxy.Config) { c.OwnershipLease = 2 * time.Second; c.SnapshotEvery = 20 }
	a := newEnv(t, prefix, cfg)
	b := a.another(prefix, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic := prefix + "-t"
	a.createMirrorTopic(ctx, topic, 1)
	ts := time.Now().UnixMilli()
	ha := a.hand(topic)
	for i := int64(0); i < 60; i++ {
		if p := ha.send(ctx, 0, srcBatch(i*3, 3, 0, 0, ts)); p.ErrorCode != 0 {
			t.Fatalf("A at %d: %d %s", i*3, p.ErrorCode, msg(p))
		}
	}
	if got := loads(t, a, "true"); got != 0 {
		t.Fatalf("A loaded the fresh partition from a snapshot (%d)", got)
	}
	time.Sleep(2500 * time.Millisecond) // A's lease runs out
	hb := b.hand(topic)
	if p := hb.send(ctx, 0, srcBatch(177, 3, 0, 0, ts)); p.ErrorCode != 0 {
		t.Fatalf("B resending A's last batch: %d %s, want an exact retry", p.ErrorCode, msg(p))
	}
	if p := hb.send(ctx, 0, srcBatch(180, 3, 0, 0, ts)); p.ErrorCode != 0 {
		t.Fatalf("B after A: %d %s", p.ErrorCode, msg(p))
	}
	if got := loads(t, b, "true"); got != 1 {
		t.Fatalf("B took the partition over %d times from a snapshot, want 1", got)
	}
	if n := count(ctx, t, a.pair.Dest, topic)[0]; n != [2]int64{0, 183} {
		t.Fatalf("the partition holds %v, want [0 183]", n)
	}
	// status (which reads the whole ledger) agrees.
	st, err := mirror.Status(ctx, hb.px, nil)
	if err != nil || len(st) == 0 {
		t.Fatalf("status: %v %v", st, err)
	}
	for _, p := range st {
		if p.Topic == topic && p.End != 183 {
			t.Fatalf("status: mirrored end %d, want 183", p.End)
		}
	}
}

// loads is how many partition takeovers an instance did, from a snapshot ("true") or not.
func loads(t *testing.T, e *env, fromSnapshot string) uint64 {
	t.Helper()
	mfs, err := e.srv.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "offsetgate_mirror_partition_load_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "snapshot" && l.GetValue() == fromSnapshot {
					return m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return 0
}

// A following mirror bootstrapped with three offsetgate instances goes on through another
// when the one it wrote through stops: it waits for the first one's lease, then the other
// takes the partitions over from the ledger; nothing is lost or written twice.
func TestMirrorFailsOverToAnotherInstance(t *testing.T) {
	prefix := testkafka.Names(t, "fo")
	lease := func(c *proxy.Config) { c.OwnershipLease = 3 * time.Second }
	a := newEnv(t, prefix, lease)
	b := a.another(prefix, lease)
	c := a.another(prefix, lease)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := a.pair.Source
	topic := prefix + "-t"
	if err := s.CreateTopic(ctx, topic, 4, 2, nil); err != nil {
		t.Fatal(err)
	}
	spread := kgo.RecordPartitioner(kgo.RoundRobinPartitioner())
	produceSource(ctx, t, s, topic, 400, spread)
	same := func() bool {
		return fmt.Sprint(count(ctx, t, s, topic)) == fmt.Sprint(count(ctx, t, a.pair.Dest, topic))
	}
	// The other instances' listeners are unreachable while A runs, so the run surely writes
	// through A first.
	_, bPort := splitPort(t, b.addr)
	_, cPort := splitPort(t, c.addr)
	var bOpen atomic.Bool
	var dialedB atomic.Int64
	cfg := a.mirrorConfig(topic)
	cfg.Proxy = []string{a.addr, b.addr, c.addr}
	cfg.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if _, p := splitPort(t, addr); p >= bPort && p < bPort+4 || p >= cPort && p < cPort+4 {
			if !bOpen.Load() {
				return nil, errors.New("B and C are not reachable yet")
			}
			dialedB.Add(1)
		}
		return (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
	}
	var progress syncBuf
	cfg.Progress, cfg.ProgressEvery = &progress, 300*time.Millisecond
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { _, err := mirror.Follow(fctx, cfg); done <- err }()
	deadline := time.Now().Add(60 * time.Second)
	for !same() {
		select {
		case err := <-done:
			t.Fatalf("the mirror ended: %v\n%s", err, progress.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the mirror did not catch up through A:\n%s", progress.String())
		}
		time.Sleep(200 * time.Millisecond)
	}

	a.stop()
	bOpen.Store(true)
	stoppedAt := time.Now()
	produceSource(ctx, t, s, topic, 400, spread)
	deadline = time.Now().Add(90 * time.Second)
	for !same() {
		select {
		case err := <-done:
			t.Fatalf("the mirror ended after A stopped: %v\n%s", err, progress.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the mirror did not go on through B or C: source %v, destination %v\n%s",
				count(ctx, t, s, topic), count(ctx, t, a.pair.Dest, topic), progress.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("caught up through another instance %v after A stopped", time.Since(stoppedAt).Round(100*time.Millisecond))
	if dialedB.Load() == 0 {
		t.Fatal("the mirror never connected to B or C")
	}
	// While it waited, its progress said for what.
	if out := progress.String(); !strings.Contains(out, "waiting for the partition's lease: partition owned by offsetgate instance") {
		t.Fatalf("the progress never said the mirror waited for A's lease:\n%s", out)
	}
	for p, se := range count(ctx, t, s, topic) {
		want := readAll(ctx, t, s, topic, p, int(se[1]-se[0]))
		got := readAll(ctx, t, a.pair.Dest, topic, p, int(se[1]-se[0]))
		for i := range want {
			if want[i] != got[i] {
				t.Fatalf("%s[%d] record %d: destination %+v, source %+v", topic, p, i, got[i], want[i])
			}
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("stopping the mirror: %v", err)
	}
}

func splitPort(t testing.TB, addr string) (string, int) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return host, p
}

// A consumer bootstrapped with two offsetgate instances carries on through the second when the
// one it read through stops: every record of the mirror topic once, in order, with the
// source's offsets.
func TestConsumerSurvivesInstanceLoss(t *testing.T) {
	prefix := testkafka.Names(t, "cl")
	a := newEnv(t, prefix, nil)
	b := a.another(prefix, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := a.pair.Source
	topic := prefix + "-t"
	if err := s.CreateTopic(ctx, topic, 2, 2, nil); err != nil {
		t.Fatal(err)
	}
	produceSource(ctx, t, s, topic, 600, kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if _, err := mirror.Once(ctx, a.mirrorConfig(topic)); err != nil {
		t.Fatal(err)
	}
	_, bPort := splitPort(t, b.addr)
	var bOpen atomic.Bool
	cl, err := kgo.NewClient(kgo.SeedBrokers(a.addr, b.addr),
		kgo.Dialer(func(ctx context.Context, network, addr string) (net.Conn, error) {
			if _, p := splitPort(t, addr); p >= bPort && p < bPort+4 && !bOpen.Load() {
				return nil, errors.New("B is not reachable yet")
			}
			c, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			tc := a.certs.ClientTLS(a.client).Clone()
			tc.ServerName, _ = splitPort(t, addr)
			return tls.Client(c, tc), nil
		}),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart(), 1: kgo.NewOffset().AtStart()}}),
		kgo.FetchMaxPartitionBytes(1024), kgo.RetryTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	next := map[int32]int64{0: 0, 1: 0}
	total := 0
	stopped := false
	var stoppedAt time.Time
	for total < 600 {
		fs := cl.PollRecords(ctx, 50)
		if ctx.Err() != nil {
			t.Fatalf("read %d of 600 records (next offsets %v)", total, next)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset != next[r.Partition] {
				t.Fatalf("%s[%d]: offset %d after %d: a record skipped or read twice", topic, r.Partition, r.Offset, next[r.Partition]-1)
			}
			next[r.Partition]++
			total++
		})
		if !stopped && total >= 100 {
			stopping := time.Now()
			a.stop() // the instance this consumer reads through goes away mid-read
			bOpen.Store(true)
			stopped, stoppedAt = true, time.Now()
			t.Logf("A stopped in %v", stoppedAt.Sub(stopping).Round(100*time.Millisecond))
		}
	}
	t.Logf("the rest read through B %v after A stopped", time.Since(stoppedAt).Round(100*time.Millisecond))
	if !stopped {
		t.Fatal("A never stopped: the consumer read everything before")
	}
}
