package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"offsetgate/internal/ports"
	"offsetgate/internal/testcerts"
	"offsetgate/internal/testkafka"
	"offsetgate/proxy"
	"offsetgate/rules"
	ogtls "offsetgate/tls"
)

// Every subcommand that talks to offsetgate takes the same address and identity flags.
func TestSharedClientFlags(t *testing.T) {
	dir := t.TempDir()
	pass := filepath.Join(dir, "pass")
	if err := os.WriteFile(pass, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	shared := []string{"--proxy", "127.0.0.1:1", "--source", "127.0.0.1:2", "--sasl-mechanism", "PLAIN", "--sasl-user", "u",
		"--sasl-password-file", pass, "--tls-ca", "", "--tls-cert", "", "--tls-key", "", "--client-config", ""}
	for _, cmd := range [][]string{{"mirror", "--topic", "t", "--once"}, {"status"}, {"verify", "--topic", "t"}, {"promote", "--topic", "t"}} {
		code, _, errs := run(append(cmd, shared...)...)
		if strings.Contains(errs, "flag provided but not defined") || !strings.Contains(errs, "cannot be reached") || code != 2 {
			t.Errorf("%s with the shared flags: exit %d, stderr %q (want it to try 127.0.0.1:1)", cmd[0], code, errs)
		}
	}
}

// The client config file and the environment fill what no flag gave: flags first, then the
// file, then the environment.
func TestClientConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "client.properties")
	body := "# offsetgate client\nproxy = file:1\ntls-ca=/ca.pem\n! a comment\nsasl-password=fromfile\n"
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("OFFSETGATE_PROXY", "env:1")
	t.Setenv("OFFSETGATE_SOURCE", "envsource:1")
	t.Setenv("OFFSETGATE_TLS_CA", "/env-ca.pem")
	t.Setenv("OFFSETGATE_SASL_USER", "envuser")
	parse := func(args ...string) *clientFlags {
		t.Helper()
		fs := newFlagSet("status")
		cf := newClientFlags(fs, true)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		if err := cf.resolve(); err != nil {
			t.Fatal(err)
		}
		return cf
	}
	cf := parse("--client-config", file, "--tls-ca", "/flag-ca.pem")
	if cf.proxy != "file:1" || cf.tlsCA != "/flag-ca.pem" || cf.source != "envsource:1" || cf.saslUser != "envuser" || cf.saslPass != "fromfile" {
		t.Fatalf("flag, file, environment: %+v", *cf)
	}
	t.Setenv("OFFSETGATE_CLIENT_CONFIG", file)
	if cf := parse("--proxy", "flag:1"); cf.proxy != "flag:1" || cf.tlsCA != "/ca.pem" {
		t.Fatalf("OFFSETGATE_CLIENT_CONFIG: %+v", *cf)
	}
	if err := os.WriteFile(file, []byte("proxy=x:1\ntls_ca=/ca.pem\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errs := run("status", "--client-config", file)
	if code != 2 || !strings.Contains(errs, `line 2: unknown key "tls_ca"`) {
		t.Fatalf("unknown key: exit %d, %q", code, errs)
	}
}

// help says what the demo does, and demo --help how it runs.
func TestDemoHelp(t *testing.T) {
	_, out, _ := run("help")
	if !strings.Contains(out, "demo     the whole journey in one process on embedded clusters") || !strings.Contains(out, "promote") {
		t.Fatalf("help:\n%s", out)
	}
	code, _, errs := run("demo", "--help")
	if code != 0 || !strings.Contains(errs, "Usage: offsetgate demo [--phase DURATION]") || !strings.Contains(errs, "billing consumer group") {
		t.Fatalf("demo --help: exit %d\n%s", code, errs)
	}
}

// status on an offsetgate with no mirror topic says so (an embedded destination, fresh).
func TestStatusNoMirrorTopics(t *testing.T) {
	dst, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	set, err := testcerts.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	kp, err := set.Client("mirror", testcerts.SANs{URIs: []string{"spiffe://test/mirror"}})
	if err != nil {
		t.Fatal(err)
	}
	base, err := ports.Block(3)
	if err != nil {
		t.Fatal(err)
	}
	cfg := proxy.Config{Listen: "127.0.0.1:" + strconv.Itoa(base), Bootstrap: dst.ListenAddrs(),
		TLS: proxy.TLSConfig{Listener: &ogtls.ServerConfig{CertFile: set.Server.CertFile, KeyFile: set.Server.KeyFile,
			ClientCAFile: set.CA.CertFile, ClientAuth: "request"}},
		Mirroring: rules.MirroringConfig{Clients: []rules.ClientConfig{{TLSSAN: "URI:spiffe://test/mirror", Topics: []string{"*"}}}}}
	srv, err := proxy.New(cfg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	defer func() { cancel(); <-done }()
	<-srv.Ready()
	code, out, errs := run("status", "--proxy", cfg.Listen, "--tls-ca", set.CA.CertFile, "--tls-cert", kp.CertFile, "--tls-key", kp.KeyFile)
	if code != 0 || !strings.Contains(out, "no mirror topics through offsetgate at "+cfg.Listen+" yet") {
		t.Fatalf("status: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
}

// promote removes the mark through offsetgate as an approved mirroring client: refused for
// another identity and while the source holds records not mirrored; afterwards the topic takes
// ordinary writes at the next source offset and is no mirror topic any more. The identity comes
// from a client config file and the address from the environment.
func TestPromote(t *testing.T) {
	prefix := testkafka.Names(t, "pr")
	e := newOGEnv(t, prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	topic := prefix + "-t"
	if err := e.pair.Source.CreateTopic(ctx, topic, 2, 2, nil); err != nil {
		t.Fatal(err)
	}
	produce(ctx, t, e.pair.Source.Addrs(), topic, "a", "b", "c", "d", "e", "f")
	conf := filepath.Join(t.TempDir(), "mirror.properties")
	body := "tls-ca=" + e.certs.CA.CertFile + "\ntls-cert=" + e.mirror.CertFile + "\ntls-key=" + e.mirror.KeyFile + "\n"
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("OFFSETGATE_PROXY", e.addr)
	t.Setenv("OFFSETGATE_SOURCE", e.source)
	if code, out, errs := run("mirror", "--once", "--topic", topic, "--client-config", conf); code != 0 {
		t.Fatalf("mirror: exit %d\n%s%s", code, out, errs)
	}
	if code, _, errs := run(args([]string{"promote", "--topic", topic}, e.reader())...); code != 1 || !strings.Contains(errs, "promote as an approved mirroring client of "+topic) {
		t.Fatalf("promote by a client that is not approved: exit %d, %s", code, errs)
	}
	produce(ctx, t, e.pair.Source.Addrs(), topic, "g", "h")
	if code, _, errs := run("promote", "--topic", topic, "--client-config", conf); code != 1 || !strings.Contains(errs, "the source holds 2 records of "+topic+" that are not mirrored yet") {
		t.Fatalf("promote with records not mirrored: exit %d, %s", code, errs)
	}
	// The refused promotion gave the topic back (unsealed); a sealed topic shows in status.
	if code, out, errs := run("status", "--client-config", conf); code != 0 || strings.Contains(out, "SEALED") {
		t.Fatalf("status after a refused promotion: exit %d\n%s%s", code, out, errs)
	}
	mcl, err := kgo.NewClient(kgo.SeedBrokers(e.addr), kgo.DialTLSConfig(e.certs.ClientTLS(e.mirror)))
	if err != nil {
		t.Fatal(err)
	}
	defer mcl.Close()
	for _, v := range []string{rules.MarkSealed, "true"} {
		res, err := kadm.NewClient(mcl).AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: rules.MarkKey, Value: kmsg.StringPtr(v)}}, topic)
		if err == nil {
			err = res[0].Err
		}
		if err != nil {
			t.Fatalf("setting the mark to %s: %v", v, err)
		}
		// status reads the marks topic, which the change reached before the answer.
		if _, out, _ := run("status", "--client-config", conf); strings.Contains(out, "SEALED") != (v == rules.MarkSealed) {
			t.Fatalf("status with the mark set to %s:\n%s", v, out)
		}
	}
	if code, out, errs := run("mirror", "--once", "--topic", topic, "--client-config", conf); code != 0 {
		t.Fatalf("mirror: exit %d\n%s%s", code, out, errs)
	}
	code, out, errs := run("promote", "--topic", topic, "--client-config", conf)
	if code != 0 || !strings.Contains(out, topic+" promoted") {
		t.Fatalf("promote: exit %d\n%s%s", code, out, errs)
	}
	// An ordinary producer through offsetgate (no certificate) writes at the next source offset.
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.addr), kgo.DialTLSConfig(e.certs.ClientTLS(nil)), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RecordRetries(20))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	end0, _ := ends.Lookup(topic, 0)
	var r *kgo.Record
	deadline := time.Now().Add(30 * time.Second)
	for {
		// The instance learns the promotion from the marks; a moment may pass.
		r, err = cl.ProduceSync(ctx, &kgo.Record{Partition: 0, Value: []byte("after")}).First()
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil || r.Offset != end0.Offset {
		t.Fatalf("ordinary write after the promotion: %v at offset %v, want offset %d", err, r, end0.Offset)
	}
	if code, _, errs := run("promote", "--topic", topic, "--client-config", conf); code != 2 || !strings.Contains(errs, "is not a mirror topic on the destination") {
		t.Fatalf("promoting again: exit %d, %s", code, errs)
	}
}
