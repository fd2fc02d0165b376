package testkafka_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"offsetgate/internal/testcerts"
	"offsetgate/internal/testkafka"
)

// A cluster of a test's own with SSL, SASL_PLAINTEXT and SASL_SSL listeners: franz-go
// produces and consumes over each with the matching credentials, and is refused without them.
func TestSecureListeners(t *testing.T) {
	certs, err := testcerts.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	alice, err := certs.Client("alice", testcerts.SANs{})
	if err != nil {
		t.Fatal(err)
	}
	expired, err := certs.ExpiredClient("old")
	if err != nil {
		t.Fatal(err)
	}
	untrusted, err := certs.UntrustedClient("mallory")
	if err != nil {
		t.Fatal(err)
	}
	users := map[string]string{"alice": "alice-secret", "bob": "bob-secret"}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := testkafka.Start(ctx, testkafka.Options{
		Name:    "secure",
		Brokers: 1,
		Secure: &testkafka.SecureOptions{
			Certs:      testkafka.CertFiles{CA: certs.CA.CertFile, ServerCert: certs.Server.CertFile, ServerKey: certs.Server.KeyFile},
			SASLUsers:  users,
			ClientAuth: "required",
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)

	n := c.Nodes[0]
	seen := map[string]bool{}
	for _, l := range []string{testkafka.ListenerPlaintext, testkafka.ListenerSSL, testkafka.ListenerSASLPlaintext, testkafka.ListenerSASLSSL} {
		a := n.ListenerAddr(l)
		if a == "" || seen[a] {
			t.Fatalf("listener %s at %q (addresses so far %v)", l, a, seen)
		}
		seen[a] = true
		if got := c.ListenerBootstrap(l); got != a {
			t.Fatalf("ListenerBootstrap(%s) = %q, want %q", l, got, a)
		}
	}
	if n.ListenerAddr("PLAINTEXT") != n.Addr() || n.ListenerAddr("sasl_ssl") != n.ListenerAddr(testkafka.ListenerSASLSSL) || n.ListenerAddr("NOPE") != "" {
		t.Fatal("ListenerAddr: PLAINTEXT is not Addr, names are case sensitive, or an unknown name has an address")
	}

	t.Run("json", func(t *testing.T) {
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		var back testkafka.Cluster
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		for _, l := range []string{testkafka.ListenerPlaintext, testkafka.ListenerSSL, testkafka.ListenerSASLPlaintext, testkafka.ListenerSASLSSL} {
			if got, want := back.ListenerBootstrap(l), c.ListenerBootstrap(l); got != want {
				t.Fatalf("%s after a JSON round trip: %q, want %q", l, got, want)
			}
		}
	})

	tlsWith := func(p *testcerts.KeyPair) kgo.Opt { return kgo.DialTLSConfig(certs.ClientTLS(p)) }
	saslPlain := func(u, p string) kgo.Opt { return kgo.SASL(plain.Auth{User: u, Pass: p}.AsMechanism()) }
	scram256 := func(u, p string) kgo.Opt { return kgo.SASL(scram.Auth{User: u, Pass: p}.AsSha256Mechanism()) }
	scram512 := func(u, p string) kgo.Opt { return kgo.SASL(scram.Auth{User: u, Pass: p}.AsSha512Mechanism()) }

	for _, tc := range []struct {
		name     string
		listener string
		opts     []kgo.Opt
	}{
		{"SSL/client-cert", testkafka.ListenerSSL, []kgo.Opt{tlsWith(alice)}},
		{"SASL_PLAINTEXT/PLAIN", testkafka.ListenerSASLPlaintext, []kgo.Opt{saslPlain("alice", users["alice"])}},
		{"SASL_PLAINTEXT/SCRAM-SHA-256", testkafka.ListenerSASLPlaintext, []kgo.Opt{scram256("bob", users["bob"])}},
		{"SASL_PLAINTEXT/SCRAM-SHA-512", testkafka.ListenerSASLPlaintext, []kgo.Opt{scram512("alice", users["alice"])}},
		{"SASL_SSL/SCRAM-SHA-512", testkafka.ListenerSASLSSL, []kgo.Opt{tlsWith(nil), scram512("bob", users["bob"])}},
		{"SASL_SSL/PLAIN", testkafka.ListenerSASLSSL, []kgo.Opt{tlsWith(nil), saslPlain("bob", users["bob"])}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			secureRoundTrip(ctx, t, c, tc.listener, tc.opts...)
		})
	}

	for _, tc := range []struct {
		name     string
		listener string
		opts     []kgo.Opt
	}{
		{"SASL_PLAINTEXT/PLAIN-wrong-password", testkafka.ListenerSASLPlaintext, []kgo.Opt{saslPlain("alice", "wrong")}},
		{"SASL_PLAINTEXT/SCRAM-SHA-256-wrong-password", testkafka.ListenerSASLPlaintext, []kgo.Opt{scram256("alice", "wrong")}},
		{"SASL_PLAINTEXT/SCRAM-SHA-512-unknown-user", testkafka.ListenerSASLPlaintext, []kgo.Opt{scram512("carol", "carol-secret")}},
		{"SASL_SSL/SCRAM-SHA-512-wrong-password", testkafka.ListenerSASLSSL, []kgo.Opt{tlsWith(nil), scram512("bob", "wrong")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := secureRefused(ctx, t, c, tc.listener, tc.opts...)
			if !errors.Is(err, kerr.SaslAuthenticationFailed) || !strings.Contains(err.Error(), "SASL Authentication failed") {
				t.Fatalf("got %v, want SASL authentication failed", err)
			}
		})
	}

	for _, tc := range []struct {
		name string
		cert *testcerts.KeyPair
	}{
		{"SSL/no-client-cert", nil},
		{"SSL/expired-client-cert", expired},
		{"SSL/untrusted-client-cert", untrusted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := secureRefused(ctx, t, c, testkafka.ListenerSSL, tlsWith(tc.cert))
			if err == nil {
				t.Fatal("the SSL listener with required client authentication accepted the client")
			}
			// The broker refuses in the handshake; it is not a timeout.
			var ne net.Error
			if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
				t.Fatalf("refusal looks like a timeout: %v", err)
			}
			t.Logf("refused: %v", err)
		})
	}

	// Without a client certificate a plain TLS handshake with the SSL listener fails too.
	t.Run("SSL/raw-handshake-without-cert", func(t *testing.T) {
		d := &net.Dialer{Timeout: 5 * time.Second}
		conn, err := tls.DialWithDialer(d, "tcp", n.ListenerAddr(testkafka.ListenerSSL), certs.ClientTLS(nil))
		if err == nil {
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			// TLS 1.3: the client's handshake is done before the server has checked the
			// (absent) client certificate; its refusal arrives with the first read.
			_, err = conn.Read(make([]byte, 1))
		}
		if err == nil {
			t.Fatal("TLS connection without a client certificate was served")
		}
		t.Logf("refused: %v", err)
	})
}

// secureRoundTrip produces 20 records over a listener and consumes them back over it, after
// checking that the broker advertises that listener's address to a client of it.
func secureRoundTrip(ctx context.Context, t *testing.T, c *testkafka.Cluster, listener string, opts ...kgo.Opt) {
	t.Helper()
	topic := testkafka.Names(t, "topic")
	if err := c.CreateTopic(ctx, topic, 1, 1, nil); err != nil {
		t.Fatal(err)
	}
	addrs := c.ListenerAddrs(listener)
	base := append([]kgo.Opt{kgo.SeedBrokers(addrs...), kgo.RetryTimeout(30 * time.Second)}, opts...)

	pcl, err := kgo.NewClient(base...)
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	md, err := kmsg.NewPtrMetadataRequest().RequestWith(rctx, pcl)
	cancel()
	if err != nil {
		t.Fatalf("metadata over %s: %v", listener, err)
	}
	for _, b := range md.Brokers {
		if got := net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))); got != c.Node(b.NodeID).ListenerAddr(listener) {
			t.Fatalf("broker %d advertised %s on %s, want %s", b.NodeID, got, listener, c.Node(b.NodeID).ListenerAddr(listener))
		}
	}

	const count = 20
	var rs []*kgo.Record
	for i := 0; i < count; i++ {
		rs = append(rs, &kgo.Record{Topic: topic, Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(fmt.Sprintf("%s-v%d", listener, i))})
	}
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := pcl.ProduceSync(pctx, rs...).FirstErr(); err != nil {
		t.Fatalf("produce over %s: %v", listener, err)
	}

	ccl, err := kgo.NewClient(append(base, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer ccl.Close()
	var got []*kgo.Record
	for len(got) < count {
		fs := ccl.PollFetches(pctx)
		if pctx.Err() != nil {
			t.Fatalf("consumed %d of %d records over %s: %v", len(got), count, listener, pctx.Err())
		}
		fs.EachError(func(tp string, p int32, err error) { t.Fatalf("fetch %s[%d] over %s: %v", tp, p, listener, err) })
		got = append(got, fs.Records()...)
	}
	for i, r := range got {
		if r.Offset != int64(i) || string(r.Value) != string(rs[i].Value) {
			t.Fatalf("record %d: offset %d value %q, want offset %d value %q", i, r.Offset, r.Value, i, rs[i].Value)
		}
	}
}

// secureRefused sends a Metadata request over a listener and returns its error (nil when the
// broker answered).
func secureRefused(ctx context.Context, t *testing.T, c *testkafka.Cluster, listener string, opts ...kgo.Opt) error {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenerAddrs(listener)...),
		kgo.RetryTimeout(5 * time.Second), kgo.RequestRetries(1)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = kmsg.NewPtrMetadataRequest().RequestWith(rctx, cl)
	return err
}
