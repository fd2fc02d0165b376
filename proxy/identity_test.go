package proxy_test

import (
	"context"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	zapobserver "go.uber.org/zap/zaptest/observer"
	"gopkg.in/yaml.v3"

	"offsetgate/internal/testcerts"
	"offsetgate/internal/testkafka"
	"offsetgate/proxy"
	"offsetgate/rules"
	ogtls "offsetgate/tls"
	"offsetgate/wire"
)

func saslHandshakeReq(mech string) *kmsg.SASLHandshakeRequest {
	r := kmsg.NewPtrSASLHandshakeRequest()
	r.SetVersion(1)
	r.Mechanism = mech
	return r
}

func saslAuthReq(token []byte) *kmsg.SASLAuthenticateRequest {
	r := kmsg.NewPtrSASLAuthenticateRequest()
	r.SetVersion(2)
	r.SASLAuthBytes = token
	return r
}

// mirrorTopicReq asks for a mirror topic (the mark set).
func mirrorTopicReq(topic string) *kmsg.CreateTopicsRequest {
	req := kmsg.NewPtrCreateTopicsRequest()
	req.SetVersion(5)
	req.TimeoutMillis = 30000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, 1, 1
	c := kmsg.NewCreateTopicsRequestTopicConfig()
	c.Name, c.Value = rules.MarkKey, kmsg.StringPtr("true")
	rt.Configs = append(rt.Configs, c)
	req.Topics = append(req.Topics, rt)
	return req
}

// atOffsetReq is a produce-at-offset request of one batch at source offset 0.
func atOffsetReq(topic string) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(11)
	req.Acks, req.TimeoutMillis = -1, 30000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = batchAt(0)
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

// mirrorWritesRefused checks that a connection cannot create a mirror topic nor write one at
// offset, and that nothing reached the destination.
func mirrorWritesRefused(ctx context.Context, t *testing.T, e *secureEnv, wc *wire.Conn, newTopic, target string) {
	t.Helper()
	ct := kmsg.NewPtrCreateTopicsResponse()
	if err := wc.RoundTrip(ctx, mirrorTopicReq(newTopic), ct, false); err != nil {
		t.Fatalf("CreateTopics: %v", err)
	}
	if code := ct.Topics[0].ErrorCode; code != kerr.TopicAuthorizationFailed.Code {
		t.Errorf("mirror topic creation answered with error %d, want TOPIC_AUTHORIZATION_FAILED", code)
	}
	pr := kmsg.NewPtrProduceResponse()
	if err := wc.RoundTrip(ctx, atOffsetReq(target), pr, true); err != nil {
		t.Fatalf("produce at offset: %v", err)
	}
	if code := pr.Topics[0].Partitions[0].ErrorCode; code != kerr.TopicAuthorizationFailed.Code {
		t.Errorf("produce at offset answered with error %d, want TOPIC_AUTHORIZATION_FAILED", code)
	}
	topicAbsent(ctx, t, e, newTopic)
	if n := hwm(ctx, t, e.c, target, 0); n != 0 {
		t.Errorf("%s has %d records: the write at offset got through", target, n)
	}
}

func topicAbsent(ctx context.Context, t *testing.T, e *secureEnv, topic string) {
	t.Helper()
	adm, err := e.c.Admin()
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if tm, ok := md.Topics[topic]; ok && tm.Err == nil {
		t.Errorf("topic %s was created", topic)
	}
}

// bob logs in, and behind the last step of his login pipelines a second SaslHandshake and a
// SaslAuthenticate naming alice, the approved mirroring client, with a wrong password. The
// destination answers ILLEGAL_SASL_STATE to both and keeps the connection; bob must stay bob.
func testPipelinedSASL(ctx context.Context, t *testing.T, e *secureEnv) {
	p := startSecureProxy(t, e, testkafka.ListenerSASLPlaintext, func(c *proxy.Config) {
		c.Mirroring = rules.MirroringConfig{Clients: []rules.ClientConfig{{SASLUser: "alice", Topics: []string{"ident-*"}}}}
		c.UpstreamSASL = &proxy.SASLConfig{Mechanism: "SCRAM-SHA-512", Username: "og", Password: users["og"]}
	})
	bogus := []byte("\x00alice\x00wrong-password")
	for _, m := range []string{"PLAIN", "SCRAM-SHA-256"} {
		t.Run(m, func(t *testing.T) {
			target := "ident-target-" + strings.ToLower(m)
			alice := franzClient(t, []string{p.addr}, kgo.SASL(mech(m, "alice")))
			if err := createMirrorVia(ctx, alice, target); err != nil {
				t.Fatalf("alice creating %s: %v", target, err)
			}
			wc, err := wire.Dial(ctx, p.addr, nil, nil, "bob")
			if err != nil {
				t.Fatal(err)
			}
			defer wc.Close()
			hs := kmsg.NewPtrSASLHandshakeResponse()
			if err := wc.RoundTrip(ctx, saslHandshakeReq(m), hs, false); err != nil || hs.ErrorCode != 0 {
				t.Fatalf("handshake: %v, error %d", err, hs.ErrorCode)
			}
			last := []byte("\x00bob\x00" + users["bob"])
			if m != "PLAIN" {
				sess, first, err := mech(m, "bob").Authenticate(ctx, "127.0.0.1")
				if err != nil {
					t.Fatal(err)
				}
				resp := kmsg.NewPtrSASLAuthenticateResponse()
				if err := wc.RoundTrip(ctx, saslAuthReq(first), resp, false); err != nil || resp.ErrorCode != 0 {
					t.Fatalf("client-first: %v, error %d", err, resp.ErrorCode)
				}
				if _, last, err = sess.Challenge(resp.SASLAuthBytes); err != nil {
					t.Fatal(err)
				}
			}
			resps := []kmsg.Response{kmsg.NewPtrSASLAuthenticateResponse(), kmsg.NewPtrSASLHandshakeResponse(), kmsg.NewPtrSASLAuthenticateResponse()}
			if err := wc.Pipeline(ctx, []kmsg.Request{saslAuthReq(last), saslHandshakeReq("PLAIN"), saslAuthReq(bogus)}, resps); err != nil {
				t.Fatalf("pipelined exchange: %v", err)
			}
			if c := resps[0].(*kmsg.SASLAuthenticateResponse).ErrorCode; c != 0 {
				t.Fatalf("bob's login: error %d", c)
			}
			if a, b := resps[1].(*kmsg.SASLHandshakeResponse).ErrorCode, resps[2].(*kmsg.SASLAuthenticateResponse).ErrorCode; a != 34 || b != 34 {
				t.Errorf("second exchange answered %d, %d; want ILLEGAL_SASL_STATE (34) twice", a, b)
			}
			mirrorWritesRefused(ctx, t, e, wc, "ident-evil-"+strings.ToLower(m), target)
		})
	}
	// A request pipelined behind the login's last step is never judged before its answer. The
	// login names alice (approved for these topics) with a password the destination refuses:
	// judged before the answer, the creation would pass as alice's; judged after it, the
	// connection has ended. Either way nothing is created. (With the right password the answer
	// may come back before the second request is read, and alice's creation is then rightly
	// approved: that order is the client's, not a hole.)
	t.Run("request behind the login", func(t *testing.T) {
		wc, err := wire.Dial(ctx, p.addr, nil, nil, "bob")
		if err != nil {
			t.Fatal(err)
		}
		defer wc.Close()
		hs := kmsg.NewPtrSASLHandshakeResponse()
		if err := wc.RoundTrip(ctx, saslHandshakeReq("PLAIN"), hs, false); err != nil || hs.ErrorCode != 0 {
			t.Fatalf("handshake: %v, error %d", err, hs.ErrorCode)
		}
		resps := []kmsg.Response{kmsg.NewPtrSASLAuthenticateResponse(), kmsg.NewPtrCreateTopicsResponse()}
		err = wc.Pipeline(ctx, []kmsg.Request{saslAuthReq([]byte("\x00alice\x00not-" + users["alice"])), mirrorTopicReq("ident-early")}, resps)
		if err == nil {
			if c := resps[0].(*kmsg.SASLAuthenticateResponse).ErrorCode; c == 0 {
				t.Fatalf("a login with a wrong password was accepted")
			}
			if c := resps[1].(*kmsg.CreateTopicsResponse).Topics[0].ErrorCode; c == 0 {
				t.Errorf("a creation pipelined behind a refused login was approved")
			}
		}
		topicAbsent(ctx, t, e, "ident-early")
	})
}

// Re-authentication (KIP-368) runs through offsetgate when the destination asked for it; it
// cannot change the principal, and a failed one, or one the destination refuses to start,
// ends the connection.
func testReauthentication(ctx context.Context, t *testing.T, e *secureEnv) {
	p := startSecureProxy(t, e, testkafka.ListenerSASLSSL, func(c *proxy.Config) {
		c.Mirroring = rules.MirroringConfig{Clients: []rules.ClientConfig{{SASLUser: "alice", Topics: []string{"reauth-*"}}}}
		c.UpstreamSASL = &proxy.SASLConfig{Mechanism: "SCRAM-SHA-512", Username: "og", Password: users["og"]}
		c.TLS.Upstream = ogtls.ClientConfig{Enabled: true, CAFile: e.certs.CA.CertFile}
	})
	alice := franzClient(t, []string{p.addr}, kgo.SASL(mech("PLAIN", "alice")))
	if err := createMirrorVia(ctx, alice, "reauth-target"); err != nil {
		t.Fatalf("alice creating reauth-target: %v", err)
	}
	// login runs SaslHandshake and SaslAuthenticate (PLAIN) and returns the first error code.
	login := func(wc *wire.Conn, user string, pass string) (int16, *kmsg.SASLAuthenticateResponse, error) {
		hs := kmsg.NewPtrSASLHandshakeResponse()
		if err := wc.RoundTrip(ctx, saslHandshakeReq("PLAIN"), hs, false); err != nil || hs.ErrorCode != 0 {
			return hs.ErrorCode, nil, err
		}
		resp := kmsg.NewPtrSASLAuthenticateResponse()
		err := wc.RoundTrip(ctx, saslAuthReq([]byte("\x00"+user+"\x00"+pass)), resp, false)
		return resp.ErrorCode, resp, err
	}
	served := func(wc *wire.Conn) bool {
		return wc.RoundTrip(ctx, kmsg.NewPtrMetadataRequest(), kmsg.NewPtrMetadataResponse(), false) == nil
	}
	dial := func() *wire.Conn {
		wc, err := wire.Dial(ctx, p.addr, nil, nil, "bob")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { wc.Close() })
		code, resp, err := login(wc, "bob", users["bob"])
		if err != nil || code != 0 || resp.SessionLifetimeMillis <= 0 {
			t.Fatalf("login: %v, error %d, %+v (the listener should ask for re-authentication)", err, code, resp)
		}
		time.Sleep(1100 * time.Millisecond) // Kafka starts one re-authentication a second at most
		if code, _, err := login(wc, "bob", users["bob"]); err != nil || code != 0 {
			t.Fatalf("re-authentication as bob: %v, error %d", err, code)
		}
		return wc
	}

	wc := dial()
	mirrorWritesRefused(ctx, t, e, wc, "reauth-bob", "reauth-target")
	// alice's own password, on bob's connection: the destination refuses to change the
	// principal (SASL_AUTHENTICATION_FAILED), and the connection ends.
	time.Sleep(1100 * time.Millisecond)
	if code, _, err := login(wc, "alice", users["alice"]); err == nil && code == 0 {
		t.Fatal("re-authentication as another principal succeeded")
	}
	if served(wc) {
		t.Fatal("the connection is still served after a failed re-authentication")
	}
	// Within a second of the last one, Kafka does not start a re-authentication: it answers
	// ILLEGAL_SASL_STATE and keeps the connection. offsetgate ends it.
	wc = dial()
	if code, _, err := login(wc, "bob", users["bob"]); err != nil || code != 34 {
		t.Fatalf("a re-authentication too soon: %v, error %d, want ILLEGAL_SASL_STATE", err, code)
	}
	if served(wc) {
		t.Fatal("the connection is still served after a refused re-authentication")
	}
	if n := p.waitMetric(t, "offsetgate_client_connections_closed_total", map[string]string{"reason": "authentication"}, 2); n < 2 {
		t.Errorf("%v connections closed for a failed re-authentication, want 2", n)
	}
}

func attr(oid asn1.ObjectIdentifier, v string) pkix.AttributeTypeAndValue {
	return pkix.AttributeTypeAndValue{Type: oid, Value: v}
}

// Certificates whose subjects Go's pkix.Name would print as "CN=mirror,O=acme", and a URI SAN
// that url.URL would print as spiffe://acme/mirror, match nothing: neither a mirroring rule nor
// an mtls_upstream mapping.
func testExactCertificates(ctx context.Context, t *testing.T, e *secureEnv) {
	cn, o := asn1.ObjectIdentifier{2, 5, 4, 3}, asn1.ObjectIdentifier{2, 5, 4, 10}
	issue := func(file string, subject pkix.RDNSequence, uri string) *testcerts.KeyPair {
		t.Helper()
		kp, err := e.certs.CA.Issue(testcerts.Template{CommonName: file, Subject: subject, RawURIs: []string{uri}})
		if err != nil {
			t.Fatal(err)
		}
		return kp
	}
	other := pkix.RDNSequence{{attr(o, "acme")}, {attr(cn, "other")}}
	exact := issue("exact", pkix.RDNSequence{{attr(o, "acme")}, {attr(cn, "mirror")}}, "spiffe://acme/exact")
	exactURI := issue("exact-uri", other, "spiffe://acme/mirror")
	hostile := map[string]*testcerts.KeyPair{
		"[CN=mirror][O=acme]":          issue("reordered", pkix.RDNSequence{{attr(cn, "mirror")}, {attr(o, "acme")}}, "spiffe://acme/h1"),
		"[CN=mirror+O=acme]":           issue("multi", pkix.RDNSequence{{attr(cn, "mirror"), attr(o, "acme")}}, "spiffe://acme/h2"),
		"[O=acme][CN=evil][CN=mirror]": issue("two-cns", pkix.RDNSequence{{attr(o, "acme")}, {attr(cn, "evil")}, {attr(cn, "mirror")}}, "spiffe://acme/h3"),
		"URI:spiffe://acme/mirror#":    issue("fragment", other, "spiffe://acme/mirror#"),
		"URI:SPIFFE://acme/mirror":     issue("scheme-case", other, "SPIFFE://acme/mirror"),
	}
	if s := exact.Cert.Subject.String(); s != "CN=mirror,O=acme" {
		t.Fatalf("the control certificate's subject is %q", s)
	}
	for name, kp := range hostile {
		if strings.HasPrefix(name, "[") && kp.Cert.Subject.String() != "CN=mirror,O=acme" {
			t.Fatalf("%s: Go prints %q: not the confusion under test", name, kp.Cert.Subject.String())
		}
	}
	listener := &ogtls.ServerConfig{CertFile: e.certs.Server.CertFile, KeyFile: e.certs.Server.KeyFile,
		ClientCAFile: e.certs.CA.CertFile, ClientAuth: "require"}

	t.Run("approval", func(t *testing.T) {
		p := startSecureProxy(t, e, testkafka.ListenerPlaintext, func(c *proxy.Config) {
			c.TLS.Listener = listener
			c.Mirroring = rules.MirroringConfig{Clients: []rules.ClientConfig{
				{TLSSubject: "CN=mirror,O=acme", Topics: []string{"exact-*"}},
				{TLSSAN: "URI:spiffe://acme/mirror", Topics: []string{"exact-*"}},
			}}
		})
		create := func(kp *testcerts.KeyPair, topic string) error {
			return createMirrorVia(ctx, franzClient(t, []string{p.addr}, kgo.DialTLSConfig(e.certs.ClientTLS(kp))), topic)
		}
		if err := create(exact, "exact-subject"); err != nil {
			t.Fatalf("the exact subject: %v", err)
		}
		if err := create(exactURI, "exact-uri"); err != nil {
			t.Fatalf("the exact URI SAN: %v", err)
		}
		i := 0
		for name, kp := range hostile {
			i++
			topic := "exact-hostile-" + string(rune('a'+i))
			if err := create(kp, topic); !errors.Is(err, kerr.TopicAuthorizationFailed) {
				t.Errorf("%s creating a mirror topic: %v, want TOPIC_AUTHORIZATION_FAILED", name, err)
			}
		}
	})

	// offsetgate lends no identity of its own: a certificate is served only when it maps to
	// destination credentials, and the mapping keys are as exact as the rules.
	t.Run("mtls_upstream mapping", func(t *testing.T) {
		alice := proxy.SASLConfig{Mechanism: "SCRAM-SHA-256", Username: "alice", Password: users["alice"]}
		p := startSecureProxy(t, e, testkafka.ListenerSASLSSL, func(c *proxy.Config) {
			c.TLS.Listener = listener
			c.TLS.Upstream = ogtls.ClientConfig{Enabled: true, CAFile: e.certs.CA.CertFile, CertFile: e.og.CertFile, KeyFile: e.og.KeyFile}
			c.UpstreamSASL = &proxy.SASLConfig{Mechanism: "SCRAM-SHA-512", Username: "og", Password: users["og"]}
			c.Identities.MTLSUpstream = []proxy.MTLSMapping{{Subject: "CN=mirror,O=acme", SASL: alice}, {SAN: "URI:spiffe://acme/mirror", SASL: alice}}
		})
		served := func(kp *testcerts.KeyPair) error {
			cl := franzClient(t, []string{p.addr}, kgo.DialTLSConfig(e.certs.ClientTLS(kp)), kgo.RequestRetries(0))
			_, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
			return err
		}
		for _, kp := range []*testcerts.KeyPair{exact, exactURI} {
			if err := served(kp); err != nil {
				t.Fatalf("a mapped certificate: %v", err)
			}
		}
		for name, kp := range hostile {
			if err := served(kp); err == nil {
				t.Errorf("%s was served with the mapped identity", name)
			}
		}
	})
}

// Rules that can never match a client are refused at start (and at reload, reload.go).
func TestNeverMatchingRulesRefused(t *testing.T) {
	base := func() proxy.Config {
		return proxy.Config{Listen: "127.0.0.1:19092", Bootstrap: []string{"127.0.0.1:1"}}
	}
	tlsListener := func(auth string) *ogtls.ServerConfig {
		return &ogtls.ServerConfig{CertFile: "s.pem", KeyFile: "s.key", ClientCAFile: "ca.pem", ClientAuth: auth}
	}
	sasl := &proxy.SASLConfig{Mechanism: "PLAIN", Username: "og", Password: "x"}
	rule := func(c rules.ClientConfig) rules.MirroringConfig {
		c.Topics = []string{"t"}
		return rules.MirroringConfig{Clients: []rules.ClientConfig{c}}
	}
	for name, c := range map[string]struct {
		mutate func(*proxy.Config)
		want   string
	}{
		"tls_subject without TLS": {func(c *proxy.Config) { c.Mirroring = rule(rules.ClientConfig{TLSSubject: "CN=mirror"}) }, "mirroring.clients[0]"},
		"tls_san without client certificates": {func(c *proxy.Config) {
			c.TLS.Listener = tlsListener("none")
			c.Mirroring = rule(rules.ClientConfig{TLSSAN: "URI:spiffe://acme/mirror"})
		}, "mirroring.clients[0]"},
		"sasl_user without SASL": {func(c *proxy.Config) { c.Mirroring = rule(rules.ClientConfig{SASLUser: "mirror"}) }, "upstream_sasl"},
		"subject that no certificate renders": {func(c *proxy.Config) {
			c.TLS.Listener = tlsListener("require")
			c.Mirroring = rule(rules.ClientConfig{TLSSubject: "O=acme, CN=mirror"})
		}, "tls_subject"},
		"mapping by two CNs": {func(c *proxy.Config) {
			c.TLS.Listener, c.UpstreamSASL = tlsListener("require"), sasl
			c.Identities.MTLSUpstream = []proxy.MTLSMapping{{Subject: "CN=evil,CN=mirror", SASL: *sasl}}
		}, "identities.mtls_upstream[0].subject"},
		"mapping by a SAN of no kind": {func(c *proxy.Config) {
			c.TLS.Listener, c.UpstreamSASL = tlsListener("require"), sasl
			c.Identities.MTLSUpstream = []proxy.MTLSMapping{{SAN: "spiffe://acme/mirror", SASL: *sasl}}
		}, "identities.mtls_upstream[0].san"},
		"mapping without SASL": {func(c *proxy.Config) {
			c.TLS.Listener = tlsListener("require")
			c.Identities.MTLSUpstream = []proxy.MTLSMapping{{Subject: "CN=mirror", SASL: *sasl}}
		}, "upstream_sasl"},
	} {
		cfg := base()
		c.mutate(&cfg)
		if _, err := proxy.New(cfg, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", name, err, c.want)
		}
	}
	ok := base()
	ok.TLS.Listener, ok.UpstreamSASL = tlsListener("request"), sasl
	ok.Mirroring = rules.MirroringConfig{Clients: []rules.ClientConfig{
		{TLSSubject: "CN=mirror,O=acme", Topics: []string{"t"}}, {SASLUser: "mirror", Topics: []string{"t"}}}}
	ok.Defaults()
	if err := ok.Validate(); err != nil {
		t.Fatalf("rules that can match: %v", err)
	}
}

// A live offsetgate whose configuration file changes in sections read at start only warns,
// naming each, and keeps serving with the rules it has.
func TestReloadWarnsAboutStartOnlySections(t *testing.T) {
	pair := testkafka.Shared(t)
	dir := t.TempDir()
	certs, err := testcerts.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg := proxy.Config{
		Listen:    "127.0.0.1:" + itoa(freeBase(t, pair.Dest)),
		Bootstrap: pair.Dest.Addrs(),
		TLS: proxy.TLSConfig{Listener: &ogtls.ServerConfig{CertFile: certs.Server.CertFile, KeyFile: certs.Server.KeyFile,
			ClientCAFile: certs.CA.CertFile, ClientAuth: "request"}},
		Mirroring: rules.MirroringConfig{Clients: []rules.ClientConfig{{TLSSAN: "URI:spiffe://acme/mirror", Topics: []string{"reload-*"}}}},
		Path:      filepath.Join(dir, "offsetgate.yaml"),
	}
	write := func(c proxy.Config) {
		t.Helper()
		b, err := yaml.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(cfg.Path+".tmp", b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(cfg.Path+".tmp", cfg.Path); err != nil {
			t.Fatal(err)
		}
	}
	write(cfg)
	core, logs := zapobserver.New(zapcore.InfoLevel)
	srv, err := proxy.New(cfg, zap.New(zapcore.NewTee(core, zaptest.NewLogger(t).Core())))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	defer func() { cancel(); <-done }()
	select {
	case <-srv.Ready():
	case err := <-done:
		t.Fatalf("offsetgate did not start: %v", err)
	}
	next := cfg
	tl := *cfg.TLS.Listener
	tl.HandshakeTimeout = 3 * time.Second
	next.TLS.Listener = &tl
	next.Identities.AllowSharedUpstreamIdentity = true
	write(next)
	waitFor(t, 15*time.Second, func() bool {
		warned := map[string]bool{}
		for _, e := range logs.FilterLevelExact(zapcore.WarnLevel).All() {
			if s, ok := e.ContextMap()["section"].(string); ok {
				warned[s] = true
			}
		}
		return warned["tls"] && warned["identities"]
	}, "warnings naming tls and identities")
	if n := logs.FilterMessage("mirroring rules reloaded").Len(); n != 0 {
		t.Fatalf("%d 'mirroring rules reloaded' lines for a file whose rules did not change", n)
	}
}
