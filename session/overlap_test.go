package session

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/catalog"
	"offsetgate/magic"
	"offsetgate/rules"
)

// gateMirror holds every write until the test releases it, and notes when two writes of one
// partition ran at once.
type gateMirror struct {
	started chan int32
	release map[int32]chan struct{}

	// queueAtOnce: a write holds its place as soon as it starts (as the writer's does once its
	// ledger entries are appended), so the partition's next write may start meanwhile.
	queueAtOnce bool

	mu       sync.Mutex
	running  map[int32]int
	samePart bool
	follows  []bool // of every write started, in order
}

func newGateMirror(parts ...int32) *gateMirror {
	m := &gateMirror{started: make(chan int32, 16), release: map[int32]chan struct{}{}, running: map[int32]int{}}
	for _, p := range parts {
		m.release[p] = make(chan struct{}, 4)
	}
	return m
}

func (m *gateMirror) Write(ctx context.Context, _ catalog.Topic, p int32, _ []byte, _ int64, follows bool, queued func()) (int16, string, int64) {
	m.mu.Lock()
	m.running[p]++
	if m.running[p] > 1 {
		m.samePart = true
	}
	m.follows = append(m.follows, follows)
	m.mu.Unlock()
	if m.queueAtOnce {
		queued()
	}
	m.started <- p
	select {
	case <-m.release[p]:
	case <-ctx.Done():
	}
	m.mu.Lock()
	m.running[p]--
	m.mu.Unlock()
	return 0, "", 100 + int64(p)
}

// atOffsetFrame is a produce-at-offset request (magic header) for one partition of topic.
func atOffsetFrame(topic string, p int32, corr int32) []byte {
	return atOffsetFrameFrom(topic, p, corr, -1)
}

// atOffsetFrameFrom is one with a from offset (-1: none).
func atOffsetFrameFrom(topic string, p int32, corr int32, from int64) []byte {
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(11)
	req.Acks, req.TimeoutMillis = -1, 30000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = p, []byte{1, 2, 3}
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	frame := magic.AppendHeader([]byte{0, 0, 0, 0}, 0, 11, corr, "mirror", from)
	frame = req.AppendTo(frame)
	putLen(frame)
	return frame
}

// waitStart waits until the writes of the partitions want have all started, in any order:
// writes of different partitions run on their own goroutines, so the scheduler picks which
// begins first.
func (m *gateMirror) waitStart(t *testing.T, want ...int32) {
	t.Helper()
	left := map[int32]bool{}
	for _, p := range want {
		left[p] = true
	}
	for len(left) > 0 {
		select {
		case p := <-m.started:
			if !left[p] {
				t.Fatalf("the write of partition %d started, want one of %v", p, want)
			}
			delete(left, p)
		case <-time.After(5 * time.Second):
			t.Fatalf("the writes of partitions %v never started", left)
		}
	}
}

func (m *gateMirror) noStart(t *testing.T) {
	t.Helper()
	select {
	case p := <-m.started:
		t.Fatalf("the write of partition %d started while an earlier write of it ran", p)
	case <-time.After(100 * time.Millisecond):
	}
}

// mirroringSession is a session of an approved mirroring client (of the topics "m*") whose
// writes wait in a gateMirror, and whose posted finishing steps the test runs.
func mirroringSession(t *testing.T) (*Session, *postConn, *gateMirror) {
	t.Helper()
	mirror := newGateMirror(0, 1)
	fc := &postConn{posts: make(chan func(), 8)}
	policy, err := rules.NewPolicy(rules.MirroringConfig{Clients: []rules.ClientConfig{{TLSSAN: "URI:spiffe://t/mirror", Topics: []string{"m*"}}}})
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{Catalog: fuzzCatalog{}, Mirror: mirror, Policy: func() *rules.Policy { return policy }}, fc)
	t.Cleanup(s.Close)
	s.SetIdentity(rules.Identity{TLSSubject: "CN=m", TLSSANs: []string{"URI:spiffe://t/mirror"}})
	return s, fc, mirror
}

func runPost(t *testing.T, c *postConn) {
	t.Helper()
	select {
	case fn := <-c.posts:
		fn()
	case <-time.After(5 * time.Second):
		t.Fatal("no write finished")
	}
}

// Produce-at-offset requests of one connection for different partitions are written at once;
// a request for a partition being written, or any other request, waits for the writes before
// it; answers leave in request order.
func TestAtOffsetWritesOverlap(t *testing.T) {
	s, fc, mirror := mirroringSession(t)

	a, b := atOffsetFrame("mtopic", 0, 1), atOffsetFrame("mtopic", 1, 2)
	md := kmsg.NewPtrMetadataRequest()
	md.SetVersion(12)
	c := reqFrame(md, 3)
	d := atOffsetFrame("mtopic", 0, 4)
	in := append(append(append(append([]byte(nil), a...), b...), c...), d...)

	n, err := s.HandleClient(in)
	if err != nil {
		t.Fatal(err)
	}
	if n != len(a)+len(b) {
		t.Fatalf("consumed %d bytes, want the two writes' %d (the Metadata behind them waits)", n, len(a)+len(b))
	}
	mirror.waitStart(t, 0, 1) // both before either is done: the writes overlap
	rest := in[n:]

	// The second write finishes first: its answer waits for the first's.
	mirror.release[1] <- struct{}{}
	runPost(t, fc)
	if fc.client.Len() != 0 {
		t.Fatal("the second write's answer left before the first's")
	}
	if n, err := s.HandleClient(rest); err != nil || n != 0 {
		t.Fatalf("a Metadata request was taken while a write ran: consumed %d, %v", n, err)
	}
	mirror.release[0] <- struct{}{}
	runPost(t, fc)
	out := frames(t, fc.client.Bytes())
	if len(out) != 2 || corrOf(out[0]) != 1 || corrOf(out[1]) != 2 {
		t.Fatalf("%d answers after both writes, want correlation ids 1, 2 in order", len(out))
	}
	for i, f := range out {
		resp := kmsg.NewPtrProduceResponse()
		resp.SetVersion(11)
		if err := resp.ReadFrom(f[9:]); err != nil {
			t.Fatal(err)
		}
		if p := resp.Topics[0].Partitions[0]; p.ErrorCode != 0 || p.Partition != int32(i) || p.BaseOffset != 100+int64(i) {
			t.Fatalf("answer %d: %+v", i, p)
		}
	}
	fc.client.Reset()

	// Now the Metadata goes upstream and the next write of partition 0 starts; the write's
	// answer waits for the broker's Metadata answer.
	n, err = s.HandleClient(rest)
	if err != nil || n != len(rest) {
		t.Fatalf("consumed %d of %d: %v", n, len(rest), err)
	}
	if fc.upstream.Len() == 0 {
		t.Fatal("the Metadata request was not forwarded")
	}
	mirror.waitStart(t, 0)
	mirror.release[0] <- struct{}{}
	runPost(t, fc)
	if fc.client.Len() != 0 {
		t.Fatal("the write's answer overtook the Metadata answer")
	}
	mdr := kmsg.NewPtrMetadataResponse()
	mdr.SetVersion(12)
	if _, err := s.HandleUpstream(respFrame(3, true, mdr)); err != nil {
		t.Fatal(err)
	}
	out = frames(t, fc.client.Bytes())
	if len(out) != 2 || corrOf(out[0]) != 3 || corrOf(out[1]) != 4 {
		t.Fatalf("answers %d, want Metadata (3) then the write (4)", len(out))
	}
	if s.Busy() {
		t.Fatal("the session is still busy with nothing in flight")
	}
	if mirror.samePart {
		t.Fatal("two writes of one partition ran at once")
	}
}

// A second write of a partition being written waits, even when it comes first in the buffer
// after a write of another partition.
func TestAtOffsetSamePartitionWaits(t *testing.T) {
	s, fc, mirror := mirroringSession(t)

	a, b := atOffsetFrame("mtopic", 0, 1), atOffsetFrame("mtopic", 0, 2)
	in := append(append([]byte(nil), a...), b...)
	n, err := s.HandleClient(in)
	if err != nil || n != len(a) {
		t.Fatalf("consumed %d, want only the first write's %d: %v", n, len(a), err)
	}
	mirror.waitStart(t, 0)
	mirror.noStart(t)
	mirror.release[0] <- struct{}{}
	runPost(t, fc)
	if n, err := s.HandleClient(in[len(a):]); err != nil || n != len(b) {
		t.Fatalf("the second write was not taken after the first: %d, %v", n, err)
	}
	mirror.waitStart(t, 0)
	mirror.release[0] <- struct{}{}
	runPost(t, fc)
	out := frames(t, fc.client.Bytes())
	if len(out) != 2 || corrOf(out[0]) != 1 || corrOf(out[1]) != 2 {
		t.Fatalf("%d answers, want 1 then 2", len(out))
	}
	if mirror.samePart {
		t.Fatal("two writes of one partition ran at once")
	}
}

// A partition's produce-at-offset requests with from offsets are pipelined: the second is
// taken while the first is written and handed to the writer, marked as following, once the
// first holds its place; one without a from offset still waits. Answers leave in order.
func TestAtOffsetPipelinedSamePartition(t *testing.T) {
	for _, atOnce := range []bool{true, false} {
		s, fc, mirror := mirroringSession(t)
		mirror.queueAtOnce = atOnce
		a, b, c := atOffsetFrameFrom("mtopic", 0, 1, 0), atOffsetFrameFrom("mtopic", 0, 2, 10), atOffsetFrame("mtopic", 0, 3)
		in := append(append(append([]byte(nil), a...), b...), c...)
		n, err := s.HandleClient(in)
		if err != nil || n != len(a)+len(b) {
			t.Fatalf("queued at once %v: consumed %d, want the two requests with from offsets (%d): %v", atOnce, n, len(a)+len(b), err)
		}
		mirror.waitStart(t, 0)
		if atOnce {
			mirror.waitStart(t, 0) // the second starts while the first is still written
		} else {
			mirror.noStart(t) // the first has not taken its place yet
		}
		mirror.release[0] <- struct{}{}
		runPost(t, fc)
		if !atOnce {
			mirror.waitStart(t, 0)
		}
		mirror.release[0] <- struct{}{}
		runPost(t, fc)
		out := frames(t, fc.client.Bytes())
		if len(out) != 2 || corrOf(out[0]) != 1 || corrOf(out[1]) != 2 {
			t.Fatalf("queued at once %v: %d answers, want 1 then 2", atOnce, len(out))
		}
		if n, err := s.HandleClient(in[len(a)+len(b):]); err != nil || n != len(c) {
			t.Fatalf("the request without a from offset was not taken after the writes: %d, %v", n, err)
		}
		mirror.waitStart(t, 0)
		mirror.release[0] <- struct{}{}
		runPost(t, fc)
		mirror.mu.Lock()
		got := append([]bool(nil), mirror.follows...)
		mirror.mu.Unlock()
		if len(got) != 3 || got[0] || !got[1] || got[2] {
			t.Fatalf("queued at once %v: writes marked following %v, want [false true false]", atOnce, got)
		}
		if s.Busy() {
			t.Fatal("the session is still busy with nothing in flight")
		}
	}
}

// While writes run, only a Produce (with a response) naming none of their partitions is
// taken; a Produce by topic id is named through the catalog; anything else waits.
func TestMayOverlap(t *testing.T) {
	s := New(Config{Catalog: fuzzCatalog{}}, &fakeConn{})
	defer s.Close()
	s.hold([]writeKey{{topic: "t", partition: 0}, {topic: "mtopic", partition: 3}}, 100)
	produce := func(version int16, acks int16, topic string, id [16]byte, p int32) []byte {
		req := kmsg.NewPtrProduceRequest()
		req.SetVersion(version)
		req.Acks = acks
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic, rt.TopicID = topic, id
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition, rp.Records = p, []byte{1}
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		return reqFrame(req, 9)
	}
	md := kmsg.NewPtrMetadataRequest()
	md.SetVersion(12)
	garbled := produce(11, -1, "other", [16]byte{}, 0)
	garbled = garbled[:len(garbled)-3]
	putLen(garbled)
	for name, c := range map[string]struct {
		frame []byte
		want  bool
	}{
		"another partition of a topic being written": {produce(11, -1, "mtopic", [16]byte{}, 2), true},
		"a partition being written":                  {produce(11, -1, "mtopic", [16]byte{}, 3), false},
		"another topic":                              {produce(11, 1, "other", [16]byte{}, 3), true},
		"by id, a partition being written":           {produce(13, -1, "", [16]byte{2}, 0), false},
		"by id, another partition":                   {produce(13, -1, "", [16]byte{2}, 1), true},
		"acks=0":                                     {produce(11, 0, "other", [16]byte{}, 0), false},
		"not a Produce":                              {reqFrame(md, 9), false},
		"a body that does not decode":                {garbled, false},
		"at offset with a from offset, a partition being written": {atOffsetFrameFrom("mtopic", 3, 9, 50), true},
		"at offset without one, a partition being written":        {atOffsetFrameFrom("mtopic", 3, 9, -1), false},
	} {
		if got := s.mayOverlap(c.frame); got != c.want {
			t.Errorf("%s: mayOverlap %v, want %v", name, got, c.want)
		}
	}
	// Bounded: past maxOverlapBytes of requests held, or maxOverlapWrites writes, the next waits.
	other := produce(11, -1, "other", [16]byte{}, 0)
	s.writeBytes = maxOverlapBytes - len(other) + 1
	if s.mayOverlap(other) {
		t.Error("a request past the bytes bound was taken")
	}
	s.writeBytes = 100
	s.writes = maxOverlapWrites
	if s.mayOverlap(other) {
		t.Error("a request past the writes bound was taken")
	}
	// A partition's pipelined writes are bounded too.
	s.writes = 1
	piped := atOffsetFrameFrom("mtopic", 3, 9, 50)
	s.writing[writeKey{topic: "mtopic", partition: 3}] = maxPartitionDepth
	if s.mayOverlap(piped) {
		t.Error("a write of a partition past maxPartitionDepth was taken")
	}
	s.writing[writeKey{topic: "mtopic", partition: 3}] = 1
	s.release([]writeKey{{topic: "t", partition: 0}, {topic: "mtopic", partition: 3}}, 100)
	if s.writes != 0 || s.writeBytes != 0 || len(s.writing) != 0 {
		t.Fatalf("after release: %d writes of %d bytes, %v", s.writes, s.writeBytes, s.writing)
	}
}
