package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"

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
