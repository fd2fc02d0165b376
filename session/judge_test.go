package session

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/catalog"
	"offsetgate/rules"
	"offsetgate/view"
)

// postConn runs the functions the session posts on the test's goroutine, when it asks.
type postConn struct {
	fakeConn
	posts chan func()
}

func (c *postConn) Post(fn func()) { c.posts <- fn }

// slowCatalog knows no topic and never answers a lookup before the caller gives up.
type slowCatalog struct{ fuzzCatalog }

func (slowCatalog) ByName(n string) (catalog.Topic, bool) { return catalog.Topic{Name: n}, false }
func (slowCatalog) Refresh(ctx context.Context, _ []string) error {
	<-ctx.Done()
	return ctx.Err()
}

type countingObserver struct {
	nopObserver
	timeouts int
}

func (o *countingObserver) WaitTimeout(int16) { o.timeouts++ }

// A request whose wait for the destination runs out of time is answered with
// REQUEST_TIMED_OUT (nothing forwarded), and counted.
func TestWaitTimeout(t *testing.T) {
	fc := &postConn{posts: make(chan func(), 1)}
	obs := &countingObserver{}
	s := New(Config{Catalog: slowCatalog{}, Observer: obs, WaitTimeout: 100 * time.Millisecond,
		Policy: func() *rules.Policy { return nil }}, fc)
	defer s.Close()
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(9)
	req.Acks = -1
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "orders"
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = []byte{}
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	if _, err := s.HandleClient(reqFrame(req, 5)); err != nil {
		t.Fatal(err)
	}
	select {
	case fn := <-fc.posts:
		fn()
	case <-time.After(5 * time.Second):
		t.Fatal("the wait never ended")
	}
	if fc.upstream.Len() != 0 {
		t.Fatal("a request whose topics could not be looked up was forwarded")
	}
	out := frames(t, fc.client.Bytes())
	if len(out) != 1 || corrOf(out[0]) != 5 {
		t.Fatalf("%d answers", len(out))
	}
	resp := kmsg.NewPtrProduceResponse()
	resp.SetVersion(9)
	if err := resp.ReadFrom(out[0][9:]); err != nil {
		t.Fatal(err)
	}
	if len(resp.Topics) != 1 || resp.Topics[0].Partitions[0].ErrorCode != 7 {
		t.Fatalf("answer %+v, want REQUEST_TIMED_OUT", resp.Topics)
	}
	if m := resp.Topics[0].Partitions[0].ErrorMessage; m == nil || *m == "" {
		t.Fatal("the refusal says nothing")
	}
	if obs.timeouts != 1 {
		t.Fatalf("%d timeouts counted", obs.timeouts)
	}
}

// gatedView reads no source view: every Load waits until `want` loads are in flight at once
// (after a wait of 5 s, none waits any more) and fails, counting what ran and how many ran
// together.
type gatedView struct {
	View
	want    int32
	mu      sync.Mutex
	now     int32
	most    int32
	loads   int32
	arrived chan struct{}
	open    sync.Once
}

func (v *gatedView) Get(catalog.TopicID, int32) *view.Partition { return nil }

func (v *gatedView) Load(ctx context.Context, _ catalog.Topic, _ int32) (*view.Partition, error) {
	v.mu.Lock()
	v.now++
	v.loads++
	v.most = max(v.most, v.now)
	if v.now == v.want {
		v.open.Do(func() { close(v.arrived) })
	}
	v.mu.Unlock()
	select {
	case <-v.arrived:
	case <-time.After(5 * time.Second):
		v.open.Do(func() { close(v.arrived) })
	case <-ctx.Done():
	}
	v.mu.Lock()
	v.now--
	v.mu.Unlock()
	return nil, errors.New("not read")
}

func (v *gatedView) LoadTopics(context.Context, []catalog.Topic) error { return nil }

// The views a request needs are read several at once, at most loadParallel, and every one is
// tried even when others fail: a ListOffsets naming 1,000 partitions read one view after the
// other took longer than the wait for the destination.
func TestLoadReadsViewsAtOnce(t *testing.T) {
	v := &gatedView{want: loadParallel, arrived: make(chan struct{})}
	var parts []mirrorPart
	tp := catalog.Topic{Name: "mirrored", ID: catalog.TopicID{1}}
	for i := range int32(100) {
		parts = append(parts, mirrorPart{t: tp, partition: i})
	}
	if err := load(context.Background(), v, parts, nil, false); err != nil {
		t.Fatalf("load: %v (a view that cannot be read is left missing, not an error)", err)
	}
	if v.loads != 100 {
		t.Errorf("%d views tried, want every one of 100", v.loads)
	}
	if v.most != loadParallel {
		t.Errorf("at most %d views read at once, want %d", v.most, loadParallel)
	}
}
