package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"time"

	"offsetgate/internal/testkafka"
)

// sourceAndDest returns the clusters a two-cluster benchmark runs on: those of a state file
// from scripts/kafka, or two it starts (2 brokers each, data on tmpfs when there is room),
// stopped by the returned function.
func sourceAndDest(ctx context.Context, clustersFile string) (src, dst *testkafka.Cluster, stop func(), err error) {
	if clustersFile != "" {
		pair, err := testkafka.Load(ctx, clustersFile)
		if err != nil {
			return nil, nil, nil, err
		}
		return pair.Source, pair.Dest, func() {}, nil
	}
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	for _, name := range []string{"bench-source", "bench-dest"} {
		opts := testkafka.Options{Name: name, Brokers: 2, ExtraConfig: map[string]string{"log.segment.delete.delay.ms": "1000"}}
		if d, ok := tmpfsDir(); ok {
			opts.Dir = d
			stops = append(stops, func() { os.RemoveAll(d) })
		}
		c, err := testkafka.Start(ctx, opts)
		if err != nil {
			stop()
			return nil, nil, nil, err
		}
		stops = append(stops, c.Stop)
		if src == nil {
			src = c
		} else {
			dst = c
		}
	}
	return src, dst, stop, nil
}

// quickDefault fills a flag left at unset with its full-run or its quick-run default.
func quickDefault[T comparable](v *T, unset T, quick bool, full, q T) {
	if *v == unset {
		*v = full
		if quick {
			*v = q
		}
	}
}

// modeName labels a run in its report.
func modeName(quick bool) string {
	if quick {
		return "quick"
	}
	return "full"
}

// reportPath is where a two-cluster benchmark's JSON goes by default: docs/bench/NAME-DATE.json,
// or docs/bench/tmp/NAME-quick-DATE.json for a quick run.
func reportPath(name string, quick bool) string {
	date := time.Now().Format("2006-01-02")
	if quick {
		return filepath.Join(docsBench(), "tmp", name+"-quick-"+date+".json")
	}
	return filepath.Join(docsBench(), name+"-"+date+".json")
}

// writeReport writes a run's JSON report; a failed run's goes beside, marked, so that it never
// replaces a complete one.
func writeReport(out string, rep any, failed bool) (string, error) {
	if failed {
		out = strings.TrimSuffix(out, ".json") + "-failed.json"
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return out, err
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return out, err
	}
	return out, os.WriteFile(out, append(b, '\n'), 0o644)
}

// docsBench is the repository's docs/bench folder (or a relative one outside a checkout).
func docsBench() string {
	if root, err := testkafka.RepoRoot(); err == nil {
		return filepath.Join(root, "docs", "bench")
	}
	return "docs/bench"
}
