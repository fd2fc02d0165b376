package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"offsetgate/rules"
)

// errNotMirrored says a topic has no mirror on the destination yet.
var errNotMirrored = errors.New("not mirrored yet")

// mirrorTopic checks that topic is a mirror topic through offsetgate (and, when src is given,
// that the source has it), with errors that say what to do.
func mirrorTopic(ctx context.Context, src, px *kgo.Client, topic string) error {
	if src != nil {
		md, err := kadm.NewClient(src).Metadata(ctx, topic)
		if err != nil {
			return fmt.Errorf("source metadata: %w", err)
		}
		if t, ok := md.Topics[topic]; !ok || errors.Is(t.Err, kerr.UnknownTopicOrPartition) {
			return fmt.Errorf("topic %s does not exist on the source cluster", topic)
		}
	}
	padm := kadm.NewClient(px)
	md, err := padm.Metadata(ctx, topic)
	if err != nil {
		return fmt.Errorf("metadata through offsetgate: %w", err)
	}
	if t, ok := md.Topics[topic]; !ok || errors.Is(t.Err, kerr.UnknownTopicOrPartition) {
		return fmt.Errorf("topic %s is %w: run offsetgate mirror --topic %s first (the destination has no topic of that name)", topic, errNotMirrored, topic)
	}
	rc, err := padm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return fmt.Errorf("configs of %s through offsetgate: %w", topic, err)
	}
	for _, r := range rc {
		if r.Err != nil {
			return fmt.Errorf("configs of %s through offsetgate: %w", topic, r.Err)
		}
		for _, c := range r.Configs {
			if c.Key == rules.MarkKey && c.Value != nil && *c.Value == "true" {
				return nil
			}
		}
	}
	return fmt.Errorf("topic %s is not a mirror topic on the destination (no %s): it was not created by offsetgate mirror, or it was promoted; there is no mirror to compare with the source", topic, rules.MarkKey)
}
