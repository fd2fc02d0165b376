package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"offsetgate/proxy"
	"offsetgate/verify"
)

func run(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := dispatch(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestHelpAndVersion(t *testing.T) {
	code, out, _ := run("--help")
	if code != 0 || !strings.Contains(out, "serve") {
		t.Fatalf("--help: %d %q", code, out)
	}
	code, out, _ = run("version")
	if code != 0 || !strings.HasPrefix(out, "offsetgate ") || !strings.Contains(out, "kmsg v") {
		t.Fatalf("version: %d %q", code, out)
	}
	if code, _, errs := run("nope"); code != 2 || !strings.Contains(errs, "unknown command") {
		t.Fatalf("unknown command: %d %q", code, errs)
	}
}

// A bad configuration names the bad key and exits 2 before anything starts.
func TestServeConfigErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for name, tc := range map[string]struct{ body, want string }{
		"unknown key":   {"listen: 127.0.0.1:9092\nbootstrap: [a:1]\nlistn: x\n", `unknown key "listn"`},
		"bad transport": {"listen: 127.0.0.1:9092\nbootstrap: [a:1]\ntransport: udp\n", `"transport"`},
		"no bootstrap":  {"listen: 127.0.0.1:9092\n", `"bootstrap"`},
		"bad mirroring": {"listen: 127.0.0.1:9092\nbootstrap: [a:1]\nmirroring: {clients: [{client_id: x, topics: [t]}]}\n", "mirroring.clients[0]"},
		"bad limit":     {"listen: 127.0.0.1:9092\nbootstrap: [a:1]\nlimits: {socket_send_bytes: -5}\n", `"limits.socket_send_bytes"`},
		"tls on gnet":   {"listen: 127.0.0.1:9092\nbootstrap: [a:1]\ntransport: gnet\ntls: {upstream: {enabled: true}}\n", "gnet carries plaintext only"},
		"short lease":   {"listen: 127.0.0.1:9092\nbootstrap: [a:1]\nownership_lease: 100ms\n", `"ownership_lease"`},
		"many lanes":    {"listen: 127.0.0.1:9092\nbootstrap: [a:1]\ndata_lanes: 17\n", `"data_lanes": must be 0 (the default, 4) to 16`},
		"ledger acks":   {"listen: 127.0.0.1:9092\nbootstrap: [a:1]\nledger_acks: one\n", `"ledger_acks": must be all (the default) or leader, not "one"`},
	} {
		code, _, errs := run("serve", "--config", write(tc.body))
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("%s: exit %d, stderr %q (want it to mention %s)", name, code, errs, tc.want)
		}
	}
}

// Bad usage of mirror and verify exits 2 with a message naming what is wrong.
func TestUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"verify"}, "--source, --proxy and --topic are required"},
		{[]string{"verify", "--source", "a:1", "--proxy", "b:2", "--topic", "t", "--level", "all"}, `--level "all"`},
		{[]string{"mirror", "--source", "a:1", "--proxy", "b:2"}, "--topics or --topic-regex"},
		{[]string{"mirror", "--source", "a:1", "--proxy", "b:2", "--topic-regex", "("}, "--topic-regex"},
		{[]string{"mirror", "--source", "a:1", "--proxy", "b:2", "--topics", "t", "--progress", "fancy"}, `--progress "fancy"`},
		{[]string{"mirror", "--source", "a:1", "--proxy", "b:2", "--topics", "t", "--resync", "2h"}, "--resync must be"},
	} {
		code, _, errs := run(c.args...)
		if code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, stderr %q (want 2 and %q)", c.args, code, errs, c.want)
		}
	}
}

// The example configuration is valid.
func TestExampleConfig(t *testing.T) {
	c, err := proxy.LoadConfig("../../examples/offsetgate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c.Defaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

// The demo runs the whole journey on embedded clusters and ends with a verified comparison.
func TestDemo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	code := dispatch(ctx, []string{"demo", "--phase", "1s"}, &out, &errb)
	if code != 0 {
		t.Fatalf("demo exited %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	for _, want := range []string{"cutover: group demo-billing: moved", "never restarted", "verified:", "demo-orders promoted in",
		"every record produced was mirrored or carried, and processed exactly once"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("demo output lacks %q:\n%s", want, out.String())
		}
	}
	// Every line says whose it is.
	for _, l := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		if !strings.HasPrefix(l, "[demo] ") && !strings.HasPrefix(l, "[mirror] ") {
			t.Fatalf("a line without its prefix: %q\n%s", l, out.String())
		}
	}
	// The numbers add up: records processed before and after the move are the distinct
	// records, none repeated, and they are every record produced and verified.
	m := regexp.MustCompile(`billing: (\d+) records processed before the move \+ (\d+) after = (\d+); (\d+) distinct records, (\d+) read more than once; the producer wrote (\d+)`).FindStringSubmatch(out.String())
	v := regexp.MustCompile(`verified: (\d+) records`).FindStringSubmatch(out.String())
	a := regexp.MustCompile(`promoted: (\d+) records written after the promotion`).FindStringSubmatch(out.String())
	if m == nil || v == nil || a == nil {
		t.Fatalf("no reconciliation in the demo output:\n%s", out.String())
	}
	n := func(s string) int { i, _ := strconv.Atoi(s); return i }
	src, og, sum, distinct, twice, produced := n(m[1]), n(m[2]), n(m[3]), n(m[4]), n(m[5]), n(m[6])
	if src == 0 || og == 0 || src+og != sum || sum != distinct || twice != 0 || distinct != produced || n(a[1]) == 0 || n(v[1])+n(a[1]) != produced {
		t.Fatalf("the demo's numbers do not add up: %q, %q, %q", m[0], v[0], a[0])
	}
}

// verify's exit code over several partitions: an error, then a difference, then a loss at the
// head, then identical.
func TestVerifyExitCodes(t *testing.T) {
	ok := verify.Result{Batches: 1}
	lost := verify.Result{Batches: 1, HeadLost: 300}
	diff := verify.Result{Batches: 1, Diff: &verify.Difference{}}
	bad := verify.Result{Err: verify.ErrNothing}
	for _, c := range []struct {
		res  []verify.Result
		want int
	}{
		{[]verify.Result{ok, ok}, 0},
		{[]verify.Result{ok, lost}, 3},
		{[]verify.Result{lost, diff, ok}, 1},
		{[]verify.Result{diff, lost, bad}, 2},
		{[]verify.Result{{HeadLost: 5}}, 3}, // everything lost: nothing to compare, still a loss
	} {
		if got := verifyExit(c.res); got != c.want {
			t.Errorf("%+v: exit %d, want %d", c.res, got, c.want)
		}
	}
	code, _, errs := run("verify", "--help")
	for _, want := range []string{"  0  identical", "  1  different", "  2  error", "  3  lost"} {
		if code != 0 || !strings.Contains(errs, want) {
			t.Fatalf("verify --help (exit %d) does not document %q:\n%s", code, want, errs)
		}
	}
}

// The collector's target comes from the configuration unless the environment sets GOGC (the
// runtime has applied that already; an operator's explicit setting wins).
func TestRuntimeLimits(t *testing.T) {
	prevGC, prevMem := debug.SetGCPercent(100), debug.SetMemoryLimit(-1)
	defer func() { debug.SetGCPercent(prevGC); debug.SetMemoryLimit(prevMem) }()
	var c proxy.Config
	c.Defaults()
	none := func(string) (string, bool) { return "", false }
	applyRuntimeLimits(c.Limits, none)
	if got := debug.SetGCPercent(100); got != proxy.DefaultGCPercent {
		t.Fatalf("collector target %d, want the default %d", got, proxy.DefaultGCPercent)
	}
	if got := debug.SetMemoryLimit(-1); got != c.Limits.MemoryLimitBytes {
		t.Fatalf("memory limit %d, want %d", got, c.Limits.MemoryLimitBytes)
	}
	c.Limits.GCPercent = 60
	applyRuntimeLimits(c.Limits, none)
	if got := debug.SetGCPercent(100); got != 60 {
		t.Fatalf("collector target %d, want the configured 60", got)
	}
	envSet := func(k string) (string, bool) { return "200", k == "GOGC" || k == "GOMEMLIMIT" }
	debug.SetMemoryLimit(12345 << 20)
	applyRuntimeLimits(c.Limits, envSet)
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("GOGC in the environment overridden: collector target %d", got)
	}
	if got := debug.SetMemoryLimit(-1); got != 12345<<20 {
		t.Fatalf("GOMEMLIMIT in the environment overridden: limit %d", got)
	}
}
