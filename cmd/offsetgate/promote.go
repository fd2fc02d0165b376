package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"offsetgate/mirror"
	"offsetgate/rules"
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
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: offsetgate promote --proxy HOST:PORT --topic T [--source HOST:PORT [--allow-lag]] [identity flags]")
		fmt.Fprintln(stderr, "Removes the mirror mark of T through offsetgate, as an approved mirroring client: T then takes ordinary")
		fmt.Fprintln(stderr, "writes through offsetgate, its consumers carry on at the next offset, and it can never be a mirror topic")
		fmt.Fprintln(stderr, "again. Stop the mirror of T first. With --source, it refuses while the source holds records the mirror")
		fmt.Fprintln(stderr, "does not (unless --allow-lag). Exit codes: 0 promoted, 1 refused, 2 bad usage or input.")
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
	if src != nil && !*allowLag {
		behind, err := notMirrored(ctx, src, px, *topic)
		if err != nil {
			return fail(2, err)
		}
		if behind > 0 {
			return fail(1, fmt.Errorf("the source holds %d records of %s that are not mirrored yet: let the mirror catch up (offsetgate status), or give --allow-lag to promote without them", behind, *topic))
		}
	}
	res, err := kadm.NewClient(px).AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.DeleteConfig, Name: rules.MarkKey}}, *topic)
	if err == nil && len(res) == 1 && res[0].Err != nil {
		err = res[0].Err
		if res[0].ErrMessage != "" {
			err = fmt.Errorf("%w: %s", err, res[0].ErrMessage)
		}
	}
	switch {
	case errors.Is(err, kerr.TopicAuthorizationFailed):
		return fail(1, fmt.Errorf("%w; promote as an approved mirroring client of %s (its client certificate or SASL user: the mirror's identity)", err, *topic))
	case err != nil:
		return fail(1, fmt.Errorf("removing the mark of %s: %w", *topic, err))
	}
	fmt.Fprintf(stdout, "%s promoted: it takes ordinary writes through offsetgate from now on; point its producers at offsetgate\n", *topic)
	return 0
}

// notMirrored is how many records the source holds beyond the mirrored end, over all
// partitions.
func notMirrored(ctx context.Context, src, px *kgo.Client, topic string) (int64, error) {
	se, err := kadm.NewClient(src).ListEndOffsets(ctx, topic)
	if err == nil {
		err = se.Error()
	}
	if err != nil {
		return 0, fmt.Errorf("source end offsets of %s: %w", topic, err)
	}
	pe, err := kadm.NewClient(px).ListEndOffsets(ctx, topic)
	if err == nil {
		err = pe.Error()
	}
	if err != nil {
		return 0, fmt.Errorf("mirrored ends of %s through offsetgate: %w", topic, err)
	}
	var behind int64
	se.Each(func(o kadm.ListedOffset) {
		if m, ok := pe.Lookup(topic, o.Partition); ok && o.Offset > m.Offset {
			behind += o.Offset - m.Offset
		}
	})
	return behind, nil
}
