package faults

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"offsetgate/mirror"
)

// check runs the checks after a recovery and adds what held and what failed to o.
func (c *campaign) check(ctx context.Context, o *Outcome) {
	e := c.e
	tallies := []*tally{c.direct, c.group, c.txn}
	if c.compact != nil {
		tallies = append(tallies, c.compact)
	}
	for _, t := range tallies {
		if v, n := t.take(); n > 0 {
			o.Failures = append(o.Failures, fmt.Sprintf("%d records not read exactly once in source order, first: %s", n, strings.Join(v[:min(len(v), 3)], "; ")))
		} else {
			o.Held = append(o.Held, t.name+" exactly once in order")
		}
	}

	vctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for _, topic := range []string{e.topic, e.txnTopic} {
		if bad := c.verify(vctx, topic); bad != "" {
			o.Failures = append(o.Failures, bad)
		} else {
			o.Held = append(o.Held, "verify "+topic+" identical, nothing lost at the head")
		}
	}
	if e.compactTopic != "" {
		c.verifyCompacted(ctx, o)
	}

	code, out, errOut := e.command(vctx, "status", "--proxy", e.ogs[0].listen, "--source", e.src.Bootstrap(), "--json",
		"--tls-ca", e.certs.CA.CertFile, "--tls-cert", e.mirror.CertFile, "--tls-key", e.mirror.KeyFile)
	var st []mirror.PartitionStatus
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil {
		o.Failures = append(o.Failures, fmt.Sprintf("offsetgate status exit %d: %v %s", code, err, strings.TrimSpace(errOut)))
	} else {
		halted := false
		for _, p := range st {
			if p.Topic != e.topic && p.Topic != e.txnTopic && p.Topic != e.compactTopic {
				continue
			}
			if p.Halted != "" {
				halted = true
				o.Failures = append(o.Failures, fmt.Sprintf("%s[%d] halted: %s", p.Topic, p.Partition, p.Halted))
			}
			if p.HeadLost != nil && *p.HeadLost > 0 {
				o.Failures = append(o.Failures, fmt.Sprintf("status: %s[%d] %s", p.Topic, p.Partition, p.State()))
			}
		}
		if !halted {
			o.Held = append(o.Held, "no partition halted")
		}
	}

	stopped := 0
	for _, mr := range e.mrs {
		m, err := scrape(ctx, mr.metrics)
		if err != nil {
			stopped++
			o.Failures = append(o.Failures, mr.name+"'s metrics: "+err.Error())
			continue
		}
		for k, v := range m {
			if strings.HasPrefix(k, "offsetgate_mirror_client_stopped{") && v != 0 {
				stopped++
				o.Failures = append(o.Failures, mr.name+" stopped "+k)
			}
		}
	}
	if stopped == 0 {
		o.Held = append(o.Held, "the mirror stopped no partition")
	}
}

// verify runs `offsetgate verify` on a topic and says what differs (empty: identical over the
// range both sides hold, nothing lost at the head).
func (c *campaign) verify(ctx context.Context, topic string) string {
	e := c.e
	code, out, errOut := e.command(ctx, "verify", "--source", e.src.Bootstrap(), "--proxy", e.ogs[0].listen, "--topic", topic,
		"--json", "--tls-ca", e.certs.CA.CertFile)
	var lines []struct {
		Partition      int32  `json:"partition"`
		Batches        int64  `json:"batches"`
		SourceHeadLost int64  `json:"source_head_lost"`
		Lost           string `json:"lost"`
		Difference     string `json:"difference"`
		Error          string `json:"error"`
	}
	jerr := json.Unmarshal([]byte(out), &lines)
	if code == 0 && jerr == nil {
		return ""
	}
	var bad []string
	for _, l := range lines {
		if l.Error != "" || l.Difference != "" || l.Lost != "" {
			bad = append(bad, fmt.Sprintf("[%d] %s%s%s", l.Partition, l.Error, l.Difference, l.Lost))
		}
	}
	return fmt.Sprintf("offsetgate verify %s exit %d: %s %s", topic, code, strings.Join(bad, "; "), strings.TrimSpace(errOut))
}

// verifyCompacted checks the compacted topic. The source's cleaner rewrites and removes
// mirrored batches all the time, and the mirror records what it changed only when it sends
// the partition again (every compactResync), so between a cleaning and the next resend the
// two sides differ by design. The topic's writes pause and verify runs until it finds the
// two identical: once the cleaner has nothing dirty left and a resend has followed, they
// must be. Never identical within compactSettle is a failure.
func (c *campaign) verifyCompacted(ctx context.Context, o *Outcome) {
	c.compactPaused.Store(true)
	defer c.compactPaused.Store(false)
	start := time.Now()
	deadline := start.Add(compactSettle)
	tries := 0
	for {
		tries++
		vctx, cancel := context.WithTimeout(ctx, time.Minute)
		bad := c.verify(vctx, c.e.compactTopic)
		cancel()
		if bad == "" {
			o.Held = append(o.Held, fmt.Sprintf("verify %s identical once the mirror recorded the source's cleaning", c.e.compactTopic))
			c.e.logf("%s identical after %s (%d verify runs)", c.e.compactTopic, time.Since(start).Round(time.Second), tries)
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			o.Failures = append(o.Failures, fmt.Sprintf("not identical %s after its writes paused (%d verify runs), last: %s",
				compactSettle, tries, bad))
			return
		}
		if err := sleep(ctx, 3*time.Second); err != nil {
			return
		}
	}
}

// compactSettle bounds how long the compacted topic may take to be found identical once its
// writes paused: the cleaner's backoff (15 s), its pass, and two resends (compactResync).
const compactSettle = 90 * time.Second

// command runs the offsetgate binary and returns its exit code and output.
func (e *env) command(ctx context.Context, args ...string) (int, string, string) {
	cmd := exec.CommandContext(ctx, e.cfg.Bin, args...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return -1, "", err.Error()
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

// scrape reads a Prometheus text endpoint: series (name and labels as written) to value.
func scrape(ctx context.Context, url string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if l == "" || l[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(l[i+1:], 64)
		if err != nil {
			continue
		}
		out[l[:i]] = v
	}
	return out, sc.Err()
}

// sample is one look at a process.
type sample struct {
	Goroutines, FDs, Sockets int
}

func (s sample) String() string {
	return fmt.Sprintf("%d goroutines, %d descriptors (%d sockets)", s.Goroutines, s.FDs, s.Sockets)
}

// leakSeries is one process life's samples: the first after it started (the baseline), the
// largest and the last.
type leakSeries struct {
	Name                string
	Life                int
	Baseline, Max, Last sample
	Samples             int
	BaselineAt          string
}

func (c *campaign) look(ctx context.Context, p *proc) (sample, error) {
	pid := p.pid()
	if pid == 0 || !p.running() {
		return sample{}, fmt.Errorf("%s is not running", p.name)
	}
	all, socks, err := fds(pid)
	if err != nil {
		return sample{}, err
	}
	m, err := scrape(ctx, p.metrics)
	if err != nil {
		return sample{}, err
	}
	g, ok := m["go_goroutines"]
	if !ok {
		return sample{}, fmt.Errorf("%s exports no go_goroutines", p.name)
	}
	return sample{Goroutines: int(g), FDs: all, Sockets: socks}, nil
}

// over reports whether s is beyond what the baseline allows: half as much again, and at least
// a margin more (connections come and go with the clients' own retries).
func over(s, base sample) bool {
	return s.Goroutines > base.Goroutines+max(base.Goroutines/2, 100) ||
		s.FDs > base.FDs+max(base.FDs/2, 40) ||
		s.Sockets > base.Sockets+max(base.Sockets/2, 30)
}

// warmBaseline raises each process's baseline to the most it holds over 30 s of traffic
// after the first look: the clients' connections through offsetgate and its connections to
// the destination (one set per client connection, per broker) are made as the traffic needs
// them, so a first look taken early is below the steady state, and the first fault's look
// would be taken for a leak.
func (c *campaign) warmBaseline(ctx context.Context) {
	for i := 0; i < 6; i++ {
		if sleep(ctx, 5*time.Second) != nil {
			return
		}
		for _, p := range c.e.procs() {
			ls := c.rep.Leaks[fmt.Sprintf("%s#%d", p.name, p.life())]
			if ls == nil {
				continue
			}
			if s, err := c.look(ctx, p); err == nil {
				ls.Baseline = sample{max(ls.Baseline.Goroutines, s.Goroutines), max(ls.Baseline.FDs, s.FDs), max(ls.Baseline.Sockets, s.Sockets)}
				ls.Max = sample{max(ls.Max.Goroutines, s.Goroutines), max(ls.Max.FDs, s.FDs), max(ls.Max.Sockets, s.Sockets)}
				ls.Samples++
				ls.Last = s
			}
		}
	}
}

// sampleLeaks looks at both processes. A process's first look in a life is its baseline; a
// survivor (a process that lived through the fault) above its baseline is looked at again for
// 30 s, and what it still holds then is reported as a leak.
func (c *campaign) sampleLeaks(ctx context.Context, label string, survivors []*proc) []string {
	var leaks []string
	for _, p := range c.e.procs() {
		s, err := c.look(ctx, p)
		if err != nil {
			c.e.logf("leak check of %s: %v", p.name, err)
			continue
		}
		key := fmt.Sprintf("%s#%d", p.name, p.life())
		ls := c.rep.Leaks[key]
		if ls == nil {
			c.rep.Leaks[key] = &leakSeries{Name: p.name, Life: p.life(), Baseline: s, Max: s, Last: s, Samples: 1, BaselineAt: label}
			continue
		}
		survivor := false
		for _, q := range survivors {
			survivor = survivor || q == p
		}
		base, at := ls.Baseline, ls.BaselineAt
		if shared, ok := c.sharedBaseline(p); ok {
			base = sample{max(base.Goroutines, shared.Goroutines), max(base.FDs, shared.FDs), max(base.Sockets, shared.Sockets)}
			at += "; every instance's first baseline together, since clients move between instances"
		}
		if survivor && over(s, base) {
			for i := 0; i < 6 && over(s, base); i++ {
				if sleep(ctx, 5*time.Second) != nil {
					break
				}
				if s2, err := c.look(ctx, p); err == nil {
					s = s2
				}
			}
			if over(s, base) {
				leaks = append(leaks, fmt.Sprintf("%s holds %s, %s at its baseline (%s)", p.name, s, base, at))
			}
		}
		ls.Samples++
		ls.Last = s
		ls.Max = sample{max(ls.Max.Goroutines, s.Goroutines), max(ls.Max.FDs, s.FDs), max(ls.Max.Sockets, s.Sockets)}
	}
	return leaks
}

// sharedBaseline is what an offsetgate instance may hold when the mirrors are given every
// instance (Config.MirrorsAll): the clients move between instances as faults hit them, so an
// instance restarted while its mirror wrote through another one has a first look without that
// mirror, and holds it legitimately once the mirror comes back to it. Its allowance is then the
// first baselines of all instances together: a leak still shows, as growth beyond what every
// client holds at once.
func (c *campaign) sharedBaseline(p *proc) (sample, bool) {
	if !c.e.cfg.MirrorsAll || len(c.e.ogs) < 2 {
		return sample{}, false
	}
	var sum sample
	mine := false
	for _, o := range c.e.ogs {
		mine = mine || o.proc == p
		first := c.rep.Leaks[fmt.Sprintf("%s#%d", o.proc.name, 1)]
		if first == nil {
			return sample{}, false
		}
		sum.Goroutines += first.Baseline.Goroutines
		sum.FDs += first.Baseline.FDs
		sum.Sockets += first.Baseline.Sockets
	}
	return sum, mine
}
