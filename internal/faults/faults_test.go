package faults_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"offsetgate/internal/faults"
	"offsetgate/internal/testkafka"
)

// A short fault campaign on clusters of its own: each of a handful of fault kinds once (the
// processes killed and stopped beyond the lease, the links cut and stalled, a leader moved on
// the destination), and after each, verify identical with nothing lost at the head, both
// consumers through offsetgate exactly once in source order, no halt, no leak.
// scripts/faults runs the same code for as long as asked (docs/reliability.md).
func TestShortCampaign(t *testing.T) {
	runShort(t, faults.Config{
		Seed: 20, Count: 6, Budget: 6 * time.Minute, Cycle: true,
		Kinds: []string{"og-kill", "mirror-stop", "link-og-dest-cut", "og-stop", "link-mirror-og-stall", "dest-leader-move"},
	})
}

// Two offsetgate instances in front of the destination and a mirror group of two processes,
// each writing through its own instance: a mirror killed and started again rejoins the group,
// whose rebalance moves partitions between the processes and so between the instances
// (ownership handed over between live instances); a killed instance comes back and its mirror
// goes on. The same checks as above, and both instances carried writes.
func TestTwoInstancesCampaign(t *testing.T) {
	rep := runShort(t, faults.Config{
		Seed: 21, Count: 4, Budget: 5 * time.Minute, Cycle: true, Instances: 2,
		Kinds: []string{"mirror-stop", "og-kill", "mirror-kill", "og-stop"},
	})
	if len(rep.Writes) != 2 {
		t.Fatalf("writes known for %d instances, want 2: %v", len(rep.Writes), rep.Writes)
	}
	for name, n := range rep.Writes {
		if n == 0 {
			t.Errorf("%s made no mirror write in its last life: the mirror group did not share the partitions (%v)", name, rep.Writes)
		}
	}
}

// A compacted topic beside the others, its source cleaning every few seconds while it is
// written: after each fault the mirror records what the cleaner changed and verify finds it
// identical, its consumer through offsetgate reads only records written at their offsets, and
// the source's cleaner did remove records (else the campaign tried nothing).
func TestCompactedCampaign(t *testing.T) {
	rep := runShort(t, faults.Config{
		Seed: 22, Count: 3, Budget: 5 * time.Minute, Cycle: true, Compacted: true,
		Kinds: []string{"og-kill", "mirror-stop", "link-og-dest-cut"},
	})
	for _, o := range rep.Outcomes {
		found := false
		for _, h := range o.Held {
			found = found || strings.HasPrefix(h, "verify faults-compact identical")
		}
		if !found {
			t.Errorf("fault %d (%s): the compacted topic was not verified: held %v", o.Index, o.Kind, o.Held)
		}
	}
	if rep.CompactRead == 0 || rep.CompactSpanned == 0 || rep.CompactLeft >= rep.CompactSpanned {
		t.Fatalf("compacted topic: %d records read through offsetgate, the source holds %d over %d offsets: the cleaner removed nothing",
			rep.CompactRead, rep.CompactLeft, rep.CompactSpanned)
	}
}

// runShort runs a short campaign on clusters of its own, fails the test if a fault failed or
// fewer than three ran, and returns the report.
func runShort(t *testing.T, cfg faults.Config) *faults.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	root, err := testkafka.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "offsetgate")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/offsetgate")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building offsetgate: %v\n%s", err, out)
	}
	unlock, err := testkafka.LockOwnPair(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	// Kept when a fault fails: the clusters' data, the processes' logs, the group's story.
	dir, err := os.MkdirTemp("", "offsetgate-faults-test-")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Bin, cfg.Dir, cfg.Log = bin, dir, testWriter{t}
	cfg.Lease, cfg.Recovery = 2*time.Second, 2*time.Minute
	rep, err := faults.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	md := rep.Markdown()
	t.Log("\n" + md)
	if rep.Failed() {
		logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
		for _, name := range logs {
			if b, err := os.ReadFile(name); err == nil {
				t.Logf("%s (last lines):\n%s", filepath.Base(name), tail(string(b), 40))
			}
		}
		t.Fatalf("a fault failed (see What failed above); logs in %s", dir)
	}
	os.RemoveAll(dir)
	if len(rep.Outcomes) < 3 {
		t.Fatalf("only %d faults ran in the budget", len(rep.Outcomes))
	}
	return rep
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

func tail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
