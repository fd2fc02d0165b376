package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"offsetgate/internal/testkafka"
)

// Three `offsetgate mirror --mirror-group` processes share 24 partitions; one is SIGKILLed
// (no goodbye to the group) while the source is written to: the other two take its
// partitions once its session times out, and verify proves the mirror identical.
func TestMirrorGroupSurvivesKill(t *testing.T) {
	prefix := testkafka.Names(t, "mgk")
	e := newOGEnv(t, prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const parts = 24
	topic := prefix + "-t"
	if err := e.pair.Source.CreateTopic(ctx, topic, parts, 2, nil); err != nil {
		t.Fatal(err)
	}
	produce := func(n int) {
		t.Helper()
		cl, err := e.pair.Source.Client(kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		for i := 0; i < n; i++ {
			cl.Produce(ctx, &kgo.Record{Value: []byte(fmt.Sprintf("%s-%d", topic, i))}, nil)
		}
		if err := cl.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	produce(1200)

	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	type proc struct {
		cmd *exec.Cmd
		out string
	}
	dir := t.TempDir()
	start := func(i int) *proc {
		out := filepath.Join(dir, fmt.Sprintf("mirror-%d.out", i))
		f, err := os.Create(out)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cmd := exec.Command(self, args([]string{"mirror", "--source", e.source, "--proxy", e.addr, "--topics", topic,
			"--mirror-group", prefix + "-mirrors", "--mirror-group-session", "6s", "--progress", "lines", "--parallel", "2"}, e.id())...)
		cmd.Env = append(os.Environ(), asCLI+"=1")
		cmd.Stdout, cmd.Stderr = f, f
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		p := &proc{cmd: cmd, out: out}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return p
	}
	procs := []*proc{start(0), start(1), start(2)}
	output := func(p *proc) string {
		b, _ := os.ReadFile(p.out)
		return string(b)
	}
	assigned := regexp.MustCompile(regexp.QuoteMeta(topic) + `: partitions ([0-9,]+) assigned by mirror group`)
	released := regexp.MustCompile(regexp.QuoteMeta(topic) + `: partitions ([0-9,]+) released`)
	owned := func(p *proc) map[string]bool {
		own := map[string]bool{}
		for _, line := range strings.Split(output(p), "\n") {
			for _, c := range []struct {
				re  *regexp.Regexp
				own bool
			}{{assigned, true}, {released, false}} {
				if g := c.re.FindStringSubmatch(line); g != nil {
					for _, n := range strings.Split(g[1], ",") {
						if c.own {
							own[n] = true
						} else {
							delete(own, n)
						}
					}
				}
			}
		}
		return own
	}
	settled := func(ps []*proc) bool {
		seen := map[string]int{}
		for _, p := range ps {
			for n := range owned(p) {
				seen[n]++
			}
		}
		if len(seen) != parts {
			return false
		}
		for _, c := range seen {
			if c != 1 {
				return false
			}
		}
		return true
	}
	wait := func(what string, d time.Duration, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(d)
		for !cond() {
			if time.Now().After(deadline) {
				var logs strings.Builder
				for i, p := range procs {
					fmt.Fprintf(&logs, "--- mirror %d:\n%s\n", i, output(p))
				}
				t.Fatalf("%s: not within %v\n%s", what, d, logs.String())
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	ends := func(c *testkafka.Cluster) string {
		adm, err := c.Admin()
		if err != nil {
			t.Fatal(err)
		}
		defer adm.Close()
		o, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			return err.Error()
		}
		out := map[int32]int64{}
		o.Each(func(l kadm.ListedOffset) { out[l.Partition] = l.Offset })
		return fmt.Sprint(out)
	}
	caughtUp := func() bool { return ends(e.pair.Source) == ends(e.pair.Dest) }

	// Settled with every process holding some: one that joins late gets its share then.
	wait("the three processes share the partitions", 2*time.Minute, func() bool {
		for _, p := range procs {
			if len(owned(p)) == 0 {
				return false
			}
		}
		return settled(procs)
	})
	wait("the group mirrors everything", 90*time.Second, caughtUp)

	victim := procs[0]
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = victim.cmd.Wait()
	produce(1200)
	rest := procs[1:]
	killedAt := time.Now()
	wait("the other two take the killed process's partitions", 2*time.Minute, func() bool { return settled(rest) })
	t.Logf("partitions moved %v after the kill", time.Since(killedAt).Round(100*time.Millisecond))
	wait("the other two mirror everything", 90*time.Second, caughtUp)

	code, out, errs := run(args([]string{"verify", "--source", e.source, "--proxy", e.addr, "--topic", topic}, e.id())...)
	if code != 0 {
		t.Fatalf("verify after the kill: exit %d\n%s\n%s", code, out, errs)
	}
}
