package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"offsetgate/catalog"
)

// runCutover starts (or aborts) a consumer group's live move from the source to the
// destination: it stores the move in offsetgate's state in the destination, which every
// offsetgate instance with a source listener follows (docs/operations.md, "Moving a group
// live"). It talks to the destination directly, as offsetgate's own identity (offsetgate's own
// topics are refused through offsetgate).
func runCutover(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("cutover", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cf := newClientFlags(fs, false)
	dest := fs.String("destination", "", "the destination cluster's brokers, host:port[,host:port] (required): offsetgate's state lives there")
	group := fs.String("group", "", "the consumer group to move (required)")
	abort := fs.Bool("abort", false, "stop a move that has not reached its final state: the group stays where it was (the source, or the destination for --back)")
	list := fs.Bool("list", false, "list every group's move (state, since, reason) and exit")
	back := fs.Bool("back", false, "move a moved group back to the source (before its topics are promoted)")
	wait := fs.Bool("wait", false, "wait until the group is moved (exit 0) or its move failed (exit 1), printing each state")
	timeout := fs.Duration("timeout", 10*time.Minute, "with --wait, how long to wait")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: offsetgate cutover --destination HOST:PORT --group G [--back] [--wait] [--abort] [identity flags]")
		fmt.Fprintln(stderr, "       offsetgate cutover --destination HOST:PORT --list [identity flags]")
		fmt.Fprintln(stderr, "Moves consumer group G live from the source to the destination through offsetgate's source listeners:")
		fmt.Fprintln(stderr, "its members give up their partitions and commit on the source, the commits are copied to the destination")
		fmt.Fprintln(stderr, "once the mirror has reached them, and the members rejoin on the destination in their processes.")
		fmt.Fprintln(stderr, "The identity flags (--tls-*, --sasl-*) are offsetgate's own on the destination; --proxy is not used.")
		fmt.Fprintln(stderr, "Exit codes: 0 stored (with --wait: moved), 1 the move failed or timed out, 2 bad usage or input.")
		fs.PrintDefaults()
	}
	if code, done := parseFlags(fs, args); done {
		return code
	}
	fail := func(code int, err error) int {
		fmt.Fprintln(stderr, "offsetgate cutover:", err)
		return code
	}
	if err := cf.resolve(); err != nil {
		return fail(2, err)
	}
	if *dest == "" || (*group == "" && !*list) {
		return fail(2, errors.New("--destination and --group are required"))
	}
	cf.proxy = *dest // the identity flags apply to the destination itself here
	if *list {
		all, err := readMoves(ctx, cf)
		if err != nil {
			return fail(2, err)
		}
		if len(all) == 0 {
			fmt.Fprintln(stdout, "no group moves")
			return 0
		}
		names := make([]string, 0, len(all))
		for g := range all {
			names = append(names, g)
		}
		sort.Strings(names)
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "GROUP\tSTATE\tSINCE\tREASON")
		for _, g := range names {
			m := all[g]
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", g, m.State, m.Since.Format(time.RFC3339), m.Reason)
		}
		_ = tw.Flush()
		return 0
	}
	cl, err := cf.proxyClient("offsetgate-cutover", kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		return fail(2, err)
	}
	defer cl.Close()
	cur, found, err := readMove(ctx, cf, *group)
	if err != nil {
		return fail(2, err)
	}
	m := catalog.Move{Group: *group, State: catalog.MoveDraining}
	done, failed := catalog.MoveMoved, catalog.MoveFailed
	if *back {
		m.State, done, failed = catalog.MoveReturning, catalog.MoveReturned, catalog.MoveMoved
	}
	switch {
	case *abort:
		switch {
		case found && cur.State == catalog.MoveDraining:
			m = catalog.Move{Group: *group, State: catalog.MoveFailed, Reason: "aborted by offsetgate cutover --abort"}
		case found && cur.State == catalog.MoveReturning:
			m = catalog.Move{Group: *group, State: catalog.MoveMoved, Reason: "move back aborted by offsetgate cutover --abort"}
		case found && cur.Moving() && cur.State != catalog.MoveMoved:
			return fail(1, fmt.Errorf("group %s is %s: its commits are final, it can no longer be aborted", *group, cur.State))
		default:
			return fail(1, fmt.Errorf("group %s has no move in progress", *group))
		}
	case *back:
		switch {
		case found && (cur.State == catalog.MoveReturning || cur.State == catalog.MoveReturnFinal):
			fmt.Fprintf(stdout, "group %s: move back already %s (since %s)\n", *group, cur.State, cur.Since.Format(time.RFC3339))
			if !*wait {
				return 0
			}
			m.State = ""
		case !found || cur.State != catalog.MoveMoved:
			st := catalog.MoveState("not moving")
			if found {
				st = cur.State
			}
			return fail(1, fmt.Errorf("group %s is %s: only a moved group goes back", *group, st))
		}
	case found && cur.Moving():
		fmt.Fprintf(stdout, "group %s: move already %s (since %s)\n", *group, cur.State, cur.Since.Format(time.RFC3339))
		if !*wait {
			return 0
		}
		m.State = ""
	}
	if m.State != "" {
		if err := catalog.StoreMoveWith(ctx, cl, m); err != nil {
			return fail(2, err)
		}
		fmt.Fprintf(stdout, "group %s: %s\n", *group, m.State)
	}
	if !*wait || *abort {
		return 0
	}
	wctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	last := m.State
	for {
		cur, found, err := readMove(wctx, cf, *group)
		if err == nil && found && cur.State != last {
			last = cur.State
			if cur.Reason != "" {
				fmt.Fprintf(stdout, "group %s: %s (%s)\n", *group, cur.State, cur.Reason)
			} else {
				fmt.Fprintf(stdout, "group %s: %s\n", *group, cur.State)
			}
		}
		switch {
		case last == done:
			return 0
		case last == failed:
			return 1
		}
		select {
		case <-wctx.Done():
			return fail(1, fmt.Errorf("group %s still %s after %v", *group, last, *timeout))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// readMove reads a group's move from offsetgate's marks topic on the destination.
func readMove(ctx context.Context, cf *clientFlags, group string) (catalog.Move, bool, error) {
	all, err := readMoves(ctx, cf)
	m, ok := all[group]
	return m, ok, err
}

// readMoves reads every group's move from offsetgate's marks topic on the destination.
func readMoves(ctx context.Context, cf *clientFlags) (map[string]catalog.Move, error) {
	cl, err := cf.proxyClient("offsetgate-cutover", kgo.ConsumeTopics(catalog.MarksTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ends, err := endOffset(ctx, cl, catalog.MarksTopic)
	if err != nil {
		return nil, fmt.Errorf("reading %s on the destination: %w", catalog.MarksTopic, err)
	}
	all := map[string]catalog.Move{}
	const prefix = catalog.MoveKeyPrefix
	for next := int64(0); next < ends; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return all, ctx.Err()
		}
		if err := fs.Err0(); err != nil {
			return all, fmt.Errorf("reading %s on the destination: %w", catalog.MarksTopic, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			next = r.Offset + 1
			key := string(r.Key)
			if !strings.HasPrefix(key, prefix) {
				return
			}
			group := key[len(prefix):]
			var m catalog.Move
			switch {
			case r.Value == nil:
				delete(all, group)
			case json.Unmarshal(r.Value, &m) == nil:
				all[group] = m
			}
		})
	}
	return all, nil
}

// endOffset is the end offset of a one-partition topic.
func endOffset(ctx context.Context, cl *kgo.Client, topic string) (int64, error) {
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		return 0, err
	}
	o, ok := ends.Lookup(topic, 0)
	if !ok {
		return 0, fmt.Errorf("%s has no partition 0", topic)
	}
	return o.Offset, o.Err
}
