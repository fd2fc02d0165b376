package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"offsetgate/internal/ports"
	"offsetgate/internal/testcerts"
	"offsetgate/internal/testkafka"
)

// Three `offsetgate serve` processes in front of the same destination and one following
// `offsetgate mirror` given all three. While the source is written to, the instance the mirror
// writes through is SIGKILLed: its lease on the partitions runs out, the mirror writes them
// through the others, and once the producer stops the copy is every source record, once, at
// the source's offsets, read through each surviving instance (verify): the one that took the
// partitions over serves what the killed one wrote before as well as what it wrote since.
func TestMirrorSurvivesServeKill(t *testing.T) {
	prefix := testkafka.Names(t, "sk")
	pair := testkafka.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	set, err := testcerts.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	kp, err := set.Client("mirror", testcerts.SANs{URIs: []string{"spiffe://test/mirror"}})
	if err != nil {
		t.Fatal(err)
	}
	id := []string{"--tls-ca", set.CA.CertFile, "--tls-cert", kp.CertFile, "--tls-key", kp.KeyFile}
	const parts = 6
	topic := prefix + "-t"
	if err := pair.Source.CreateTopic(ctx, topic, parts, 2, nil); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()

	// Each instance: its listener and the destination brokers' ports (node N at port+1+N), and
	// an admin listener for its metrics. One block, so no instance picks another's port.
	const stride = 5
	base, err := ports.Block(3 * stride)
	if err != nil {
		t.Fatal(err)
	}
	type instance struct {
		name, addr, admin string
		proc              *cliProc
	}
	og := make([]*instance, 3)
	for i := range og {
		p := base + i*stride
		in := &instance{name: fmt.Sprintf("og%d", i+1), addr: "127.0.0.1:" + strconv.Itoa(p),
			admin: "127.0.0.1:" + strconv.Itoa(p+stride-1)}
		conf := fmt.Sprintf(`listen: %s
bootstrap: [%s]
admin: %s
instance_id: %s
ownership_lease: 3s
tls:
  listener: {cert_file: %s, key_file: %s, client_ca_file: %s, client_auth: request}
mirroring:
  clients: [{tls_san: "URI:spiffe://test/mirror", topics: ["%s*"]}]
log: {level: info, format: json}
`, in.addr, strings.Join(pair.Dest.Addrs(), ", "), in.admin, in.name, set.Server.CertFile, set.Server.KeyFile, set.CA.CertFile, prefix)
		cfgFile := filepath.Join(dir, in.name+".yaml")
		if err := os.WriteFile(cfgFile, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		in.proc = startCLI(t, self, filepath.Join(dir, in.name+".log"), "serve", "--config", cfgFile)
		og[i] = in
	}
	var mp *cliProc // the mirror
	logs := func() string {
		var b strings.Builder
		for _, in := range og {
			fmt.Fprintf(&b, "--- %s (%s):\n%s\n", in.name, in.addr, tailLines(in.proc.output(), 60))
		}
		if mp != nil {
			fmt.Fprintf(&b, "--- mirror:\n%s\n", tailLines(mp.output(), 60))
		}
		return b.String()
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	get := func(in *instance, path string) (string, error) {
		resp, err := hc.Get("http://" + in.admin + path)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(b)))
		}
		return string(b), err
	}
	wait := func(what string, d time.Duration, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(d)
		for !cond() {
			if mp != nil && mp.exited() {
				t.Fatalf("%s: the mirror process ended (%v)\n%s", what, mp.cmd.ProcessState, logs())
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %v\n%s", what, d, logs())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	for _, in := range og {
		wait(in.name+" is ready", 2*time.Minute, func() bool { _, err := get(in, "/readyz"); return err == nil })
	}
	// writes is an instance's successful produce-at-offset writes of the topic, by partition.
	writes := func(in *instance) (map[int32]float64, error) {
		body, err := get(in, "/metrics")
		if err != nil {
			return nil, err
		}
		return mirrorWrites(body, topic), nil
	}

	// A producer writes to the source until told to stop: round robin over the partitions,
	// a few hundred records a second.
	var produced, failed atomic.Int64
	stopProducing := make(chan struct{})
	produceDone := make(chan error, 1)
	go func() {
		cl, err := pair.Source.Client(kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
		if err != nil {
			produceDone <- err
			return
		}
		defer cl.Close()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; {
			select {
			case <-stopProducing:
				produceDone <- cl.Flush(ctx)
				return
			case <-tick.C:
			}
			for j := 0; j < 6; j++ {
				cl.Produce(ctx, &kgo.Record{Value: []byte(fmt.Sprintf("%s-%d", topic, i))}, func(_ *kgo.Record, err error) {
					if err != nil {
						failed.Add(1)
					} else {
						produced.Add(1)
					}
				})
				i++
			}
		}
	}()
	stop := sync.OnceFunc(func() {
		close(stopProducing)
		if err := <-produceDone; err != nil {
			t.Errorf("producer: %v", err)
		}
	})
	defer stop()
	wait("the producer writes", time.Minute, func() bool { return produced.Load() >= 300 })

	proxies := []string{og[0].addr, og[1].addr, og[2].addr}
	mp = startCLI(t, self, filepath.Join(dir, "mirror.log"), args([]string{"mirror", "--source", pair.Source.Addrs()[0],
		"--proxy", strings.Join(proxies, ","), "--topics", topic, "--progress", "lines"}, id)...)

	// The mirror writes every partition, through one instance or more. Which instance writes
	// which partition is read from two looks at their metrics a few seconds apart (a partition
	// is written through one instance at a time: the others are refused while its lease
	// holds); the victim is the instance that wrote the most meanwhile.
	snapshot := func() ([]map[int32]float64, error) {
		out := make([]map[int32]float64, len(og))
		for i, in := range og {
			w, err := writes(in)
			if err != nil {
				return nil, fmt.Errorf("%s's metrics: %w", in.name, err)
			}
			out[i] = w
		}
		return out, nil
	}
	wait("the mirror writes every partition", 2*time.Minute, func() bool {
		ws, err := snapshot()
		seen := map[int32]bool{}
		for _, w := range ws {
			for p := range w {
				seen[p] = true
			}
		}
		return err == nil && len(seen) == parts
	})
	first, err := snapshot()
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	before, err := snapshot()
	if err != nil {
		t.Fatal(err)
	}
	grew := make([]map[int32]bool, len(og)) // instance, partition: written in between
	victim, most := 0, 0.0
	for i := range og {
		grew[i] = map[int32]bool{}
		n := 0.0
		for p, v := range before[i] {
			if v > first[i][p] {
				grew[i][p] = true
				n += v - first[i][p]
			}
		}
		if n > most {
			victim, most = i, n
		}
		t.Logf("%s: successful writes by partition %v, then %v", og[i].name, first[i], before[i])
	}
	dead := og[victim]
	var victimParts []int32
	for p := int32(0); p < parts; p++ {
		if grew[victim][p] {
			victimParts = append(victimParts, p)
		}
	}
	if len(victimParts) == 0 {
		t.Fatalf("the mirror wrote nothing through %s before the kill: the kill would prove nothing", dead.name)
	}
	// What the others logged so far: a takeover logs the partition loaded again.
	loadsBefore := make([]map[int32]int, len(og))
	for i, in := range og {
		loadsBefore[i] = loads(in.proc.output(), topic)
	}

	// SIGKILL: no goodbye, the lease on its partitions holds until it runs out.
	dead.proc.kill()
	killedAt := time.Now()
	t.Logf("%s (%s) killed, it wrote partitions %v; %d records produced so far", dead.name, dead.addr, victimParts, produced.Load())
	var survivors []*instance
	for i, in := range og {
		if i != victim {
			survivors = append(survivors, in)
		}
	}

	// Every partition the victim wrote is then written through an instance that did not
	// write it before the kill.
	var firstWrite time.Duration
	moved := map[int32]string{}
	wait("the survivors write the killed instance's partitions", 90*time.Second, func() bool {
		for i, in := range og {
			if i == victim {
				continue
			}
			w, err := writes(in)
			if err != nil {
				continue // asked again on the next round
			}
			for _, p := range victimParts {
				if w[p] > before[i][p] && !grew[i][p] && moved[p] == "" {
					moved[p] = in.name
					if firstWrite == 0 {
						firstWrite = time.Since(killedAt)
					}
				}
			}
		}
		return len(moved) == len(victimParts)
	})
	allMoved := time.Since(killedAt)
	t.Logf("failover: first write through another instance %v after the kill, all of %s's partitions %v after it: %v",
		firstWrite.Round(10*time.Millisecond), dead.name, allMoved.Round(10*time.Millisecond), moved)
	// The instances that took the partitions logged loading them after the kill.
	for i, in := range og {
		if i == victim {
			continue
		}
		now := loads(in.proc.output(), topic)
		for _, p := range victimParts {
			if moved[p] == in.name && now[p] <= loadsBefore[i][p] {
				t.Fatalf("%s writes %s[%d] since the kill, but did not log loading it\n%s", in.name, topic, p, logs())
			}
		}
	}
	time.Sleep(2 * time.Second) // the producer goes on a while after the failover
	stop()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d records were not produced", n)
	}
	want := produced.Load()

	sc, err := pair.Source.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	ends := func(cl *kgo.Client) (map[int32]int64, error) {
		lctx, lcancel := context.WithTimeout(ctx, 10*time.Second)
		defer lcancel()
		o, err := kadm.NewClient(cl).ListEndOffsets(lctx, topic)
		if err != nil {
			return nil, err
		}
		if err := o.Error(); err != nil {
			return nil, err
		}
		out := map[int32]int64{}
		o.Each(func(l kadm.ListedOffset) { out[l.Partition] = l.Offset })
		return out, nil
	}
	srcEnds, err := ends(sc)
	if err != nil {
		t.Fatal(err)
	}
	var srcTotal int64
	for _, e := range srcEnds {
		srcTotal += e
	}
	if len(srcEnds) != parts || srcTotal != want {
		t.Fatalf("source ends %v (%d offsets): %d records produced", srcEnds, srcTotal, want)
	}

	// Through each surviving instance (the ones that took partitions over, and the others):
	// caught up (the end offsets are the source's), then every partition identical, nothing
	// lost, nothing twice.
	for _, via := range survivors {
		pc, err := kgo.NewClient(kgo.SeedBrokers(via.addr), kgo.DialTLSConfig(set.ClientTLS(kp)))
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		var last map[int32]int64
		wait("the mirror catches up through "+via.name, 3*time.Minute, func() bool {
			e, err := ends(pc)
			if err != nil {
				return false
			}
			last = e
			return fmt.Sprint(e) == fmt.Sprint(srcEnds)
		})
		t.Logf("caught up %v after the kill: %v through %s, %d records", time.Since(killedAt).Round(100*time.Millisecond), last, via.name, want)

		code, out, errs := run(args([]string{"verify", "--json", "--source", pair.Source.Addrs()[0], "--proxy", via.addr, "--topic", topic}, id)...)
		if code != 0 {
			t.Fatalf("verify through %s: exit %d\n%s\n%s", via.name, code, out, errs)
		}
		var res []struct {
			Partition  int32  `json:"partition"`
			From       int64  `json:"from"`
			To         int64  `json:"to"`
			Records    int64  `json:"records"`
			Tail       int64  `json:"source_tail"`
			HeadLost   int64  `json:"source_head_lost"`
			Difference string `json:"difference"`
			Error      string `json:"error"`
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("verify --json: %v\n%s", err, out)
		}
		var records int64
		for _, r := range res {
			if r.From != 0 || r.To != srcEnds[r.Partition] || r.Tail != 0 || r.HeadLost != 0 || r.Difference != "" || r.Error != "" {
				t.Errorf("verify through %s, partition %d: %+v (source end %d)", via.name, r.Partition, r, srcEnds[r.Partition])
			}
			records += r.Records
		}
		if len(res) != parts || records != want {
			t.Fatalf("verify through %s compared %d partitions, %d records: %d produced\n%s", via.name, len(res), records, want, out)
		}
	}
	if mp.exited() {
		t.Fatalf("the mirror process ended (%v)\n%s", mp.cmd.ProcessState, logs())
	}
}

// cliProc is the test binary run as the offsetgate command, its output in a file.
type cliProc struct {
	cmd  *exec.Cmd
	out  string
	done chan struct{} // closed once the process was waited for
}

// startCLI starts the offsetgate command with its output to a file; the process dies with
// the test (Pdeathsig), and is killed and waited for at its end.
func startCLI(t *testing.T, self, out string, args ...string) *cliProc {
	t.Helper()
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(self, args...)
	cmd.Env = append(os.Environ(), asCLI+"=1")
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &cliProc{cmd: cmd, out: out, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(p.kill)
	return p
}

// kill SIGKILLs the process and waits for it.
func (p *cliProc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// exited reports whether the process has ended.
func (p *cliProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// output is what the process wrote so far.
func (p *cliProc) output() string {
	b, _ := os.ReadFile(p.out)
	return string(b)
}

var metricLine = regexp.MustCompile(`^offsetgate_mirror_writes_total\{([^}]*)\} (\S+)$`)

// mirrorWrites is the successful produce-at-offset writes of topic in a Prometheus text
// exposition, by partition.
func mirrorWrites(body, topic string) map[int32]float64 {
	out := map[int32]float64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		m := metricLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		labels := map[string]string{}
		for _, kv := range strings.Split(m[1], ",") {
			k, v, _ := strings.Cut(kv, "=")
			labels[k] = strings.Trim(v, `"`)
		}
		if labels["topic"] != topic || labels["code"] != "0" {
			continue
		}
		p, err1 := strconv.Atoi(labels["partition"])
		n, err2 := strconv.ParseFloat(m[2], 64)
		if err1 == nil && err2 == nil {
			out[int32(p)] += n
		}
	}
	return out
}

// loads counts, by partition, the lines of an instance's JSON log saying it loaded (took) a
// partition of topic.
func loads(log, topic string) map[int32]int {
	out := map[int32]int{}
	for _, l := range strings.Split(log, "\n") {
		var e struct {
			Msg       string `json:"msg"`
			Topic     string `json:"topic"`
			Partition *int32 `json:"partition"`
		}
		if json.Unmarshal([]byte(l), &e) == nil && e.Msg == "mirror partition loaded" && e.Topic == topic && e.Partition != nil {
			out[*e.Partition]++
		}
	}
	return out
}

func tailLines(s string, n int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}
