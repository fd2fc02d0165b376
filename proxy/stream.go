package proxy

import (
	"errors"
	"fmt"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/panjf2000/gnet/v2"
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/session"
)

// Streamed requests (session.StartStream): a large Produce request is passed to the broker as
// it arrives, all but its last byte, and finished once the session forwarded it unchanged.

// streamStep is the most of a streamed frame read at once: pieces this size are passed on
// while they are still in the processor's cache.
const streamStep = 256 << 10

// errStreamOrder closes a connection where something else was to go upstream while a streamed
// frame was unfinished; the session never does that (a safety net: the broker would read the
// bytes as the frame's rest).
var errStreamOrder = errors.New("a request was to be forwarded while a streamed one was unfinished")

// streamState is the client frame being streamed, if any.
type streamState struct {
	on      bool // its rest is still to be sent (FinishStream)
	reading bool // it is still being read into the connection's frame buffer
	sent    int  // its bytes written to the upstream
	size    int  // its whole length
	// compact: its record sets are dropped from the frame buffer once sent (compactStream);
	// sizes and offsets above count the frame as it is held, the dropped bytes left out.
	compact bool
}

// streamLag is the most of a streamed request read ahead of what the broker's socket took;
// past it the client is not read until the socket has room (backlogged), as a streaming
// proxy's copy loop waits on its write, so a request of tens of MiB to a slow broker is not
// read whole into memory. It is the broker socket's send buffer (4 MiB by default): bounds of
// 1 and 2 MiB held the producers of the pass-through benchmark back often enough to cost
// 11-14% of their throughput (docs/benchmarks.md, "Run 6").
const streamLag = 4 << 20

// errStreamLag stops reading a streamed frame for now (assembly.fill): see streamLag.
var errStreamLag = errors.New("streamed request ahead of the broker")

// streamLagging reports whether the streamed frame being read is too far ahead of its broker.
func (cl *gnetClient) streamLagging() bool {
	return cl.stream.reading && len(cl.inFrame.buf)-cl.stream.sent >= streamLag
}

// compactFrom is the size from which a streamed request's record sets are dropped once sent:
// a smaller one fits a pooled buffer, and dropping would save little.
const compactFrom = keptFrame

// compactCap bounds what a compacted request may hold below its sent mark: its topics and
// partitions, decoded again at every piece, and the part sent of the record set being read; a
// request made of more than that (a client sending megabytes of partition headers, or a record
// set of several MiB) is held whole from there on, as one not compacted.
const compactCap = 4 << 20

// cutClients remembers the clients (address and client id) whose streamed request was cut, so
// that their next requests are judged whole before anything is forwarded and a refusal reaches
// them as an answer with its error and message rather than as a closed connection.
type cutClients struct {
	lru *lru.Cache[string, time.Time] // when each was cut; bounded, so forgetting is safe
}

// cutMemory is how long a client whose streamed request was cut is not streamed again.
const cutMemory = 10 * time.Minute

func newCutClients() *cutClients {
	c, _ := lru.New[string, time.Time](4096) // fails only for a size below 1
	return &cutClients{lru: c}
}

func cutKey(ip, clientID string) string { return ip + "\x00" + clientID }

func (c *cutClients) add(ip, clientID string) { c.lru.Add(cutKey(ip, clientID), time.Now()) }

func (c *cutClients) has(ip, clientID string) bool {
	at, ok := c.lru.Get(cutKey(ip, clientID))
	return ok && time.Since(at) < cutMemory
}

// startStream decides, at the start of a large client frame whose first bytes are in c's
// inbound buffer, whether it is streamed.
func (cl *gnetClient) startStream(c gnet.Conn, want int) bool {
	// backlogged covers a request rest still waiting for the broker's socket (cl.direct).
	if cl.up == nil || cl.stream.on || len(cl.pendingUp) > 0 || cl.t.watch == nil || cl.backlogged() ||
		cl.t.srv.cut.has(cl.ip, cl.sess.ClientID()) {
		return false
	}
	prefix, err := c.Peek(min(c.InboundBuffered(), 4<<10))
	if err != nil || !cl.sess.StartStream(prefix) {
		return false
	}
	cl.stream = streamState{on: true, reading: true, size: want, compact: want > compactFrom}
	cl.t.srv.metrics.streamed.Inc()
	return true
}

// streamOut writes what arrived of the streamed frame, all but its last byte, as far as the
// upstream's socket takes it directly; the rest waits in the frame buffer (FinishStream).
func (cl *gnetClient) streamOut() error {
	if !cl.stream.reading || cl.up == nil || cl.up.OutboundBuffered() > 0 || len(cl.direct) > 0 {
		if cl.streamLagging() {
			if len(cl.direct) == 0 {
				// gnet still holds earlier requests for the socket: told when it has room
				// (a rest in cl.direct has armed the watch already).
				cl.armWatch()
			}
			return errStreamLag
		}
		return nil
	}
	end := min(len(cl.inFrame.buf), cl.stream.size-1)
	if end <= cl.stream.sent {
		return nil
	}
	n, err := writeFD(cl.up.Fd(), cl.inFrame.buf[cl.stream.sent:end])
	short := n < end-cl.stream.sent
	cl.stream.sent += n
	if err != nil {
		return fmt.Errorf("writing a streamed request to the broker: %w", err)
	}
	cl.compactStream()
	if cl.streamLagging() {
		if short {
			cl.armWatch() // the socket is full: flushDirect goes on when it has room
		}
		return errStreamLag
	}
	return nil
}

// compactStream drops the record sets of the streamed request that are sent already from its
// buffer (session.CompactProduce), so that a Produce request of megabytes costs about one
// record set of memory while it is read and judged, not its whole size: producing to 16
// partitions, each connection held requests of 7-8 MiB. The frame's claimed size, the bytes
// still to read and the bytes sent shrink by what was dropped; what is still to be sent is
// never touched (the dropped bytes all lie before the sent mark).
//
// Bytes are dropped as soon as they were sent, which keeps the bytes read and written next
// in the same few MiB of the buffer, still in the processor's cache: dropping them only when the
// buffer's room ran short saved the moves of the unsent bytes but cost as much again in the
// kernel's copies into a buffer read through from end to end.
func (cl *gnetClient) compactStream() {
	if !cl.stream.compact || cl.stream.sent < 4 {
		return
	}
	a := &cl.inFrame
	out, removed, ok := session.CompactProduce(a.buf, cl.stream.sent)
	if !ok || cl.stream.sent-removed > compactCap {
		cl.stream.compact = false
	}
	if removed == 0 {
		return
	}
	a.buf, a.want = out, a.want-removed
	cl.stream.sent -= removed
	cl.stream.size -= removed
	cl.t.srv.metrics.streamDropped.Add(float64(removed))
	// The session counts the request's bytes from the frame it is handed: these are not in it.
	cl.t.srv.metrics.requestBytes[idx(int16(kmsg.Produce))].Add(float64(removed))
}

// FinishStream sends the streamed frame's rest (session.StreamConn).
func (cl *gnetClient) FinishStream(frame []byte) {
	if !cl.stream.on || len(frame) != cl.stream.size {
		cl.failClient("client", errStreamOrder)
		return
	}
	rest := frame[cl.stream.sent:]
	cl.stream = streamState{}
	cl.WriteUpstream(rest)
}

// noteCut counts a connection ended because its streamed request was cut, and remembers the
// client.
func (cl *gnetClient) noteCut(err error) {
	if errors.Is(err, session.ErrStreamCut) {
		cl.t.srv.metrics.streamCuts.Inc()
		cl.t.srv.cut.add(cl.ip, cl.sess.ClientID())
	}
}
