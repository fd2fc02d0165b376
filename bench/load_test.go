package bench

import (
	"os"
	"os/exec"
	"slices"
	"testing"

	"offsetgate/internal/procstat"
)

func TestDescendantsFindsGrandchildren(t *testing.T) {
	// A shell that starts a sleep of its own: both are below this process, the sleep two levels
	// down, as a mirroring tool's JVM is below the script that starts it.
	cmd := exec.Command("sh", "-c", "sleep 30 & echo started; wait")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	buf := make([]byte, 8)
	if _, err := out.Read(buf); err != nil {
		t.Fatal(err)
	}
	var got []int
	for range 50 {
		got = descendants(os.Getpid())
		if len(got) >= 2 {
			break
		}
	}
	if !slices.Contains(got, cmd.Process.Pid) {
		t.Fatalf("descendants %v lack the child %d", got, cmd.Process.Pid)
	}
	if len(got) < 2 {
		t.Fatalf("descendants %v: the grandchild (sleep) is missing", got)
	}
	if slices.Contains(got, os.Getpid()) || slices.Contains(got, os.Getppid()) {
		t.Fatalf("descendants %v hold this process or its parent", got)
	}
}

func TestRoundLoadCountsTheBench(t *testing.T) {
	m := markLoad(MM2Config{})
	// Burn a third of a CPU second in this process: the round's bench CPU must show it.
	start, _ := procstat.CPUSeconds(os.Getpid())
	x := 0
	for {
		for i := range 1 << 20 {
			x += i
		}
		if now, _ := procstat.CPUSeconds(os.Getpid()); now-start >= 0.35 {
			break
		}
	}
	_ = x
	l := m.since()
	if l.Seconds <= 0 {
		t.Fatalf("round of %v seconds", l.Seconds)
	}
	if used := l.Bench * l.Seconds; used < 0.3 {
		t.Fatalf("bench CPU %.2f s, want at least 0.3 (load %+v)", used, l)
	}
	if l.Busy*l.Seconds < 0.3 {
		t.Fatalf("machine busy %.2f CPU s while this process burned 0.35 (load %+v)", l.Busy*l.Seconds, l)
	}
	if l.Other < 0 || l.Kafka != 0 {
		t.Fatalf("load %+v: no brokers were named, other is never negative", l)
	}
}

func TestBusyRounds(t *testing.T) {
	r := MirrorResult{LagRoundLoad: []RoundLoad{{Other: 0.01}, {Other: 0.5}, {Steal: 0.2}, {Other: BusyOtherCPUs}}}
	if got := r.BusyRounds(); !slices.Equal(got, []int{2, 3}) {
		t.Fatalf("busy rounds %v, want [2 3]", got)
	}
}
