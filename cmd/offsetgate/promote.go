package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"offsetgate/mirror"
)

// runPromote removes a mirror topic's mark through offsetgate (IncrementalAlterConfigs DELETE
// offsetgate.produce.at.offset, as an approved mirroring client): the topic then takes
// ordinary writes, keeps its source offsets for consumers, and can never be marked again.
func runPromote(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("promote", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cf := newClientFlags(fs, true)
	topic := fs.String("topic", "", "the mirror topic to promote (required)")
	allowLag := fs.Bool("allow-lag", false, "promote even when --source shows records the mirror does not have yet (they will never be mirrored)")
	wait := fs.Duration("wait", 0, "with --source: how long the sealed topic may take to be mirrored to the source's end (keep the mirror running; 0: one check)")
	settle := fs.Duration("settle", time.Second, "how long offsetgate instances take to see the seal and the promotion")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: offsetgate promote --proxy HOST:PORT --topic T [--source HOST:PORT [--wait D] [--allow-lag]] [identity flags]")
		fmt.Fprintln(stderr, "Removes the mirror mark of T through offsetgate, as an approved mirroring client: T then takes ordinary")
		fmt.Fprintln(stderr, "writes through offsetgate, its consumers carry on at the next offset, and it can never be a mirror topic")
		fmt.Fprintln(stderr, "again. With --source it first seals T (offsetgate's source listeners refuse its writes, retriably),")
		fmt.Fprintln(stderr, "waits up to --wait for the mirror to hold the source's end, then promotes; producers on source listeners")
		fmt.Fprintln(stderr, "are then switched to the destination. Behind at the end of the wait, T is unsealed and nothing changes.")
		fmt.Fprintln(stderr, "Exit codes: 0 promoted, 1 refused, 2 bad usage or input, 3 promoted but the source took records after it.")
		fs.PrintDefaults()
	}
	if code, done := parseFlags(fs, args); done {
		return code
	}
	fail := func(code int, err error) int {
		fmt.Fprintln(stderr, "offsetgate promote:", err)
		return code
	}
	if err := cf.resolve(); err != nil {
		return fail(2, err)
	}
	if cf.proxy == "" || *topic == "" {
		return fail(2, errors.New("--proxy and --topic are required"))
	}
	px, err := cf.proxyClient("offsetgate-promote")
	if err != nil {
		return fail(2, err)
	}
	defer px.Close()
	var src *kgo.Client
	if cf.source != "" {
		if src, err = cf.sourceClient("offsetgate-promote"); err != nil {
			return fail(2, err)
		}
		defer src.Close()
		if err := mirror.Reachable(ctx, src, "the source cluster", cf.sourceAddrs()); err != nil {
			return fail(2, err)
		}
	}
	if err := mirror.CheckOffsetgate(ctx, px, cf.proxyAddrs(), cf.sourceAddrs()); err != nil {
		return fail(2, err)
	}
	if err := mirrorTopic(ctx, nil, px, *topic); err != nil {
		return fail(2, err)
	}
	res, err := mirror.Promote(ctx, px, *topic, mirror.PromoteOptions{Source: src, AllowLag: *allowLag, Wait: *wait, Settle: *settle,
		Progress: func(msg string) { fmt.Fprintln(stderr, "offsetgate promote:", msg) }})
	if err != nil {
		// Refused: another identity, or the mirror behind the source (mirror.ErrBehind).
		return fail(1, err)
	}
	if res.Late > 0 {
		fmt.Fprintf(stderr, "offsetgate promote: %s promoted, but the source took %d more records after it (a producer writing to the source directly, or through an offsetgate instance that had not seen the seal): they are on the source only\n", *topic, res.Late)
		return 3
	}
	fmt.Fprintf(stdout, "%s promoted: it takes ordinary writes through offsetgate from now on; producers on source listeners are switched to the destination\n", *topic)
	return 0
}
