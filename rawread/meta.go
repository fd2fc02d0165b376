package rawread

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Meta asks the cluster about topics as Lookup does, sharing Metadata requests between callers
// that ask about the same topic at the same time. Taking over a mirror partition looks up its
// topic, its ledger topic and its snapshot topic several times, and every answer holds all of
// the topic's partitions: a thousand partitions taken over at once by many writers were a
// thousand requests of a thousand partitions each per lookup, for brokers that were already the
// bound (docs/benchmarks.md, "Writers").
//
// Sharing keeps Lookup's promise: a caller is answered by a request sent after it asked, never
// by an older answer. One request per topic is on its way at a time; callers that ask meanwhile
// wait for it to be answered and share the next one.
type Meta struct {
	ask func(ctx context.Context, topic string) (*kmsg.MetadataResponse, error)

	mu     sync.Mutex
	topics map[string]*metaTopic
}

type metaTopic struct {
	cur    *metaRound // sent, not answered yet
	queued *metaRound // callers that asked while cur was on its way
}

type metaRound struct {
	done chan struct{} // closed once resp and err are set
	resp *kmsg.MetadataResponse
	err  error
}

// metaTimeout bounds a shared request: it does not end with the caller that sent it, since
// others wait for its answer.
const metaTimeout = 30 * time.Second

// NewMeta shares the Metadata requests of one client.
func NewMeta(cl *kgo.Client) *Meta {
	return newMeta(func(ctx context.Context, topic string) (*kmsg.MetadataResponse, error) {
		return askTopic(ctx, cl, topic)
	})
}

func newMeta(ask func(ctx context.Context, topic string) (*kmsg.MetadataResponse, error)) *Meta {
	return &Meta{ask: ask, topics: map[string]*metaTopic{}}
}

// Lookup is rawread.Lookup, its request shared with concurrent lookups of the topic.
func (m *Meta) Lookup(ctx context.Context, topic string, partition int32) (Partition, error) {
	resp, err := m.topic(ctx, topic)
	if err != nil {
		return Partition{}, err
	}
	return pick(resp, topic, partition)
}

// LookupLeader is rawread.LookupLeader, its requests shared.
func (m *Meta) LookupLeader(ctx context.Context, topic string, partition int32) (Partition, error) {
	return lookupLeader(ctx, func(ctx context.Context) (Partition, error) { return m.Lookup(ctx, topic, partition) }, topic, partition)
}

// EachWith is rawread.EachWith, its leader lookups shared.
func (m *Meta) EachWith(ctx context.Context, cl *kgo.Client, hint *Partition, topic string, partition int32, from, to int64, fn func(*kgo.Record) error) (int64, error) {
	return eachWith(ctx, cl, func(ctx context.Context) (Partition, error) { return m.Lookup(ctx, topic, partition) }, hint, topic, partition, from, to, false, fn)
}

// EachExact is EachWith for a reader that must see every offset from from on: where the log
// no longer holds some of them (its start moved past them, before or during the read), the
// read stops with ErrGone instead of going on from the new start. A read that succeeds is
// proof the log held all of them when each was fetched.
func (m *Meta) EachExact(ctx context.Context, cl *kgo.Client, topic string, partition int32, from, to int64, fn func(*kgo.Record) error) (int64, error) {
	return eachWith(ctx, cl, func(ctx context.Context) (Partition, error) { return m.Lookup(ctx, topic, partition) }, nil, topic, partition, from, to, true, fn)
}

// topic answers with a Metadata response for topic from a request sent after the call began.
func (m *Meta) topic(ctx context.Context, topic string) (*kmsg.MetadataResponse, error) {
	m.mu.Lock()
	t := m.topics[topic]
	var r *metaRound
	switch {
	case t == nil:
		r = &metaRound{done: make(chan struct{})}
		t = &metaTopic{cur: r}
		m.topics[topic] = t
		go m.rounds(topic, t)
	case t.queued == nil:
		r = &metaRound{done: make(chan struct{})}
		t.queued = r
	default:
		r = t.queued
	}
	m.mu.Unlock()
	select {
	case <-r.done:
		return r.resp, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("metadata of %s: %w", topic, ctx.Err())
	}
}

// rounds sends t's rounds one after the other, each once the one before is answered, until
// none is queued. It belongs to the Meta and ends with the last round (each bounded by
// metaTimeout, not by a caller's context: a caller that stops waiting leaves the others theirs).
func (m *Meta) rounds(topic string, t *metaTopic) {
	for {
		m.mu.Lock()
		r := t.cur
		m.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), metaTimeout)
		r.resp, r.err = m.ask(ctx, topic)
		cancel()
		m.mu.Lock()
		t.cur, t.queued = t.queued, nil
		last := t.cur == nil
		if last {
			delete(m.topics, topic)
		}
		m.mu.Unlock()
		close(r.done)
		if last {
			return
		}
	}
}
