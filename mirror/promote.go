package mirror

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"offsetgate/rules"
)

// PromoteOptions says how Promote checks that nothing of the source is left behind.
type PromoteOptions struct {
	// Source, when set, is checked: the topic is promoted only once the mirror holds
	// everything the source does (unless AllowLag).
	Source   *kgo.Client
	AllowLag bool
	// Wait is how long the sealed topic may take to be mirrored to the source's end (0: one
	// check, for a mirror that is already stopped at the end).
	Wait time.Duration
	// Settle is how long offsetgate instances take to see a seal or a promotion in the marks
	// topic (default 1s).
	Settle time.Duration
	// Progress, when set, hears what Promote waits for.
	Progress func(msg string)
}

// PromoteResult is what a promotion found.
type PromoteResult struct {
	// Late is how many records the source took after the promotion (a producer writing to the
	// source directly, or through an instance that had not seen the seal): they are on the
	// source only.
	Late int64
}

// ErrBehind is a promotion refused because the mirror does not hold everything the source does.
type ErrBehind struct {
	Topic  string
	Behind int64
}

func (e *ErrBehind) Error() string {
	return fmt.Sprintf("the source holds %d records of %s that are not mirrored yet: let the mirror catch up (offsetgate status), or give --allow-lag to promote without them", e.Behind, e.Topic)
}

// Promote promotes a mirror topic through offsetgate (px, an approved mirroring client's
// connection). With a source to check it first seals the topic: offsetgate's source listeners
// then refuse the topic's writes (retriable), so producers writing through them pause instead
// of adding records the mirror would never copy; once the mirror holds the source's end the
// mark is removed, and those producers' next writes are carried to the destination. A
// promotion that cannot finish (the mirror does not reach the end in Wait) unseals the topic
// and returns ErrBehind.
func Promote(ctx context.Context, px *kgo.Client, topic string, o PromoteOptions) (PromoteResult, error) {
	if o.Settle <= 0 {
		o.Settle = time.Second
	}
	say := func(format string, a ...any) {
		if o.Progress != nil {
			o.Progress(fmt.Sprintf(format, a...))
		}
	}
	adm := kadm.NewClient(px)
	if o.Source == nil || o.AllowLag {
		return PromoteResult{}, setMark(ctx, adm, topic, nil)
	}
	sealed := rules.MarkSealed
	if err := setMark(ctx, adm, topic, &sealed); err != nil {
		return PromoteResult{}, err
	}
	unseal := func(cause error) error {
		yes := "true"
		// Not the request's context: a promotion cut short still gives the topic back.
		uctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := setMark(uctx, adm, topic, &yes); err != nil {
			return fmt.Errorf("%w; unsealing %s failed too (its writes through source listeners stay refused until `offsetgate promote` runs again): %v", cause, topic, err)
		}
		return cause
	}
	say("%s sealed: source listeners refuse its writes; waiting %v for every offsetgate instance to see it", topic, o.Settle)
	if err := sleep(ctx, o.Settle); err != nil {
		return PromoteResult{}, unseal(err)
	}
	deadline := time.Now().Add(o.Wait)
	var ends map[int32]int64
	for {
		behind, se, err := notMirrored(ctx, o.Source, px, topic)
		if err != nil {
			return PromoteResult{}, unseal(err)
		}
		if behind == 0 {
			ends = se
			break
		}
		if time.Now().After(deadline) {
			return PromoteResult{}, unseal(&ErrBehind{Topic: topic, Behind: behind})
		}
		say("waiting for the mirror: %d records of %s behind the source", behind, topic)
		if err := sleep(ctx, 250*time.Millisecond); err != nil {
			return PromoteResult{}, unseal(err)
		}
	}
	if err := setMark(ctx, adm, topic, nil); err != nil {
		return PromoteResult{}, unseal(err)
	}
	// Writes the seal did not stop (a producer on the source itself) are on the source only.
	say("%s promoted; checking that the source took nothing more", topic)
	if err := sleep(ctx, o.Settle); err != nil {
		return PromoteResult{}, nil
	}
	_, now, err := sourceEnds(ctx, o.Source, topic)
	if err != nil {
		return PromoteResult{}, fmt.Errorf("%s promoted, but the source's end offsets could not be read again: %w", topic, err)
	}
	var late int64
	for p, e := range now {
		if e > ends[p] {
			late += e - ends[p]
		}
	}
	return PromoteResult{Late: late}, nil
}

// setMark sets the mark key of a topic through offsetgate (nil: deletes it, the promotion).
func setMark(ctx context.Context, adm *kadm.Client, topic string, v *string) error {
	op := kadm.AlterConfig{Op: kadm.DeleteConfig, Name: rules.MarkKey}
	if v != nil {
		op = kadm.AlterConfig{Op: kadm.SetConfig, Name: rules.MarkKey, Value: v}
	}
	res, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{op}, topic)
	if err == nil && len(res) == 1 && res[0].Err != nil {
		err = res[0].Err
		if res[0].ErrMessage != "" {
			err = fmt.Errorf("%w: %s", err, res[0].ErrMessage)
		}
	}
	if errors.Is(err, kerr.TopicAuthorizationFailed) {
		return fmt.Errorf("%w; promote as an approved mirroring client of %s (its client certificate or SASL user: the mirror's identity)", err, topic)
	}
	if err != nil {
		return fmt.Errorf("changing the mark of %s: %w", topic, err)
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// sourceEnds is the source's end offset of every partition of a topic.
func sourceEnds(ctx context.Context, src *kgo.Client, topic string) (kadm.ListedOffsets, map[int32]int64, error) {
	se, err := kadm.NewClient(src).ListEndOffsets(ctx, topic)
	if err == nil {
		err = se.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("source end offsets of %s: %w", topic, err)
	}
	ends := map[int32]int64{}
	se.Each(func(o kadm.ListedOffset) { ends[o.Partition] = o.Offset })
	return se, ends, nil
}

// notMirrored is how many records the source holds beyond the mirrored end, over all
// partitions, and the source's ends.
func notMirrored(ctx context.Context, src, px *kgo.Client, topic string) (int64, map[int32]int64, error) {
	se, ends, err := sourceEnds(ctx, src, topic)
	if err != nil {
		return 0, nil, err
	}
	pe, err := kadm.NewClient(px).ListEndOffsets(ctx, topic)
	if err == nil {
		err = pe.Error()
	}
	if err != nil {
		return 0, nil, fmt.Errorf("mirrored ends of %s through offsetgate: %w", topic, err)
	}
	var behind int64
	se.Each(func(o kadm.ListedOffset) {
		if m, ok := pe.Lookup(topic, o.Partition); !ok || o.Offset > m.Offset {
			behind += o.Offset - max(m.Offset, 0)
		}
	})
	return behind, ends, nil
}
