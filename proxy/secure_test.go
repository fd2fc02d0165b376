package proxy_test

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"offsetgate/internal/relay"
	"offsetgate/internal/testcerts"
	"offsetgate/internal/testkafka"
	"offsetgate/proxy"
	"offsetgate/rules"
	ogtls "offsetgate/tls"
	"offsetgate/wire"
)

// batchAt is a one-record source batch at a source offset.
func batchAt(base int64) []byte {
	b := oneBatch()
	binary.BigEndian.PutUint64(b[0:], uint64(base))
	return b
}

// secureEnv is a Kafka cluster of the test's own with SSL (client certificates required),
// SASL_PLAINTEXT and SASL_SSL listeners (PLAIN, SCRAM-SHA-256/512), and certificates.
type secureEnv struct {
	c     *testkafka.Cluster
	certs *testcerts.Set
	og    *testcerts.KeyPair // offsetgate's own client certificate towards the destination
	alice *testcerts.KeyPair
	carol *testcerts.KeyPair
}

var users = map[string]string{"alice": "alice-secret", "bob": "bob-secret", "og": "og-secret"}

func startSecure(t testing.TB) *secureEnv {
	t.Helper()
	certs, err := testcerts.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e := &secureEnv{certs: certs}
	for _, x := range []struct {
		kp **testcerts.KeyPair
		cn string
	}{{&e.og, "offsetgate"}, {&e.alice, "alice"}, {&e.carol, "carol"}} {
		if *x.kp, err = certs.Client(x.cn, testcerts.SANs{}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e.c, err = testkafka.Start(ctx, testkafka.Options{Name: "secure-proxy", Brokers: 1,
		// SASL_SSL asks clients to re-authenticate (KIP-368) within 10 minutes: longer than
		// any test here, but every login's answer announces a session lifetime.
		ExtraConfig: map[string]string{"listener.name.sasl_ssl.connections.max.reauth.ms": "600000"},
		Secure: &testkafka.SecureOptions{
			Certs:     testkafka.CertFiles{CA: certs.CA.CertFile, ServerCert: certs.Server.CertFile, ServerKey: certs.Server.KeyFile},
			SASLUsers: users, ClientAuth: "required",
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.c.Stop)
	return e
}

func mech(name, user string) sasl.Mechanism {
	pass := users[user]
	switch name {
	case "PLAIN":
		return plain.Auth{User: user, Pass: pass}.AsMechanism()
	case "SCRAM-SHA-256":
		return scram.Auth{User: user, Pass: pass}.AsSha256Mechanism()
	default:
		return scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()
	}
}

// startSecureProxy starts offsetgate in front of a listener of the secure cluster.
func startSecureProxy(t testing.TB, e *secureEnv, listener string, mutate func(*proxy.Config)) *running {
	t.Helper()
	return startProxy(t, e.c, "", func(c *proxy.Config) {
		c.Transport = ""
		c.Bootstrap = e.c.ListenerAddrs(listener)
		if mutate != nil {
			mutate(c)
		}
	})
}

func createMirrorVia(ctx context.Context, cl *kgo.Client, topic string) error {
	resps, err := kadm.NewClient(cl).CreateTopics(ctx, 1, 1, map[string]*string{rules.MarkKey: kmsg.StringPtr("true")}, topic)
	if err != nil {
		return err
	}
	return resps[topic].Err
}

func roundTrip(ctx context.Context, t *testing.T, cl *kgo.Client, topic string) {
	t.Helper()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("hello")}).FirstErr(); err != nil {
		t.Fatalf("produce through offsetgate: %v", err)
	}
}

// Client identity, TLS on both sides and SASL, against real Kafka with TLS and SASL listeners.
func TestSecure(t *testing.T) {
	e := startSecure(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	approveSASL := rules.MirroringConfig{Clients: []rules.ClientConfig{{SASLUser: "alice", Topics: []string{"sasl-*"}}}}
	ownSASL := &proxy.SASLConfig{Mechanism: "SCRAM-SHA-512", Username: "og", Password: users["og"]}

	// SASL passes through to the destination, which authenticates each client; offsetgate
	// reads the principal from the exchange and the rules admit the approved one only.
	t.Run("sasl passthrough", func(t *testing.T) {
		p := startSecureProxy(t, e, testkafka.ListenerSASLPlaintext, func(c *proxy.Config) {
			c.Mirroring, c.UpstreamSASL = approveSASL, ownSASL
		})
		for _, m := range []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"} {
			alice := franzClient(t, []string{p.addr}, kgo.SASL(mech(m, "alice")))
			topic := "sasl-" + strings.ToLower(m)
			if err := createMirrorVia(ctx, alice, topic); err != nil {
				t.Fatalf("%s: approved SASL identity creating a mirror topic: %v", m, err)
			}
			bob := franzClient(t, []string{p.addr}, kgo.SASL(mech(m, "bob")))
			if err := createMirrorVia(ctx, bob, topic+"-bob"); !errors.Is(err, kerr.TopicAuthorizationFailed) {
				t.Fatalf("%s: unapproved SASL identity creating a mirror topic: %v", m, err)
			}
			plainTopic := "plain-" + strings.ToLower(m)
			if err := e.c.CreateTopic(ctx, plainTopic, 1, 1, nil); err != nil {
				t.Fatal(err)
			}
			roundTrip(ctx, t, bob, plainTopic)
		}
		wrong := franzClient(t, []string{p.addr}, kgo.SASL(plain.Auth{User: "alice", Pass: "nope"}.AsMechanism()), kgo.RequestRetries(0))
		_, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, wrong)
		if !errors.Is(err, kerr.SaslAuthenticationFailed) {
			t.Fatalf("wrong password: %v", err)
		}
	})

	// TLS on both sides: clients speak TLS to offsetgate, offsetgate to the SASL_SSL listener.
	t.Run("sasl over tls on both sides", func(t *testing.T) {
		p := startSecureProxy(t, e, testkafka.ListenerSASLSSL, func(c *proxy.Config) {
			c.Mirroring, c.UpstreamSASL = approveSASL, ownSASL
			c.TLS.Listener = &ogtls.ServerConfig{CertFile: e.certs.Server.CertFile, KeyFile: e.certs.Server.KeyFile}
			c.TLS.Upstream = ogtls.ClientConfig{Enabled: true, CAFile: e.certs.CA.CertFile}
		})
		alice := franzClient(t, []string{p.addr}, kgo.DialTLSConfig(e.certs.ClientTLS(nil)), kgo.SASL(mech("SCRAM-SHA-512", "alice")))
		if err := createMirrorVia(ctx, alice, "sasl-tls"); err != nil {
			t.Fatal(err)
		}
		if err := e.c.CreateTopic(ctx, "plain-tls", 1, 1, nil); err != nil {
			t.Fatal(err)
		}
		roundTrip(ctx, t, alice, "plain-tls")
	})

	// mTLS terminated by offsetgate, plaintext to the destination: the certificate's subject
	// is the identity; another certificate is not approved.
	t.Run("mtls identity", func(t *testing.T) {
		p := startSecureProxy(t, e, testkafka.ListenerPlaintext, func(c *proxy.Config) {
			c.Mirroring = rules.MirroringConfig{Clients: []rules.ClientConfig{{TLSSubject: e.alice.Cert.Subject.String(), Topics: []string{"mtls-*"}}}}
			c.TLS.Listener = &ogtls.ServerConfig{CertFile: e.certs.Server.CertFile, KeyFile: e.certs.Server.KeyFile,
				ClientCAFile: e.certs.CA.CertFile, ClientAuth: "require", HandshakeTimeout: time.Second}
		})
		alice := franzClient(t, []string{p.addr}, kgo.DialTLSConfig(e.certs.ClientTLS(e.alice)))
		if err := createMirrorVia(ctx, alice, "mtls-a"); err != nil {
			t.Fatalf("approved mTLS identity: %v", err)
		}
		carol := franzClient(t, []string{p.addr}, kgo.DialTLSConfig(e.certs.ClientTLS(e.carol)))
		if err := createMirrorVia(ctx, carol, "mtls-c"); !errors.Is(err, kerr.TopicAuthorizationFailed) {
			t.Fatalf("unapproved mTLS identity: %v", err)
		}
		// Misconfigured and hostile clients: refused at the handshake, never hanging.
		expired, _ := e.certs.ExpiredClient("old")
		untrusted, _ := e.certs.UntrustedClient("mallory")
		for name, cfg := range map[string]*tls.Config{
			"no certificate":        e.certs.ClientTLS(nil),
			"expired certificate":   e.certs.ClientTLS(expired),
			"untrusted certificate": e.certs.ClientTLS(untrusted),
		} {
			c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", p.addr, cfg)
			if err == nil {
				// TLS 1.3 reports a refused client certificate on the first read.
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				_, err = c.Read(make([]byte, 1))
				c.Close()
			}
			if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("%s: the handshake was not refused (%v)", name, err)
			}
		}
		for name, send := range map[string][]byte{
			"plaintext kafka on the TLS port": kmsg.NewRequestFormatter().AppendRequest(nil, kmsg.NewPtrApiVersionsRequest(), 1),
			"handshake never completes":       nil,
		} {
			c, err := net.DialTimeout("tcp", p.addr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if send != nil {
				_, _ = c.Write(send)
			}
			start := time.Now()
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, err = io.ReadAll(c)
			c.Close()
			if errors.Is(err, os.ErrDeadlineExceeded) || time.Since(start) > 5*time.Second {
				t.Errorf("%s: offsetgate held the connection for %v", name, time.Since(start))
			}
		}
		if n := p.waitMetric(t, "offsetgate_client_connections_closed_total", map[string]string{"reason": "tls"}, 4); n < 4 {
			t.Errorf("%v TLS handshake failures counted, want at least 4", n)
		}
		// Renegotiation (TLS 1.2) is refused: crypto/tls servers never renegotiate.
		cmd := exec.CommandContext(ctx, "openssl", "s_client", "-connect", p.addr, "-tls1_2",
			"-cert", e.alice.CertFile, "-key", e.alice.KeyFile, "-CAfile", e.certs.CA.CertFile)
		cmd.Stdin = strings.NewReader("R\n")
		out, _ := cmd.CombinedOutput()
		if !strings.Contains(string(out), "RENEGOTIATING") || !strings.Contains(strings.ToLower(string(out)), "no renegotiation") && !strings.Contains(string(out), "alert") {
			t.Errorf("renegotiation attempt: unexpected openssl output:\n%s", out)
		}
	})

	// offsetgate authenticates to the destination with its own certificate: a client that
	// did not log in with SASL would borrow it, so it is refused unless its identity is mapped
	// to destination credentials of its own, or sharing is switched on explicitly.
	t.Run("no lending of offsetgate's identity", func(t *testing.T) {
		base := func(c *proxy.Config) {
			c.TLS.Listener = &ogtls.ServerConfig{CertFile: e.certs.Server.CertFile, KeyFile: e.certs.Server.KeyFile,
				ClientCAFile: e.certs.CA.CertFile, ClientAuth: "require"}
			c.TLS.Upstream = ogtls.ClientConfig{Enabled: true, CAFile: e.certs.CA.CertFile, CertFile: e.og.CertFile, KeyFile: e.og.KeyFile}
		}
		p := startSecureProxy(t, e, testkafka.ListenerSSL, base)
		alice := franzClient(t, []string{p.addr}, kgo.DialTLSConfig(e.certs.ClientTLS(e.alice)), kgo.RequestRetries(0))
		if _, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, alice); err == nil {
			t.Fatal("an unmapped mTLS client used offsetgate's destination certificate")
		}
		if n := p.waitMetric(t, "offsetgate_client_connections_closed_total", map[string]string{"reason": "forbidden"}, 1); n < 1 {
			t.Fatalf("the refusal was not counted as forbidden (%v)", n)
		}
		shared := startSecureProxy(t, e, testkafka.ListenerSSL, func(c *proxy.Config) {
			base(c)
			c.Identities.AllowSharedUpstreamIdentity = true
		})
		roundTripTopic := "lend-shared"
		if err := e.c.CreateTopic(ctx, roundTripTopic, 1, 1, nil); err != nil {
			t.Fatal(err)
		}
		roundTrip(ctx, t, franzClient(t, []string{shared.addr}, kgo.DialTLSConfig(e.certs.ClientTLS(e.alice))), roundTripTopic)
		// Mapped: the upstream connection logs in as alice herself (SASL_SSL).
		mapped := startSecureProxy(t, e, testkafka.ListenerSASLSSL, func(c *proxy.Config) {
			base(c)
			c.UpstreamSASL = ownSASL
			c.Identities.MTLSUpstream = []proxy.MTLSMapping{{Subject: e.alice.Cert.Subject.String(),
				SASL: proxy.SASLConfig{Mechanism: "SCRAM-SHA-256", Username: "alice", Password: users["alice"]}}}
			c.Mirroring = rules.MirroringConfig{Clients: []rules.ClientConfig{{TLSSubject: e.alice.Cert.Subject.String(), Topics: []string{"mapped-*"}}}}
		})
		ma := franzClient(t, []string{mapped.addr}, kgo.DialTLSConfig(e.certs.ClientTLS(e.alice)))
		if err := createMirrorVia(ctx, ma, "mapped-a"); err != nil {
			t.Fatalf("mapped mTLS identity: %v", err)
		}
		roundTrip(ctx, t, ma, roundTripTopic)
		carol := franzClient(t, []string{mapped.addr}, kgo.DialTLSConfig(e.certs.ClientTLS(e.carol)), kgo.RequestRetries(0))
		if _, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, carol); err == nil {
			t.Fatal("an unmapped identity was served on the mapped proxy")
		}
	})

	// Identities are what the destination accepted (identity_test.go).
	t.Run("pipelined SASL logins cannot change the identity", func(t *testing.T) { testPipelinedSASL(ctx, t, e) })
	t.Run("re-authentication", func(t *testing.T) { testReauthentication(ctx, t, e) })
	t.Run("certificate subjects and SANs are exact", func(t *testing.T) { testExactCertificates(ctx, t, e) })

	// A wrong CA for the destination: clients get a clear failure, not a hang.
	t.Run("wrong destination CA", func(t *testing.T) {
		_, err := proxy.New(proxy.Config{Listen: "127.0.0.1:1", Bootstrap: e.c.ListenerAddrs(testkafka.ListenerSSL),
			TLS: proxy.TLSConfig{Upstream: ogtls.ClientConfig{Enabled: true, CAFile: e.certs.Untrusted.CertFile, CertFile: e.og.CertFile, KeyFile: e.og.KeyFile}}}, nil)
		if err != nil {
			t.Fatalf("config itself is valid: %v", err)
		}
		srv, _ := proxy.New(proxy.Config{Listen: "127.0.0.1:" + itoa(freeBase(t, e.c)), Bootstrap: e.c.ListenerAddrs(testkafka.ListenerSSL),
			TLS: proxy.TLSConfig{Upstream: ogtls.ClientConfig{Enabled: true, CAFile: e.certs.Untrusted.CertFile, CertFile: e.og.CertFile, KeyFile: e.og.KeyFile}}}, nil)
		rctx, rcancel := context.WithTimeout(ctx, 90*time.Second)
		defer rcancel()
		start := time.Now()
		err = srv.Run(rctx)
		if err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("offsetgate started against a destination it cannot verify: %v", err)
		}
		if time.Since(start) > 80*time.Second {
			t.Fatalf("it took %v to fail", time.Since(start))
		}
	})

	// A produce-at-offset write whose ledger and destination calls stall runs off the event
	// loop: an ordinary client on the same (single) loop keeps its latency.
	t.Run("stalled ledger does not block the loop", func(t *testing.T) {
		own := relay.NewSet(false, nil)
		defer own.Close()
		p := startSecureProxy(t, e, testkafka.ListenerSASLPlaintext, func(c *proxy.Config) {
			c.Mirroring, c.UpstreamSASL = approveSASL, ownSASL
			c.Transport, c.EventLoops, c.Dial = "gnet", 1, own.Dial
		})
		alice := franzClient(t, []string{p.addr}, kgo.SASL(mech("PLAIN", "alice")))
		topic := "sasl-stall"
		if err := createMirrorVia(ctx, alice, topic); err != nil {
			t.Fatal(err)
		}
		md, err := kadm.NewClient(alice).Metadata(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		leader := md.Topics[topic].Partitions[0].Leader
		var addr string
		for _, b := range md.Brokers {
			if b.NodeID == leader {
				addr = net.JoinHostPort(b.Host, itoa(int(b.Port)))
			}
		}
		wc, err := wire.Dial(ctx, addr, nil, mech("PLAIN", "alice"), "stall-test")
		if err != nil {
			t.Fatal(err)
		}
		defer wc.Close()
		write := func(base int64) (int16, time.Duration) {
			req := produceOne(11, topic, batchAt(base), 30000)
			resp := kmsg.NewPtrProduceResponse()
			start := time.Now()
			if err := wc.RoundTrip(ctx, req, resp, true); err != nil {
				t.Error(err)
				return -1, 0
			}
			return resp.Topics[0].Partitions[0].ErrorCode, time.Since(start)
		}
		if code, _ := write(0); code != 0 {
			t.Fatalf("first at-offset write: code %d", code)
		}
		own.SetDelay(time.Second) // every frame of offsetgate's own connections waits 1s
		done := make(chan [2]int64, 1)
		go func() {
			code, took := write(1)
			done <- [2]int64{int64(code), int64(took)}
		}()
		bob := franzClient(t, []string{p.addr}, kgo.SASL(mech("PLAIN", "bob")))
		time.Sleep(200 * time.Millisecond)
		var worst time.Duration
		for i := 0; i < 10; i++ {
			start := time.Now()
			if _, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, bob); err != nil {
				t.Fatal(err)
			}
			worst = max(worst, time.Since(start))
			time.Sleep(100 * time.Millisecond)
		}
		r := <-done
		if r[0] != 0 || time.Duration(r[1]) < 2*time.Second {
			t.Fatalf("stalled at-offset write: code %d after %v (the stall did not happen)", r[0], time.Duration(r[1]))
		}
		if worst > 1500*time.Millisecond { // blocked, it would wait for the stalled ledger: 2 s and more
			t.Fatalf("an ordinary client on the same loop waited %v while a ledger write stalled", worst)
		}
	})

	// Certificates are re-read on change, without a restart.
	t.Run("certificate reload", func(t *testing.T) {
		dir := t.TempDir()
		certFile, keyFile := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key")
		copyFile(t, e.certs.Server.CertFile, certFile)
		copyFile(t, e.certs.Server.KeyFile, keyFile)
		p := startSecureProxy(t, e, testkafka.ListenerPlaintext, func(c *proxy.Config) {
			c.TLS.Listener = &ogtls.ServerConfig{CertFile: certFile, KeyFile: keyFile}
		})
		cn := func() string {
			c, err := tls.Dial("tcp", p.addr, e.certs.ClientTLS(nil))
			if err != nil {
				return "error: " + err.Error()
			}
			defer c.Close()
			return c.ConnectionState().PeerCertificates[0].Subject.CommonName
		}
		first := cn()
		next, err := e.certs.CA.Issue(testcerts.Template{CommonName: "rotated", Server: true,
			SANs: testcerts.SANs{DNSNames: []string{"localhost"}, IPs: []net.IP{net.ParseIP("127.0.0.1")}}, File: "rotated"})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(1100 * time.Millisecond)
		copyFile(t, next.KeyFile, keyFile)
		copyFile(t, next.CertFile, certFile)
		waitFor(t, 10*time.Second, func() bool { return cn() == "rotated" }, "the rotated certificate to be served (first was "+first+")")
	})
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to+".tmp", b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(to+".tmp", to); err != nil {
		t.Fatal(err)
	}
}

// SaslHandshake v0 (bare SASL tokens after it) is refused with UNSUPPORTED_VERSION.
func TestSaslHandshakeV0Refused(t *testing.T) {
	pair := testkafka.Shared(t)
	p := startProxy(t, pair.Dest, "gnet", nil)
	raw := dialRaw(t, p.addr)
	req := kmsg.NewPtrSASLHandshakeRequest()
	req.SetVersion(0)
	req.Mechanism = "PLAIN"
	resp := kmsg.NewPtrSASLHandshakeResponse()
	raw.roundTrip(req, resp)
	if resp.ErrorCode != 35 {
		t.Fatalf("SaslHandshake v0: error %d, want UNSUPPORTED_VERSION (35)", resp.ErrorCode)
	}
}
