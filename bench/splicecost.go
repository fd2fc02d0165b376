package bench

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// The cost of a TCP hop that copies against one that splices, without Kafka: the floor of
// "CPU per GB within 1.3x of the relay's" for a proxy that reads the bytes it forwards. A
// source writes into a relay process over loopback, the relay forwards to a sink, and the relay
// process's own CPU (getrusage) is what is compared: io.Copy between two TCP connections
// (splice(2) on Linux: socket to pipe to socket, what the pass-through benchmark's relay does)
// against a read/write loop through a buffer in user space (what any proxy that looks at the
// bytes pays at least). Modes run alternately, rounds times each.

// spliceCostResult is one measurement.
type spliceCostResult struct {
	Mode     string  `json:"mode"`
	MBps     float64 `json:"mb_per_s"`
	CPUPerGB float64 `json:"relay_cpu_s_per_gb"`
}

// SpliceCostMain runs `ogbench splicecost`: the parent, or with --child MODE the relay.
func SpliceCostMain(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("splicecost", flag.ContinueOnError)
	mib := fs.Int("mib", 4096, "MiB forwarded per measurement")
	rounds := fs.Int("rounds", 3, "measurements of each mode, alternating; medians reported")
	buf := fs.Int("buffer", 256<<10, "the copying relay's buffer (bytes)")
	outPath := fs.String("out", "", "JSON report (optional)")
	child := fs.String("child", "", "internal: run as the relay in this mode (splice or copy) toward --sink")
	sink := fs.String("sink", "", "internal: the sink's address")
	if err := fs.Parse(args); err != nil {
		return err
	}
	total := int64(*mib) << 20
	if *child != "" {
		return spliceCostRelay(*child, *sink, *buf, total, out)
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	var all []spliceCostResult
	for r := 0; r < *rounds; r++ {
		for _, mode := range []string{"splice", "copy"} {
			res, err := spliceCostOnce(exe, mode, *buf, *mib, total)
			if err != nil {
				return fmt.Errorf("%s, round %d: %w", mode, r+1, err)
			}
			fmt.Fprintf(out, "%s  round %d: %7.0f MB/s, relay CPU %.3f s/GB\n", mode, r+1, res.MBps, res.CPUPerGB)
			all = append(all, res)
		}
	}
	med := func(mode string, f func(spliceCostResult) float64) float64 {
		var v []float64
		for _, r := range all {
			if r.Mode == mode {
				v = append(v, f(r))
			}
		}
		return median(v)
	}
	mbps := func(r spliceCostResult) float64 { return r.MBps }
	cpu := func(r spliceCostResult) float64 { return r.CPUPerGB }
	fmt.Fprintf(out, "medians: splice %.0f MB/s, %.3f s/GB; copy (%d KiB buffer) %.0f MB/s, %.3f s/GB; copy/splice CPU %.2fx, throughput %.0f%%\n",
		med("splice", mbps), med("splice", cpu), *buf>>10, med("copy", mbps), med("copy", cpu),
		med("copy", cpu)/med("splice", cpu), 100*med("copy", mbps)/med("splice", mbps))
	if *outPath != "" {
		b, _ := json.MarshalIndent(map[string]any{"tool": "ogbench splicecost", "mib": *mib, "buffer": *buf, "results": all}, "", "  ")
		return os.WriteFile(*outPath, b, 0o644)
	}
	return nil
}

// spliceCostOnce runs one measurement: sink here, relay in a child process, source here.
func spliceCostOnce(exe, mode string, buf, mib int, total int64) (spliceCostResult, error) {
	lb, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return spliceCostResult{}, err
	}
	defer lb.Close()
	sunk := make(chan error, 1)
	go func() {
		c, err := lb.Accept()
		if err != nil {
			sunk <- err
			return
		}
		_, err = io.Copy(io.Discard, struct{ io.Reader }{c})
		c.Close()
		sunk <- err
	}()
	cmd := exec.Command(exe, "splicecost", "--child", mode, "--sink", lb.Addr().String(),
		"--buffer", fmt.Sprint(buf), "--mib", fmt.Sprint(mib))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return spliceCostResult{}, err
	}
	if err := cmd.Start(); err != nil {
		return spliceCostResult{}, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	dec := json.NewDecoder(stdout)
	var hello struct{ Addr string }
	if err := dec.Decode(&hello); err != nil {
		return spliceCostResult{}, fmt.Errorf("relay address: %w", err)
	}
	c, err := net.Dial("tcp", hello.Addr)
	if err != nil {
		return spliceCostResult{}, err
	}
	chunk := make([]byte, 1<<20)
	for sent := int64(0); sent < total; sent += int64(len(chunk)) {
		if _, err := c.Write(chunk); err != nil {
			c.Close()
			return spliceCostResult{}, err
		}
	}
	c.Close()
	var res spliceCostResult
	if err := dec.Decode(&res); err != nil {
		return res, fmt.Errorf("relay result: %w", err)
	}
	if err := <-sunk; err != nil {
		return res, err
	}
	return res, nil
}

// spliceCostRelay is the child: it accepts the source, dials the sink, forwards everything
// and prints its throughput and its own CPU per GB.
func spliceCostRelay(mode, sink string, buf int, total int64, out io.Writer) error {
	if mode != "splice" && mode != "copy" {
		return fmt.Errorf("mode %q: splice or copy", mode)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer l.Close()
	enc := json.NewEncoder(out)
	if err := enc.Encode(map[string]string{"Addr": l.Addr().String()}); err != nil {
		return err
	}
	a, err := l.Accept()
	if err != nil {
		return err
	}
	defer a.Close()
	b, err := net.Dial("tcp", sink)
	if err != nil {
		return err
	}
	defer b.Close()
	cpu0, t0 := selfCPU(), time.Now()
	var n int64
	if mode == "splice" {
		n, err = io.Copy(b, a) // *TCPConn to *TCPConn: splice(2) on Linux
	} else {
		// Wrapped so that neither side's ReadFrom/WriteTo (splice) is found.
		n, err = io.CopyBuffer(struct{ io.Writer }{b}, struct{ io.Reader }{a}, make([]byte, buf))
	}
	took, cpu := time.Since(t0), selfCPU()-cpu0
	if err != nil {
		return err
	}
	if n != total {
		return fmt.Errorf("forwarded %d bytes, want %d", n, total)
	}
	return enc.Encode(spliceCostResult{Mode: mode, MBps: float64(n) / took.Seconds() / 1e6, CPUPerGB: cpu.Seconds() / (float64(n) / 1e9)})
}

// selfCPU is the process's user and system CPU so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
