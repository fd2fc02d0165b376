package rawread

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// answer is a Metadata response for topic whose partition count tells which request of the
// test answered it (the n-th request answers with n partitions), partition 0 led by broker 1.
func answer(topic string, n int) *kmsg.MetadataResponse {
	resp := kmsg.NewPtrMetadataResponse()
	b := kmsg.NewMetadataResponseBroker()
	b.NodeID, b.Host, b.Port = 1, "127.0.0.1", 9092
	resp.Brokers = append(resp.Brokers, b)
	t := kmsg.NewMetadataResponseTopic()
	t.Topic = kmsg.StringPtr(topic)
	for i := 0; i < n; i++ {
		p := kmsg.NewMetadataResponseTopicPartition()
		p.Partition, p.Leader = int32(i), 1
		t.Partitions = append(t.Partitions, p)
	}
	resp.Topics = append(resp.Topics, t)
	return resp
}

// A caller that asks while a request is on its way is answered by a later request, never by
// the one it did not see sent: callers arriving meanwhile share that next request.
func TestMetaSharesOnlyLaterRequests(t *testing.T) {
	var sent atomic.Int32
	release := make(chan struct{})
	firstIn := make(chan struct{})
	m := newMeta(func(ctx context.Context, topic string) (*kmsg.MetadataResponse, error) {
		n := int(sent.Add(1))
		if n == 1 {
			close(firstIn)
			<-release
		}
		return answer(topic, n), nil
	})
	ctx := context.Background()
	first := make(chan Partition, 1)
	go func() {
		p, err := m.Lookup(ctx, "t", 0)
		if err != nil {
			t.Error(err)
		}
		first <- p
	}()
	<-firstIn
	const later = 8
	var wg sync.WaitGroup
	got := make(chan Partition, later)
	for i := 0; i < later; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := m.Lookup(ctx, "t", 0)
			if err != nil {
				t.Error(err)
			}
			got <- p
		}()
	}
	// Every later caller has joined the queued round before the first request is answered.
	deadline := time.Now().Add(10 * time.Second)
	for {
		m.mu.Lock()
		queued := m.topics["t"] != nil && m.topics["t"].queued != nil
		m.mu.Unlock()
		if queued || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // the others join the same round
	close(release)
	if p := <-first; p.Partitions != 1 || p.Leader != 1 || p.Addr != "127.0.0.1:9092" {
		t.Fatalf("first caller: %+v, want the first request's answer (1 partition, leader 1 at 127.0.0.1:9092)", p)
	}
	wg.Wait()
	close(got)
	for p := range got {
		if p.Partitions != 2 {
			t.Fatalf("a caller that asked while the first request was on its way got %+v: the answer of request %d, want 2", p, p.Partitions)
		}
	}
	if n := sent.Load(); n != 2 {
		t.Fatalf("%d requests for 1+%d callers, want 2", n, later)
	}
	// Nothing in flight: the next caller sends a request of its own at once.
	if p, err := m.Lookup(ctx, "t", 1); err != nil || p.Partitions != 3 {
		t.Fatalf("after the rounds: %+v, %v; want the third request's answer", p, err)
	}
	m.mu.Lock()
	left := len(m.topics)
	m.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d topics still tracked with nothing in flight", left)
	}
}

// Errors reach every caller of the round; a partition the answer lacks is the caller's own
// error; a caller whose context ends stops waiting while the round goes on for the others.
func TestMetaErrors(t *testing.T) {
	boom := errors.New("broker gone")
	var fail atomic.Bool
	fail.Store(true)
	m := newMeta(func(ctx context.Context, topic string) (*kmsg.MetadataResponse, error) {
		if fail.Load() {
			return nil, boom
		}
		return answer(topic, 2), nil
	})
	ctx := context.Background()
	if _, err := m.Lookup(ctx, "t", 0); !errors.Is(err, boom) {
		t.Fatalf("failed request: %v, want %v", err, boom)
	}
	fail.Store(false)
	if _, err := m.Lookup(ctx, "t", 5); !errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("partition 5 of 2: %v, want UNKNOWN_TOPIC_OR_PARTITION", err)
	}

	release := make(chan struct{})
	var sent atomic.Int32
	slow := newMeta(func(ctx context.Context, topic string) (*kmsg.MetadataResponse, error) {
		if sent.Add(1) == 1 {
			<-release
		}
		return answer(topic, 1), nil
	})
	done := make(chan error, 1)
	go func() { _, err := slow.Lookup(ctx, "t", 0); done <- err }()
	for sent.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	// The first caller of the queued round sends it; a second one gives up on its context.
	go func() { _, _ = slow.Lookup(ctx, "t", 0) }()
	for {
		slow.mu.Lock()
		q := slow.topics["t"].queued != nil
		slow.mu.Unlock()
		if q {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := slow.Lookup(cctx, "t", 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a caller whose context ended: %v, want its deadline", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
