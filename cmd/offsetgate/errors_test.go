package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"offsetgate/internal/testkafka"
)

func produce(ctx context.Context, t *testing.T, addrs []string, topic string, values ...string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, v := range values {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

func exists(ctx context.Context, t *testing.T, addrs []string, topic string) bool {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	md, err := kadm.NewClient(cl).Metadata(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	tm, ok := md.Topics[topic]
	return ok && tm.Err == nil
}

// verify on a topic that was never mirrored, or that is not a mirror topic, says so (exit 2)
// instead of failing an offset lookup or reporting a difference.
func TestVerifyNotAMirror(t *testing.T) {
	prefix := testkafka.Names(t, "v")
	e := newOGEnv(t, prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	never, plain := prefix+"-never", prefix+"-plain"
	for _, c := range []*testkafka.Cluster{e.pair.Source, e.pair.Dest} {
		if err := c.CreateTopic(ctx, plain, 1, 2, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.pair.Source.CreateTopic(ctx, never, 2, 2, nil); err != nil {
		t.Fatal(err)
	}
	produce(ctx, t, e.pair.Source.Addrs(), never, "a", "b")
	produce(ctx, t, e.pair.Source.Addrs(), plain, "source")
	produce(ctx, t, e.pair.Dest.Addrs(), plain, "destination")
	for _, c := range []struct{ topic, want string }{
		{never, "is not mirrored yet: run offsetgate mirror --topic " + never},
		{plain, "is not a mirror topic on the destination"},
		{prefix + "-nowhere", "does not exist on the source cluster"},
	} {
		code, out, errs := run(args([]string{"verify", "--source", e.source, "--proxy", e.addr, "--topic", c.topic}, e.reader())...)
		if code != 2 || !strings.Contains(errs, c.want) || strings.Contains(out, "DIFFERENT") || strings.Count(errs, "verify:") != 1 {
			t.Errorf("verify %s: exit %d\nstdout: %s\nstderr: %s\nwant exit 2 and one line saying %q", c.topic, code, out, errs, c.want)
		}
	}
}

// mirror with --proxy at a plain broker (the destination's, the source's) says that it is not
// offsetgate, prints no summary, and says "nothing was written" once.
func TestMirrorProxyNotOffsetgate(t *testing.T) {
	prefix := testkafka.Names(t, "p")
	e := newOGEnv(t, prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic := prefix + "-t"
	if err := e.pair.Source.CreateTopic(ctx, topic, 1, 2, nil); err != nil {
		t.Fatal(err)
	}
	src := e.pair.Source.Addrs()
	for _, c := range []struct{ name, proxy, want string }{
		{"the destination's broker", e.pair.Dest.Addrs()[0], "the destination itself, not offsetgate in front of it"},
		{"the source's address", src[0], "is the source cluster's address"},
		{"another source broker", src[len(src)-1], "does not look like offsetgate: it answers as a plain Kafka broker"},
	} {
		code, out, errs := run("mirror", "--once", "--source", src[0], "--proxy", c.proxy, "--topic", topic)
		if code != 2 || !strings.Contains(errs, c.want) || strings.Contains(out, "mirrored 0 partitions") || strings.Count(errs, "nothing was written") != 1 {
			t.Errorf("%s: exit %d\nstdout: %s\nstderr: %s\nwant exit 2, %q, no summary, \"nothing was written\" once", c.name, code, out, errs, c.want)
		}
	}
	if exists(ctx, t, e.pair.Dest.Addrs(), topic) {
		t.Fatalf("%s was created on the destination", topic)
	}
}

// A missing topic or a cluster nobody answers on is reported at once, not after the retries
// meant for a long run's lost connections.
func TestMirrorFailsFast(t *testing.T) {
	prefix := testkafka.Names(t, "f")
	e := newOGEnv(t, prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic := prefix + "-t"
	if err := e.pair.Source.CreateTopic(ctx, topic, 1, 2, nil); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		args   []string
		wanted string
	}{
		{"missing topic", []string{"--source", e.source, "--proxy", e.addr, "--topic", prefix + "-missing"}, "does not exist on the source cluster"},
		{"source unreachable", []string{"--source", "127.0.0.1:1", "--proxy", e.addr, "--topic", topic}, "the source cluster at 127.0.0.1:1 cannot be reached"},
		{"offsetgate unreachable", []string{"--source", e.source, "--proxy", "127.0.0.1:1", "--topic", topic}, "offsetgate at 127.0.0.1:1 cannot be reached"},
	} {
		start := time.Now()
		code, out, errs := run(args([]string{"mirror", "--once"}, c.args, e.id())...)
		took := time.Since(start)
		// The retries gave 7 s of sleeps alone; a loaded two-core machine gets slack.
		if code != 2 || !strings.Contains(errs, c.wanted) || took > 4*time.Second {
			t.Errorf("%s: exit %d after %v\nstdout: %s\nstderr: %s\nwant exit 2 within 4 s saying %q", c.name, code, took, out, errs, c.wanted)
		}
	}
}

// status tells a client that may not read the marks what to give, at once.
func TestStatusNeedsMirroringIdentity(t *testing.T) {
	e := newOGEnv(t, testkafka.Names(t, "s"))
	start := time.Now()
	code, out, errs := run(args([]string{"status", "--proxy", e.addr}, e.reader())...)
	if code == 0 || !strings.Contains(errs, "only approved mirroring clients read the mirror marks") || time.Since(start) > 4*time.Second {
		t.Fatalf("status without a mirroring identity: exit %d after %v\nstdout: %s\nstderr: %s", code, time.Since(start), out, errs)
	}
}
