package session

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/magic"
)

// streamConn is a transport that streams requests: it records the frames the session finishes.
type streamConn struct {
	fakeConn
	finished [][]byte
}

func (c *streamConn) FinishStream(frame []byte) {
	c.finished = append(c.finished, append([]byte(nil), frame...))
}

func plainProduce(topic string, corr int32) []byte {
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(9)
	req.Acks, req.TimeoutMillis = -1, 30000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = make([]byte, 4096)
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return reqFrame(req, corr)
}

// A streamed Produce request that is judged to go on unchanged is finished by the transport
// (FinishStream, never WriteUpstream); one refused is cut: the session returns ErrStreamCut and
// sends nothing, so the transport closes the connection before the request's last byte.
func TestStreamedProduce(t *testing.T) {
	fc := &streamConn{}
	s := New(Config{Catalog: fuzzCatalog{}}, fc) // fuzzCatalog: names starting with "m" are mirror topics
	ok := plainProduce("ordinary", 1)
	if !s.StartStream(ok[:64]) {
		t.Fatal("a plain Produce request was not streamed")
	}
	if s.StartStream(ok[:64]) {
		t.Fatal("a second frame was streamed before the first was given")
	}
	if n, err := s.HandleClient(ok); err != nil || n != len(ok) {
		t.Fatalf("HandleClient: %d of %d, %v", n, len(ok), err)
	}
	if len(fc.finished) != 1 || string(fc.finished[0]) != string(ok) || fc.upstream.Len() != 0 {
		t.Fatalf("finished %d frames, %d bytes written upstream otherwise", len(fc.finished), fc.upstream.Len())
	}

	refused := plainProduce("mirrored", 2)
	if !s.StartStream(refused[:64]) {
		t.Fatal("a Produce request to a topic judged later was not streamed")
	}
	_, err := s.HandleClient(refused)
	if !errors.Is(err, ErrStreamCut) {
		t.Fatalf("a refused streamed request: %v, want ErrStreamCut", err)
	}
	if len(fc.finished) != 1 || fc.upstream.Len() != 0 || fc.client.Len() != 0 {
		t.Fatalf("a refused streamed request sent something: finished %d, upstream %d, client %d bytes",
			len(fc.finished), fc.upstream.Len(), fc.client.Len())
	}
}

// What is never streamed: other requests, requests with the magic header, a transport that
// cannot stream, a connection with work under way.
func TestStreamNotStarted(t *testing.T) {
	s := New(Config{Catalog: fuzzCatalog{}}, &streamConn{})
	md := kmsg.NewPtrMetadataRequest()
	md.SetVersion(12)
	if f := reqFrame(md, 1); s.StartStream(f) {
		t.Fatal("a Metadata request was streamed")
	}
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(11)
	tagged := req.AppendTo(magic.AppendHeader([]byte{0, 0, 0, 0}, 0, 11, 3, "mirror", -1))
	putLen(tagged)
	if s.StartStream(tagged) {
		t.Fatal("a request with the magic header was streamed")
	}
	if s.StartStream(plainProduce("ordinary", 4)[:10]) {
		t.Fatal("a frame whose header has not arrived was streamed")
	}
	if New(Config{}, &fakeConn{}).StartStream(plainProduce("ordinary", 5)) {
		t.Fatal("streamed over a transport without FinishStream")
	}
	s.blocked = true
	if s.StartStream(plainProduce("ordinary", 6)) {
		t.Fatal("streamed while an asynchronous step was under way")
	}
}
