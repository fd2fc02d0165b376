package atoffset

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"offsetgate/catalog"
	"offsetgate/ledger"
)

// A client that lost a write's answer (its connection broke while the data were on their way
// to D) sends the same batches again on another connection: the resend is answered once the
// first write lands, acknowledged without a second copy, rather than refused with an error
// the mirroring client would take for a content mismatch (a following mirror stopped the
// partition on it in the fault campaign).
func TestResendWaitsForFlyingWrite(t *testing.T) {
	c, cl, ctx, tid := kfakeTopic(t)
	release := make(chan struct{})
	var held atomic.Int32 // data requests to the mirror topic held
	c.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		for _, rt := range r.(*kmsg.ProduceRequest).Topics {
			if rt.Topic == kfakeTopicName {
				held.Add(1)
				c.SleepControl(func() { <-release })
			}
		}
		return nil, nil, false
	})
	w := New(Config{Instance: "a", Dial: plainDial}, cl, ledger.New(cl), zap.NewNop(), nil)
	t.Cleanup(w.Close)
	mt := catalog.Topic{Name: kfakeTopicName, ID: tid}
	b := sourceBatch(0, 3)

	var wg sync.WaitGroup
	results := make([]Result, 2)
	wg.Add(1)
	go func() {
		defer wg.Done()
		results[0] = w.Write(ctx, mt, 0, b, 0, false, nil)
	}()
	for deadline := time.Now().Add(10 * time.Second); held.Load() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first write's data never reached the destination")
		}
	}
	resent := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(resent)
		results[1] = w.Write(ctx, mt, 0, b, 0, false, nil)
	}()
	select {
	case <-resent:
		t.Fatalf("the resend was answered while the first write was still on its way: %+v", results[1])
	case <-time.After(500 * time.Millisecond):
	}
	close(release)
	wg.Wait()
	for i, r := range results {
		if r.Code != 0 {
			t.Fatalf("write %d answered %d: %s", i, r.Code, r.Msg)
		}
	}
	hwm, err := kadm.NewClient(cl).ListEndOffsets(ctx, kfakeTopicName)
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := hwm.Lookup(kfakeTopicName, 0); o.Offset != 3 {
		t.Fatalf("the destination holds %d records after a write and its resend, want 3", o.Offset)
	}
	if n := held.Load(); n != 1 {
		t.Fatalf("%d data requests reached the destination, want 1 (the resend is acknowledged, not written)", n)
	}
}
