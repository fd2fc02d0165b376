package main

import (
	"strings"
	"testing"
	"time"

	"offsetgate/catalog"
	"offsetgate/internal/testkafka"
)

// offsetgate cutover stores a group's move where every instance follows it, refuses what it
// cannot do, and aborts a move that has not reached its final step. The move itself (members
// drained, offsets copied, the group carried to the destination) is TestLiveGroupMove's.
func TestCutoverCommand(t *testing.T) {
	prefix := testkafka.Names(t, "co")
	e := newOGEnv(t, prefix) // an instance without a source: nothing advances the move
	dest := strings.Join(e.pair.Dest.Addrs(), ",")
	group := prefix + "-g"

	if code, _, errOut := run("cutover", "--destination", dest); code != 2 || !strings.Contains(errOut, "--group") {
		t.Fatalf("cutover without --group: exit %d, %q", code, errOut)
	}
	if code, _, errOut := run("cutover", "--destination", dest, "--group", group, "--abort"); code != 1 || !strings.Contains(errOut, "no move in progress") {
		t.Fatalf("abort of a group that is not moving: exit %d, %q", code, errOut)
	}
	code, out, errOut := run("cutover", "--destination", dest, "--group", group)
	if code != 0 || !strings.Contains(out, "draining") {
		t.Fatalf("cutover: exit %d, %q, %q", code, out, errOut)
	}
	state := func(want catalog.MoveState) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			m, ok := e.srv.Catalog().Move(group)
			if ok && m.State == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the instance sees the move as %+v (found %v), want %s", m, ok, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	state(catalog.MoveDraining)
	if code, _, errOut := run("cutover", "--destination", dest, "--group", group, "--back"); code != 1 || !strings.Contains(errOut, "only a moved group goes back") {
		t.Fatalf("--back of a draining group: exit %d, %q", code, errOut)
	}
	if code, out, _ := run("cutover", "--destination", dest, "--group", group); code != 0 || !strings.Contains(out, "already draining") {
		t.Fatalf("a second cutover: exit %d, %q", code, out)
	}
	if code, out, errOut := run("cutover", "--destination", dest, "--group", group, "--abort"); code != 0 || !strings.Contains(out, "failed") {
		t.Fatalf("abort: exit %d, %q, %q", code, out, errOut)
	}
	state(catalog.MoveFailed)
	if m, _ := e.srv.Catalog().Move(group); !strings.Contains(m.Reason, "aborted") {
		t.Fatalf("the aborted move's reason: %q", m.Reason)
	}
	// A failed move can be started again.
	if code, out, _ := run("cutover", "--destination", dest, "--group", group); code != 0 || !strings.Contains(out, "draining") {
		t.Fatalf("cutover after an abort: exit %d, %q", code, out)
	}
	state(catalog.MoveDraining)
	if code, out, _ := run("cutover", "--destination", dest, "--list"); code != 0 || !strings.Contains(out, group) || !strings.Contains(out, "draining") {
		t.Fatalf("--list: exit %d, %q", code, out)
	}
	// A move's record in the marks topic is not a topic's mark: status reads past it.
	if code, out, errOut := run(args([]string{"status", "--proxy", e.addr}, e.id())...); code != 0 {
		t.Fatalf("status with a group move stored: exit %d, %q, %q", code, out, errOut)
	}
}
