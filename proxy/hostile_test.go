package proxy_test

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/catalog"
	"offsetgate/internal/testcerts"
	"offsetgate/ledger"
	"offsetgate/proxy"
	"offsetgate/rules"
)

// instance is one offsetgate in front of the shared destination, as a client sees it.
type instance struct {
	name string
	addr string
}

// hostile is two offsetgate instances in front of the same destination: A (where the mirror
// topic is created and written) and B, started before the topic existed, which learns of it
// only as a second instance does.
type hostile struct {
	*mirrorEnv
	a, b  instance
	topic string
	id    catalog.TopicID
}

func newHostile(t *testing.T) *hostile {
	prefix := "mirror-" + testNames(t)
	e := newMirrorEnv(t, prefix)
	second := startProxy(t, e.d, "goroutine", func(c *proxy.Config) {
		listen := c.Listen
		*c = e.cfg
		c.Listen, c.Transport = listen, "goroutine"
	})
	h := &hostile{mirrorEnv: e, a: instance{"A", e.p.addr}, b: instance{"B (has not seen the topic)", second.addr}, topic: prefix + "-t"}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.createMirror(ctx, e.mirror, h.topic, 2, nil); err != nil {
		t.Fatal(err)
	}
	// One produce-at-offset write through A: the topic's ledger exists from then on.
	if p := h.writeAt(ctx, 0); p.ErrorCode != 0 {
		t.Fatalf("produce-at-offset by the approved client: code %d", p.ErrorCode)
	}
	adm, err := e.d.Admin()
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	md, err := adm.Metadata(ctx, h.topic)
	if err != nil {
		t.Fatal(err)
	}
	h.id = md.Topics[h.topic].ID
	return h
}

// writeAt writes one batch at source offset base into partition 0 of the mirror topic through
// A, produce-at-offset as the approved mirroring client, and returns the partition's answer.
func (h *hostile) writeAt(ctx context.Context, base int64) kmsg.ProduceResponseTopicPartition {
	h.t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(11)
	req.Acks, req.TimeoutMillis = -1, 10000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = h.topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = 0, batchAt(base)
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return sendWithMagic(ctx, h.t, h.client(h.mirror), h.certs.ClientTLS(h.mirror), req).Topics[0].Partitions[0]
}

func testNames(t *testing.T) string {
	return strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
}

// dial opens a raw TLS connection, as the given identity, to the offsetgate broker listener
// that stands for node (the instance's listen port + 1 + node id).
func (h *hostile) dial(inst instance, kp *testcerts.KeyPair, node int32) *rawConn {
	h.t.Helper()
	host, port := splitHostPort(h.t, inst.addr)
	addr := fmt.Sprintf("%s:%d", host, port+1+int(node))
	c, err := tls.Dial("tcp", addr, h.certs.ClientTLS(kp))
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { c.Close() })
	return &rawConn{t: h.t, c: c}
}

func splitHostPort(t *testing.T, addr string) (string, int) {
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			p, err := strconv.Atoi(addr[i+1:])
			if err != nil {
				t.Fatal(err)
			}
			return addr[:i], p
		}
	}
	t.Fatalf("no port in %s", addr)
	return "", 0
}

// leader is the destination node leading a partition.
func (h *hostile) leader(ctx context.Context, topic string, p int32) int32 {
	h.t.Helper()
	l, _, err := h.d.Leader(ctx, topic, p)
	if err != nil {
		h.t.Fatal(err)
	}
	return l
}

// overlong is a Produce v11 request frame whose transactional id length is the overlong
// 5-byte unsigned varint 80 80 80 80 10: Kafka's ByteUtils.readUnsignedVarint reads it as 0
// (a null id), kmsg refuses it.
func overlong(topic string, p int32, records []byte, corr int32) []byte {
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(11)
	req.Acks, req.TimeoutMillis = -1, 10000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = p, records
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	const clientID = "hostile"
	frame := kmsg.NewRequestFormatter(kmsg.FormatterClientID(clientID)).AppendRequest(nil, req, corr)
	bodyAt := 4 + 2 + 2 + 4 + 2 + len(clientID) + 1 // size, key, version, corr, client id, header tags
	if frame[bodyAt] != 0 {
		panic("the null transactional id is not where it was expected")
	}
	out := append(append(append([]byte{}, frame[:bodyAt]...), 0x80, 0x80, 0x80, 0x80, 0x10), frame[bodyAt+1:]...)
	binary.BigEndian.PutUint32(out, uint32(len(out)-4))
	return out
}

// recordBatch is one record (a tombstone when value is nil) in a batch a broker takes.
func recordBatch(key, value []byte) []byte {
	rec := kmsg.Record{Key: key, Value: value}
	rec.Length = int32(len(rec.AppendTo(nil)) - 1)
	now := time.Now().UnixMilli()
	b := kmsg.RecordBatch{Magic: 2, FirstTimestamp: now, MaxTimestamp: now, ProducerID: -1, ProducerEpoch: -1,
		FirstSequence: -1, NumRecords: 1, Records: rec.AppendTo(nil)}
	raw := b.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[8:], uint32(len(raw)-12))
	binary.BigEndian.PutUint32(raw[17:], crc32c(raw[21:]))
	return raw
}

// closedOrRefused sends a crafted frame and reports whether offsetgate closed the connection
// without answering.
func closedWithoutAnswer(r *rawConn, frame []byte) bool {
	if _, err := r.c.Write(frame); err != nil {
		return true
	}
	_, err := r.readFrame()
	return errors.Is(err, io.EOF) || err != nil && !isTimeout(err)
}

func isTimeout(err error) bool {
	var ne interface{ Timeout() bool }
	return errors.As(err, &ne) && ne.Timeout()
}

// tombstoned reports whether the marks partition holds, from offset from to its end, a
// tombstone keyed key.
func (h *hostile) tombstoned(ctx context.Context, from int64, key string) bool {
	h.t.Helper()
	end := h.end(ctx, catalog.MarksTopic, 0)
	if end <= from {
		return false
	}
	cl, err := h.d.Client(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
		catalog.MarksTopic: {0: kgo.NewOffset().At(from)},
	}))
	if err != nil {
		h.t.Fatal(err)
	}
	defer cl.Close()
	for at := from; at < end; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			h.t.Fatalf("reading %s from %d to %d: %v", catalog.MarksTopic, from, end, err)
		}
		for _, e := range fs.Errors() {
			h.t.Fatalf("reading %s: %v", catalog.MarksTopic, e.Err)
		}
		found := false
		fs.EachRecord(func(r *kgo.Record) {
			at = r.Offset + 1
			if string(r.Key) == key && r.Value == nil {
				found = true
			}
		})
		if found {
			return true
		}
	}
	return false
}

func (h *hostile) end(ctx context.Context, topic string, p int32) int64 {
	return hwm(ctx, h.t, h.d, topic, p)
}

// Requests of judged apis that kmsg cannot decode are refused (the connection closed), even
// where Kafka would read them: a Produce into a mirror partition, and a tombstone into
// offsetgate's marks that would silently un-mark the topic. Through both instances.
func TestUndecodableRequestsRefused(t *testing.T) {
	h := newHostile(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	marksEnd := h.end(ctx, catalog.MarksTopic, 0)
	for _, inst := range []instance{h.b, h.a} {
		r := h.dial(inst, h.other, h.leader(ctx, h.topic, 1))
		if !closedWithoutAnswer(r, overlong(h.topic, 1, oneBatch(), 1)) {
			t.Errorf("%s: an overlong-varint Produce into a mirror partition was answered", inst.name)
		}
		r = h.dial(inst, h.mirror, h.leader(ctx, catalog.MarksTopic, 0))
		tomb := recordBatch([]byte(hex.EncodeToString(h.id[:])), nil)
		if !closedWithoutAnswer(r, overlong(catalog.MarksTopic, 0, tomb, 1)) {
			t.Errorf("%s: an overlong-varint tombstone into %s was answered", inst.name, catalog.MarksTopic)
		}
	}
	time.Sleep(500 * time.Millisecond) // a write that got through would be visible by now
	if n := h.end(ctx, h.topic, 1); n != 0 {
		t.Fatalf("the mirror partition holds %d records written by an undecodable request", n)
	}
	// Other tests mark their own topics in the same shared destination, so the marks topic
	// may grow meanwhile: what must not be there is a tombstone for this topic's mark.
	if key := hex.EncodeToString(h.id[:]); h.tombstoned(ctx, marksEnd, key) {
		t.Fatalf("a tombstone for %s got into %s", key, catalog.MarksTopic)
	}
	// The mark still holds: an unapproved client is still refused.
	if err := produceErr(ctx, h.client(h.other, kgo.RecordRetries(1)), h.topic, 1); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("after the attack, an unapproved producer to the mirror topic: %v", err)
	}
}

// Every api that can write, delete or alter a topic is judged, with ids looked up like names:
// transaction markers, deletion by id, share-group reads by id, the whole-config AlterConfigs
// and unclean elections. Through the instance that has not seen the topic, then the other.
func TestWritingApisJudged(t *testing.T) {
	h := newHostile(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ledgerTopic := ledger.Topic(catalog.IDString(h.id))
	adm, err := h.d.Admin()
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	lmd, err := adm.Metadata(ctx, ledgerTopic)
	if err != nil || lmd.Topics[ledgerTopic].Err != nil {
		t.Fatalf("the ledger topic %s: %v %v", ledgerTopic, err, lmd.Topics[ledgerTopic].Err)
	}
	ledgerID := lmd.Topics[ledgerTopic].ID
	retention := directConfigs(ctx, t, h.d, h.topic)["retention.ms"]

	for _, inst := range []instance{h.b, h.a} {
		// Deleting a ledger topic and the mirror topic by id (DeleteTopics v6).
		r := h.dial(inst, h.other, h.leader(ctx, h.topic, 0))
		del := kmsg.NewPtrDeleteTopicsRequest()
		del.SetVersion(6)
		del.TimeoutMillis = 10000
		for _, id := range []catalog.TopicID{ledgerID, h.id} {
			dt := kmsg.NewDeleteTopicsRequestTopic()
			dt.TopicID = id
			del.Topics = append(del.Topics, dt)
		}
		dresp := kmsg.NewPtrDeleteTopicsResponse()
		r.roundTrip(del, dresp)
		for _, dt := range dresp.Topics {
			if dt.ErrorCode != rules.ErrTopicAuthorization {
				t.Errorf("%s: DeleteTopics by id of %x: code %d, want TOPIC_AUTHORIZATION_FAILED", inst.name, dt.TopicID, dt.ErrorCode)
			}
		}
		// A share-group read of the mirror topic by id.
		sf := kmsg.NewPtrShareFetchRequest()
		sf.GroupID, sf.MemberID = kmsg.StringPtr("hostile-share"), kmsg.StringPtr("m")
		st := kmsg.NewShareFetchRequestTopic()
		st.TopicID = h.id
		sp := kmsg.NewShareFetchRequestTopicPartition()
		sp.Partition = 0
		st.Partitions = append(st.Partitions, sp)
		sf.Topics = append(sf.Topics, st)
		sresp := kmsg.NewPtrShareFetchResponse()
		h.dial(inst, h.other, h.leader(ctx, h.topic, 0)).roundTrip(sf, sresp)
		if len(sresp.Topics) != 1 || sresp.Topics[0].Partitions[0].ErrorCode != rules.ErrPolicyViolation {
			t.Errorf("%s: ShareFetch of the mirror topic by id: %+v", inst.name, sresp.Topics)
		}
		// offsetgate's own topics are read only by approved mirroring clients.
		for _, who := range []struct {
			kp   *testcerts.KeyPair
			want int16
		}{{h.other, rules.ErrTopicAuthorization}, {h.mirror, 0}} {
			fr := kmsg.NewPtrFetchRequest()
			fr.SetVersion(12) // topics by name
			fr.ReplicaID, fr.MaxBytes, fr.MaxWaitMillis = -1, 1<<20, 10
			ft := kmsg.NewFetchRequestTopic()
			ft.Topic = catalog.MarksTopic
			fp := kmsg.NewFetchRequestTopicPartition()
			fp.PartitionMaxBytes = 1 << 20
			ft.Partitions = append(ft.Partitions, fp)
			fr.Topics = append(fr.Topics, ft)
			fresp := kmsg.NewPtrFetchResponse()
			h.dial(inst, who.kp, h.leader(ctx, catalog.MarksTopic, 0)).roundTrip(fr, fresp)
			if len(fresp.Topics) != 1 || fresp.Topics[0].Partitions[0].ErrorCode != who.want {
				t.Errorf("%s: reading %s: %+v, want code %d", inst.name, catalog.MarksTopic, fresp.Topics, who.want)
			}
		}
		// Transaction markers into the mirror topic and a ledger.
		for _, target := range []struct {
			topic string
			p     int32
		}{{h.topic, 1}, {ledgerTopic, 0}} {
			if code := h.addToTxn(ctx, inst, target.topic, target.p); code != rules.ErrTopicAuthorization {
				t.Errorf("%s: AddPartitionsToTxn of %s[%d]: code %d, want TOPIC_AUTHORIZATION_FAILED", inst.name, target.topic, target.p, code)
			}
		}
		// The legacy AlterConfigs with the four settings it used to check: the rest (retention
		// among them) would go back to the broker's defaults.
		ac := kmsg.NewPtrAlterConfigsRequest()
		res := kmsg.NewAlterConfigsRequestResource()
		res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeTopic, h.topic
		for k, v := range map[string]string{"compression.type": "producer", "message.timestamp.type": "CreateTime",
			"message.timestamp.before.max.ms": "9223372036854775807", "message.timestamp.after.max.ms": "9223372036854775807"} {
			c := kmsg.NewAlterConfigsRequestResourceConfig()
			c.Name, c.Value = k, kmsg.StringPtr(v)
			res.Configs = append(res.Configs, c)
		}
		ac.Resources = append(ac.Resources, res)
		aresp := kmsg.NewPtrAlterConfigsResponse()
		h.dial(inst, h.mirror, h.leader(ctx, h.topic, 0)).roundTrip(ac, aresp)
		if len(aresp.Resources) != 1 || aresp.Resources[0].ErrorCode != rules.ErrInvalidConfig {
			t.Errorf("%s: AlterConfigs resetting retention of a mirror topic: %+v", inst.name, aresp.Resources)
		}
		// An unclean election of a mirror partition.
		el := kmsg.NewPtrElectLeadersRequest()
		el.SetVersion(2)
		el.ElectionType = 1
		et := kmsg.NewElectLeadersRequestTopic()
		et.Topic, et.Partitions = h.topic, []int32{0}
		el.Topics = append(el.Topics, et)
		eresp := kmsg.NewPtrElectLeadersResponse()
		h.dial(inst, h.mirror, h.leader(ctx, h.topic, 0)).roundTrip(el, eresp)
		if len(eresp.Topics) != 1 || eresp.Topics[0].Partitions[0].ErrorCode != rules.ErrPolicyViolation {
			t.Errorf("%s: unclean election of a mirror partition: %+v", inst.name, eresp.Topics)
		}
	}
	// Nothing happened on the destination.
	if md, err := adm.Metadata(ctx, ledgerTopic, h.topic); err != nil || md.Topics[ledgerTopic].Err != nil || md.Topics[h.topic].Err != nil {
		t.Fatalf("a topic was deleted: %v %+v", err, md.Topics)
	}
	if n := h.end(ctx, h.topic, 1); n != 0 {
		t.Fatalf("a transaction marker reached the mirror partition: end offset %d", n)
	}
	if got := directConfigs(ctx, t, h.d, h.topic)["retention.ms"]; got != retention {
		t.Fatalf("retention.ms of the mirror topic went from %s to %s", retention, got)
	}
}

// addToTxn starts a transaction through inst and asks to add a partition to it, then ends it
// with a commit; it returns the partition's AddPartitionsToTxn error code.
func (h *hostile) addToTxn(ctx context.Context, inst instance, topic string, p int32) int16 {
	h.t.Helper()
	txnID := "hostile-" + testNames(h.t)
	cl := h.client(h.other)
	// On a fresh destination the first transactional FindCoordinator creates
	// __transaction_state and is answered COORDINATOR_NOT_AVAILABLE until it is ready.
	var fresp *kmsg.FindCoordinatorResponse
	var err error
	for i := 0; i < 100; i++ {
		fc := kmsg.NewPtrFindCoordinatorRequest()
		fc.CoordinatorType, fc.CoordinatorKey = 1, txnID
		fresp, err = fc.RequestWith(ctx, cl)
		if err == nil && fresp.ErrorCode != kerr.CoordinatorNotAvailable.Code && fresp.ErrorCode != kerr.CoordinatorLoadInProgress.Code {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil || fresp.ErrorCode != 0 {
		h.t.Fatalf("FindCoordinator: %v %+v", err, fresp)
	}
	node := fresp.NodeID
	r := h.dial(inst, h.other, node)
	var ip *kmsg.InitProducerIDResponse
	for i := 0; i < 50; i++ {
		init := kmsg.NewPtrInitProducerIDRequest()
		init.TransactionalID, init.TransactionTimeoutMillis = kmsg.StringPtr(txnID), 60000
		ip = kmsg.NewPtrInitProducerIDResponse()
		r.roundTrip(init, ip)
		if ip.ErrorCode == 0 {
			break
		}
		time.Sleep(200 * time.Millisecond) // the coordinator loading its partition
	}
	if ip.ErrorCode != 0 {
		h.t.Fatalf("InitProducerId: code %d", ip.ErrorCode)
	}
	add := kmsg.NewPtrAddPartitionsToTxnRequest()
	add.SetVersion(3)
	add.TransactionalID, add.ProducerID, add.ProducerEpoch = txnID, ip.ProducerID, ip.ProducerEpoch
	at := kmsg.NewAddPartitionsToTxnRequestTopic()
	at.Topic, at.Partitions = topic, []int32{p}
	add.Topics = append(add.Topics, at)
	aresp := kmsg.NewPtrAddPartitionsToTxnResponse()
	r.roundTrip(add, aresp)
	code := int16(-99)
	for _, t := range aresp.Topics {
		for _, rp := range t.Partitions {
			code = rp.ErrorCode
		}
	}
	end := kmsg.NewPtrEndTxnRequest()
	end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = txnID, ip.ProducerID, ip.ProducerEpoch, true
	r.roundTrip(end, kmsg.NewPtrEndTxnResponse())
	return code
}

// offsetgate's own transactional ids (one per ledger partition, whose producer appends the
// ledger) are refused to every client, approved mirroring clients included: the ledger's
// fencing is built on their epochs, which only a takeover may bump. The transactional APIs naming one are answered
// TRANSACTIONAL_ID_AUTHORIZATION_FAILED by offsetgate (TxnOffsetCommit too), DescribeTransactions refuses it and
// ListTransactions leaves it out, while D itself lists it; the mirror partition is written on
// after every attempt.
func TestOwnTransactionalIDsRefused(t *testing.T) {
	h := newHostile(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	own := ledger.TransactionalID(catalog.IDString(h.id), 0)
	var fresp *kmsg.FindCoordinatorResponse
	var err error
	for i := 0; i < 100; i++ {
		fc := kmsg.NewPtrFindCoordinatorRequest()
		fc.CoordinatorType, fc.CoordinatorKey = 1, own
		fresp, err = fc.RequestWith(ctx, h.client(h.other))
		if err == nil && fresp.ErrorCode != kerr.CoordinatorNotAvailable.Code && fresp.ErrorCode != kerr.CoordinatorLoadInProgress.Code {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil || fresp.ErrorCode != 0 {
		t.Fatalf("FindCoordinator of %s: %v %+v", own, err, fresp)
	}
	want := rules.ErrTxnIDAuthorization
	next := int64(1)
	for _, inst := range []instance{h.a, h.b} {
		for _, id := range []struct {
			name string
			kp   *testcerts.KeyPair
		}{{"another client", h.other}, {"the approved mirroring client", h.mirror}} {
			who, kp := inst.name+", "+id.name, id.kp
			r := h.dial(inst, kp, fresp.NodeID)
			init := kmsg.NewPtrInitProducerIDRequest()
			init.TransactionalID, init.TransactionTimeoutMillis = kmsg.StringPtr(own), 60000
			ip := kmsg.NewPtrInitProducerIDResponse()
			r.roundTrip(init, ip)
			if ip.ErrorCode != want {
				t.Errorf("%s: InitProducerId of %s: code %d, want TRANSACTIONAL_ID_AUTHORIZATION_FAILED", who, own, ip.ErrorCode)
			}
			end := kmsg.NewPtrEndTxnRequest()
			end.TransactionalID, end.ProducerID, end.ProducerEpoch = own, 1, 0
			eresp := kmsg.NewPtrEndTxnResponse()
			r.roundTrip(end, eresp)
			ao := kmsg.NewPtrAddOffsetsToTxnRequest()
			ao.TransactionalID, ao.Group = own, "hostile"
			aoresp := kmsg.NewPtrAddOffsetsToTxnResponse()
			r.roundTrip(ao, aoresp)
			add := kmsg.NewPtrAddPartitionsToTxnRequest()
			add.SetVersion(3)
			add.TransactionalID = own
			at := kmsg.NewAddPartitionsToTxnRequestTopic()
			at.Topic, at.Partitions = "hostile-any", []int32{0}
			add.Topics = append(add.Topics, at)
			aresp := kmsg.NewPtrAddPartitionsToTxnResponse()
			r.roundTrip(add, aresp)
			toc := kmsg.NewPtrTxnOffsetCommitRequest()
			toc.TransactionalID, toc.Group = own, "hostile"
			tt := kmsg.NewTxnOffsetCommitRequestTopic()
			tt.Topic = "hostile-any"
			tp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
			tt.Partitions = append(tt.Partitions, tp)
			toc.Topics = append(toc.Topics, tt)
			tresp := kmsg.NewPtrTxnOffsetCommitResponse()
			r.roundTrip(toc, tresp)
			if eresp.ErrorCode != want || aoresp.ErrorCode != want || len(aresp.Topics) != 1 || aresp.Topics[0].Partitions[0].ErrorCode != want ||
				len(tresp.Topics) != 1 || tresp.Topics[0].Partitions[0].ErrorCode != want {
				t.Errorf("%s: EndTxn %d, AddOffsetsToTxn %d, AddPartitionsToTxn %+v, TxnOffsetCommit %+v; want TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
					who, eresp.ErrorCode, aoresp.ErrorCode, aresp.Topics, tresp.Topics)
			}
			// A transactional Produce with the id, to the mirror partition's leader.
			pr := kmsg.NewPtrProduceRequest()
			pr.SetVersion(11)
			pr.TransactionID, pr.Acks, pr.TimeoutMillis = kmsg.StringPtr(own), -1, 10000
			pt := kmsg.NewProduceRequestTopic()
			pt.Topic = h.topic
			pp := kmsg.NewProduceRequestTopicPartition()
			pp.Partition, pp.Records = 0, oneBatch()
			pt.Partitions = append(pt.Partitions, pp)
			pr.Topics = append(pr.Topics, pt)
			presp := kmsg.NewPtrProduceResponse()
			h.dial(inst, kp, h.leader(ctx, h.topic, 0)).roundTrip(pr, presp)
			if len(presp.Topics) != 1 || presp.Topics[0].Partitions[0].ErrorCode != want {
				t.Errorf("%s: Produce with transactional id %s: %+v", who, own, presp.Topics)
			}
			// Reading: DescribeTransactions refuses it (another id goes to D), ListTransactions
			// leaves it out.
			dt := kmsg.NewPtrDescribeTransactionsRequest()
			dt.TransactionalIDs = []string{own, "hostile-unknown"}
			dresp := kmsg.NewPtrDescribeTransactionsResponse()
			r.roundTrip(dt, dresp)
			codes := map[string]int16{}
			for _, st := range dresp.TransactionStates {
				codes[st.TransactionalID] = st.ErrorCode
			}
			if c, ok := codes[own]; !ok || c != want || len(codes) != 2 || codes["hostile-unknown"] == want {
				t.Errorf("%s: DescribeTransactions: %v", who, codes)
			}
			lresp := kmsg.NewPtrListTransactionsResponse()
			r.roundTrip(kmsg.NewPtrListTransactionsRequest(), lresp)
			for _, st := range lresp.TransactionStates {
				if strings.HasPrefix(st.TransactionalID, rules.OwnTopicPrefix) {
					t.Errorf("%s: ListTransactions lists %s", who, st.TransactionalID)
				}
			}

			// offsetgate's ledger appender was not fenced: the mirror partition is written on.
			if p := h.writeAt(ctx, next); p.ErrorCode != 0 {
				msg := ""
				if p.ErrorMessage != nil {
					msg = *p.ErrorMessage
				}
				t.Fatalf("%s: produce-at-offset at %d after the attempts: code %d (%s)", who, next, p.ErrorCode, msg)
			}
			next++
		}
	}
	// D itself lists the id: what offsetgate leaves out is there.
	dcl, err := h.d.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer dcl.Close()
	found := false
	for i := 0; i < 50 && !found; i++ {
		shards := dcl.RequestSharded(ctx, kmsg.NewPtrListTransactionsRequest())
		for _, sh := range shards {
			if lr, ok := sh.Resp.(*kmsg.ListTransactionsResponse); ok && sh.Err == nil {
				for _, st := range lr.TransactionStates {
					found = found || st.TransactionalID == own
				}
			}
		}
		if !found {
			time.Sleep(200 * time.Millisecond)
		}
	}
	if !found {
		t.Fatalf("the destination does not list %s: the test shows nothing", own)
	}
}
