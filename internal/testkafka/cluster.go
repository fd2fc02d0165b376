// Package testkafka runs real Apache Kafka clusters in KRaft mode on loopback for tests and
// benchmarks.
//
// A cluster is one combined controller+broker node plus broker-only nodes, so that broker
// address rewriting, leader moves and leader epoch changes are real. Every JVM is started with
// a parent-death signal, so no broker outlives the process that started it, even when a test
// binary panics or is killed by go test's -timeout.
package testkafka

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/internal/ports"
)

// KafkaVersion is the pinned Apache Kafka release; testenv/kafka/pom.xml must say the same.
const KafkaVersion = "4.1.1"

// Options describe a cluster to start.
type Options struct {
	// Name labels the cluster in logs and in its data folder ("source", "dest").
	Name string
	// Brokers is the total node count: node 1 is controller+broker, the others broker-only.
	// Zero means 2.
	Brokers int
	// Dir is where data and logs go; empty means a fresh temporary folder removed on Stop.
	Dir string
	// ExtraConfig is appended to every node's server.properties (key=value).
	ExtraConfig map[string]string
	// HeapMB is each JVM's heap; zero means 512.
	HeapMB int
	// Secure adds SSL, SASL_PLAINTEXT and SASL_SSL client listeners to every node, next to the
	// PLAINTEXT one (which stays the inter-broker listener and the one the harness itself
	// uses). Nil means PLAINTEXT only.
	Secure *SecureOptions
	// AliasHost, when set (another loopback address, "127.0.0.2"), gives every node one more
	// plaintext client listener, ALIAS, on a port of its own on 127.0.0.1 that it advertises at
	// AliasHost with the same port. A client bootstrapped from AliasAddrs learns only alias
	// addresses, so a relay listening on AliasHost:port (to 127.0.0.1:port) stands between
	// that client and every node, while brokers and the harness talk directly.
	AliasHost string
}

// ListenerAlias names the listener Options.AliasHost adds.
const ListenerAlias = "ALIAS"

// Node is one Kafka process.
type Node struct {
	ID         int32
	Controller bool
	Port       int // client (PLAINTEXT) port on 127.0.0.1
	CtrlPort   int
	dir        string
	props      string
	logPath    string

	// listeners maps client listener names (PLAINTEXT, SSL, ...) to ports on 127.0.0.1.
	listeners map[string]int
	// aliasHost is Options.AliasHost.
	aliasHost string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	// foreignPid is set for a node started by another process (a shared cluster).
	foreignPid int
}

// Addr is the node's client address.
func (n *Node) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.Port)) }

// ListenerAddr is the node's address for a client listener (ListenerPlaintext, ListenerSSL,
// ListenerSASLPlaintext, ListenerSASLSSL; case does not matter), or "" when the node has no
// such listener.
func (n *Node) ListenerAddr(name string) string {
	name = strings.ToUpper(name)
	p, ok := n.listeners[name]
	if !ok && name == ListenerPlaintext {
		p, ok = n.Port, n.Port != 0
	}
	if !ok {
		return ""
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
}

// AliasAddr is where the node advertises its ALIAS listener (Options.AliasHost), or "".
func (n *Node) AliasAddr() string {
	p, ok := n.listeners[ListenerAlias]
	if !ok || n.aliasHost == "" {
		return ""
	}
	return net.JoinHostPort(n.aliasHost, strconv.Itoa(p))
}

// AliasAddrs lists every node's AliasAddr, controller node first (empty without AliasHost).
func (c *Cluster) AliasAddrs() []string {
	var out []string
	for _, n := range c.Nodes {
		if a := n.AliasAddr(); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// LogPath is the file the node's stdout and stderr go to.
func (n *Node) LogPath() string { return n.logPath }

// Cluster is a running Kafka cluster.
type Cluster struct {
	Name      string
	ClusterID string
	Nodes     []*Node
	dir       string
	ownDir    bool
	libs      string
	// formatArgs are extra StorageTool format arguments (SCRAM credentials).
	formatArgs []string
}

// Addrs lists every node's client address, controller node first.
func (c *Cluster) Addrs() []string {
	out := make([]string, 0, len(c.Nodes))
	for _, n := range c.Nodes {
		out = append(out, n.Addr())
	}
	return out
}

// Bootstrap is the comma-joined client address list.
func (c *Cluster) Bootstrap() string { return strings.Join(c.Addrs(), ",") }

// ListenerAddrs lists every node's address for a client listener (see Node.ListenerAddr),
// controller node first; nodes without that listener are left out.
func (c *Cluster) ListenerAddrs(name string) []string {
	out := make([]string, 0, len(c.Nodes))
	for _, n := range c.Nodes {
		if a := n.ListenerAddr(name); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// ListenerBootstrap is the comma-joined address list of a client listener; "" when no node has
// it.
func (c *Cluster) ListenerBootstrap(name string) string {
	return strings.Join(c.ListenerAddrs(name), ",")
}

// Libs is the folder holding the Kafka jars (broker and Java client).
func (c *Cluster) Libs() string { return c.libs }

// Node returns the node with the given id, or nil.
func (c *Cluster) Node(id int32) *Node {
	for _, n := range c.Nodes {
		if n.ID == id {
			return n
		}
	}
	return nil
}

// Start formats and starts a cluster and waits until every broker is registered and
// answering with the cluster id it was formatted with.
func Start(ctx context.Context, o Options) (*Cluster, error) {
	if o.Brokers == 0 {
		o.Brokers = 2
	}
	if o.HeapMB == 0 {
		o.HeapMB = 512
	}
	if o.Name == "" {
		o.Name = "kafka"
	}
	if err := o.Secure.validate(); err != nil {
		return nil, err
	}
	libs, err := LibsDir()
	if err != nil {
		return nil, err
	}
	c := &Cluster{Name: o.Name, libs: libs}
	if o.Dir == "" {
		d, err := os.MkdirTemp("", "offsetgate-kafka-"+o.Name+"-")
		if err != nil {
			return nil, fmt.Errorf("testkafka: data folder: %w", err)
		}
		c.dir, c.ownDir = d, true
	} else {
		c.dir = o.Dir
		if err := os.MkdirAll(c.dir, 0o755); err != nil {
			return nil, fmt.Errorf("testkafka: data folder: %w", err)
		}
	}
	c.ClusterID = newClusterID()
	var sec *secureSetup
	if o.Secure != nil {
		if sec, err = o.Secure.setup(c.dir); err != nil {
			c.Stop()
			return nil, err
		}
		c.formatArgs = sec.formatArgs
	}
	names := clientListeners(o.Secure)

	nports := len(names)
	if o.AliasHost != "" {
		nports++
	}
	pp, err := freePorts(o.Brokers*nports + 1)
	if err != nil {
		c.Stop()
		return nil, err
	}
	ctrlPort := pp[len(pp)-1]
	for i := 0; i < o.Brokers; i++ {
		n := &Node{ID: int32(i + 1), Controller: i == 0, Port: pp[i], listeners: map[string]int{}, aliasHost: o.AliasHost}
		n.listeners[ListenerPlaintext] = n.Port
		for j, name := range names[1:] {
			n.listeners[name] = pp[o.Brokers*(j+1)+i]
		}
		if o.AliasHost != "" {
			n.listeners[ListenerAlias] = pp[o.Brokers*len(names)+i]
		}
		if n.Controller {
			n.CtrlPort = ctrlPort
		}
		n.dir = filepath.Join(c.dir, fmt.Sprintf("node-%d", n.ID))
		n.logPath = filepath.Join(n.dir, "server.log")
		if err := os.MkdirAll(filepath.Join(n.dir, "data"), 0o755); err != nil {
			c.Stop()
			return nil, fmt.Errorf("testkafka: node folder: %w", err)
		}
		n.props = filepath.Join(n.dir, "server.properties")
		if err := os.WriteFile(n.props, []byte(nodeConfig(n, ctrlPort, o, sec)), 0o644); err != nil {
			c.Stop()
			return nil, fmt.Errorf("testkafka: writing config: %w", err)
		}
		if err := os.WriteFile(filepath.Join(n.dir, "log4j2.properties"), []byte(log4jConfig), 0o644); err != nil {
			c.Stop()
			return nil, fmt.Errorf("testkafka: writing log config: %w", err)
		}
		c.Nodes = append(c.Nodes, n)
	}

	// Formatting is a JVM start per node; run them side by side.
	var wg sync.WaitGroup
	errs := make([]error, len(c.Nodes))
	for i, n := range c.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.format(ctx, n)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.Stop()
		return nil, err
	}
	for _, n := range c.Nodes {
		if err := c.startNode(n, o.HeapMB); err != nil {
			c.Stop()
			return nil, err
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 120*time.Second)
	defer cancel()
	if err := c.WaitReady(wctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// newClusterID makes a random cluster id. Like Kafka's Uuid.randomUuid it never starts with
// '-': the storage tool's argument parser would take such an id for an option.
func newClusterID() string {
	for {
		var b [16]byte
		_, _ = rand.Read(b[:])
		if id := base64.RawURLEncoding.EncodeToString(b[:]); id[0] != '-' {
			return id
		}
	}
}

// freePorts picks n consecutive free ports below the ephemeral range, so that no outgoing
// connection takes one while the JVM starts.
func freePorts(n int) ([]int, error) {
	p, err := ports.Block(n)
	if err != nil {
		return nil, fmt.Errorf("testkafka: %w", err)
	}
	out := make([]int, n)
	for i := range out {
		out[i] = p + i
	}
	return out, nil
}

func nodeConfig(n *Node, ctrlPort int, o Options, sec *secureSetup) string {
	rf := 2
	if o.Brokers < 2 {
		rf = 1
	}
	kv := [][2]string{
		{"node.id", strconv.Itoa(int(n.ID))},
		{"controller.quorum.voters", fmt.Sprintf("1@127.0.0.1:%d", ctrlPort)},
		{"controller.listener.names", "CONTROLLER"},
		{"inter.broker.listener.name", "PLAINTEXT"},
		{"listener.security.protocol.map", protocolMap(o.Secure, o.AliasHost != "")},
		{"log.dirs", filepath.Join(n.dir, "data")},
		{"auto.create.topics.enable", "false"},
		{"num.partitions", "1"},
		{"default.replication.factor", "1"},
		{"offsets.topic.replication.factor", strconv.Itoa(rf)},
		{"offsets.topic.num.partitions", "4"},
		{"transaction.state.log.replication.factor", strconv.Itoa(rf)},
		{"transaction.state.log.min.isr", "1"},
		{"transaction.state.log.num.partitions", "4"},
		{"share.coordinator.state.topic.replication.factor", strconv.Itoa(rf)},
		{"share.coordinator.state.topic.min.isr", "1"},
		{"min.insync.replicas", "1"},
		{"group.initial.rebalance.delay.ms", "0"},
		{"num.network.threads", "2"},
		{"num.io.threads", "2"},
		{"background.threads", "2"},
		{"num.recovery.threads.per.data.dir", "1"},
		{"log.cleaner.threads", "1"},
		{"log.cleaner.dedupe.buffer.size", "8388608"},
		{"log.cleaner.backoff.ms", "1000"},
		// Tests write records with old timestamps (mirrors carry the source's); time-based
		// retention would delete them at the broker's next check, at a random point of a run.
		{"log.retention.ms", "-1"},
		{"replica.lag.time.max.ms", "10000"},
		{"controlled.shutdown.enable", "true"},
	}
	var client, adv []string
	for _, name := range clientListeners(o.Secure) {
		client = append(client, fmt.Sprintf("%s://127.0.0.1:%d", name, n.listeners[name]))
	}
	adv = append(adv, client...)
	if o.AliasHost != "" {
		p := n.listeners[ListenerAlias]
		client = append(client, fmt.Sprintf("%s://127.0.0.1:%d", ListenerAlias, p))
		adv = append(adv, fmt.Sprintf("%s://%s", ListenerAlias, net.JoinHostPort(o.AliasHost, strconv.Itoa(p))))
	}
	listeners, advertised := strings.Join(client, ","), strings.Join(adv, ",")
	if n.Controller {
		kv = append(kv,
			[2]string{"process.roles", "broker,controller"},
			[2]string{"listeners", listeners + fmt.Sprintf(",CONTROLLER://127.0.0.1:%d", ctrlPort)},
			[2]string{"advertised.listeners", advertised},
		)
	} else {
		kv = append(kv,
			[2]string{"process.roles", "broker"},
			[2]string{"listeners", listeners},
			[2]string{"advertised.listeners", advertised},
		)
	}
	if sec != nil {
		kv = append(kv, sec.config...)
	}
	var b strings.Builder
	b.WriteString("# written by offsetgate's testkafka harness\n")
	seen := map[string]bool{}
	for k, v := range o.ExtraConfig {
		seen[k] = true
		fmt.Fprintf(&b, "%s=%s\n", k, v)
	}
	for _, p := range kv {
		if !seen[p[0]] {
			fmt.Fprintf(&b, "%s=%s\n", p[0], p[1])
		}
	}
	return b.String()
}

const log4jConfig = `status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = OUT
logger.started.name = kafka.server.KafkaRaftServer
logger.started.level = INFO
`

func (c *Cluster) java(args ...string) *exec.Cmd {
	java := "java"
	if h := os.Getenv("JAVA_HOME"); h != "" {
		java = filepath.Join(h, "bin", "java")
	}
	cmd := exec.Command(java, args...)
	// The JVM dies with the process that started it, whatever way that process ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	return cmd
}

func (c *Cluster) format(ctx context.Context, n *Node) error {
	cmd := c.java("-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", filepath.Join(c.libs, "*"),
		"-Dlog4j2.configurationFile="+filepath.Join(n.dir, "log4j2.properties"),
		"kafka.tools.StorageTool", "format", "-t", c.ClusterID, "-c", n.props, "--ignore-formatted")
	cmd.Args = append(cmd.Args, c.formatArgs...)
	out, err := runWithContext(ctx, cmd)
	if err != nil {
		return fmt.Errorf("testkafka: formatting %s node %d: %w\n%s", c.Name, n.ID, err, out)
	}
	return nil
}

func runWithContext(ctx context.Context, cmd *exec.Cmd) ([]byte, error) {
	var buf strings.Builder
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return []byte(buf.String()), err
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-done
		return []byte(buf.String()), ctx.Err()
	}
}

func (c *Cluster) startNode(n *Node, heapMB int) error {
	logf, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("testkafka: node log: %w", err)
	}
	cmd := c.java(
		fmt.Sprintf("-Xmx%dm", heapMB), fmt.Sprintf("-Xms%dm", heapMB/2),
		"-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:ParallelGCThreads=1", "-XX:ConcGCThreads=1",
		"-Djava.awt.headless=true",
		"-Dlog4j2.configurationFile="+filepath.Join(n.dir, "log4j2.properties"),
		"-cp", filepath.Join(c.libs, "*"),
		"kafka.Kafka", n.props)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("testkafka: starting %s node %d: %w", c.Name, n.ID, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(done)
	}()
	n.mu.Lock()
	n.cmd, n.done = cmd, done
	n.mu.Unlock()
	return nil
}

// Running reports whether the node's process is alive.
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.foreignPid != 0 {
		return syscall.Kill(n.foreignPid, 0) == nil
	}
	if n.done == nil {
		return false
	}
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

// Pid is the node's JVM process id, or 0 when it is not running.
func (n *Node) Pid() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.foreignPid != 0 {
		return n.foreignPid
	}
	if n.cmd == nil || n.cmd.Process == nil {
		return 0
	}
	return n.cmd.Process.Pid
}

// stop sends SIGTERM (a controlled shutdown) and SIGKILL after grace.
func (n *Node) stop(grace time.Duration) {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(grace):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Process.Kill()
		<-done
	}
}

// Kill ends a node at once, as a crash would.
func (n *Node) Kill() {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// StopNode stops one node cleanly.
func (c *Cluster) StopNode(id int32) {
	if n := c.Node(id); n != nil {
		n.stop(20 * time.Second)
	}
}

// RestartNode starts a stopped node again with the same data.
func (c *Cluster) RestartNode(ctx context.Context, id int32) error {
	n := c.Node(id)
	if n == nil {
		return fmt.Errorf("testkafka: no node %d", id)
	}
	if n.Running() {
		return fmt.Errorf("testkafka: node %d is running", id)
	}
	if err := c.startNode(n, 512); err != nil {
		return err
	}
	return c.WaitReady(ctx)
}

// Stop stops every node (broker-only nodes first, so the controller sees them leave) and
// removes the data folder when the harness made it.
func (c *Cluster) Stop() {
	for i := len(c.Nodes) - 1; i >= 0; i-- {
		c.Nodes[i].stop(15 * time.Second)
	}
	if c.ownDir {
		_ = os.RemoveAll(c.dir)
	}
}

// WaitReady waits until every node is registered in the cluster metadata, answers with the
// formatted cluster id, and the cluster can create a topic.
func (c *Cluster) WaitReady(ctx context.Context) error {
	var last error
	for {
		for _, n := range c.Nodes {
			if !n.Running() {
				return fmt.Errorf("testkafka: %s node %d exited during start; log %s:\n%s",
					c.Name, n.ID, n.logPath, tail(n.logPath, 30))
			}
		}
		last = c.checkReady(ctx)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testkafka: %s not ready: %v (last check: %w)", c.Name, ctx.Err(), last)
		case <-time.After(300 * time.Millisecond):
		}
	}
}

func (c *Cluster) checkReady(ctx context.Context) error {
	for _, n := range c.Nodes {
		cl, err := kgo.NewClient(kgo.SeedBrokers(n.Addr()), kgo.RetryTimeout(time.Second),
			kgo.RequestRetries(0), kgo.DialTimeout(time.Second))
		if err != nil {
			return err
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		req := kmsg.NewPtrMetadataRequest()
		resp, err := req.RequestWith(rctx, cl)
		cancel()
		cl.Close()
		if err != nil {
			return fmt.Errorf("node %d: %w", n.ID, err)
		}
		if resp.ClusterID == nil || *resp.ClusterID != c.ClusterID {
			got := "<nil>"
			if resp.ClusterID != nil {
				got = *resp.ClusterID
			}
			return fmt.Errorf("node %d answers for cluster %q, harness formatted %q", n.ID, got, c.ClusterID)
		}
		if len(resp.Brokers) != len(c.Nodes) {
			return fmt.Errorf("node %d sees %d of %d brokers", n.ID, len(resp.Brokers), len(c.Nodes))
		}
	}
	return nil
}

func tail(path string, lines int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var ring []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		ring = append(ring, sc.Text())
		if len(ring) > lines {
			ring = ring[1:]
		}
	}
	return strings.Join(ring, "\n")
}
