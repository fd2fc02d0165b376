package proxy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	zapobserver "go.uber.org/zap/zaptest/observer"

	"offsetgate/rules"
)

const reloadBase = `listen: 127.0.0.1:9092
bootstrap: [127.0.0.1:1]
upstream_sasl: {mechanism: PLAIN, username: og, password: x}
mirroring:
  clients:
    - sasl_user: mirror
      topics: ["orders"]
`

// The file is taken only whole: a write in place caught half-way (a valid file with a rule
// whose narrowing line is not written yet) is never applied; a file that does not parse or
// validate, or whose rules cannot match the running offsetgate, changes nothing and says why;
// sections read at start only warn by name.
func TestConfigWatcher(t *testing.T) {
	path := filepath.Join(t.TempDir(), "offsetgate.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(reloadBase)
	running, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	running.Defaults()
	if err := running.Validate(); err != nil {
		t.Fatal(err)
	}
	core, logs := zapobserver.New(zapcore.InfoLevel)
	var policy *rules.Policy
	applied := 0
	w := newConfigWatcher(&running, zap.New(core), func(p *rules.Policy) { policy, applied = p, applied+1 })
	stranger := rules.Identity{SASLUser: "other", Addr: "192.168.1.1:5000"}
	insider := rules.Identity{SASLUser: "other", Addr: "10.1.1.1:5000"}

	full := reloadBase + `    - sasl_user: other
      topics: ["*"]
      source_cidr: 10.0.0.0/8
`
	half := full[:strings.LastIndex(full, "      source_cidr")]
	write(half)
	w.poll() // the change is seen
	write(full)
	w.poll() // it changed again: wait
	if applied != 0 {
		t.Fatal("a file still being written was taken")
	}
	w.poll()
	if applied != 1 {
		t.Fatalf("the whole file was not taken (%d)", applied)
	}
	if _, ok := policy.Approved(stranger, "t"); ok {
		t.Fatal("the half-written rule (without its source_cidr) is in force")
	}
	if _, ok := policy.Approved(insider, "t"); !ok {
		t.Fatal("the new rule is not in force")
	}
	if logs.FilterMessage("mirroring rules reloaded").Len() != 1 {
		t.Fatalf("logs: %v", logs.All())
	}

	refused := func(content, why string) {
		t.Helper()
		before := applied
		logs.TakeAll()
		write(content)
		w.poll()
		w.poll()
		if applied != before {
			t.Fatalf("%s: taken", why)
		}
		found := false
		for _, e := range logs.All() {
			if e.Level == zapcore.ErrorLevel && strings.Contains(e.Message, "config reload refused: "+why) {
				found = true
			}
		}
		if !found {
			t.Fatalf("no error saying %q: %v", why, logs.All())
		}
	}
	refused("mirroring: [\n", "the file does not parse")
	refused(strings.Replace(full, "10.0.0.0/8", "10.0.0.0/88", 1), "the file does not validate")
	refused(strings.Replace(full, "listen: 127.0.0.1:9092\n", "", 1), "the file does not validate")
	// The file turns a TLS listener with client certificates on and adds a certificate rule:
	// valid as a file, but the listener in force asks for no certificate.
	tlsOn := full + `tls:
  listener: {cert_file: s.pem, key_file: s.key, client_ca_file: ca.pem, client_auth: request}
`
	refused(strings.Replace(tlsOn, "sasl_user: other", "tls_san: URI:spiffe://acme/mirror", 1), "a mirroring rule can never match")
	if _, ok := policy.Approved(insider, "t"); !ok {
		t.Fatal("a refused file changed the rules")
	}

	// Sections read at start only: a warning each, naming it; the rules are unchanged.
	logs.TakeAll()
	write(tlsOn + `identities:
  mtls_upstream: [{subject: "CN=mirror,O=acme", sasl: {mechanism: PLAIN, username: mirror, password: y}}]
`)
	w.poll()
	w.poll()
	warned := map[string]bool{}
	for _, e := range logs.FilterLevelExact(zapcore.WarnLevel).All() {
		warned[e.ContextMap()["section"].(string)] = true
	}
	// The transport follows tls when it is not set: it would change too.
	if !warned["tls"] || !warned["identities"] || !warned["transport"] || len(warned) != 3 {
		t.Fatalf("warnings for %v, want tls, identities and transport", warned)
	}
	if logs.FilterMessage("mirroring rules reloaded").Len() != 0 || logs.FilterMessage("config reload: the mirroring rules are unchanged").Len() != 1 {
		t.Fatalf("logs: %v", logs.All())
	}
}
