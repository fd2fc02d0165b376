package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"offsetgate/internal/ports"
	"offsetgate/internal/testkafka"
)

// docSection is the text of a "## title" section of a markdown file, up to the next one.
func docSection(t *testing.T, path, title string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "\n## "+title+"\n")
	if i < 0 {
		t.Fatalf("%s has no section %q", path, title)
	}
	s = s[i+1:]
	if j := strings.Index(s[3:], "\n## "); j >= 0 {
		s = s[:j+4]
	}
	return s
}

var shellBlock = regexp.MustCompile("(?s)\n```sh\n(.*?)\n```\n")

// The worked example of docs/operations.md runs as written: its shell blocks, in order, in one
// shell, against the test clusters (offsetgate and the Kafka tools included).
func TestWorkedExample(t *testing.T) {
	pair := testkafka.Shared(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	section := docSection(t, filepath.Join(root, "docs", "operations.md"), "Worked example: from two plain clusters to a moved group")
	var script strings.Builder
	script.WriteString("set -euo pipefail\nset -x\n")
	for _, m := range shellBlock.FindAllStringSubmatch(section, -1) {
		script.WriteString(m[1] + "\n")
	}
	if strings.Count(script.String(), "offsetgate ") < 4 {
		t.Fatalf("the worked example's shell blocks were not found:\n%s", script.String())
	}
	state := os.Getenv(testkafka.EnvVar)
	if state == "" { // clusters of this test binary: described for scripts/kafka env
		state = filepath.Join(t.TempDir(), "clusters.json")
		if err := testkafka.WritePairFile(pair, state); err != nil {
			t.Fatal(err)
		}
	}
	og, err := ports.Block(4) // a bootstrap listener, then its brokers' (node ids 1 and 2)
	if err != nil {
		t.Fatal(err)
	}
	ogMirror, err := ports.Block(4)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := ports.Block(1)
	if err != nil {
		t.Fatal(err)
	}
	libs, err := testkafka.LibsDir()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
	cmd.Dir = root
	cmd.Env = append(os.Environ(), testkafka.EnvVar+"="+state, "OFFSETGATE_KAFKA_LIBS="+libs,
		"OG_PORT="+strconv.Itoa(og), "MIRROR_PORT="+strconv.Itoa(ogMirror), "ADMIN_PORT="+strconv.Itoa(admin),
		"TOPIC="+testkafka.Names(t, "orders"), "GROUP="+testkafka.Names(t, "billing"))
	// The example starts offsetgate in the background and runs JVMs: all of them are in the
	// shell's process group, ended with it whatever happens.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// Output goes to a file: a pipe would stay open as long as a background process of the
	// example holds it.
	outFile, err := os.Create(filepath.Join(t.TempDir(), "example.out"))
	if err != nil {
		t.Fatal(err)
	}
	defer outFile.Close()
	cmd.Stdout, cmd.Stderr = outFile, outFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }()
	err = cmd.Wait()
	out, _ := os.ReadFile(outFile.Name())
	if err != nil {
		t.Fatalf("the worked example failed: %v\n%s", err, out)
	}
	for _, want := range []string{"ready", ": identical", "records read twice: 0; records read: 100 of 100", " promoted: "} {
		if !bytes.Contains(out, []byte(want)) {
			t.Fatalf("the worked example's output lacks %q:\n%s", want, out)
		}
	}
}
