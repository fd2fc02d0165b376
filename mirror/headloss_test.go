package mirror_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"offsetgate/internal/testkafka"
	"offsetgate/mirror"
	"offsetgate/verify"
)

var built struct {
	once sync.Once
	bin  string
	err  error
	out  []byte
}

// offsetgateBinary builds cmd/offsetgate once per test binary.
func offsetgateBinary(t testing.TB) string {
	t.Helper()
	built.once.Do(func() {
		root, err := testkafka.RepoRoot()
		if err != nil {
			built.err = err
			return
		}
		dir, err := os.MkdirTemp("", "offsetgate-bin-")
		if err != nil {
			built.err = err
			return
		}
		testkafka.AtExit(func() { os.RemoveAll(dir) })
		built.bin = filepath.Join(dir, "offsetgate")
		cmd := exec.Command("go", "build", "-o", built.bin, "./cmd/offsetgate")
		cmd.Dir = root
		built.out, built.err = cmd.CombinedOutput()
	})
	if built.err != nil {
		t.Fatalf("building offsetgate: %v\n%s", built.err, built.out)
	}
	return built.bin
}

// The judge sees what the destination lost at the head. Records deleted on the destination
// directly (DeleteRecords bypassing offsetgate) while the source still holds them are reported
// by verify (LOST, exit 3, with the range lost) and by status (LOST AT HEAD), although the
// range both hold is identical. The mirror's own log-start following (the source's log start
// moved, the mirror moved the destination's up to it) is no loss, and neither is a source
// whose log start moved on before the mirror followed.
func TestVerifyReportsHeadLoss(t *testing.T) {
	prefix := testkafka.Names(t, "hl")
	e := newEnv(t, prefix, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s := e.pair.Source
	topic := prefix + "-t"
	if err := s.CreateTopic(ctx, topic, 3, 2, nil); err != nil {
		t.Fatal(err)
	}
	produceSource(ctx, t, s, topic, 3000, kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	cfg := e.mirrorConfig(topic)
	if _, err := mirror.Once(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	scl, pcl := e.srcClient(t), e.proxyClient(t)
	run := func() []verify.Result {
		t.Helper()
		res, err := verify.Run(ctx, verify.Config{Source: scl, Proxy: pcl, Topic: topic}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			t.Log(r.Line(topic))
		}
		return res
	}
	for _, r := range run() {
		if r.Err != nil || r.Diff != nil || r.HeadLost != 0 || r.Tail != 0 {
			t.Fatalf("after the mirror: %s", r.Line(topic))
		}
	}

	// Partition 1: the source's log start moves and the mirror follows (no loss). Partition
	// 2: the source's moves and the mirror has not followed yet (no loss either).
	sadm := kadm.NewClient(scl)
	if _, err := sadm.DeleteRecords(ctx, kadm.Offsets{topic: {
		1: {Topic: topic, Partition: 1, At: 200},
		2: {Topic: topic, Partition: 2, At: 150},
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := mirror.FollowLogStart(ctx, scl, pcl, []string{topic}, nil); err != nil {
		t.Fatal(err)
	}
	dadm, err := e.pair.Dest.Admin()
	if err != nil {
		t.Fatal(err)
	}
	defer dadm.Close()
	if c := count(ctx, t, e.pair.Dest, topic); c[1][0] != 200 || c[2][0] != 150 {
		t.Fatalf("log starts on the destination after following: %v", c)
	}
	if _, err := sadm.DeleteRecords(ctx, kadm.Offsets{topic: {2: {Topic: topic, Partition: 2, At: 250}}}); err != nil {
		t.Fatal(err)
	}
	// Partition 0: the first 300 records deleted on the destination directly.
	if _, err := dadm.DeleteRecords(ctx, kadm.Offsets{topic: {0: {Topic: topic, Partition: 0, At: 300}}}); err != nil {
		t.Fatal(err)
	}
	res := run()
	if r := res[0]; r.Err != nil || r.Diff != nil || r.HeadLost != 300 || r.SourceStart != 0 || r.CopyStart != 300 ||
		r.Batches == 0 || !strings.Contains(r.Line(topic), "LOST") {
		t.Fatalf("partition 0, 300 records deleted on the destination: %s", r.Line(topic))
	}
	for _, r := range res[1:] {
		if r.Err != nil || r.Diff != nil || r.HeadLost != 0 || !strings.HasSuffix(r.Line(topic), "identical") {
			t.Fatalf("partition %d (log start followed, or not yet): %s", r.Partition, r.Line(topic))
		}
	}

	// The commands say the same.
	bin := offsetgateBinary(t)
	px := e.plain(t)
	cmd := func(args ...string) (int, string) {
		t.Helper()
		c := exec.CommandContext(ctx, bin, args...)
		var stderr strings.Builder
		c.Stderr = &stderr
		out, err := c.Output()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		if stderr.Len() > 0 {
			t.Logf("offsetgate %s: %s", args[0], stderr.String())
		}
		return c.ProcessState.ExitCode(), string(out)
	}
	code, out := cmd("verify", "--source", s.Bootstrap(), "--proxy", px, "--topic", topic)
	if code != 3 || !strings.Contains(out, topic+"[0]") || !strings.Contains(out, "LOST: the source still holds offsets [0, 300)") {
		t.Fatalf("offsetgate verify: exit %d, want 3 (lost)\n%s", code, out)
	}
	if code, out = cmd("verify", "--source", s.Bootstrap(), "--proxy", px, "--topic", topic, "--partition", "1"); code != 0 {
		t.Fatalf("offsetgate verify --partition 1: exit %d\n%s", code, out)
	}
	code, out = cmd("verify", "--source", s.Bootstrap(), "--proxy", px, "--topic", topic, "--json")
	var vj []struct {
		Partition      int32 `json:"partition"`
		SourceHeadLost int64 `json:"source_head_lost"`
	}
	if err := json.Unmarshal([]byte(out), &vj); err != nil || code != 3 || len(vj) != 3 || vj[0].SourceHeadLost != 300 || vj[1].SourceHeadLost != 0 {
		t.Fatalf("offsetgate verify --json: exit %d, %v\n%s", code, err, out)
	}
	// offsetgate's own topics are read by the mirroring identity.
	tlsFlags := []string{"--tls-ca", e.certs.CA.CertFile, "--tls-cert", e.client.CertFile, "--tls-key", e.client.KeyFile}
	code, out = cmd(append([]string{"status", "--proxy", e.addr, "--source", s.Bootstrap()}, tlsFlags...)...)
	var line0 string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == topic && f[1] == "0" {
			line0 = l
		} else if len(f) > 1 && f[0] == topic && strings.Contains(l, "LOST") {
			t.Fatalf("offsetgate status: partition %s reported lost:\n%s", f[1], out)
		}
	}
	if code != 0 || !strings.Contains(line0, "LOST AT HEAD: the source still holds [0, 300), the mirror starts at 300") {
		t.Fatalf("offsetgate status: exit %d\n%s", code, out)
	}
	code, out = cmd(append([]string{"status", "--proxy", e.addr, "--source", s.Bootstrap(), "--json"}, tlsFlags...)...)
	var sj []mirror.PartitionStatus
	if err := json.Unmarshal([]byte(out), &sj); err != nil || code != 0 {
		t.Fatalf("offsetgate status --json: exit %d, %v\n%s", code, err, out)
	}
	found := 0
	for _, p := range sj {
		if p.Topic != topic {
			continue
		}
		found++
		want := int64(0)
		if p.Partition == 0 {
			want = 300
		}
		if p.HeadLost == nil || *p.HeadLost != want {
			t.Fatalf("offsetgate status --json, partition %d: head_lost %v, want %d", p.Partition, p.HeadLost, want)
		}
	}
	if found != 3 {
		t.Fatalf("offsetgate status --json lists %d partitions of %s", found, topic)
	}
}
