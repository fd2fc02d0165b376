package mirror_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"offsetgate/internal/testkafka"
	"offsetgate/mirror"
)

// Three following runs of one mirror group share 24 partitions (each mirrors some, together
// all of them); when one leaves, the other two take its partitions and everything produced
// afterwards is mirrored, record for record.
func TestMirrorGroupShares(t *testing.T) {
	prefix := testkafka.Names(t, "mg")
	e := newEnv(t, prefix, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := e.pair.Source
	const parts = 24
	topic := prefix + "-t"
	if err := s.CreateTopic(ctx, topic, parts, 2, nil); err != nil {
		t.Fatal(err)
	}
	spread := kgo.RecordPartitioner(kgo.RoundRobinPartitioner())
	produceSource(ctx, t, s, topic, 1200, spread)
	same := func() bool {
		return fmt.Sprint(count(ctx, t, s, topic)) == fmt.Sprint(count(ctx, t, e.pair.Dest, topic))
	}
	// A consumer group of the source with offsets on every partition: one process of the
	// mirror group copies them (groupCopier), for all partitions.
	app := prefix + "-app"
	appOffsets := kadm.Offsets{}
	for p := int32(0); p < parts; p++ {
		appOffsets.Add(kadm.Offset{Topic: topic, Partition: p, At: int64(p % 40), LeaderEpoch: -1})
	}
	if _, err := kadm.NewClient(e.srcClient(t)).CommitOffsets(ctx, app, appOffsets); err != nil {
		t.Fatal(err)
	}

	type member struct {
		progress *syncBuf
		stop     context.CancelFunc
		done     chan error
	}
	start := func() *member {
		mctx, stop := context.WithCancel(ctx)
		m := &member{progress: &syncBuf{}, stop: stop, done: make(chan error, 1)}
		cfg := e.mirrorConfig(topic)
		cfg.Parallel, cfg.Progress, cfg.ProgressEvery = 2, m.progress, time.Second
		cfg.MirrorGroup, cfg.GroupSessionTimeout, cfg.GroupInterval = prefix+"-mirrors", 6*time.Second, time.Second
		cfg.Groups = regexp.MustCompile("^" + regexp.QuoteMeta(app) + "$")
		go func() { _, err := mirror.Follow(mctx, cfg); m.done <- err }()
		return m
	}
	members := []*member{start(), start(), start()}
	defer func() {
		for _, m := range members {
			m.stop()
		}
	}()
	assigned := regexp.MustCompile(regexp.QuoteMeta(topic) + `: partitions ([0-9,]+) assigned by mirror group`)
	released := regexp.MustCompile(regexp.QuoteMeta(topic) + `: partitions ([0-9,]+) released`)
	// owned is the partitions a member holds now, from its progress lines.
	owned := func(m *member) map[string]bool {
		own := map[string]bool{}
		for _, line := range strings.Split(m.progress.String(), "\n") {
			if g := assigned.FindStringSubmatch(line); g != nil {
				for _, p := range strings.Split(g[1], ",") {
					own[p] = true
				}
			}
			if g := released.FindStringSubmatch(line); g != nil {
				for _, p := range strings.Split(g[1], ",") {
					delete(own, p)
				}
			}
		}
		return own
	}
	// Settled: every partition owned by exactly one running member.
	settled := func(ms []*member) bool {
		seen := map[string]int{}
		for _, m := range ms {
			for p := range owned(m) {
				seen[p]++
			}
		}
		if len(seen) != parts {
			return false
		}
		for _, n := range seen {
			if n != 1 {
				return false
			}
		}
		return true
	}
	dump := func() string {
		var b strings.Builder
		for i, m := range members {
			select {
			case err := <-m.done:
				fmt.Fprintf(&b, "--- member %d ended: %v\n", i, err)
				m.done <- err
			default:
			}
			fmt.Fprintf(&b, "--- member %d:\n%s\n", i, m.progress.String())
		}
		return b.String()
	}
	waitFor := func(what string, d time.Duration, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(d)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %v\n%s", what, d, dump())
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	// Settled with every member holding some: a member that joins late gets its share then.
	waitFor("the three members share the partitions", 90*time.Second, func() bool {
		for _, m := range members {
			if len(owned(m)) == 0 {
				return false
			}
		}
		return settled(members)
	})
	deadline := time.Now().Add(90 * time.Second)
	for !same() {
		if time.Now().After(deadline) {
			t.Fatalf("the group did not mirror everything: source %v, destination %v", count(ctx, t, s, topic), count(ctx, t, e.pair.Dest, topic))
		}
		time.Sleep(200 * time.Millisecond)
	}

	pcl := kadm.NewClient(e.proxyClient(t))
	waitFor("the group's offsets copied for every partition", 60*time.Second, func() bool {
		got, err := pcl.FetchOffsets(ctx, app)
		if err != nil {
			return false
		}
		for p := int32(0); p < parts; p++ {
			o, ok := got.Lookup(topic, p)
			if !ok || o.Err != nil || o.At != int64(p%40) {
				return false
			}
		}
		return true
	})
	copiers := 0
	for _, m := range members {
		if strings.Contains(m.progress.String(), "group "+app+": ") {
			copiers++
		}
	}
	if copiers != 1 {
		t.Fatalf("%d members copied group %s's offsets, want 1\n%s", copiers, app, dump())
	}

	// The source's log start moves: the member holding the partition moves the mirror's.
	sadm := kadm.NewClient(e.srcClient(t))
	del := kadm.Offsets{}
	del.Add(kadm.Offset{Topic: topic, Partition: 3, At: 10})
	if _, err := sadm.DeleteRecords(ctx, del); err != nil {
		t.Fatal(err)
	}
	waitFor("the mirror's log start follows the source's", 60*time.Second, func() bool {
		starts, err := pcl.ListStartOffsets(ctx, topic)
		if err != nil {
			return false
		}
		o, ok := starts.Lookup(topic, 3)
		return ok && o.Err == nil && o.Offset == 10
	})

	// One member leaves while the source is written to: the others take its partitions.
	gone := members[0]
	hadParts := len(owned(gone))
	produceSource(ctx, t, s, topic, 600, spread)
	gone.stop()
	if err := <-gone.done; err != nil {
		t.Fatalf("the member that left: %v", err)
	}
	if !strings.Contains(gone.progress.String(), "released") {
		t.Fatalf("the member that left did not release its %d partitions:\n%s", hadParts, gone.progress.String())
	}
	rest := members[1:]
	produceSource(ctx, t, s, topic, 600, spread)
	waitFor("the other two take the partitions of the one that left", 90*time.Second, func() bool { return settled(rest) })
	deadline = time.Now().Add(90 * time.Second)
	for !same() {
		if time.Now().After(deadline) {
			t.Fatalf("after a member left, the others did not mirror everything: source %v, destination %v",
				count(ctx, t, s, topic), count(ctx, t, e.pair.Dest, topic))
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Partitions added to the source topic are added to the mirror topic and shared.
	adm, err := s.Admin()
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if _, err := adm.UpdatePartitions(ctx, parts+4, topic); err != nil {
		t.Fatal(err)
	}
	waitFor("the partitions added on the source are shared", 90*time.Second, func() bool {
		produceSource(ctx, t, s, topic, 28, spread)
		n := 0
		for _, m := range rest {
			n += len(owned(m))
		}
		return n == parts+4
	})
	deadline = time.Now().Add(90 * time.Second)
	for !same() {
		if time.Now().After(deadline) {
			t.Fatalf("partitions added on the source were not mirrored: source %v, destination %v",
				count(ctx, t, s, topic), count(ctx, t, e.pair.Dest, topic))
		}
		time.Sleep(200 * time.Millisecond)
	}
	for p, se := range count(ctx, t, s, topic) {
		want := readAll(ctx, t, s, topic, p, int(se[1]-se[0]))
		got := readAll(ctx, t, e.pair.Dest, topic, p, int(se[1]-se[0]))
		for i := range want {
			if want[i] != got[i] {
				t.Fatalf("%s[%d] record %d: destination %+v, source %+v", topic, p, i, got[i], want[i])
			}
		}
	}
}

// A mirror group is for following runs only.
func TestMirrorGroupNeedsFollowing(t *testing.T) {
	_, err := mirror.Once(context.Background(), mirror.Config{Source: []string{"127.0.0.1:1"}, Proxy: []string{"127.0.0.1:1"},
		Topics: []string{"t"}, MirrorGroup: "g"})
	var ie *mirror.InputError
	if err == nil || !strings.Contains(err.Error(), "--once") {
		t.Fatalf("a --once run with a mirror group: %v", err)
	}
	if !errors.As(err, &ie) {
		t.Fatalf("not an input error: %T %v", err, err)
	}
}
