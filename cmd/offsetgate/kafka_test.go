package main

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"go.uber.org/zap"

	"offsetgate/internal/ports"
	"offsetgate/internal/testcerts"
	"offsetgate/internal/testkafka"
	"offsetgate/proxy"
	"offsetgate/rules"
	ogtls "offsetgate/tls"
)

// asCLI set in its environment makes the test binary run as the offsetgate command (a test
// that kills a process starts it so, with its arguments).
const asCLI = "OFFSETGATE_TEST_AS_CLI"

func TestMain(m *testing.M) {
	if os.Getenv(asCLI) == "1" {
		main()
	}
	testkafka.Main(m)
}

// ogEnv is offsetgate (a TLS listener asking for client certificates) in front of the shared
// destination, with a mirroring identity approved for the test's topics, and the CLI flags
// that prove it.
type ogEnv struct {
	pair   *testkafka.Pair
	addr   string
	source string
	certs  *testcerts.Set
	mirror *testcerts.KeyPair
	srv    *proxy.Server
}

func newOGEnv(t *testing.T, prefix string) *ogEnv {
	t.Helper()
	pair := testkafka.Shared(t)
	set, err := testcerts.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	kp, err := set.Client("mirror", testcerts.SANs{URIs: []string{"spiffe://test/mirror"}})
	if err != nil {
		t.Fatal(err)
	}
	base, err := ports.Block(4)
	if err != nil {
		t.Fatal(err)
	}
	cfg := proxy.Config{
		Listen:    "127.0.0.1:" + strconv.Itoa(base),
		Bootstrap: pair.Dest.Addrs(),
		TLS: proxy.TLSConfig{Listener: &ogtls.ServerConfig{CertFile: set.Server.CertFile, KeyFile: set.Server.KeyFile,
			ClientCAFile: set.CA.CertFile, ClientAuth: "request"}},
		Mirroring: rules.MirroringConfig{Clients: []rules.ClientConfig{{TLSSAN: "URI:spiffe://test/mirror", Topics: []string{prefix + "*"}}}},
	}
	srv, err := proxy.New(cfg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	select {
	case <-srv.Ready():
	case err := <-done:
		cancel()
		t.Fatal(err)
	case <-time.After(time.Minute):
		cancel()
		t.Fatal("offsetgate did not start")
	}
	t.Cleanup(func() { cancel(); <-done })
	return &ogEnv{pair: pair, addr: cfg.Listen, source: pair.Source.Addrs()[0], certs: set, mirror: kp, srv: srv}
}

// id is the mirroring identity's flags.
func (e *ogEnv) id() []string {
	return []string{"--tls-ca", e.certs.CA.CertFile, "--tls-cert", e.mirror.CertFile, "--tls-key", e.mirror.KeyFile}
}

// reader is the flags of a client without a certificate.
func (e *ogEnv) reader() []string { return []string{"--tls-ca", e.certs.CA.CertFile} }

func args(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}
