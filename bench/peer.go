package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"offsetgate/internal/ports"
)

// PeerVersion is the grepplabs/kafka-proxy release the benchmark compares against (the module
// scripts/bench installs into the cache; docs/benchmarks.md).
const PeerVersion = "v0.4.3"

// PeerArgs are kafka-proxy's settings besides the broker mappings: as its README suggests for
// throughput, 32 KiB copy buffers in each direction, and the same 4 MiB kernel send buffers
// offsetgate asks for (limits.socket_send_bytes), on both of its sides. Its HTTP endpoint is
// off (the relay and offsetgate are not scraped either while measured).
var PeerArgs = []string{
	"--proxy-request-buffer-size", "32768",
	"--proxy-response-buffer-size", "32768",
	"--proxy-listener-write-buffer-size", "4194304",
	"--kafka-connection-write-buffer-size", "4194304",
	"--http-disable",
	"--log-level", "warning",
}

// peerProc is a running kafka-proxy.
type peerProc struct {
	cmd    *exec.Cmd
	listen []string // one listener per broker, in the order of the brokers given
	done   chan struct{}
}

// startPeer runs `kafka-proxy server` in front of brokers, a loopback listener of its own per
// broker (static mappings: every broker is known up front, so its dynamic listeners never
// start), and waits until every listener accepts.
func startPeer(ctx context.Context, bin string, brokers []string, logDir string) (*peerProc, error) {
	args := []string{"server"}
	p := &peerProc{done: make(chan struct{})}
	for _, b := range brokers {
		port, err := ports.One()
		if err != nil {
			return nil, err
		}
		l := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		p.listen = append(p.listen, l)
		args = append(args, "--bootstrap-server-mapping", b+","+l)
	}
	args = append(args, PeerArgs...)
	logf, err := os.Create(filepath.Join(logDir, "kafka-proxy.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child holds its own descriptor
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting kafka-proxy %s: %w", bin, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for _, l := range p.listen {
		for {
			c, err := net.DialTimeout("tcp", l, time.Second)
			if err == nil {
				c.Close()
				break
			}
			select {
			case <-p.done:
				return nil, fmt.Errorf("kafka-proxy exited at start (%s): %s", p.cmd.ProcessState, tailFile(logf.Name(), 20))
			case <-ctx.Done():
				p.stop()
				return nil, ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				p.stop()
				return nil, fmt.Errorf("kafka-proxy: %s does not accept after 30s: %s", l, tailFile(logf.Name(), 20))
			}
		}
	}
	return p, nil
}

func (p *peerProc) pid() int { return p.cmd.Process.Pid }

func (p *peerProc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}
