package session

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/catalog"
	"offsetgate/rules"
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
