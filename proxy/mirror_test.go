package proxy_test

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"gopkg.in/yaml.v3"

	"offsetgate/internal/testcerts"
	"offsetgate/internal/testkafka"
	"offsetgate/magic"
	"offsetgate/proxy"
	"offsetgate/rules"
	ogtls "offsetgate/tls"
)

// mirrorEnv is offsetgate with a TLS listener (client certificates prove identities) in front
// of the shared destination, and a config file whose mirroring section can be rewritten.
type mirrorEnv struct {
	t       *testing.T
	d       *testkafka.Cluster
	p       *running
	certs   *testcerts.Set
	cfgPath string
	cfg     proxy.Config
	mirror  *testcerts.KeyPair // approved for topics "mirror-*" (and the test's prefix)
	other   *testcerts.KeyPair // a proven identity, not approved
}

func newMirrorEnv(t *testing.T, prefix string) *mirrorEnv {
	t.Helper()
	pair := testkafka.Shared(t)
	dir := t.TempDir()
	set, err := testcerts.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	mirror, err := set.Client("mirror", testcerts.SANs{URIs: []string{"spiffe://test/mirror"}})
	if err != nil {
		t.Fatal(err)
	}
	other, err := set.Client("other", testcerts.SANs{})
	if err != nil {
		t.Fatal(err)
	}
	e := &mirrorEnv{t: t, d: pair.Dest, certs: set, mirror: mirror, other: other, cfgPath: filepath.Join(dir, "offsetgate.yaml")}
	e.cfg = proxy.Config{
		Bootstrap: pair.Dest.Addrs(),
		TLS: proxy.TLSConfig{Listener: &ogtls.ServerConfig{CertFile: set.Server.CertFile, KeyFile: set.Server.KeyFile,
			ClientCAFile: set.CA.CertFile, ClientAuth: "request"}},
		Mirroring: rules.MirroringConfig{Clients: []rules.ClientConfig{
			{Name: "mirror", TLSSAN: "URI:spiffe://test/mirror", Topics: []string{prefix + "*"}},
			// client.id alone never approves: this rule has no proof and is refused at load,
			// so the narrowing rule below is what is tested.
			{Name: "narrowed", TLSSubject: mirror.Cert.Subject.String(), ClientID: "only-this-client", Topics: []string{"narrowed-*"}},
		}},
	}
	e.writeConfig()
	e.p = startProxy(t, pair.Dest, "goroutine", func(c *proxy.Config) {
		listen := c.Listen
		*c = e.cfg
		c.Listen = listen
		c.Transport = "goroutine"
		c.Path = e.cfgPath
	})
	return e
}

func (e *mirrorEnv) writeConfig() {
	e.t.Helper()
	// The whole configuration, as a reload validates it; only the mirroring section changes.
	c := e.cfg
	c.Listen, c.Transport = "127.0.0.1:1", "goroutine"
	if e.p != nil {
		c.Listen = e.p.addr
	}
	full, err := yaml.Marshal(c)
	if err != nil {
		e.t.Fatal(err)
	}
	tmp := e.cfgPath + ".tmp"
	if err := os.WriteFile(tmp, full, 0o644); err != nil {
		e.t.Fatal(err)
	}
	if err := os.Rename(tmp, e.cfgPath); err != nil {
		e.t.Fatal(err)
	}
}

// client connects to offsetgate with a client certificate (nil: none).
func (e *mirrorEnv) client(kp *testcerts.KeyPair, opts ...kgo.Opt) *kgo.Client {
	return franzClient(e.t, []string{e.p.addr}, append([]kgo.Opt{kgo.DialTLSConfig(e.certs.ClientTLS(kp))}, opts...)...)
}

func (e *mirrorEnv) admin(kp *testcerts.KeyPair) *kadm.Client {
	return kadm.NewClient(e.client(kp))
}

// createMirror creates a mirror topic through offsetgate as the given identity.
func (e *mirrorEnv) createMirror(ctx context.Context, kp *testcerts.KeyPair, topic string, partitions int32, extra map[string]*string) error {
	cfg := map[string]*string{rules.MarkKey: kmsg.StringPtr("true"), rules.SourcePrefix + "retention.ms": kmsg.StringPtr("604800000")}
	for k, v := range extra {
		cfg[k] = v
	}
	resps, err := e.admin(kp).CreateTopics(ctx, partitions, 2, cfg, topic)
	if err != nil {
		return err
	}
	if r := resps[topic]; r.Err != nil {
		return fmt.Errorf("%w: %s", r.Err, r.ErrMessage)
	}
	return nil
}

// hwm reads a partition's high watermark directly from the destination.
func hwm(ctx context.Context, t *testing.T, d *testkafka.Cluster, topic string, p int32) int64 {
	t.Helper()
	adm, err := d.Admin()
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	offs, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	o, ok := offs.Lookup(topic, p)
	if !ok || o.Err != nil {
		t.Fatalf("end offset of %s[%d]: %v", topic, p, o.Err)
	}
	return o.Offset
}

func directConfigs(ctx context.Context, t *testing.T, d *testkafka.Cluster, topic string) map[string]string {
	t.Helper()
	adm, err := d.Admin()
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	rc, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, c := range rc[0].Configs {
		if c.Value != nil {
			out[c.Key] = *c.Value
		}
	}
	return out
}

func produceErr(ctx context.Context, cl *kgo.Client, topic string, n int) error {
	var rs []*kgo.Record
	for i := 0; i < n; i++ {
		rs = append(rs, &kgo.Record{Topic: topic, Value: []byte(fmt.Sprintf("v%d", i))})
	}
	return cl.ProduceSync(ctx, rs...).FirstErr()
}

// A mirror topic is marked at creation by an approved client; the broker never sees
// offsetgate's keys and gets the settings exactness needs; DescribeConfigs through offsetgate
// shows the mark; the mark can never be added later; bad settings are refused by name.
func TestMirrorTopicCreation(t *testing.T) {
	prefix := testkafka.Names(t, "m")
	e := newMirrorEnv(t, prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic := prefix + "-orders"
	if err := e.createMirror(ctx, e.mirror, topic, 2, nil); err != nil {
		t.Fatalf("approved client creating a mirror topic: %v", err)
	}
	direct := directConfigs(ctx, t, e.d, topic)
	for k := range direct {
		if strings.HasPrefix(k, rules.KeyPrefix) {
			t.Fatalf("the broker holds offsetgate key %s", k)
		}
	}
	for k, want := range map[string]string{"compression.type": "producer", "message.timestamp.type": "CreateTime",
		"message.timestamp.after.max.ms": "9223372036854775807", "retention.ms": "604800000"} {
		if direct[k] != want {
			t.Errorf("destination %s = %q, want %q", k, direct[k], want)
		}
	}
	rc, err := e.admin(e.other).DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, c := range rc[0].Configs {
		if c.Value != nil {
			seen[c.Key] = *c.Value
		}
	}
	if seen[rules.MarkKey] != "true" || seen[rules.SourcePrefix+"retention.ms"] != "604800000" {
		t.Fatalf("DescribeConfigs through offsetgate does not show the mark: %v", seen)
	}

	// Refusals at creation.
	err = e.createMirror(ctx, e.other, prefix+"-denied", 1, nil)
	if !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("unapproved identity creating a mirror topic: %v", err)
	}
	err = e.createMirror(ctx, e.mirror, prefix+"-gzip", 1, map[string]*string{"compression.type": kmsg.StringPtr("gzip")})
	if !errors.Is(err, kerr.InvalidConfig) || !strings.Contains(err.Error(), "compression.type") {
		t.Fatalf("mirror topic with compression.type=gzip: %v", err)
	}
	err = e.createMirror(ctx, e.mirror, prefix+"-short", 1, map[string]*string{"retention.ms": kmsg.StringPtr("1000")})
	if !errors.Is(err, kerr.InvalidConfig) || !strings.Contains(err.Error(), "retention.ms") {
		t.Fatalf("mirror topic with a retention shorter than the source's: %v", err)
	}
	for _, name := range []string{prefix + "-denied", prefix + "-gzip", prefix + "-short"} {
		if md, _ := e.admin(nil).ListTopics(ctx, name); md.Has(name) {
			t.Fatalf("refused topic %s exists", name)
		}
	}

	// The mark is never added afterwards, not even to an empty topic.
	plain := prefix + "-plain"
	if err := e.d.CreateTopic(ctx, plain, 1, 1, nil); err != nil {
		t.Fatal(err)
	}
	ir, err := e.admin(e.mirror).AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: rules.MarkKey, Value: kmsg.StringPtr("true")}}, plain)
	if err != nil || !errors.Is(ir[0].Err, kerr.InvalidConfig) {
		t.Fatalf("adding the mark later: %v / %+v", err, ir)
	}
	lr, err := e.admin(e.mirror).AlterTopicConfigsState(ctx, []kadm.AlterConfig{{Name: rules.MarkKey, Value: kmsg.StringPtr("true")}}, plain)
	if err != nil || !errors.Is(lr[0].Err, kerr.InvalidConfig) {
		t.Fatalf("adding the mark later with AlterConfigs: %v / %+v", err, lr)
	}
	// A config change that breaks exactness on the mirror topic.
	ir, err = e.admin(e.mirror).AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "compression.type", Value: kmsg.StringPtr("lz4")}}, topic)
	if err != nil || !errors.Is(ir[0].Err, kerr.InvalidConfig) {
		t.Fatalf("changing compression.type on a mirror topic: %v / %+v", err, ir)
	}
	if got := directConfigs(ctx, t, e.d, topic)["compression.type"]; got != "producer" {
		t.Fatalf("compression.type became %s on the destination", got)
	}
}

// Everyone but an approved mirroring client with the header is refused, per partition, with
// the documented code, and nothing is written; the rest of the request goes through.
func TestMirrorTopicRefusals(t *testing.T) {
	prefix := testkafka.Names(t, "r")
	e := newMirrorEnv(t, prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic := prefix + "-m"
	if err := e.createMirror(ctx, e.mirror, topic, 2, nil); err != nil {
		t.Fatal(err)
	}
	ordinary := prefix + "-o"
	if err := e.d.CreateTopic(ctx, ordinary, 1, 2, nil); err != nil {
		t.Fatal(err)
	}
	// Both partitions of the mixed request below must have the same leader.
	leader, _, err := e.d.Leader(ctx, topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.d.MoveLeader(ctx, ordinary, 0, leader); err != nil {
		t.Fatal(err)
	}
	// Unapproved identities, proven or not, and a client.id that matches a rule on its own.
	for name, cl := range map[string]*kgo.Client{
		"other identity": e.client(e.other, kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.RecordRetries(1)),
		"no certificate": e.client(nil, kgo.RecordRetries(1)),
		"client.id only": e.client(nil, kgo.ClientID("only-this-client"), kgo.RecordRetries(1)),
	} {
		if err := produceErr(ctx, cl, topic, 5); !errors.Is(err, kerr.TopicAuthorizationFailed) {
			t.Errorf("%s producing to a mirror topic: %v, want TOPIC_AUTHORIZATION_FAILED", name, err)
		}
	}
	// The approved client without the header (and without attach_header).
	if err := produceErr(ctx, e.client(e.mirror, kgo.RecordRetries(1)), topic, 5); !errors.Is(err, kerr.PolicyViolation) {
		t.Errorf("approved client without the header: %v, want POLICY_VIOLATION", err)
	}
	// One request, two topics: the ordinary partition is written, the mirror one refused.
	cl := e.client(e.other)
	resp := e.rawProduce(ctx, e.other, false, map[string]int32{topic: 0, ordinary: 0})
	codes := map[string]int16{}
	for _, tp := range resp.Topics {
		for _, p := range tp.Partitions {
			codes[tp.Topic] = p.ErrorCode
			if tp.Topic == topic && (p.ErrorMessage == nil || !strings.Contains(*p.ErrorMessage, "mirror topic")) {
				t.Errorf("refusal carries no explanation: %v", p.ErrorMessage)
			}
		}
	}
	if codes[topic] != rules.ErrTopicAuthorization || codes[ordinary] != 0 {
		t.Fatalf("mixed request codes %v", codes)
	}
	// A forged magic header from an unapproved client changes nothing.
	resp = e.rawProduce(ctx, e.other, true, map[string]int32{topic: 1})
	if c := resp.Topics[0].Partitions[0].ErrorCode; c != rules.ErrTopicAuthorization {
		t.Fatalf("forged header: code %d", c)
	}
	for p := int32(0); p < 2; p++ {
		if n := hwm(ctx, t, e.d, topic, p); n != 0 {
			t.Fatalf("refused writes reached %s[%d]: end offset %d", topic, p, n)
		}
	}
	if n := hwm(ctx, t, e.d, ordinary, 0); n != 1 {
		t.Fatalf("the ordinary partition of the mixed request has end offset %d, want 1", n)
	}

	// Other operations that would break exactness.
	adm := e.admin(e.other)
	dr, err := adm.DeleteRecords(ctx, kadm.Offsets{topic: {0: {Topic: topic, Partition: 0, At: 0}}})
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := dr.Lookup(topic, 0); !errors.Is(r.Err, kerr.PolicyViolation) {
		t.Errorf("DeleteRecords on a mirror topic: %v", r.Err)
	}
	cp, err := adm.CreatePartitions(ctx, 1, topic)
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(cp[topic].Err, kerr.PolicyViolation) {
		t.Errorf("CreatePartitions on a mirror topic: %v", cp[topic].Err)
	}
	ir, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "message.timestamp.type", Value: kmsg.StringPtr("LogAppendTime")}}, topic)
	if err != nil || !errors.Is(ir[0].Err, kerr.InvalidConfig) {
		t.Errorf("message.timestamp.type change: %v %+v", err, ir)
	}
	// offsetgate's own topics.
	if err := produceErr(ctx, e.client(e.mirror, kgo.RecordRetries(1)), "__offsetgate_marks", 1); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Errorf("writing offsetgate's marks topic: %v", err)
	}
	dt, err := adm.DeleteTopics(ctx, "__offsetgate_marks")
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(dt["__offsetgate_marks"].Err, kerr.TopicAuthorizationFailed) {
		t.Errorf("deleting offsetgate's marks topic: %v", dt["__offsetgate_marks"].Err)
	}
	// Share groups cannot read a mirror topic.
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	sf := kmsg.NewPtrShareFetchRequest()
	sf.GroupID, sf.MemberID = kmsg.StringPtr(prefix+"-share"), kmsg.StringPtr("m")
	st := kmsg.NewShareFetchRequestTopic()
	st.TopicID = md.Topics[topic].ID
	sp := kmsg.NewShareFetchRequestTopicPartition()
	st.Partitions = append(st.Partitions, sp)
	sf.Topics = append(sf.Topics, st)
	sresp, err := sf.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if len(sresp.Topics) != 1 || sresp.Topics[0].Partitions[0].ErrorCode != rules.ErrPolicyViolation {
		t.Errorf("ShareFetch of a mirror topic: %+v", sresp)
	}
	if n := hwm(ctx, t, e.d, topic, 0); n != 0 {
		t.Fatalf("mirror partition end offset %d after refusals", n)
	}
	// The approved mirroring client adds partitions (the source grew); nobody else did above.
	if cp, err := e.admin(e.mirror).CreatePartitions(ctx, 1, topic); err != nil || cp[topic].Err != nil {
		t.Fatalf("CreatePartitions on a mirror topic by its mirroring client: %v %v", err, cp[topic].Err)
	}
}

// rawProduce sends one Produce v11 request with one record per partition, with the magic
// header when forged is set (as an unapproved client might).
func (e *mirrorEnv) rawProduce(ctx context.Context, kp *testcerts.KeyPair, withHeader bool, parts map[string]int32) *kmsg.ProduceResponse {
	t := e.t
	t.Helper()
	cl := e.client(kp)
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(11)
	req.Acks, req.TimeoutMillis = -1, 10000
	for topic, p := range parts {
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition, rp.Records = p, oneBatch()
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
	}
	if withHeader {
		return sendWithMagic(ctx, t, cl, e.certs.ClientTLS(kp), req)
	}
	// kgo picks the newest Produce version, which names topics by id.
	ids := e.topicIDs(ctx, cl, req)
	for i := range req.Topics {
		req.Topics[i].TopicID = ids[req.Topics[i].Topic]
	}
	// The leader of every partition named here is asked through kgo's routing.
	// kgo sends a raw Produce to any broker: send it to the leader of the first partition.
	leader, _, err := e.d.Leader(ctx, req.Topics[0].Topic, req.Topics[0].Partitions[0].Partition)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := cl.Broker(int(leader)).Request(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	pr := resp.(*kmsg.ProduceResponse)
	for i := range pr.Topics {
		for name, id := range ids {
			if pr.Topics[i].TopicID == id {
				pr.Topics[i].Topic = name
			}
		}
	}
	return pr
}

func (e *mirrorEnv) topicIDs(ctx context.Context, cl *kgo.Client, req *kmsg.ProduceRequest) map[string][16]byte {
	md := kmsg.NewPtrMetadataRequest()
	for _, rt := range req.Topics {
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(rt.Topic)
		md.Topics = append(md.Topics, mt)
	}
	resp, err := md.RequestWith(ctx, cl)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string][16]byte{}
	for _, t := range resp.Topics {
		out[*t.Topic] = t.TopicID
	}
	return out
}

// sendWithMagic writes a Produce request with the magic header tag on a raw connection to the
// partitions' leader listener, through the client's TLS settings.
func sendWithMagic(ctx context.Context, t *testing.T, cl *kgo.Client, tc *tls.Config, req *kmsg.ProduceRequest) *kmsg.ProduceResponse {
	t.Helper()
	// Find the leader of the first partition and its proxy address.
	md := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(req.Topics[0].Topic)
	md.Topics = append(md.Topics, mt)
	mresp, err := md.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	leader := int32(-1)
	for _, p := range mresp.Topics[0].Partitions {
		if p.Partition == req.Topics[0].Partitions[0].Partition {
			leader = p.Leader
		}
	}
	var addr string
	for _, b := range mresp.Brokers {
		if b.NodeID == leader {
			addr = fmt.Sprintf("%s:%d", b.Host, b.Port)
		}
	}
	body := magic.AppendHeader([]byte{0, 0, 0, 0}, 0, req.Version, 9, "forger", -1)
	body = req.AppendTo(body)
	putSize(body)
	c, err := tls.Dial("tcp", addr, tc)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	conn := &rawConn{t: t, c: c}
	if _, err := conn.c.Write(body); err != nil {
		t.Fatal(err)
	}
	f, err := conn.readFrame()
	if err != nil {
		t.Fatal(err)
	}
	resp := kmsg.NewPtrProduceResponse()
	resp.SetVersion(req.Version)
	if err := resp.ReadFrom(skipTagsTest(t, f[4:])); err != nil {
		t.Fatal(err)
	}
	return resp
}

func putSize(b []byte) { binary.BigEndian.PutUint32(b, uint32(len(b)-4)) }

// Marks live in the destination: a second offsetgate with no local state, and the first one
// after a restart, know the mirror topic and refuse the same writes.
func TestMarksSurviveRestart(t *testing.T) {
	prefix := testkafka.Names(t, "s")
	e := newMirrorEnv(t, prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic := prefix + "-m"
	if err := e.createMirror(ctx, e.mirror, topic, 1, nil); err != nil {
		t.Fatal(err)
	}
	e.p.stop()
	second := startProxy(t, e.d, "goroutine", func(c *proxy.Config) {
		listen := c.Listen
		*c = e.cfg
		c.Listen, c.Transport = listen, "goroutine"
	})
	cl := franzClient(t, []string{second.addr}, kgo.DialTLSConfig(e.certs.ClientTLS(e.other)), kgo.RecordRetries(1))
	rc, err := kadm.NewClient(cl).DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	marked := false
	for _, c := range rc[0].Configs {
		marked = marked || (c.Key == rules.MarkKey && c.Value != nil && *c.Value == "true")
	}
	if !marked {
		t.Fatal("a fresh offsetgate does not know the mirror topic")
	}
	if err := produceErr(ctx, cl, topic, 1); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("a fresh offsetgate let an unapproved client write: %v", err)
	}
	if n := hwm(ctx, t, e.d, topic, 0); n != 0 {
		t.Fatalf("end offset %d", n)
	}
}

// An approved client's produce-at-offset batch at offset 0 into an empty mirror topic is
// admitted, with the header sent or attached by configuration; a config reload that withdraws
// the approval refuses the same client on the same connection.
func TestApprovedWriteAndReload(t *testing.T) {
	prefix := testkafka.Names(t, "a")
	e := newMirrorEnv(t, prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic := prefix + "-m"
	if err := e.createMirror(ctx, e.mirror, topic, 2, nil); err != nil {
		t.Fatal(err)
	}
	resp := e.rawProduce(ctx, e.mirror, true, map[string]int32{topic: 0})
	if p := resp.Topics[0].Partitions[0]; p.ErrorCode != 0 || p.BaseOffset != 0 {
		t.Fatalf("approved at-offset batch: code %d base offset %d: %s", p.ErrorCode, p.BaseOffset, *p.ErrorMessage)
	}
	if n := hwm(ctx, t, e.d, topic, 0); n != 1 {
		t.Fatalf("end offset %d after the approved write, want 1", n)
	}
	// attach_header: the approved client's ordinary produce counts as at-offset.
	e.cfg.Mirroring.Clients[0].AttachHeader = true
	e.writeConfig()
	var disconnects atomic.Int32
	cl := e.client(e.mirror, kgo.RecordRetries(1), kgo.DefaultProduceTopic(topic), kgo.DisableIdempotentWrite(),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.WithHooks(disconnectHook(func() { disconnects.Add(1) })))
	var lastErr error
	waitFor(t, 10*time.Second, func() bool {
		lastErr = cl.ProduceSync(ctx, &kgo.Record{Partition: 1, Value: []byte("x")}).FirstErr()
		if lastErr != nil {
			t.Logf("attach_header produce: %v", lastErr)
		}
		return lastErr == nil
	}, "attach_header to take effect")
	if lastErr != nil {
		t.Logf("last: %v", lastErr)
	}
	// Withdraw the approval: the same connection is refused from now on.
	e.cfg.Mirroring.Clients = e.cfg.Mirroring.Clients[1:]
	e.writeConfig()
	waitFor(t, 10*time.Second, func() bool {
		return errors.Is(cl.ProduceSync(ctx, &kgo.Record{Partition: 1, Value: []byte("y")}).FirstErr(), kerr.TopicAuthorizationFailed)
	}, "the withdrawal to take effect")
	if n := disconnects.Load(); n != 0 {
		t.Fatalf("the reload dropped the client's connections %d times", n)
	}
}

func waitFor(t *testing.T, d time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

type disconnectHook func()

func (h disconnectHook) OnBrokerDisconnect(kgo.BrokerMetadata, net.Conn) { h() }

// Promotion: an approved mirroring client removes the mark; the topic then takes ordinary
// writes through offsetgate, DescribeConfigs no longer shows the mark, and it can never be
// marked again. Others may not promote.
func TestPromotion(t *testing.T) {
	prefix := testkafka.Names(t, "p")
	e := newMirrorEnv(t, prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic := prefix + "-m"
	if err := e.createMirror(ctx, e.mirror, topic, 1, nil); err != nil {
		t.Fatal(err)
	}
	resp := e.rawProduce(ctx, e.mirror, true, map[string]int32{topic: 0})
	if p := resp.Topics[0].Partitions[0]; p.ErrorCode != 0 {
		t.Fatalf("at-offset write before promotion: %d", p.ErrorCode)
	}
	del := []kadm.AlterConfig{{Op: kadm.DeleteConfig, Name: rules.MarkKey}}
	ir, err := e.admin(e.other).AlterTopicConfigs(ctx, del, topic)
	if err != nil || !errors.Is(ir[0].Err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("an unapproved identity promoting: %v %+v", err, ir)
	}
	ir, err = e.admin(e.mirror).AlterTopicConfigs(ctx, del, topic)
	if err != nil || ir[0].Err != nil {
		t.Fatalf("promotion by the mirroring client: %v %+v", err, ir)
	}
	// Ordinary producers now write; the offsets carry on from the mirrored ones.
	pcl := e.client(e.other, kgo.DefaultProduceTopic(topic))
	if err := pcl.ProduceSync(ctx, &kgo.Record{Value: []byte("after promotion")}).FirstErr(); err != nil {
		t.Fatalf("ordinary produce after promotion: %v", err)
	}
	if n := hwm(ctx, t, e.d, topic, 0); n != 2 {
		t.Fatalf("end offset %d after promotion and one ordinary write, want 2", n)
	}
	// A mirror still writing the promoted topic is refused, with or without the magic header.
	for _, magic := range []bool{true, false} {
		resp := e.rawProduce(ctx, e.mirror, magic, map[string]int32{topic: 0})
		if p := resp.Topics[0].Partitions[0]; p.ErrorCode != rules.ErrPolicyViolation || p.ErrorMessage == nil || !strings.Contains(*p.ErrorMessage, "was promoted") {
			t.Fatalf("the mirroring client writing the promoted topic (magic %v): %d %v", magic, p.ErrorCode, p.ErrorMessage)
		}
	}
	if n := hwm(ctx, t, e.d, topic, 0); n != 2 {
		t.Fatalf("end offset %d after the mirror's refused writes, want 2", n)
	}
	rc, err := e.admin(e.other).DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rc[0].Configs {
		if c.Key == rules.MarkKey {
			t.Fatalf("the promoted topic still shows the mark")
		}
	}
	// Never marked again.
	ir, err = e.admin(e.mirror).AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: rules.MarkKey, Value: kmsg.StringPtr("true")}}, topic)
	if err != nil || !errors.Is(ir[0].Err, kerr.InvalidConfig) {
		t.Fatalf("marking a promoted topic again: %v %+v", err, ir)
	}
	// A consumer through offsetgate reads on without a jump in offsets.
	got := consumeAll(ctx, t, []string{e.p.addr}, topic, 2, kgo.DialTLSConfig(e.certs.ClientTLS(e.other)))
	if got[0].Offset != 0 || got[1].Offset != 1 || got[1].Value != "after promotion" {
		t.Fatalf("consumer after promotion: %+v", got)
	}
}
