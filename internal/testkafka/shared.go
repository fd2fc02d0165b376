package testkafka

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// EnvVar names the file describing the shared clusters that scripts/test (or scripts/kafka up)
// started for this test run.
const EnvVar = "OFFSETGATE_TEST_KAFKA"

// Pair is a source and a destination cluster.
type Pair struct {
	Source *Cluster `json:"source"`
	Dest   *Cluster `json:"dest"`
}

type nodeJSON struct {
	ID         int32  `json:"id"`
	Controller bool   `json:"controller"`
	Port       int    `json:"port"`
	Pid        int    `json:"pid"`
	Log        string `json:"log"`
	// Listeners maps client listener names to ports (PLAINTEXT is Port).
	Listeners map[string]int `json:"listeners,omitempty"`
}

type clusterJSON struct {
	Name      string     `json:"name"`
	ClusterID string     `json:"cluster_id"`
	Libs      string     `json:"libs"`
	Nodes     []nodeJSON `json:"nodes"`
}

// MarshalJSON describes a cluster so that other processes can use it.
func (c *Cluster) MarshalJSON() ([]byte, error) {
	j := clusterJSON{Name: c.Name, ClusterID: c.ClusterID, Libs: c.libs}
	for _, n := range c.Nodes {
		j.Nodes = append(j.Nodes, nodeJSON{ID: n.ID, Controller: n.Controller, Port: n.Port, Pid: n.Pid(), Log: n.logPath,
			Listeners: n.listeners})
	}
	return json.Marshal(j)
}

// UnmarshalJSON rebuilds a cluster started by another process: it can be used, not stopped.
func (c *Cluster) UnmarshalJSON(b []byte) error {
	var j clusterJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	c.Name, c.ClusterID, c.libs = j.Name, j.ClusterID, j.Libs
	for _, n := range j.Nodes {
		ls := map[string]int{ListenerPlaintext: n.Port}
		for name, p := range n.Listeners {
			ls[strings.ToUpper(name)] = p
		}
		c.Nodes = append(c.Nodes, &Node{ID: n.ID, Controller: n.Controller, Port: n.Port, logPath: n.Log, foreignPid: n.Pid,
			listeners: ls})
	}
	return nil
}

// StartPair starts the source and then the destination cluster (one after the other: two
// cores do not boot four JVMs at once any faster).
func StartPair(ctx context.Context, dir string) (*Pair, error) {
	var sd, dd string
	if dir != "" {
		sd, dd = filepath.Join(dir, "source"), filepath.Join(dir, "dest")
	}
	src, err := Start(ctx, Options{Name: "source", Dir: sd})
	if err != nil {
		return nil, err
	}
	dst, err := Start(ctx, Options{Name: "dest", Dir: dd})
	if err != nil {
		src.Stop()
		return nil, err
	}
	return &Pair{Source: src, Dest: dst}, nil
}

// Stop stops both clusters.
func (p *Pair) Stop() {
	p.Dest.Stop()
	p.Source.Stop()
}

// Load reads a pair description written by WritePairFile and checks that its brokers answer
// with the cluster ids the harness formatted.
func Load(ctx context.Context, path string) (*Pair, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("testkafka: reading %s: %w", path, err)
	}
	var p Pair
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("testkafka: parsing %s: %w", path, err)
	}
	if p.Source == nil || p.Dest == nil {
		return nil, fmt.Errorf("testkafka: %s lacks a source or destination cluster", path)
	}
	for _, c := range []*Cluster{p.Source, p.Dest} {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := c.WaitReady(cctx)
		cancel()
		if err != nil {
			return nil, err
		}
	}
	return &p, nil
}

// WritePairFile writes the pair's description atomically.
func WritePairFile(p *Pair, path string) error {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// shared holds the clusters of one test binary. Test harness state: it lives as long as the
// test process and is set up by Main.
var shared struct {
	mu   sync.Mutex
	pair *Pair
	err  error
	own  bool
	lock *os.File
	exit []func()
}

// AtExit runs f when Main ends, after the tests and before the shared clusters stop (test
// binaries built for the run, say).
func AtExit(f func()) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	shared.exit = append(shared.exit, f)
}

// Main runs a package's tests with the shared clusters available through Shared. With
// OFFSETGATE_TEST_KAFKA set (scripts/test sets it) the run's clusters are used; otherwise this
// package starts its own pair, holding a machine-wide lock so that packages tested in parallel
// boot one pair at a time, and stops it afterwards.
func Main(m *testing.M) {
	code := m.Run()
	shared.mu.Lock()
	for _, f := range shared.exit {
		f()
	}
	if shared.own && shared.pair != nil {
		shared.pair.Stop()
	}
	if shared.lock != nil {
		_ = syscall.Flock(int(shared.lock.Fd()), syscall.LOCK_UN)
		shared.lock.Close()
	}
	shared.mu.Unlock()
	os.Exit(code)
}

// Shared returns the shared source and destination clusters. It never skips: a test that
// needs Kafka fails when Kafka cannot be had.
func Shared(t testing.TB) *Pair {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.pair == nil && shared.err == nil {
		shared.pair, shared.err = acquire()
	}
	if shared.err != nil {
		t.Fatalf("real Kafka is required and could not be had: %v", shared.err)
	}
	return shared.pair
}

func acquire() (*Pair, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if path := os.Getenv(EnvVar); path != "" {
		return Load(ctx, path)
	}
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(root, ".cache"), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(root, ".cache", "testkafka.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	shared.lock, shared.own = f, true
	return StartPair(ctx, "")
}

// Names gives a test its own topic and group names.
func Names(t testing.TB, what string) string {
	n := strings.NewReplacer("/", "-", " ", "_", "#", "-").Replace(t.Name())
	return fmt.Sprintf("%s-%s-%s", n, what, strconv.FormatInt(time.Now().UnixNano()%1e9, 36))
}

// LockOwnPair waits for the machine-wide lock held while a process runs clusters of its own
// that break brokers (the fault campaign): one such pair at a time on a machine. unlock gives
// it back (more than once is fine).
func LockOwnPair(ctx context.Context) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "offsetgate-own-kafka-pair.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if err != syscall.EWOULDBLOCK {
			f.Close()
			return nil, fmt.Errorf("testkafka: locking own pair: %w", err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
			f.Close()
		})
	}, nil
}
