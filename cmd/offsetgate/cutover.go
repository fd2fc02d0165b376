package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
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
	abort := fs.Bool("abort", false, "stop a move that has not reached the final state: the group stays on the source")
	wait := fs.Bool("wait", false, "wait until the group is moved (exit 0) or its move failed (exit 1), printing each state")
	timeout := fs.Duration("timeout", 10*time.Minute, "with --wait, how long to wait")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: offsetgate cutover --destination HOST:PORT --group G [--wait] [--abort] [identity flags]")
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
	if *dest == "" || *group == "" {
		return fail(2, errors.New("--destination and --group are required"))
	}
	cf.proxy = *dest // the identity flags apply to the destination itself here
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
	switch {
	case *abort:
		if !found || !cur.Moving() {
			return fail(1, fmt.Errorf("group %s has no move in progress", *group))
		}
		if cur.State != catalog.MoveDraining {
			return fail(1, fmt.Errorf("group %s is %s: its source commits are final, it can no longer be aborted", *group, cur.State))
		}
		m = catalog.Move{Group: *group, State: catalog.MoveFailed, Reason: "aborted by offsetgate cutover --abort"}
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
		case last == catalog.MoveMoved:
			return 0
		case last == catalog.MoveFailed:
			return 1
		}
		select {
		case <-wctx.Done():
			return fail(1, fmt.Errorf("group %s still %s after %v", *group, last, *timeout))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// readMove reads a group's move from offsetgate's marks topic on the destination (nil: none).
func readMove(ctx context.Context, cf *clientFlags, group string) (catalog.Move, bool, error) {
	cl, err := cf.proxyClient("offsetgate-cutover", kgo.ConsumeTopics(catalog.MarksTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return catalog.Move{}, false, err
	}
	defer cl.Close()
	ends, err := endOffset(ctx, cl, catalog.MarksTopic)
	if err != nil {
		return catalog.Move{}, false, fmt.Errorf("reading %s on the destination: %w", catalog.MarksTopic, err)
	}
	var m catalog.Move
	found := false
	key := "group:" + group
	for next := int64(0); next < ends; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return m, found, ctx.Err()
		}
		if err := fs.Err0(); err != nil {
			return m, found, fmt.Errorf("reading %s on the destination: %w", catalog.MarksTopic, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			next = r.Offset + 1
			if string(r.Key) != key {
				return
			}
			if r.Value == nil {
				found = false
				return
			}
			if json.Unmarshal(r.Value, &m) == nil {
				found = true
			}
		})
	}
	return m, found, nil
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
