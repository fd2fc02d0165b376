package mirror_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap/zaptest"

	"offsetgate/internal/testcerts"
	"offsetgate/internal/testkafka"
	"offsetgate/mirror"
	"offsetgate/proxy"
	"offsetgate/rules"
	ogtls "offsetgate/tls"
)

// Two listeners, as a broker has: plaintext for consumers and mTLS (certificates required) for
// the mirror, whose rule names its listener. Each advertises its own broker ports; the mirror
// writes through its listener and consumers read through theirs, in source offsets; the
// mirror's certificate on the consumers' listener proves nothing (it is plaintext), and a
// SaslHandshake there is answered ILLEGAL_SASL_STATE.
func TestNamedListeners(t *testing.T) {
	prefix := testkafka.Names(t, "ln")
	pair := testkafka.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	set, err := testcerts.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	kp, err := set.Client("mirror", testcerts.SANs{URIs: []string{"spiffe://test/mirror"}})
	if err != nil {
		t.Fatal(err)
	}
	plainPort, mtlsPort := freeBase(t), freeBase(t)
	cfg := proxy.Config{
		Listeners: []proxy.ListenerConfig{
			{Name: "consumers", Listen: "127.0.0.1:" + strconv.Itoa(plainPort)},
			{Name: "mirror", Listen: "127.0.0.1:" + strconv.Itoa(mtlsPort), Advertise: "localhost",
				TLS: &ogtls.ServerConfig{CertFile: set.Server.CertFile, KeyFile: set.Server.KeyFile, ClientCAFile: set.CA.CertFile, ClientAuth: "require"}},
		},
		Bootstrap: pair.Dest.Addrs(),
		Mirroring: rules.MirroringConfig{Clients: []rules.ClientConfig{{TLSSAN: "URI:spiffe://test/mirror", Topics: []string{prefix + "*"},
			Listeners: []string{"mirror"}}}},
	}
	srv, err := proxy.New(cfg, zaptest.NewLogger(t, zaptestLevel(t)))
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(sctx) }()
	defer func() { stop(); <-done }()
	select {
	case <-srv.Ready():
	case err := <-done:
		t.Fatal(err)
	}
	plain, mtls := srv.ListenerAddr("consumers"), srv.ListenerAddr("mirror")

	// Each listener advertises its own host and broker ports.
	for _, c := range []struct {
		addr string
		opts []kgo.Opt
		host string
		base int
	}{
		{plain, nil, "127.0.0.1", plainPort},
		{mtls, []kgo.Opt{kgo.DialTLSConfig(set.ClientTLS(kp))}, "localhost", mtlsPort},
	} {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.addr)}, c.opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		mreq := kmsg.NewPtrMetadataRequest()
		mreq.Topics = []kmsg.MetadataRequestTopic{} // the brokers only
		md, err := mreq.RequestWith(ctx, cl)
		cl.Close()
		if err != nil {
			t.Fatalf("metadata through %s: %v", c.addr, err)
		}
		for _, b := range md.Brokers {
			if want := net.JoinHostPort(c.host, strconv.Itoa(c.base+1+int(b.NodeID))); net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))) != want {
				t.Fatalf("through %s, node %d is advertised at %s:%d, want %s", c.addr, b.NodeID, b.Host, b.Port, want)
			}
		}
	}

	topic := prefix + "-t"
	if err := pair.Source.CreateTopic(ctx, topic, 2, 2, nil); err != nil {
		t.Fatal(err)
	}
	produceSource(ctx, t, pair.Source, topic, 50)
	// The mirror's identity is approved on its listener only: through the consumers' listener
	// (plaintext: no certificate can be shown) it may not create the mirror topic.
	if _, err := mirror.Once(ctx, mirror.Config{Source: pair.Source.Addrs(), Proxy: []string{plain}, Topics: []string{topic}, ReplicationFactor: 2}); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("mirroring through the consumers' listener: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	sum, err := mirror.Once(ctx, mirror.Config{Source: pair.Source.Addrs(), Proxy: []string{mtls}, ProxyTLS: set.ClientTLS(kp),
		Topics: []string{topic}, ReplicationFactor: 2})
	if err != nil {
		t.Fatalf("mirror through its listener: %v", err)
	}
	var records int64
	for _, p := range sum.Partitions {
		records += p.Records
	}
	if records != 50 {
		t.Fatalf("mirrored %d records, want 50", records)
	}
	// Consumers read through their listener, in source offsets.
	src := count(ctx, t, pair.Source, topic)
	for p := int32(0); p < 2; p++ {
		got := consume(ctx, t, []string{plain}, topic, p, kgo.NewOffset().AtStart(), int(src[p][1]-src[p][0]))
		if len(got) > 0 && got[0].Offset != src[p][0] {
			t.Fatalf("partition %d through the consumers' listener starts at %d, the source at %d", p, got[0].Offset, src[p][0])
		}
	}
	// No SASL on a PLAINTEXT listener.
	cl, err := kgo.NewClient(kgo.SeedBrokers(plain))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrSASLHandshakeRequest()
	req.Mechanism = "PLAIN"
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); !errors.Is(err, kerr.IllegalSaslState) {
		t.Fatalf("SaslHandshake on a PLAINTEXT listener: %v, want ILLEGAL_SASL_STATE", err)
	}
}

// Two plaintext listeners on the event loops: the loops own the first bootstrap address, the
// second's connections are handed to them; each advertises its own ports, and a client of the
// second produces and reads through them.
func TestNamedListenersGnet(t *testing.T) {
	pair := testkafka.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, b := freeBase(t), freeBase(t)
	cfg := proxy.Config{
		Listeners: []proxy.ListenerConfig{{Name: "a", Listen: "127.0.0.1:" + strconv.Itoa(a)}, {Name: "b", Listen: "127.0.0.1:" + strconv.Itoa(b)}},
		Bootstrap: pair.Dest.Addrs(),
	}
	srv, err := proxy.New(cfg, zaptest.NewLogger(t, zaptestLevel(t)))
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(sctx) }()
	defer func() { stop(); <-done }()
	select {
	case <-srv.Ready():
	case err := <-done:
		t.Fatal(err)
	}
	topic := testkafka.Names(t, "t")
	if err := pair.Dest.CreateTopic(ctx, topic, 1, 2, nil); err != nil {
		t.Fatal(err)
	}
	for _, l := range []struct {
		addr string
		base int
	}{{srv.ListenerAddr("a"), a}, {srv.ListenerAddr("b"), b}} {
		var mu sync.Mutex
		var seen []string
		cl, err := kgo.NewClient(kgo.SeedBrokers(l.addr), kgo.DefaultProduceTopic(topic),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
			kgo.WithHooks(brokerSeen(func(host string, port int32) {
				mu.Lock()
				seen = append(seen, net.JoinHostPort(host, strconv.Itoa(int(port))))
				mu.Unlock()
			})))
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(l.addr)}).FirstErr(); err != nil {
			t.Fatalf("produce through %s: %v", l.addr, err)
		}
		n := 0
		for n == 0 && ctx.Err() == nil {
			n += len(cl.PollFetches(ctx).Records())
		}
		cl.Close()
		mu.Lock()
		defer mu.Unlock()
		if len(seen) < 2 {
			t.Fatalf("a client of %s connected to %v only", l.addr, seen)
		}
		for _, s := range seen {
			_, p, _ := net.SplitHostPort(s)
			port, _ := strconv.Atoi(p)
			if port != l.base && (port < l.base+2 || port > l.base+3) {
				t.Fatalf("a client of %s connected to %s, not one of its listener's ports", l.addr, s)
			}
		}
	}
}

// brokerSeen is a kgo hook that hears every broker connection opened.
type brokerSeen func(host string, port int32)

func (f brokerSeen) OnBrokerConnect(m kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err == nil {
		f(m.Host, m.Port)
	}
}
