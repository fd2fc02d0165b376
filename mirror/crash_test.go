package mirror_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"offsetgate/internal/relay"
	"offsetgate/internal/testkafka"
	"offsetgate/mirror"
	"offsetgate/proxy"
	"offsetgate/verify"
)

func newRelays(t testing.TB, raw bool, f relay.Fault) *relay.Set {
	s := relay.NewSet(raw, f)
	t.Cleanup(s.Close)
	return s
}

// dropProduceResponses drops every nth Produce response (and cuts its connection): the
// request reached the other side, its answer is lost.
func dropProduceResponses(n int64, dropped *atomic.Int64) relay.Fault {
	var mu sync.Mutex
	produce := map[[2]int32]bool{} // (connection, correlation id) of Produce requests
	var seen atomic.Int64
	return func(conn int, dir relay.Direction, frame []byte) relay.Action {
		if len(frame) < 12 {
			return relay.Pass
		}
		mu.Lock()
		defer mu.Unlock()
		if dir == relay.ToServer {
			if binary.BigEndian.Uint16(frame[4:]) == 0 {
				produce[[2]int32{int32(conn), int32(binary.BigEndian.Uint32(frame[8:]))}] = true
			}
			return relay.Pass
		}
		k := [2]int32{int32(conn), int32(binary.BigEndian.Uint32(frame[4:]))}
		if !produce[k] {
			return relay.Pass
		}
		delete(produce, k)
		if seen.Add(1)%n == 0 {
			dropped.Add(1)
			return relay.Drop
		}
		return relay.Pass
	}
}

// cutLongConnections cuts each connection once, after it carried `after` chunks towards the
// client (TLS: frames are not visible, but a cut loses whatever response was in flight).
func cutLongConnections(after int, dropped *atomic.Int64) relay.Fault {
	var mu sync.Mutex
	chunks := map[int]int{}
	return func(conn int, dir relay.Direction, _ []byte) relay.Action {
		if dir != relay.ToClient {
			return relay.Pass
		}
		mu.Lock()
		defer mu.Unlock()
		chunks[conn]++
		if chunks[conn] == after {
			dropped.Add(1)
			return relay.Drop
		}
		return relay.Pass
	}
}

func sameData(ctx context.Context, t testing.TB, e *env, topic string) {
	t.Helper()
	sc, dc := count(ctx, t, e.pair.Source, topic), count(ctx, t, e.pair.Dest, topic)
	for p, se := range sc {
		if dc[p] != se {
			t.Fatalf("%s[%d]: destination holds %v, source %v (written twice or lost)", topic, p, dc[p], se)
		}
		want := readAll(ctx, t, e.pair.Source, topic, p, int(se[1]-se[0]))
		got := readAll(ctx, t, e.pair.Dest, topic, p, int(se[1]-se[0]))
		for i := range want {
			if want[i] != got[i] {
				t.Fatalf("%s[%d] record %d: destination %+v, source %+v", topic, p, i, got[i], want[i])
			}
		}
	}
}

// Responses lost between the mirroring client and offsetgate, and between offsetgate and
// the destination, make both retry: nothing is written twice and nothing is lost.
func TestDroppedResponses(t *testing.T) {
	prefix := testkafka.Names(t, "x")
	var upDropped, clientDropped atomic.Int64
	up := newRelays(t, false, dropProduceResponses(4, &upDropped))
	e := newEnv(t, prefix, func(c *proxy.Config) { c.Dial = up.Dial })
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	topic := prefix + "-t"
	if err := e.pair.Source.CreateTopic(ctx, topic, 2, 2, nil); err != nil {
		t.Fatal(err)
	}
	produceSource(ctx, t, e.pair.Source, topic, 3000)
	// The client side is TLS: the relay cuts connections between chunks, which loses
	// responses in flight just the same.
	down := newRelays(t, true, cutLongConnections(12, &clientDropped))
	cfg := e.mirrorConfig(topic)
	cfg.Dial = down.Dial
	cfg.MaxBytes = 16 << 10
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		if _, err = mirror.Once(ctx, cfg); err == nil {
			break
		}
		t.Logf("mirror run %d: %v (running again)", attempt, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if upDropped.Load() == 0 || clientDropped.Load() == 0 {
		t.Fatalf("dropped %d destination and %d client responses: the faults did not happen", upDropped.Load(), clientDropped.Load())
	}
	sameData(ctx, t, e, topic)
}

// offsetgate killed with SIGKILL in the middle of mirroring, restarted, and the mirror run
// again: nothing is written twice and nothing is lost.
func TestKillDuringMirror(t *testing.T) {
	killDuringMirror(t, "k", func(ctx context.Context, pair *testkafka.Pair, topic string) {
		produceSource(ctx, t, pair.Source, topic, 6000)
	}, func(ctx context.Context, e *env, topic string) { sameData(ctx, t, e, topic) })
}

// The same with transactions: many small ones across both partitions, committed and aborted,
// so the kills land between a transaction's batches and its markers, and between the markers
// of one transaction on different partitions. Then the mirroring process itself is killed
// (SIGKILL) in the middle of a run. Afterwards every batch, marker, last stable offset and
// aborted transaction is the source's.
func TestKillDuringTransactionalMirror(t *testing.T) {
	killDuringMirror(t, "kt", func(ctx context.Context, pair *testkafka.Pair, topic string) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(pair.Source.Addrs()...), kgo.TransactionalID(topic+"-tx"),
			kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		for i := 0; i < 400; i++ {
			if err := cl.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			for p := int32(0); p < 2; p++ {
				r := &kgo.Record{Topic: topic, Partition: p, Key: []byte(fmt.Sprintf("k%d", i)), Value: bytes.Repeat([]byte{'v'}, 200)}
				if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
			if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(i%3 != 0)); err != nil {
				t.Fatal(err)
			}
		}
	}, func(ctx context.Context, e *env, topic string) {
		res, err := verify.Run(ctx, verify.Config{Source: e.srcClient(t), Proxy: e.proxyClient(t), Topic: topic}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil || r.Diff != nil || r.Tail != 0 || r.Aborted == 0 {
				t.Fatalf("after the kills: %s", r.Line(topic))
			}
		}
	})
}

func killDuringMirror(t *testing.T, what string, produce func(context.Context, *testkafka.Pair, string), check func(context.Context, *env, string)) {
	prefix := testkafka.Names(t, what)
	pair := testkafka.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
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
	e := newEnv(t, prefix, nil) // certificates and the source data helpers; its own proxy is not used
	e.stop()
	base := freeBase(t)
	listen := "127.0.0.1:" + strconv.Itoa(base)
	cfgFile := filepath.Join(t.TempDir(), "offsetgate.yaml")
	conf := fmt.Sprintf(`listen: %s
bootstrap: [%s]
tls:
  listener: {cert_file: %s, key_file: %s, client_ca_file: %s, client_auth: request}
mirroring:
  clients: [{tls_san: "URI:spiffe://test/mirror", topics: ["%s*"]}]
log: {level: warn}
`, listen, strings.Join(pair.Dest.Addrs(), ", "), e.certs.Server.CertFile, e.certs.Server.KeyFile, e.certs.CA.CertFile, prefix)
	if err := os.WriteFile(cfgFile, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	start := func() *exec.Cmd {
		cmd := exec.Command(bin, "serve", "--config", cfgFile)
		cmd.Dir = root
		cmd.Stderr = os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		deadline := time.Now().Add(60 * time.Second)
		for {
			c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(base+2), time.Second)
			if err == nil {
				c.Close()
				return cmd
			}
			if time.Now().After(deadline) {
				t.Fatal("offsetgate did not come up")
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	topic := prefix + "-t"
	if err := pair.Source.CreateTopic(ctx, topic, 2, 2, nil); err != nil {
		t.Fatal(err)
	}
	produce(ctx, pair, topic)
	total := func(c map[int32][2]int64) int64 { return c[0][1] + c[1][1] }
	srcTotal := total(count(ctx, t, pair.Source, topic))
	e.addr = listen
	cfg := e.mirrorConfig(topic)
	cfg.MaxBytes = 8 << 10 // many small requests, so the kill lands in the middle
	waitFor := func(n int64) {
		deadline := time.Now().Add(2 * time.Minute)
		for total(count(ctx, t, pair.Dest, topic)) <= n {
			if time.Now().After(deadline) {
				t.Fatal("no progress before the kill")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	// offsetgate killed under a running mirror.
	og := start()
	mdone := make(chan error, 1)
	go func() { _, err := mirror.Once(ctx, cfg); mdone <- err }()
	waitFor(srcTotal / 10)
	_ = og.Process.Signal(syscall.SIGKILL)
	_ = og.Wait()
	if err := <-mdone; err == nil {
		t.Log("the mirror run finished before the kill took effect")
	}
	mid := count(ctx, t, pair.Dest, topic)
	if total(mid) >= srcTotal {
		t.Fatalf("everything was mirrored before the kill (%v): the test proves nothing", mid)
	}
	t.Logf("offsetgate killed with %v on the destination", mid)
	start()

	// The mirroring process killed in the middle of its run.
	args := []string{"mirror", "--once", "--source", strings.Join(pair.Source.Addrs(), ","), "--proxy", listen, "--topic", topic,
		"--max-bytes", "8192", "--tls-ca", e.certs.CA.CertFile, "--tls-cert", e.client.CertFile, "--tls-key", e.client.KeyFile, "--progress", "lines"}
	mp := exec.Command(bin, args...)
	mp.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := mp.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(total(mid) + srcTotal/10)
	_ = mp.Process.Signal(syscall.SIGKILL)
	_ = mp.Wait()
	t.Logf("the mirror killed with %v on the destination", count(ctx, t, pair.Dest, topic))

	var runErr error
	for attempt := 0; attempt < 3; attempt++ {
		if _, runErr = mirror.Once(ctx, cfg); runErr == nil {
			break
		}
	}
	if runErr != nil {
		t.Fatal(runErr)
	}
	e.addr = listen
	check(ctx, e, topic)
}
