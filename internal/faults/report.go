package faults

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"offsetgate/internal/testkafka"
)

// percentile is the nearest-rank percentile of sorted durations.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

// Markdown is the report as docs/reliability.md has it.
func (r *Report) Markdown() string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	cfg := r.Config
	p("# Reliability: the fault campaign\n\n")
	p("`scripts/faults` (internal/faults) starts a source and a destination cluster of its own (real Kafka %s,\n", kafkaVersion())
	p("two brokers each), offsetgate (`offsetgate serve`) and a following mirror (`offsetgate mirror`) as\n")
	p("processes, writes to a dense source topic all the time and reads it through offsetgate with two\n")
	p("franz-go consumers: one keeping its own positions, one consumer group committing after every poll.\n")
	p("A transactional producer writes a second topic (transactions of 1-8 records, one in ten aborted),\n")
	p("mirrored by the same mirror and read through offsetgate at read_committed. It injects one fault at\n")
	p("a time at a random point, undoes it, waits until the consumers have read everything the source held\n")
	p("then (every transaction committed by then, for the transactional topic; the recovery time below),\n")
	p("and checks:\n\n")
	p("- `offsetgate verify` exits 0 for both topics: identical over the range both sides hold (markers and\n")
	p("  aborted batches included), nothing lost at the head;\n")
	p("- the read_committed consumer read every committed record once, in order, as the source holds it, and\n")
	p("  no record of an aborted transaction;\n")
	p("- each consumer read every record once, in source order, and as the source holds it (offset, key and\n")
	p("  value against the producer's acknowledgements); the group's processed records are those whose commit\n")
	p("  went through, and after a failed commit a new client must resume exactly where a commit left it;\n")
	p("- `offsetgate status` shows no halted partition and no loss at the head, and the mirror stopped none;\n")
	p("- no goroutine, connection or file descriptor leaked in the processes that lived through the fault\n")
	p("  (goroutines from `go_goroutines` on their metrics endpoints, descriptors and sockets from\n")
	p("  `/proc/<pid>/fd`; a look above half as much again as the process's baseline, and a margin, is\n")
	p("  looked at again for 30 s before it counts; the baseline of the processes started first is the most\n")
	p("  they held over their first 30 s of traffic, the first look of a restarted one; with `--mirrors-all`,\n")
	p("  where clients move between instances, an instance may hold what all instances held at first together).\n\n")
	p("Links are cut and stalled by relays (internal/relay) on a second loopback address: the destination's\n")
	p("brokers advertise a listener there, offsetgate advertises itself there, and the consumers reach\n")
	p("offsetgate directly, so only the link named is hit. The source's log start is moved up every ten\n")
	p("faults (as retention would), below what both consumers have read, and the mirror follows it.\n\n")

	p("## This run\n\n")
	cmd := cfg.Command
	if cmd == "" {
		cmd = fmt.Sprintf("scripts/faults --seed %d --count %d --budget %s", cfg.Seed, cfg.Count, cfg.Budget)
	}
	p("    %s\n\n", cmd)
	p("| seed | faults | elapsed | ownership lease | partitions | records/s written | records written | read (direct) | read (group) |\n")
	p("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	p("| %d | %d | %s | %s | %d | %d | %d | %d | %d |\n\n", cfg.Seed, len(r.Outcomes), r.Elapsed.Round(time.Second), cfg.Lease,
		cfg.Partitions, cfg.Rate, r.Produced, r.Direct, r.Group)
	p("Transactional topic: %d transactions committed (%d records), %d aborted, %d of unknown end (their\n", r.TxnCommits, r.TxnCommitted, r.TxnAborts, r.TxnUnknown)
	p("EndTransaction failed; either outcome is allowed, all or nothing); %d records read at read_committed.\n\n", r.TxnRead)
	if cfg.Compacted {
		p("Compacted topic (`--compacted`): %d records written from 128 keys (one in 16 a tombstone), segments\n", r.CompactProduced)
		p("rolled every 3 s and cleaned at any dirty share, the mirror sending it again every %s (`--resync`);\n", compactResync)
		p("%d records read through offsetgate by a consumer of its own (offsets only forward, every record the\n", r.CompactRead)
		p("one written at its offset). After each fault its writes pause until `offsetgate verify` finds it\n")
		p("identical: between a cleaning and the next resend the two sides differ by design. At the end the\n")
		p("source held %d records over %d offsets: its cleaner had removed %d.\n\n", r.CompactLeft, r.CompactSpanned, r.CompactSpanned-r.CompactLeft)
	}
	if cfg.Instances > 1 {
		p("%d offsetgate instances in front of the destination and %d mirror processes in one mirror group\n", cfg.Instances, cfg.Instances)
		if cfg.MirrorsAll {
			p("(`--mirror-group`, a 6 s session), mirror i bootstrapped with every instance, its own first; the consumer keeping its own\n")
		} else {
			p("(`--mirror-group`, a 6 s session), mirror i writing through instance i; the consumer keeping its own\n")
		}
		p("positions reads through the first instance, the group and the read_committed consumer through the\n")
		p("second; a process fault hits one instance or one mirror, picked at random. Mirror writes made by\n")
		p("each instance in its last life:")
		var names []string
		for n := range r.Writes {
			names = append(names, n)
		}
		sort.Strings(names)
		for i, n := range names {
			sep := ","
			if i == len(names)-1 {
				sep = "."
			}
			p(" %s %.0f%s", n, r.Writes[n], sep)
		}
		p("\n\n")
	}
	if cfg.ServeYAML != "" {
		p("offsetgate's configuration had, beyond the campaign's own: `%s`.\n\n", strings.TrimSpace(cfg.ServeYAML))
	}
	if r.Aborted != "" {
		p("**The campaign stopped early:** %s\n\n", r.Aborted)
	}

	p("## Faults\n\n")
	p("Recovery: from the fault being undone until both consumers had read everything the source held at that moment.\n\n")
	p("| fault | what it does | runs | held | failed | recovery p50 | p99 | max |\n")
	p("| --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, k := range kinds() {
		var rec []time.Duration
		runs, failed := 0, 0
		for _, o := range r.Outcomes {
			if o.Kind != k.name {
				continue
			}
			runs++
			if len(o.Failures) > 0 {
				failed++
			}
			if o.Recovery >= 0 {
				rec = append(rec, o.Recovery)
			}
		}
		if runs == 0 {
			continue
		}
		sort.Slice(rec, func(i, j int) bool { return rec[i] < rec[j] })
		p50, p99, mx := "-", "-", "-"
		if len(rec) > 0 {
			p50, p99, mx = secs(percentile(rec, 0.5)), secs(percentile(rec, 0.99)), secs(rec[len(rec)-1])
		}
		p("| `%s` | %s | %d | %d | %d | %s | %s | %s |\n", k.name, k.doc, runs, runs-failed, failed, p50, p99, mx)
	}
	var all []time.Duration
	for _, o := range r.Outcomes {
		if o.Recovery >= 0 {
			all = append(all, o.Recovery)
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	if len(all) > 0 {
		p("| all | | %d | | | %s | %s | %s |\n", len(r.Outcomes), secs(percentile(all, 0.5)), secs(percentile(all, 0.99)), secs(all[len(all)-1]))
	}

	p("\n## What held\n\n")
	held := map[string]int{}
	for _, o := range r.Outcomes {
		for _, h := range o.Held {
			held[h]++
		}
	}
	var hs []string
	for h := range held {
		hs = append(hs, h)
	}
	sort.Strings(hs)
	for _, h := range hs {
		p("- %s: after %d of %d faults\n", h, held[h], len(r.Outcomes))
	}
	p("- records written to the source: %d (%d produce calls failed and were not counted)\n", r.Produced, r.ProduceFailed)
	p("- the group read %d records again after a commit whose answer did not come (never counted as processed twice); its client was started again %d times after a failed commit\n\n", r.Redelivered, r.GroupRestarts)
	if len(r.Leaks) > 0 {
		p("Processes looked at (one row per process life; a life ends when the campaign kills the process):\n\n")
		p("| process | life | looks | first look (baseline) | largest | last |\n| --- | --- | --- | --- | --- | --- |\n")
		var keys []string
		for k := range r.Leaks {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool {
			a, b := r.Leaks[keys[i]], r.Leaks[keys[j]]
			if a.Name != b.Name {
				return a.Name < b.Name
			}
			return a.Life < b.Life
		})
		for i, k := range keys {
			ls := r.Leaks[k]
			if len(keys) > 24 && i >= 8 && i < len(keys)-8 && ls.Samples < 5 {
				continue // short lives between kills: the long ones show a leak
			}
			p("| %s | %d | %d | %s | %s | %s |\n", ls.Name, ls.Life, ls.Samples, ls.Baseline, ls.Max, ls.Last)
		}
		p("\n")
	}

	p("## What failed\n\n")
	nf := 0
	for _, o := range r.Outcomes {
		if len(o.Failures) == 0 {
			continue
		}
		nf++
		p("- fault %d, `%s` (%s), seed %d: %s. Replay: `scripts/faults --replay %d`\n", o.Index, o.Kind, o.What, o.Seed, strings.Join(o.Failures, "; "), o.Seed)
	}
	if nf == 0 && r.Aborted == "" {
		p("Nothing.\n")
	}
	if len(r.ConsumerErrors) > 0 {
		p("\n## Errors the consumers saw (retried by the client; not failures)\n\n")
		for _, e := range r.ConsumerErrors {
			p("- %s\n", e)
		}
	}
	return b.String()
}

func kafkaVersion() string { return testkafka.KafkaVersion }
