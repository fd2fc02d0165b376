package bench

import (
	"bufio"
	"bytes"
	"debug/buildinfo"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"

	"offsetgate/internal/procstat"
)

// cpuOf sums procstat.CPUSeconds over pids, skipping zero pids and processes that cannot be
// read.
func cpuOf(pids ...int) float64 {
	var s float64
	for _, p := range pids {
		if p <= 0 {
			continue
		}
		if v, err := procstat.CPUSeconds(p); err == nil {
			s += v
		}
	}
	return s
}

// machineCPU returns the machine's busy CPU seconds (user, nice, system, irq, softirq) and
// steal seconds since boot, from /proc/stat.
func machineCPU() (busy, steal float64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0
	}
	v := func(i int) float64 {
		n, _ := strconv.ParseInt(f[i], 10, 64)
		return float64(n) / procstat.UserHZ
	}
	// user nice system idle iowait irq softirq steal
	return v(1) + v(2) + v(3) + v(6) + v(7), v(8)
}

// resetPeakRSS sets a process's VmHWM to its current VmRSS (proc(5), clear_refs "5").
func resetPeakRSS(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

// procStatusKiB reads a "kB" line (VmRSS, VmHWM, ...) of /proc/<pid>/status.
func procStatusKiB(pid int, key string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, key+":") {
			continue
		}
		fs := strings.Fields(strings.TrimPrefix(line, key+":"))
		if len(fs) == 0 {
			break
		}
		return strconv.ParseInt(fs[0], 10, 64)
	}
	return 0, fmt.Errorf("/proc/%d/status: no %s", pid, key)
}

// procFDs counts a process's open file descriptors.
func procFDs(pid int) int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return -1
	}
	return len(ents)
}

// procFDLimit is a process's soft limit of open files.
func procFDLimit(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Max open files"); ok {
			fs := strings.Fields(rest)
			if len(fs) > 0 {
				return strconv.Atoi(fs[0])
			}
		}
	}
	return 0, fmt.Errorf("/proc/%d/limits: no open files limit", pid)
}

// Machine describes where a run happened.
type Machine struct {
	Nproc        int    `json:"nproc"`
	CPUModel     string `json:"cpu_model"`
	Kernel       string `json:"kernel"`
	MemTotalKiB  int64  `json:"mem_total_kib"`
	LoadAvgStart string `json:"loadavg_start"`
	LoadAvgEnd   string `json:"loadavg_end"`
	FDLimit      string `json:"fd_limit"`
}

func machineInfo() Machine {
	m := Machine{Nproc: runtime.NumCPU(), LoadAvgStart: loadAvg()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "MemTotal:") {
				fs := strings.Fields(line)
				if len(fs) >= 2 {
					m.MemTotalKiB, _ = strconv.ParseInt(fs[1], 10, 64)
				}
			}
		}
	}
	if b, err := os.ReadFile("/proc/self/limits"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "Max open files") {
				fs := strings.Fields(strings.TrimPrefix(line, "Max open files"))
				if len(fs) >= 2 {
					m.FDLimit = fs[0] + "/" + fs[1]
				}
			}
		}
	}
	return m
}

// loadAvg is the first three fields of /proc/loadavg.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	fs := strings.Fields(string(b))
	if len(fs) > 3 {
		fs = fs[:3]
	}
	return strings.Join(fs, " ")
}

// Versions are the software a run measured.
type Versions struct {
	Go         string `json:"go"`
	Kafka      string `json:"kafka"`
	FranzGo    string `json:"franz_go"`
	Offsetgate string `json:"offsetgate"`
	// OffsetgateCommit is the commit the offsetgate binary was built from.
	OffsetgateCommit string `json:"offsetgate_commit,omitempty"`
}

func versions(kafka, offsetgateBin string) Versions {
	v := Versions{Go: runtime.Version(), Kafka: kafka}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/twmb/franz-go" {
				v.FranzGo = d.Version
			}
		}
	}
	if offsetgateBin != "" {
		if out, err := exec.Command(offsetgateBin, "version").Output(); err == nil {
			v.Offsetgate = strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
		}
	}
	v.OffsetgateCommit = binaryCommit(offsetgateBin)
	// Without VCS stamping (-buildvcs=false), the working tree's commit (scripts/bench builds
	// offsetgate from it), marked when Go sources that go into the binary differ from it.
	if v.OffsetgateCommit == "" {
		if out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output(); err == nil {
			v.OffsetgateCommit = strings.TrimSpace(string(out))
			st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no", "--",
				"*.go", ":(exclude)*_test.go", "go.mod", "go.sum").Output()
			if err == nil && len(bytes.TrimSpace(st)) > 0 {
				v.OffsetgateCommit += " with uncommitted changes"
			}
		}
	}
	return v
}

// binaryCommit is the commit a Go binary was built from, as the toolchain stamped it into the
// binary ("" without VCS stamping).
func binaryCommit(bin string) string {
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		return ""
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" && modified == "true" {
		rev += " with uncommitted changes"
	}
	return rev
}

// tempLogDir makes a temporary folder for a run's logs when dir is empty; cleanup removes it
// (and leaves a folder the caller named alone).
func tempLogDir(dir *string, prefix string) (cleanup func(), err error) {
	if *dir != "" {
		return func() {}, nil
	}
	d, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, err
	}
	*dir = d
	return func() { os.RemoveAll(d) }, nil
}

// descendants returns the pids of every process below root (its children, theirs, ...), from
// the parent pids in /proc/<pid>/stat.
func descendants(root int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	parent := map[int]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The command name (field 2) may hold spaces; ppid is the second field after it.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 {
			continue
		}
		if pp, err := strconv.Atoi(f[1]); err == nil {
			parent[pid] = pp
		}
	}
	var out []int
	for pid := range parent {
		for p, hops := parent[pid], 0; p > 1 && hops < 64; p, hops = parent[p], hops+1 {
			if p == root {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}
