package proxy_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"offsetgate/catalog"
	"offsetgate/internal/testkafka"
	"offsetgate/rules"
)

// A mirror topic exists on the destination a moment before its mark (the mark is keyed by the
// id the destination gives it). The creating instance holds the name back with an intent
// stored first: another instance that meets the topic in that moment waits for the mark
// instead of taking it for an ordinary topic. The test plays the creating instance directly
// on the destination: intent, topic, then the mark or a withdrawal.
func TestMirrorCreationHeldBack(t *testing.T) {
	prefix := testkafka.Names(t, "ch")
	e := newMirrorEnv(t, prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d, err := e.d.Client(kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	put := func(key string, value any) {
		t.Helper()
		var b []byte
		if value != nil {
			if b, err = json.Marshal(value); err != nil {
				t.Fatal(err)
			}
		}
		if err := d.ProduceSync(ctx, &kgo.Record{Topic: catalog.MarksTopic, Key: []byte(key), Value: b}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	intent := func(topic string) {
		put(catalog.IntentKeyPrefix+topic+"/t", map[string]any{"by": "another-instance", "until": time.Now().Add(time.Minute).UTC()})
	}
	cl := franzClient(t, []string{e.p.addr}, kgo.DialTLSConfig(e.certs.ClientTLS(e.other)), kgo.RecordRetries(2))

	// A creation through offsetgate leaves no intent behind.
	created := prefix + "-made"
	if err := e.createMirror(ctx, e.mirror, created, 1, nil); err != nil {
		t.Fatal(err)
	}
	if n, live := intents(ctx, t, d, created); n != 1 || live != 0 {
		t.Fatalf("creation intents of %s: %d stored, %d not withdrawn (want 1, 0)", created, n, live)
	}

	// An ordinary client writes to a topic that is being created as a mirror topic: its write
	// waits, and is refused once the mark is there; nothing reaches the destination.
	held := prefix + "-held"
	intent(held)
	if err := e.d.CreateTopic(ctx, held, 1, 2, nil); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- produceErr(ctx, cl, held, 1) }()
	select {
	case err := <-done:
		t.Fatalf("a write to a topic being created as a mirror topic was answered before its mark: %v", err)
	case <-time.After(1500 * time.Millisecond):
	}
	put(catalog.IDString(topicID(ctx, t, e, held)), rules.Mark{Version: rules.MarkVersion, Topic: held, MarkedAt: time.Now().UTC(), MarkedBy: "another-instance"})
	put(catalog.IntentKeyPrefix+held+"/t", nil)
	if err := <-done; !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("a write to a mirror topic just created: %v (want TOPIC_AUTHORIZATION_FAILED)", err)
	}
	if n := hwm(ctx, t, e.d, held, 0); n != 0 {
		t.Fatalf("%s holds %d records", held, n)
	}

	// A creation that did not make a mirror topic (its intent withdrawn, no mark) lets the
	// waiting write through to what is an ordinary topic.
	plain := prefix + "-plain"
	intent(plain)
	if err := e.d.CreateTopic(ctx, plain, 1, 2, nil); err != nil {
		t.Fatal(err)
	}
	go func() { done <- produceErr(ctx, cl, plain, 1) }()
	select {
	case err := <-done:
		t.Fatalf("a write to a topic being created as a mirror topic was answered before the intent was withdrawn: %v", err)
	case <-time.After(1500 * time.Millisecond):
	}
	put(catalog.IntentKeyPrefix+plain+"/t", nil)
	if err := <-done; err != nil {
		t.Fatalf("a write to an ordinary topic after a withdrawn intent: %v", err)
	}
	if n := hwm(ctx, t, e.d, plain, 0); n != 1 {
		t.Fatalf("%s holds %d records, want 1", plain, n)
	}
}

// topicID reads a topic's id directly from the destination.
func topicID(ctx context.Context, t *testing.T, e *mirrorEnv, topic string) [16]byte {
	t.Helper()
	adm, err := e.d.Admin()
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	td, ok := md.Topics[topic]
	if !ok || td.Err != nil {
		t.Fatalf("metadata of %s: %v", topic, td.Err)
	}
	return td.ID
}

// intents reads the marks topic to its end and counts a topic's creation intents, and those
// not withdrawn.
func intents(ctx context.Context, t *testing.T, d *kgo.Client, topic string) (n, live int) {
	t.Helper()
	last := map[string][]byte{}
	for _, r := range readAll(ctx, t, d, catalog.MarksTopic) {
		if strings.HasPrefix(string(r.Key), catalog.IntentKeyPrefix+topic+"/") {
			last[string(r.Key)] = r.Value
		}
	}
	for _, v := range last {
		if v != nil {
			live++
		}
	}
	return len(last), live
}

// readAll reads a one-partition topic directly from the destination, start to end.
func readAll(ctx context.Context, t *testing.T, d *kgo.Client, topic string) []*kgo.Record {
	t.Helper()
	ends, err := kadm.NewClient(d).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup(topic, 0)
	cl, err := kgo.NewClient(kgo.SeedBrokers(d.OptValue(kgo.SeedBrokers).([]string)...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for len(out) == 0 || out[len(out)-1].Offset+1 < end.Offset {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s to %d: %v", topic, end.Offset, ctx.Err())
		}
		out = append(out, fs.Records()...)
	}
	return out
}
