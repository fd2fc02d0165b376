package bench

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// RelayMain is the relay process: one loopback listener per target, a goroutine pair per
// connection copying bytes both ways with io.Copy, no protocol knowledge at all. It prints one
// JSON line mapping each target to its listener address, then serves until it is killed.
//
// It is the baseline for "any TCP hop costs this much": between two *net.TCPConn, io.Copy
// uses splice(2) on Linux, so the payload never enters the relay's memory.
func RelayMain(targets []string, out io.Writer) error {
	if len(targets) == 0 {
		return errors.New("relay: no target")
	}
	m := map[string]string{}
	var ls []net.Listener
	for _, t := range targets {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("relay: listen: %w", err)
		}
		ls = append(ls, l)
		m[t] = l.Addr().String()
	}
	b, _ := json.Marshal(m)
	if _, err := fmt.Fprintf(out, "%s\n", b); err != nil {
		return err
	}
	errc := make(chan error, len(ls))
	for i, l := range ls {
		go func() { errc <- relayAccept(l, targets[i]) }()
	}
	return <-errc
}

func relayAccept(l net.Listener, target string) error {
	for {
		c, err := l.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return err
		}
		go relayConn(c, target)
	}
}

func relayConn(c net.Conn, target string) {
	u, err := net.DialTimeout("tcp", target, 10*time.Second)
	if err != nil {
		c.Close()
		return
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(u, c)
		_ = u.(*net.TCPConn).CloseWrite()
	}()
	_, _ = io.Copy(c, u)
	_ = c.(*net.TCPConn).CloseWrite()
	wg.Wait()
	c.Close()
	u.Close()
}

// relayProc is a running relay process.
type relayProc struct {
	cmd  *exec.Cmd
	addr map[string]string // broker address -> relay listener address
	done chan struct{}
}

// startRelay starts the relay process made by mk for the given broker addresses, its stderr
// going to relay.log in logDir, and reads its address map.
func startRelay(mk func(targets []string) *exec.Cmd, targets []string, logDir string) (*relayProc, error) {
	cmd := mk(targets)
	if cmd.Stderr == nil {
		logf, err := os.Create(filepath.Join(logDir, "relay.log"))
		if err != nil {
			return nil, err
		}
		defer logf.Close() // the child holds its own descriptor
		cmd.Stderr = logf
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the relay: %w", err)
	}
	p := &relayProc{cmd: cmd, done: make(chan struct{})}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() { _ = cmd.Wait(); close(p.done) }()
	select {
	case line, ok := <-lines:
		if ok {
			if err := json.Unmarshal([]byte(line), &p.addr); err == nil && len(p.addr) == len(targets) {
				return p, nil
			}
		}
		p.stop()
		return nil, fmt.Errorf("relay: unexpected first line %q", line)
	case <-time.After(30 * time.Second):
		p.stop()
		return nil, errors.New("relay: no address map within 30s")
	}
}

func (p *relayProc) pid() int { return p.cmd.Process.Pid }

func (p *relayProc) stop() {
	_ = p.cmd.Process.Kill()
	<-p.done
}
