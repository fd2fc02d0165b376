package atoffset

import (
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"offsetgate/catalog"
	"offsetgate/ledger"
)

// A partition's takeover logs, at debug level, how long each of its steps took: where a new
// mirror partition's first write waits.
func TestLoadPhasesLogged(t *testing.T) {
	_, cl, ctx, tid := kfakeTopic(t)
	core, logs := observer.New(zapcore.DebugLevel)
	w := New(Config{Instance: "a"}, cl, ledger.New(cl), zap.New(core), nil)
	defer w.Close()
	mt := catalog.Topic{Name: kfakeTopicName, ID: tid}
	if res := w.Write(ctx, mt, 0, sourceBatch(0, 3), -1, false, nil); res.Code != 0 {
		t.Fatalf("write: code %d %q", res.Code, res.Msg)
	}
	got := logs.FilterMessage("mirror partition load").All()
	if len(got) != 1 {
		t.Fatalf("%d takeover timing lines, want 1", len(got))
	}
	f := got[0].ContextMap()
	var sum time.Duration
	for _, k := range []string{"lookup", "ensure", "snapshot", "read", "claim", "ahead"} {
		d, ok := f[k].(time.Duration)
		if !ok {
			t.Fatalf("field %s: %v (%T), want a duration", k, f[k], f[k])
		}
		sum += d
	}
	total, _ := f["total"].(time.Duration)
	if f["topic"] != kfakeTopicName || f["partition"] != int32(0) || total <= 0 || sum > total {
		t.Fatalf("takeover timing %v: the steps' sum %v against total %v", f, sum, total)
	}
	if f["ensure"].(time.Duration) <= 0 || f["claim"].(time.Duration) <= 0 {
		t.Fatalf("takeover timing %v: the ledger topic's creation and the claim took no time", f)
	}
}
