package proxy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	zapobserver "go.uber.org/zap/zaptest/observer"

	"offsetgate/rules"
)

const listenersBase = `bootstrap: [127.0.0.1:1]
listeners:
  - name: consumers
    listen: 127.0.0.1:9092
  - name: mirror
    listen: 127.0.0.1:9192
    advertise: og.example
    broker_ports: {1: 9301}
    tls: {cert_file: s.pem, key_file: s.key, client_ca_file: ca.pem, client_auth: require}
mirroring:
  clients:
    - tls_san: URI:spiffe://acme/mirror
      listeners: [mirror]
      topics: ["orders"]
`

func parseValid(t *testing.T, body string) (Config, error) {
	t.Helper()
	c, err := parseConfig([]byte(body), "offsetgate.yaml")
	if err != nil {
		return c, err
	}
	c.Defaults()
	return c, c.Validate()
}

// Named listeners: each is validated with its keys named; a rule that no listener it may come
// through can satisfy is refused; the single-listener keys stay the default listener.
func TestListenersConfig(t *testing.T) {
	c, err := parseValid(t, listenersBase)
	if err != nil {
		t.Fatal(err)
	}
	ls := c.ListenerList()
	if len(ls) != 2 || ls[0].SecurityProtocol != ProtocolPlaintext || ls[1].SecurityProtocol != ProtocolSSL {
		t.Fatalf("listeners: %+v", ls)
	}
	if ls[1].AdvertiseHost() != "og.example" || ls[1].BrokerPort(1) != 9301 || ls[1].BrokerPort(2) != 9195 || ls[0].BrokerPort(2) != 9095 {
		t.Fatalf("advertised: %s %d %d %d", ls[1].AdvertiseHost(), ls[1].BrokerPort(1), ls[1].BrokerPort(2), ls[0].BrokerPort(2))
	}
	if c.Transport != "goroutine" {
		t.Fatalf("a TLS listener needs the goroutine transport, got %s", c.Transport)
	}
	for name, tc := range map[string]struct{ from, to, want string }{
		"both forms":          {"bootstrap: [", "listen: 127.0.0.1:7000\nbootstrap: [", `"listeners"`},
		"same name":           {"name: mirror", "name: consumers", `"listeners[1].name": "consumers" is the name of another listener`},
		"same address":        {"listen: 127.0.0.1:9192", "listen: 127.0.0.1:9092", `"listeners[1].listen": 127.0.0.1:9092 is also the address of listener consumers`},
		"SSL without tls":     {"    listen: 127.0.0.1:9092\n", "    listen: 127.0.0.1:9092\n    security_protocol: SSL\n", `"listeners[0].tls": required`},
		"tls on PLAINTEXT":    {"    advertise: og.example\n", "    advertise: og.example\n    security_protocol: plaintext\n", `"listeners[1].tls": a PLAINTEXT listener has no TLS`},
		"SASL without SASL":   {"    listen: 127.0.0.1:9092\n", "    listen: 127.0.0.1:9092\n    security_protocol: SASL_PLAINTEXT\n", "upstream_sasl"},
		"unknown protocol":    {"    listen: 127.0.0.1:9092\n", "    listen: 127.0.0.1:9092\n    security_protocol: QUIC\n", `"listeners[0].security_protocol"`},
		"unnamed":             {"  - name: consumers\n", "  - name: \"\"\n", `"listeners[0].name"`},
		"unknown listener":    {"listeners: [mirror]", "listeners: [mirorr]", `"mirroring.clients[0].listeners": names listener "mirorr", which is not configured (listeners: consumers, mirror)`},
		"rule on plaintext":   {"listeners: [mirror]", "listeners: [consumers]", `a certificate rule can never match: clients prove certificates only on a listener with tls and client_auth request or require; the rule may come through consumers (PLAINTEXT)`},
		"no client certs":     {"client_auth: require", "client_auth: none", `"mirroring.clients[0]": a certificate rule can never match`},
		"sasl rule, no login": {"tls_san: URI:spiffe://acme/mirror", "sasl_user: mirror", "upstream_sasl"},
	} {
		body := strings.Replace(listenersBase, tc.from, tc.to, 1)
		if body == listenersBase {
			t.Fatalf("%s: the change does not apply", name)
		}
		if _, err := parseValid(t, body); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, tc.want)
		}
	}
	// With upstream_sasl, a listener left without a protocol takes SASL logins; one set to SSL
	// does not, so a sasl_user rule for it alone can never match.
	withSASL := strings.Replace(listenersBase, "bootstrap: [", "upstream_sasl: {mechanism: PLAIN, username: og, password: x}\nbootstrap: [", 1)
	c, err = parseValid(t, withSASL)
	if err != nil {
		t.Fatal(err)
	}
	if ls := c.ListenerList(); ls[0].SecurityProtocol != ProtocolSASLPlaintext || ls[1].SecurityProtocol != ProtocolSASLSSL {
		t.Fatalf("with upstream_sasl: %+v", ls)
	}
	sslOnly := strings.Replace(strings.Replace(withSASL, "tls_san: URI:spiffe://acme/mirror", "sasl_user: mirror", 1),
		"    advertise: og.example\n", "    advertise: og.example\n    security_protocol: SSL\n", 1)
	if _, err := parseValid(t, sslOnly); err == nil || !strings.Contains(err.Error(), "no listener it may come through takes SASL logins") {
		t.Fatalf("a sasl_user rule on an SSL listener: %v", err)
	}
	// The single-listener keys are the listener named default.
	c, err = parseValid(t, "listen: 127.0.0.1:9092\nadvertise: og.example\nbootstrap: [127.0.0.1:1]\n")
	if err != nil {
		t.Fatal(err)
	}
	if ls := c.ListenerList(); len(ls) != 1 || ls[0].Name != DefaultListener || ls[0].AdvertiseHost() != "og.example" || c.Transport != "gnet" {
		t.Fatalf("the single listener: %+v (%s)", ls, c.Transport)
	}
}

// A reload whose rule no listener in force can satisfy is refused, per listener.
func TestReloadRuleForListener(t *testing.T) {
	path := filepath.Join(t.TempDir(), "offsetgate.yaml")
	if err := os.WriteFile(path, []byte(listenersBase), 0o600); err != nil {
		t.Fatal(err)
	}
	running, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	running.Defaults()
	if err := running.Validate(); err != nil {
		t.Fatal(err)
	}
	core, logs := zapobserver.New(zapcore.InfoLevel)
	applied := 0
	w := newConfigWatcher(&running, zap.New(core), func(*rules.Policy) { applied++ })
	// The new file gives the consumers' listener client certificates and moves the rule there:
	// valid as a file, but listeners are read at start only, and the consumers' listener in
	// force is plaintext.
	body := strings.Replace(strings.Replace(listenersBase, "listeners: [mirror]", "listeners: [consumers]", 1),
		"    listen: 127.0.0.1:9092\n", "    listen: 127.0.0.1:9092\n    tls: {cert_file: s.pem, key_file: s.key, client_ca_file: ca.pem, client_auth: request}\n", 1)
	if _, err := parseValid(t, body); err != nil {
		t.Fatalf("the new file is valid by itself: %v", err)
	}
	if err := os.WriteFile(path+".tmp", []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
	w.poll()
	w.poll()
	if applied != 0 {
		t.Fatal("a rule that can never match was taken")
	}
	found := false
	for _, e := range logs.All() {
		if e.Level == zapcore.ErrorLevel && strings.Contains(e.Message, "config reload refused: a mirroring rule can never match with the listeners in force") {
			found = true
		}
	}
	if !found {
		t.Fatalf("no refusal: %v", logs.All())
	}
	// A rule for the mirror listener, which asks for certificates: taken.
	body = strings.Replace(listenersBase, `topics: ["orders"]`, `topics: ["orders", "payments"]`, 1)
	if err := os.WriteFile(path+".tmp", []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
	w.poll()
	w.poll()
	if applied != 1 {
		t.Fatalf("a rule that can match was not taken: %v", logs.All())
	}
}

// Source mode's keys: a listener fronts the source only with a source section, a source
// section needs a listener that fronts it, and the defaults are filled in.
func TestSourceConfig(t *testing.T) {
	const base = `bootstrap: [127.0.0.1:1]
source:
  bootstrap: [127.0.0.1:2]
listeners:
  - name: apps
    listen: 127.0.0.1:9092
    upstream: source
  - name: mirror
    listen: 127.0.0.1:9192
`
	c, err := parseValid(t, base)
	if err != nil {
		t.Fatal(err)
	}
	if c.Source.NodeIDOffset != DefaultSourceNodeIDOffset || c.ListenerList()[0].Upstream != UpstreamSource {
		t.Fatalf("source: %+v, listeners %+v", c.Source, c.ListenerList())
	}
	if c.Source.FetchMaxWait != time.Second {
		t.Fatalf("source.fetch_max_wait defaults to %v, want 1s", c.Source.FetchMaxWait)
	}
	c, err = parseValid(t, strings.Replace(base, "  bootstrap: [127.0.0.1:2]\n", "  bootstrap: [127.0.0.1:2]\n  fetch_max_wait: -1s\n", 1))
	if err != nil {
		t.Fatal(err)
	}
	if c.Source.FetchMaxWait != -time.Second {
		t.Fatalf("fetch_max_wait: -1s read as %v, want -1s: every client's wait as it asks", c.Source.FetchMaxWait)
	}
	for name, tc := range map[string]struct{ from, to, want string }{
		"no source section": {"source:\n  bootstrap: [127.0.0.1:2]\n", "", `"source": required: a listener has upstream: source`},
		"nobody fronts it":  {"    upstream: source\n", "", `"source": no listener fronts the source`},
		"unknown upstream":  {"upstream: source", "upstream: sauce", `"listeners[0].upstream": "sauce" is not one of destination, source`},
		"no source seeds":   {"  bootstrap: [127.0.0.1:2]\n", "  bootstrap: []\n", `"source.bootstrap": required`},
		"negative offset":   {"  bootstrap: [127.0.0.1:2]\n", "  bootstrap: [127.0.0.1:2]\n  node_id_offset: -5\n", `"source.node_id_offset"`},
		"SASL, no source login": {"    upstream: source\n", "    upstream: source\n    security_protocol: SASL_PLAINTEXT\n",
			"source.sasl"},
	} {
		body := strings.Replace(base, tc.from, tc.to, 1)
		if strings.Contains(tc.want, "sasl") {
			body = "upstream_sasl: {mechanism: PLAIN, username: og, password: x}\n" + body
		}
		if body == base {
			t.Fatalf("%s: the change does not apply", name)
		}
		if _, err := parseValid(t, body); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, tc.want)
		}
	}
}
