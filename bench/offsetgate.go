package bench

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"offsetgate/internal/ports"
	"offsetgate/internal/testcerts"
	"offsetgate/internal/testkafka"
)

// ogProc is a running `offsetgate serve` process.
type ogProc struct {
	cmd     *exec.Cmd
	listen  string
	admin   string
	logPath string
	done    chan struct{}
}

// startOffsetgate runs `offsetgate serve` (gnet transport) in front of dest on loopback ports
// it picks, and waits until it is ready and every broker listener accepts.
func startOffsetgate(ctx context.Context, bin string, dest *testkafka.Cluster, logDir, name string) (*ogProc, error) {
	return startOffsetgateWith(ctx, bin, dest, logDir, name, "")
}

// startOffsetgateWith is startOffsetgate with a configuration file (TLS, approved mirroring
// clients); its transport is then what the file implies.
func startOffsetgateWith(ctx context.Context, bin string, dest *testkafka.Cluster, logDir, name, configPath string) (*ogProc, error) {
	if configPath != "" {
		return startOffsetgateArgs(ctx, bin, dest, logDir, name, "--config", configPath)
	}
	return startOffsetgateArgs(ctx, bin, dest, logDir, name, "--transport", "gnet")
}

// startOffsetgateArgs is startOffsetgate with further `offsetgate serve` flags.
func startOffsetgateArgs(ctx context.Context, bin string, dest *testkafka.Cluster, logDir, name string, extra ...string) (*ogProc, error) {
	base, err := freeBase(dest)
	if err != nil {
		return nil, err
	}
	admin, err := ports.One()
	if err != nil {
		return nil, err
	}
	p := &ogProc{
		listen:  net.JoinHostPort("127.0.0.1", strconv.Itoa(base)),
		admin:   net.JoinHostPort("127.0.0.1", strconv.Itoa(admin)),
		logPath: filepath.Join(logDir, name+".log"),
		done:    make(chan struct{}),
	}
	logf, err := os.Create(p.logPath)
	if err != nil {
		return nil, err
	}
	args := []string{"serve", "--bootstrap", dest.Bootstrap(), "--listen", p.listen,
		"--admin", p.admin, "--log-format", "json", "--log-level", logLevel()}
	p.cmd = exec.Command(bin, append(args, extra...)...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	go func() { _ = p.cmd.Wait(); logf.Close(); close(p.done) }()

	deadline := time.Now().Add(30 * time.Second)
	for {
		err := p.ready(dest)
		if err == nil {
			return p, nil
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("offsetgate exited during start; log %s:\n%s", p.logPath, tailFile(p.logPath, 20))
		case <-ctx.Done():
			p.stop()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("offsetgate not ready in 30s: %v; log %s:\n%s", err, p.logPath, tailFile(p.logPath, 20))
		}
	}
}

func (p *ogProc) ready(dest *testkafka.Cluster) error {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + p.admin + "/readyz")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("readyz: %s", resp.Status)
	}
	for _, n := range dest.Nodes {
		a := net.JoinHostPort("127.0.0.1", strconv.Itoa(p.brokerPort(n.ID)))
		conn, err := net.DialTimeout("tcp", a, time.Second)
		if err != nil {
			return fmt.Errorf("broker listener for node %d: %w", n.ID, err)
		}
		conn.Close()
	}
	return nil
}

func (p *ogProc) brokerPort(node int32) int {
	_, ps, _ := net.SplitHostPort(p.listen)
	base, _ := strconv.Atoi(ps)
	return base + 1 + int(node)
}

func (p *ogProc) pid() int { return p.cmd.Process.Pid }

// metricsText reads a /metrics URL: the exposition text, whole (tens of KiB), for metric,
// counters, readStages and the partitions bench's scrape to pick from.
func metricsText(url string) (string, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", url, resp.Status)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("%s: %w", url, err)
	}
	return string(b), nil
}

// adminMetrics is the /metrics URL of an admin address.
func adminMetrics(admin string) string { return "http://" + admin + "/metrics" }

// metric reads one unlabelled sample from the admin /metrics endpoint.
func (p *ogProc) metric(name string) (float64, error) {
	text, err := metricsText(adminMetrics(p.admin))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(text) {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("metric %s not found", name)
}

// counters reads offsetgate's own non-zero samples from /metrics (histogram buckets left out)
// and a few of the Go runtime's, by their exposition names.
func (p *ogProc) counters() (map[string]float64, error) {
	text, err := metricsText(adminMetrics(p.admin))
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for line := range strings.Lines(text) {
		line = strings.TrimSuffix(line, "\n")
		keep := strings.HasPrefix(line, "offsetgate_") && !strings.Contains(line, "_bucket{")
		for _, k := range []string{"go_goroutines ", "go_memstats_heap_inuse_bytes ", "process_resident_memory_bytes ", "go_gc_duration_seconds_count "} {
			keep = keep || strings.HasPrefix(line, k)
		}
		if !keep {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil && v != 0 {
			out[line[:i]] = v
		}
	}
	return out, nil
}

// stop asks offsetgate to drain and stop (SIGTERM), and kills it after 20 s.
func (p *ogProc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// freeBase finds a port p such that p and the broker ports p+1+id of dest's nodes are free on
// loopback.
func freeBase(dest *testkafka.Cluster) (int, error) {
	maxID := int32(0)
	for _, n := range dest.Nodes {
		maxID = max(maxID, n.ID)
	}
	return ports.Block(int(maxID) + 2)
}

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// logLevel is the level of the offsetgate processes a benchmark starts: warn, or
// OGBENCH_LOG_LEVEL.
func logLevel() string {
	if l := os.Getenv("OGBENCH_LOG_LEVEL"); l != "" {
		return l
	}
	return "warn"
}

// mirrorIdentity is the client certificate a mirroring run presents to offsetgate.
type mirrorIdentity struct {
	flags []string    // the identity flags of `offsetgate mirror`
	tls   *tls.Config // the same identity for an in-process client
}

// startMirroringServe runs `offsetgate serve` with a TLS listener whose configuration approves
// one mirroring client, identified by its certificate, for the topics matching glob; it
// returns the process and that client's identity. The certificates go to a folder in logDir.
func startMirroringServe(ctx context.Context, bin string, dest *testkafka.Cluster, logDir, name, glob string) (*ogProc, mirrorIdentity, error) {
	return startMirroringServeWith(ctx, bin, dest, logDir, name, glob, "")
}

// startMirroringServeWith is startMirroringServe with more lines of configuration.
func startMirroringServeWith(ctx context.Context, bin string, dest *testkafka.Cluster, logDir, name, glob, extra string) (*ogProc, mirrorIdentity, error) {
	dir, err := os.MkdirTemp(logDir, "og-")
	if err != nil {
		return nil, mirrorIdentity{}, err
	}
	set, err := testcerts.New(dir)
	if err != nil {
		return nil, mirrorIdentity{}, err
	}
	kp, err := set.Client("ogbench-mirror", testcerts.SANs{URIs: []string{"spiffe://ogbench/mirror"}})
	if err != nil {
		return nil, mirrorIdentity{}, err
	}
	conf := filepath.Join(dir, "offsetgate.yaml")
	yaml := fmt.Sprintf(`tls:
  listener: {cert_file: %q, key_file: %q, client_ca_file: %q, client_auth: request}
mirroring:
  clients:
    - {name: bench, tls_san: "URI:spiffe://ogbench/mirror", topics: [%q]}
%s`, set.Server.CertFile, set.Server.KeyFile, set.CA.CertFile, glob, extra)
	if err := os.WriteFile(conf, []byte(yaml), 0o600); err != nil {
		return nil, mirrorIdentity{}, err
	}
	og, err := startOffsetgateWith(ctx, bin, dest, logDir, name, conf)
	if err != nil {
		return nil, mirrorIdentity{}, err
	}
	return og, mirrorIdentity{
		flags: []string{"--tls-ca", set.CA.CertFile, "--tls-cert", kp.CertFile, "--tls-key", kp.KeyFile},
		tls:   set.ClientTLS(kp),
	}, nil
}
