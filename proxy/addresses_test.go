package proxy_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/internal/testkafka"
)

// rawConn speaks the Kafka protocol with versions chosen by the test, not by a client library.
type rawConn struct {
	t    *testing.T
	c    net.Conn
	corr int32
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, c: c}
}

func (r *rawConn) send(req kmsg.Request) int32 {
	r.t.Helper()
	r.corr++
	b := kmsg.NewRequestFormatter(kmsg.FormatterClientID("raw-test")).AppendRequest(nil, req, r.corr)
	if _, err := r.c.Write(b); err != nil {
		r.t.Fatal(err)
	}
	return r.corr
}

// readFrame reads one response frame's payload (after the size).
// answer reads the next frame and fails the test unless it answers corr (the n-th request).
func (r *rawConn) answer(n int, corr int32) []byte {
	r.t.Helper()
	f, err := r.readFrame()
	if err != nil {
		r.t.Fatalf("answer %d: %v", n, err)
	}
	if c := int32(binary.BigEndian.Uint32(f)); c != corr {
		r.t.Fatalf("answer %d has correlation id %d, want %d", n, c, corr)
	}
	return f
}

func (r *rawConn) readFrame() ([]byte, error) {
	_ = r.c.SetReadDeadline(time.Now().Add(30 * time.Second))
	var sz [4]byte
	if _, err := io.ReadFull(r.c, sz[:]); err != nil {
		return nil, err
	}
	p := make([]byte, binary.BigEndian.Uint32(sz[:]))
	_, err := io.ReadFull(r.c, p)
	return p, err
}

// roundTrip sends req at its set version and decodes the response into resp.
func (r *rawConn) roundTrip(req kmsg.Request, resp kmsg.Response) {
	r.t.Helper()
	corr := r.send(req)
	p, err := r.readFrame()
	if err != nil {
		r.t.Fatalf("%s v%d: %v", kmsg.NameForKey(req.Key()), req.GetVersion(), err)
	}
	if got := int32(binary.BigEndian.Uint32(p)); got != corr {
		r.t.Fatalf("correlation id %d, want %d", got, corr)
	}
	body := p[4:]
	if req.IsFlexible() && req.Key() != 18 {
		body = skipTagsTest(r.t, body)
	}
	resp.SetVersion(req.GetVersion())
	if err := resp.ReadFrom(body); err != nil {
		r.t.Fatalf("decoding %s v%d response: %v", kmsg.NameForKey(req.Key()), req.GetVersion(), err)
	}
}

func skipTagsTest(t *testing.T, b []byte) []byte {
	n, w := binary.Uvarint(b)
	b = b[w:]
	for i := uint64(0); i < n; i++ {
		_, w := binary.Uvarint(b)
		b = b[w:]
		sz, w := binary.Uvarint(b)
		b = b[w+int(sz):]
	}
	return b
}

// brokerMax asks the broker (directly) for its max version of a key.
func brokerMax(t *testing.T, addr string, key int16) int16 {
	r := dialRaw(t, addr)
	req := kmsg.NewPtrApiVersionsRequest()
	req.SetVersion(3)
	req.ClientSoftwareName, req.ClientSoftwareVersion = "offsetgate-test", "1"
	resp := kmsg.NewPtrApiVersionsResponse()
	r.roundTrip(req, resp)
	for _, k := range resp.ApiKeys {
		if k.ApiKey == key {
			return k.MaxVersion
		}
	}
	return -1
}

// No version of Metadata, FindCoordinator or DescribeCluster tells a client a real broker
// address, and neither do the KIP-951 endpoints of a Produce or Fetch sent to the wrong broker.
func TestAddressesNeverLeak(t *testing.T) {
	pair := testkafka.Shared(t)
	d := pair.Dest
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := startProxy(t, d, "gnet", nil)
	allowed := p.ports(d)
	check := func(what string, node int32, host string, port int32) {
		t.Helper()
		addr := net.JoinHostPort(host, strconv.Itoa(int(port)))
		if !allowed[addr] {
			t.Errorf("%s: node %d advertised at %s, not an offsetgate address", what, node, addr)
		}
	}
	topic := testkafka.Names(t, "addr")
	if err := d.CreateTopic(ctx, topic, 1, 1, nil); err != nil {
		t.Fatal(err)
	}
	group := testkafka.Names(t, "g")
	raw := dialRaw(t, p.addr)

	for v := int16(0); v <= brokerMax(t, d.Addrs()[0], 3); v++ {
		req := kmsg.NewPtrMetadataRequest()
		req.SetVersion(v)
		resp := kmsg.NewPtrMetadataResponse()
		raw.roundTrip(req, resp)
		if len(resp.Brokers) != len(d.Nodes) {
			t.Fatalf("Metadata v%d lists %d brokers", v, len(resp.Brokers))
		}
		for _, b := range resp.Brokers {
			check(fmt.Sprintf("Metadata v%d", v), b.NodeID, b.Host, b.Port)
		}
	}
	for v := int16(0); v <= brokerMax(t, d.Addrs()[0], 10); v++ {
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.SetVersion(v)
		req.CoordinatorKey = group
		req.CoordinatorKeys = []string{group, group + "-2"}
		resp := kmsg.NewPtrFindCoordinatorResponse()
		for i := 0; ; i++ {
			raw.roundTrip(req, resp)
			if resp.ErrorCode == 0 && (v < 4 || (resp.Coordinators[0].ErrorCode == 0 && resp.Coordinators[1].ErrorCode == 0)) {
				break
			}
			if i > 50 {
				t.Fatalf("FindCoordinator v%d keeps failing", v)
			}
			time.Sleep(200 * time.Millisecond)
		}
		if v < 4 {
			check(fmt.Sprintf("FindCoordinator v%d", v), resp.NodeID, resp.Host, resp.Port)
		}
		for _, c := range resp.Coordinators {
			check(fmt.Sprintf("FindCoordinator v%d batched", v), c.NodeID, c.Host, c.Port)
		}
	}
	for v := int16(0); v <= brokerMax(t, d.Addrs()[0], 60); v++ {
		req := kmsg.NewPtrDescribeClusterRequest()
		req.SetVersion(v)
		resp := kmsg.NewPtrDescribeClusterResponse()
		raw.roundTrip(req, resp)
		if len(resp.Brokers) != len(d.Nodes) {
			t.Fatalf("DescribeCluster v%d lists %d brokers (error %d)", v, len(resp.Brokers), resp.ErrorCode)
		}
		for _, b := range resp.Brokers {
			check(fmt.Sprintf("DescribeCluster v%d", v), b.NodeID, b.Host, b.Port)
		}
	}

	// KIP-951: Produce and Fetch sent to a broker that does not lead the partition.
	leader, _, err := d.Leader(ctx, topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	other := int32(1)
	if leader == 1 {
		other = 2
	}
	mreq := kmsg.NewPtrMetadataRequest()
	mreq.SetVersion(12) // topic ids
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	mreq.Topics = append(mreq.Topics, mt)
	mresp := kmsg.NewPtrMetadataResponse()
	raw.roundTrip(mreq, mresp)
	topicID := mresp.Topics[0].TopicID

	produceReq := func(v int16) *kmsg.ProduceRequest {
		req := kmsg.NewPtrProduceRequest()
		req.SetVersion(v)
		req.Acks, req.TimeoutMillis = -1, 5000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic, rt.TopicID = topic, topicID
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Records = oneBatch()
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		return req
	}
	fetchReq := func(v int16) *kmsg.FetchRequest {
		req := kmsg.NewPtrFetchRequest()
		req.SetVersion(v)
		req.MaxWaitMillis, req.MaxBytes, req.ReplicaID = 100, 1<<20, -1
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic, ft.TopicID = topic, topicID
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.PartitionMaxBytes = 1 << 20
		fp.CurrentLeaderEpoch = -1
		ft.Partitions = append(ft.Partitions, fp)
		req.Topics = append(req.Topics, ft)
		return req
	}
	pv := brokerMax(t, d.Addrs()[0], 0)
	fv := brokerMax(t, d.Addrs()[0], 1)
	if pv < 10 || fv < 16 {
		t.Fatalf("broker supports Produce v%d, Fetch v%d: KIP-951 cannot be tested", pv, fv)
	}
	// Directly, the wrong broker names the leader's real address: the case is real.
	direct := dialRaw(t, d.Node(other).Addr())
	dresp := kmsg.NewPtrProduceResponse()
	direct.roundTrip(produceReq(pv), dresp)
	if len(dresp.Brokers) == 0 {
		t.Fatalf("the broker sent no KIP-951 endpoints (error %d): nothing to test", dresp.Topics[0].Partitions[0].ErrorCode)
	}
	viaOther := dialRaw(t, fmt.Sprintf("127.0.0.1:%d", p.cfg.BrokerPort(other)))
	presp := kmsg.NewPtrProduceResponse()
	viaOther.roundTrip(produceReq(pv), presp)
	if len(presp.Brokers) == 0 {
		t.Fatalf("Produce v%d through offsetgate lost its endpoints", pv)
	}
	for _, b := range presp.Brokers {
		check(fmt.Sprintf("Produce v%d endpoints", pv), b.NodeID, b.Host, b.Port)
	}
	// A Fetch of an ordinary topic goes to the broker as v15 (gnet passes its answer as it
	// arrives: session/answer_stream.go), so it carries no endpoints, and the client is told
	// to refresh its metadata.
	fresp := kmsg.NewPtrFetchResponse()
	viaOther.roundTrip(fetchReq(fv), fresp)
	if code := fresp.Topics[0].Partitions[0].ErrorCode; len(fresp.Brokers) != 0 || code != 6 {
		t.Fatalf("plain Fetch v%d through offsetgate: %d endpoints, error %d; want none, NOT_LEADER_OR_FOLLOWER", fv, len(fresp.Brokers), code)
	}
	// One whose answer offsetgate rewrites anyway (here: a partition of a topic id the
	// destination does not know, refused) keeps its version, and its endpoints are offsetgate's.
	withRefusal := fetchReq(fv)
	unknown := kmsg.NewFetchRequestTopic()
	unknown.TopicID = [16]byte{0xde, 0xad}
	unknown.Partitions = append(unknown.Partitions, withRefusal.Topics[0].Partitions[0])
	withRefusal.Topics = append(withRefusal.Topics, unknown)
	fresp = kmsg.NewPtrFetchResponse()
	viaOther.roundTrip(withRefusal, fresp)
	if len(fresp.Brokers) == 0 {
		t.Fatalf("Fetch v%d through offsetgate has no endpoints (error %d)", fv, fresp.Topics[0].Partitions[0].ErrorCode)
	}
	for _, b := range fresp.Brokers {
		check(fmt.Sprintf("Fetch v%d endpoints", fv), b.NodeID, b.Host, b.Port)
	}
}

func oneBatch() []byte {
	rec := kmsg.Record{Key: []byte("k"), Value: []byte("v")}
	rec.Length = int32(len(rec.AppendTo(nil)) - 1) // AppendTo writes Length as given (0: one byte)
	recBytes := rec.AppendTo(nil)
	b := kmsg.RecordBatch{Magic: 2, LastOffsetDelta: 0, FirstTimestamp: time.Now().UnixMilli(), MaxTimestamp: time.Now().UnixMilli(),
		ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: 1, Records: recBytes}
	raw := b.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[8:], uint32(len(raw)-12))
	binary.BigEndian.PutUint32(raw[17:], crc32c(raw[21:]))
	return raw
}

// ApiVersions through offsetgate is the intersection of the broker's and offsetgate's, never
// lists DescribeQuorum, and a too-new request gets the KIP-511 v0 answer.
func TestApiVersionsThroughProxy(t *testing.T) {
	pair := testkafka.Shared(t)
	d := pair.Dest
	p := startProxy(t, d, "gnet", nil)
	get := func(addr string) map[int16][2]int16 {
		r := dialRaw(t, addr)
		req := kmsg.NewPtrApiVersionsRequest()
		req.SetVersion(3)
		req.ClientSoftwareName, req.ClientSoftwareVersion = "offsetgate-test", "1"
		resp := kmsg.NewPtrApiVersionsResponse()
		r.roundTrip(req, resp)
		out := map[int16][2]int16{}
		for _, k := range resp.ApiKeys {
			out[k.ApiKey] = [2]int16{k.MinVersion, k.MaxVersion}
		}
		return out
	}
	direct, via := get(d.Addrs()[0]), get(p.addr)
	if _, ok := direct[55]; !ok {
		t.Fatal("the broker does not list DescribeQuorum; the exclusion cannot be tested")
	}
	if _, ok := via[55]; ok {
		t.Error("DescribeQuorum is advertised through offsetgate")
	}
	if len(via) < 30 {
		t.Fatalf("only %d keys advertised through offsetgate", len(via))
	}
	for k, r := range via {
		dr, ok := direct[k]
		if !ok || r[0] < dr[0] || r[1] > dr[1] {
			t.Errorf("key %d advertised %v through offsetgate, broker has %v", k, r, dr)
		}
	}
	// KIP-511: ApiVersions v99.
	raw := dialRaw(t, p.addr)
	req := kmsg.NewPtrApiVersionsRequest()
	b := kmsg.NewRequestFormatter().AppendRequest(nil, req, 77)
	binary.BigEndian.PutUint16(b[6:], 99)
	if _, err := raw.c.Write(b); err != nil {
		t.Fatal(err)
	}
	f, err := raw.readFrame()
	if err != nil {
		t.Fatal(err)
	}
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.SetVersion(0)
	if err := resp.ReadFrom(f[4:]); err != nil || resp.ErrorCode != 35 || len(resp.ApiKeys) != 1 || resp.ApiKeys[0].ApiKey != 18 {
		t.Fatalf("too-new ApiVersions answer: %+v, %v", resp, err)
	}
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crc32c(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }
