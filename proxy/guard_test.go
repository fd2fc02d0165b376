package proxy_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"offsetgate/proxy"
)

// A mirror topic that lacks guarded settings on the topic itself (created by an earlier
// version, or changed on the destination behind offsetgate's back) gets them back, with the
// values creation pins, when an offsetgate instance starts; settings the topic has are kept.
func TestGuardedSettingsRestored(t *testing.T) {
	prefix := "mirror-" + testNames(t)
	e := newMirrorEnv(t, prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic := prefix + "-guard"
	if err := e.createMirror(ctx, e.mirror, topic, 1, nil); err != nil {
		t.Fatal(err)
	}
	want := directConfigs(ctx, t, e.d, topic)
	adm, err := e.d.Admin()
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	// As an earlier version left it: no segment.bytes, no unclean election setting, no
	// minimum compaction lag on the topic; and a retention an operator set, which stays.
	keep := "86400000"
	res, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{
		{Op: kadm.DeleteConfig, Name: "segment.bytes"},
		{Op: kadm.DeleteConfig, Name: "unclean.leader.election.enable"},
		{Op: kadm.DeleteConfig, Name: "min.compaction.lag.ms"},
		{Op: kadm.SetConfig, Name: "retention.ms", Value: &keep},
	}, topic)
	if err == nil {
		err = res[0].Err
	}
	if err != nil {
		t.Fatal(err)
	}
	topicLevel := func() map[string]string {
		rc, err := adm.DescribeTopicConfigs(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, c := range rc[0].Configs {
			if c.Source == 1 && c.Value != nil { // DYNAMIC_TOPIC_CONFIG
				out[c.Key] = *c.Value
			}
		}
		return out
	}
	if got := topicLevel(); got["segment.bytes"] != "" || got["unclean.leader.election.enable"] != "" {
		t.Fatalf("the settings were not removed: %v", got)
	}

	// A second instance starts: it sets what the topic lacks.
	startProxy(t, e.d, "goroutine", func(c *proxy.Config) {
		listen := c.Listen
		*c = e.cfg
		c.Listen, c.Transport = listen, "goroutine"
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := topicLevel()
		done := true
		for _, k := range []string{"segment.bytes", "unclean.leader.election.enable", "min.compaction.lag.ms"} {
			done = done && got[k] == want[k] && got[k] != ""
		}
		if done {
			if got["retention.ms"] != keep {
				t.Fatalf("retention.ms went from the operator's %s to %s", keep, got["retention.ms"])
			}
			t.Logf("restored: segment.bytes=%s unclean.leader.election.enable=%s min.compaction.lag.ms=%s", got["segment.bytes"],
				got["unclean.leader.election.enable"], got["min.compaction.lag.ms"])
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s the topic's settings are %v; want segment.bytes, unclean.leader.election.enable and min.compaction.lag.ms as created (%s, %s, %s)",
				got, want["segment.bytes"], want["unclean.leader.election.enable"], want["min.compaction.lag.ms"])
		}
		time.Sleep(200 * time.Millisecond)
	}
}
