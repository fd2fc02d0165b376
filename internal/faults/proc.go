package faults

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one of the campaign's processes (offsetgate serve, offsetgate mirror): started,
// killed, stopped and continued by the campaign, its output appended to one log file across
// restarts.
type proc struct {
	name string
	bin  string
	args []string
	log  string
	// metrics is the process's Prometheus endpoint (go_goroutines for the leak checks).
	metrics string

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	exit    error
	paused  bool
	starts  int
	started time.Time
}

func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		select {
		case <-p.done:
		default:
			return fmt.Errorf("%s is running", p.name)
		}
	}
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	p.starts++
	fmt.Fprintf(f, "\n==== faults: %s start %d at %s\n", p.name, p.starts, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = f, f
	// Never outlive the campaign, whatever way it ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("starting %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.exit, p.paused, p.started = cmd, done, nil, false, time.Now()
	go func() {
		err := cmd.Wait()
		f.Close()
		p.mu.Lock()
		p.exit = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// running reports whether the process is alive (a stopped process is alive).
func (p *proc) running() bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// exited says how the last run ended, or "" while it runs.
func (p *proc) exited() string {
	if p.running() {
		return ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exit == nil {
		return "exited with status 0"
	}
	return p.exit.Error()
}

func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

func (p *proc) signal(sig syscall.Signal) {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		_ = cmd.Process.Signal(sig)
	}
}

// kill ends the process with SIGKILL (continued first, so that nothing waits on a stopped
// process) and waits for it.
func (p *proc) kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Process.Signal(syscall.SIGCONT)
	<-done
}

// terminate asks the process to end (SIGTERM) and kills it after grace.
func (p *proc) terminate(grace time.Duration) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(grace):
		p.kill()
	}
}

func (p *proc) pause() {
	p.signal(syscall.SIGSTOP)
	p.mu.Lock()
	p.paused = true
	p.mu.Unlock()
}

func (p *proc) resume() {
	p.signal(syscall.SIGCONT)
	p.mu.Lock()
	p.paused = false
	p.mu.Unlock()
}

// life is the number of the current run (1 for the first start).
func (p *proc) life() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.starts
}

// fds counts the process's open file descriptors and, among them, its sockets.
func fds(pid int) (all, sockets int, err error) {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, 0, err
	}
	for _, e := range ents {
		all++
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && strings.HasPrefix(l, "socket:") {
			sockets++
		}
	}
	return all, sockets, nil
}
