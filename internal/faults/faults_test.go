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
	rep, err := faults.Run(ctx, faults.Config{
		Seed: 20, Count: 6, Budget: 6 * time.Minute, Cycle: true, Bin: bin, Dir: dir,
		Kinds:    []string{"og-kill", "mirror-stop", "link-og-dest-cut", "og-stop", "link-mirror-og-stall", "dest-leader-move"},
		Lease:    2 * time.Second,
		Recovery: 2 * time.Minute,
		Log:      testWriter{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	md := rep.Markdown()
	t.Log("\n" + md)
	if rep.Failed() {
		for _, name := range []string{"offsetgate.log", "mirror.log"} {
			if b, err := os.ReadFile(filepath.Join(dir, name)); err == nil {
				t.Logf("%s (last lines):\n%s", name, tail(string(b), 40))
			}
		}
		t.Fatalf("a fault failed (see What failed above); logs in %s", dir)
	}
	os.RemoveAll(dir)
	if len(rep.Outcomes) < 3 {
		t.Fatalf("only %d faults ran in the budget", len(rep.Outcomes))
	}
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
