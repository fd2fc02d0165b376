// Package session is one client connection's Kafka protocol handling, independent of how the
// bytes travel: it takes bytes from the client and from the upstream broker, consumes whole
// frames, and hands frames back through the Conn its transport implements. It keeps responses
// in request order (a FIFO of slots), decodes only the api keys and versions a handler needs,
// and bounds what it holds (frame size, in-flight requests, unsent responses).
//
// A session is not safe for concurrent use: its transport calls it from one goroutine at a
// time (the gnet transport from the connection's event loop, the goroutine transport under a
// per-connection lock).
package session

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"offsetgate/catalog"
	"offsetgate/rules"
	"offsetgate/view"
)

// Conn is what a transport gives a session.
type Conn interface {
	// WriteClient sends bytes to the client. The transport copies what it cannot send at once,
	// so the caller may reuse b after the call.
	WriteClient(b []byte)
	// WriteClientv sends the slices as one write, in order, with WriteClient's contract (the
	// caller may reuse them after the call).
	WriteClientv(bs [][]byte)
	// WriteUpstream sends bytes to the upstream broker, with the same contract.
	WriteUpstream(b []byte)
	// ClientPending is the number of bytes written to the client and not yet sent.
	ClientPending() int
	// Resume asks the transport to call HandleClient again soon, with the client bytes it still
	// holds; the session calls it when it stopped consuming and can go on.
	Resume()
	// WaitClientDrain asks the transport to call Resume once the client's unsent bytes fall
	// below the low-water mark.
	WaitClientDrain()
	// Post runs fn on the session's goroutine (under its lock), from any goroutine; after
	// the connection closed it may drop fn.
	Post(fn func())
	// Close ends the connection, from a function run by Post (an asynchronous step found that
	// its request cannot be judged); err says why, for the log and the metrics.
	Close(err error)
}

// Addresses maps upstream brokers to the addresses clients must be told instead.
type Addresses interface {
	// Broker records an upstream broker's real address and returns the proxy address that
	// stands for it.
	Broker(nodeID int32, host string, port int32) (string, int32)
}

// Observer receives per-request measurements; the proxy exports them as metrics.
type Observer interface {
	Request(key int16, bytes int)
	Response(key int16, bytes int, latency time.Duration)
	Rewrite(key int16)
	LocalAnswer(key int16)
	// WaitTimeout counts a request whose wait for the destination ran out of time.
	WaitTimeout(key int16)
}

// Config is what every session of a listener shares. It is read-only after start.
type Config struct {
	// MaxFrame caps a frame's size (after its 4-byte length).
	MaxFrame int
	// MaxInFlight caps requests sent upstream or waiting in order for their response.
	MaxInFlight int
	// ClientHighWater stops the forwarding of a client's requests while the responses it has
	// not read are above it.
	ClientHighWater int
	Addresses       Addresses
	Observer        Observer
	Log             *zap.Logger
	// Draining, when it returns true, stops the session from taking new requests (graceful
	// shutdown lets in-flight ones finish).
	Draining func() bool
	// InFlight, when set, counts the requests of all sessions that wait for a response.
	InFlight *atomic.Int64
	// Admit, when set, decides whether a connection with this identity may send requests
	// other than ApiVersions and the SASL exchange; an error closes the connection.
	Admit func(id rules.Identity) error
	// UpstreamLoggedIn says offsetgate logged the upstream connection in itself before the
	// client's first byte (an mTLS identity mapped to destination credentials): the client's
	// own SaslHandshake and SaslAuthenticate are refused.
	UpstreamLoggedIn bool
	// NoSASL says the listener takes no SASL login (security protocol PLAINTEXT or SSL): a
	// SaslHandshake is answered ILLEGAL_SASL_STATE, as a Kafka broker does on such a listener.
	NoSASL bool
	// OnIdentity hears when a connection's identity is established or changes (a SASL login
	// completes), for the one log line per connection and the rules' caches.
	OnIdentity func(id rules.Identity)
	// Policy returns the current approved-clients snapshot (it changes on config reload).
	Policy func() *rules.Policy
	// Catalog knows topic ids and mirror marks; nil turns the mirror rules off.
	Catalog Catalog
	// Mirror, when set, takes over admitted produce-at-offset partitions; without it they are
	// forwarded as they came.
	Mirror Mirror
	// View, when set, gives consumers of mirror topics the source's offsets, epochs and
	// batches; without it they see the destination's.
	View View
	// NodeShift, when above zero, makes this a source connection (source.go): the upstream is
	// a broker of the source cluster, whose node ids clients see raised by NodeShift. Catalog,
	// Mirror and View are then nil: the mirror rules judge the destination only.
	NodeShift int32
	// Moves, on a source connection, is the groups' live moves (moves.go).
	Moves Moves
	// SourceFetchWait, on a source connection, bounds how long a consumer's Fetch may wait at
	// the source for records (its max wait is lowered to it); 0 leaves the client's. A fetch
	// waiting at the source when a topic is sealed for its promotion keeps waiting there,
	// with nothing new to come, and its consumer gets the promoted topic's records only after
	// it: 5 s with franz-go's default wait.
	SourceFetchWait time.Duration
	// CarryLogins, on a source connection of a SASL listener, lets promoted topics' requests
	// be carried to the destination although the client's own login reached the source only
	// (promoted.go).
	CarryLogins bool
	// WaitTimeout bounds a request's wait for the destination: lookups, source-view loads and
	// durable writes (DefaultWaitTimeout when zero).
	WaitTimeout time.Duration
}

// View is the source view of mirror partitions (package view). Get never blocks; Load and
// LoadTopic read ledgers and run on asynchronous steps only.
type View interface {
	Get(id catalog.TopicID, partition int32) *view.Partition
	Load(ctx context.Context, t catalog.Topic, partition int32) (*view.Partition, error)
	LoadTopic(ctx context.Context, t catalog.Topic) error
	LoadTopics(ctx context.Context, ts []catalog.Topic) error
	TopicLoaded(id catalog.TopicID) bool
	// LoadLater loads a partition in the background (one added to a topic loaded whole).
	LoadLater(t catalog.Topic, partition int32)
}

// Mirror is the produce-at-offset write path (package atoffset). Write blocks: the session
// calls it from its asynchronous step, never from its own goroutine.
type Mirror interface {
	// Write mirrors one partition's source batches; code 0 means written (or an exact retry),
	// and base is then the source offset of the first batch. from is the source offset the
	// request continues from (the magic header's; -1: not given); follows: the request was
	// sent behind an unanswered one for the partition. queued, when not nil, is called once
	// the write holds its place among the partition's writes: the partition's next write may
	// be started then (overlap.go).
	Write(ctx context.Context, t catalog.Topic, partition int32, records []byte, from int64, follows bool, queued func()) (code int16, msg string, base int64)
}

// Catalog is what the session asks about the destination's topics (package catalog).
type Catalog interface {
	ByName(name string) (catalog.Topic, bool)
	ByID(id catalog.TopicID) (catalog.Topic, bool)
	Observe(name string, id catalog.TopicID)
	Removed(id catalog.TopicID) bool
	// Mirrors lists the mirror topics whose names are known.
	Mirrors() []catalog.Topic
	// HasMirrors reports, without a lock, whether any mirror topic exists.
	HasMirrors() bool
	Refresh(ctx context.Context, names []string) error
	Store(ctx context.Context, id catalog.TopicID, m rules.Mark) error
	// StoreIntent and WithdrawIntent hold a name back while a mirror topic of that name is
	// created (catalog/creating.go).
	StoreIntent(ctx context.Context, name, who string) (string, error)
	WithdrawIntent(ctx context.Context, key string) error
	// Request sends a request of offsetgate's own to the destination (with its own rights).
	Request(ctx context.Context, req kmsg.Request) (kmsg.Response, error)
}

// Defaults for Config fields left zero.
const (
	DefaultMaxFrame        = 100 << 20
	DefaultMaxInFlight     = 256
	DefaultClientHighWater = 8 << 20
)

// ErrFrame marks a framing error: the connection must be closed.
var ErrFrame = errors.New("bad frame")

// slot is one request awaiting its response, in request order.
type slot struct {
	key, version int16
	corr         int32
	start        time.Time
	upstream     bool // the response comes from the upstream broker
	done         bool // out holds the response
	noResp       bool // the request gets no response at all (acks=0 Produce)
	rewrite      rewriteFunc
	out          []byte
	// asIs: a Fetch answer that holds nothing to change (answer_stream.go), planned while no
	// mirror topic existed (mirrorsOff) or not; learnSession: its fetch session's id is to be
	// read from it.
	asIs, mirrorsOff, learnSession bool
}

// Session is one client connection.
type Session struct {
	cfg  Config
	conn Conn
	log  *zap.Logger

	slots    ring // requests in order; the head is the next response the client gets
	upstream ring // sequence numbers of slots awaiting the upstream, in send order
	paused   bool

	clientID string
	ident    rules.Identity
	admitted bool
	sasl     saslState

	// closing ends the connection once the responses processed so far are written (a SASL
	// login the destination refused).
	closing error

	blocked bool // an async request is pending: take no more client requests
	// streamNext: the next client frame is being streamed (stream.go); streamWaiting: a
	// streamed request's asynchronous step is running, its end not yet sent.
	streamNext, streamWaiting bool
	// writes is the number of produce-at-offset writes running while the connection goes on
	// (overlap.go), writing their partitions.
	writes     int
	writeBytes int
	writing    map[writeKey]int
	// turns holds, per partition being written, a channel closed once its newest write holds
	// its place in the writer: the partition's next write starts after it (overlap.go).
	turns map[writeKey]chan struct{}
	// carrier carries moved groups' requests to the destination (moves.go); made on first use.
	carrier Carrier
	// staleFetch: mirror partitions whose index fell behind D in a fetch answer.
	staleFetch []mirrorPart
	// skippedFetch: mirror partitions last fetched from inside a filled hole, sent to D past
	// its fillers, and the source offset the client asked for (fillerSkip, 01_fetch.go).
	skippedFetch map[partID]int64
	// fetchGen, on a source connection, is how many topics were promoted when the client last
	// sent a full Fetch: an incremental one after a later promotion may rely on a fetch
	// session of the source's that holds a promoted topic (01_fetch_source.go).
	fetchGen int64
	// A rewrite that builds a large response (restored Fetch answers) writes it into outBuf
	// after headroom bytes left for the frame header, so the response is neither grown by
	// append nor copied again into a frame; outBuf is reused once the client has it.
	headroom int
	outBuf   []byte
	outUsed  bool // the last rewrite's result lives in outBuf
	// vec builds an answer written as slices (vector.go); vecUsed: the last rewrite's result in
	// outBuf holds tokens for vec's fields, encoded flexible or not (vecFlexible).
	vec         vecAnswer
	vecUsed     bool
	vecFlexible bool
	// answering: the transport is passing the answer at the head of the FIFO to the client as
	// it arrives (answer_stream.go), answerSize bytes; fetchClean: fetch sessions opened on this
	// connection that hold no partition of a source-view topic.
	answering  bool
	answerSize int
	fetchClean []int32
	// held is the bytes of responses kept in their slots, waiting for an earlier one.
	held   int
	closed bool
	ctx    context.Context // ends when the connection does; async work watches it
	cancel context.CancelFunc
}

// New makes a session for one client connection.
func New(cfg Config, conn Conn) *Session {
	if cfg.MaxFrame <= 0 {
		cfg.MaxFrame = DefaultMaxFrame
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if cfg.ClientHighWater <= 0 {
		cfg.ClientHighWater = DefaultClientHighWater
	}
	if cfg.WaitTimeout <= 0 {
		cfg.WaitTimeout = DefaultWaitTimeout
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.Observer == nil {
		cfg.Observer = nopObserver{}
	}
	if cfg.Policy == nil {
		cfg.Policy = func() *rules.Policy { return nil }
	}
	s := &Session{cfg: cfg, conn: conn, log: cfg.Log}
	if cfg.UpstreamLoggedIn {
		s.sasl.phase = saslDone
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s
}

// InFlight is the number of requests waiting for their response.
func (s *Session) InFlight() int { return s.slots.len() }

// Busy reports whether a request is waiting for its response or for an asynchronous step.
func (s *Session) Busy() bool { return s.slots.len() > 0 || s.blocked }

// Held is the bytes of responses the session keeps until the responses before them are ready
// (the transport counts what it buffers itself).
func (s *Session) Held() int { return s.held }

// ClientID is the client.id of the last request that carried one.
func (s *Session) ClientID() string { return s.clientID }

// SetIdentity sets what the transport proved (mTLS) and knows (the source address) before the
// first byte is handled.
func (s *Session) SetIdentity(id rules.Identity) {
	s.ident = id
	s.admitted = false
	if s.cfg.OnIdentity != nil && id.Proven() {
		s.cfg.OnIdentity(id)
	}
}

// Identity is the connection's identity as far as it is known now.
func (s *Session) Identity() rules.Identity { return s.ident }

// ErrForbidden closes a connection that may not send what it sent.
var ErrForbidden = errors.New("forbidden")

// ErrUndecodable closes a connection that sent a request of an API offsetgate judges or
// translates which it cannot decode. Forwarding it unjudged would let an encoding the broker
// reads differently from kmsg (an overlong varint, say) write where offsetgate refuses; Kafka
// itself closes the connection on a request it cannot parse.
var ErrUndecodable = errors.New("undecodable request")

// ErrUnjudged closes a connection whose request could not be judged because something it
// needed was not available (a topic lookup or a source view failed): the client reconnects and
// retries, and nothing is forwarded on a guess.
var ErrUnjudged = errors.New("request could not be judged")

// undecodable is the error of a request body kmsg could not read.
func (r *request) undecodable(err error) error {
	return fmt.Errorf("%w: %s v%d: %v", ErrUndecodable, kmsg.NameForKey(r.h.key), r.h.version, err)
}

// frameLen validates a frame's 4-byte size prefix.
func (s *Session) frameLen(p []byte, from string) (int, error) {
	size := int32(binary.BigEndian.Uint32(p))
	if size < 0 || int(size) > s.cfg.MaxFrame {
		if from == "client" && p[0] == 0x16 && p[1] == 0x03 {
			return 0, fmt.Errorf("%w: a TLS handshake on a plaintext listener (size prefix %d)", ErrFrame, size)
		}
		return 0, fmt.Errorf("%w: %s frame of %d bytes exceeds the %d-byte cap", ErrFrame, from, size, s.cfg.MaxFrame)
	}
	return int(size), nil
}

// HandleClient consumes as many whole client frames from buf as it may and returns how many
// bytes it consumed. An error means the connection must be closed.
func (s *Session) HandleClient(buf []byte) (int, error) {
	s.paused = false
	if s.closing != nil {
		return 0, s.closing
	}
	off := 0
	fwdStart := -1 // start of a run of frames forwarded unchanged, written in one go
	flushFwd := func(end int) {
		if fwdStart >= 0 {
			s.conn.WriteUpstream(buf[fwdStart:end])
			fwdStart = -1
		}
	}
	for len(buf)-off >= 4 && !s.blocked {
		size, err := s.frameLen(buf[off:], "client")
		if err != nil {
			flushFwd(off)
			return off, err
		}
		if size < 8 {
			flushFwd(off)
			return off, fmt.Errorf("%w: %d-byte request is shorter than a request header", ErrFrame, size)
		}
		if len(buf)-off < 4+size {
			break
		}
		if s.slots.len() >= s.cfg.MaxInFlight || (s.cfg.Draining != nil && s.cfg.Draining()) {
			s.paused = true
			break
		}
		if s.conn.ClientPending() > s.cfg.ClientHighWater {
			s.paused = true
			s.conn.WaitClientDrain()
			break
		}
		frame := buf[off : off+4+size]
		if s.writes > 0 && !s.mayOverlap(frame) {
			// Taken once the writes before it are done (their finish resumes the connection).
			break
		}
		streamed := s.streamNext
		out, asIs, err := s.request(frame)
		if err != nil {
			flushFwd(off)
			return off, err
		}
		if streamed {
			flushFwd(off)
			if !s.streamWaiting {
				if err := s.streamedOutcome(frame, asIs); err != nil {
					return off, err
				}
			}
			off += 4 + size
			continue
		}
		switch {
		case asIs:
			if fwdStart < 0 {
				fwdStart = off
			}
		default:
			flushFwd(off)
			if out != nil {
				s.conn.WriteUpstream(out)
			}
		}
		off += 4 + size
	}
	flushFwd(off)
	s.flush()
	return off, nil
}

// request is one client request as a handler sees it, and what the handler decided.
type request struct {
	h     reqHeader
	frame []byte // the whole frame; valid only during the handler call unless async
	body  []byte
	magic magicTag // the produce-at-offset header tag, if the request carries one

	// Outcome. Nothing set: forward the frame unchanged.
	replace []byte      // forward this frame instead
	answer  []byte      // answer locally with this response frame; forward nothing
	drop    bool        // forward nothing and answer nothing (an acks=0 request refused whole)
	onResp  rewriteFunc // response hook for this request, instead of the handler's
	// async, when set, is blocking work (a lookup, a durable write) that runs off the
	// session's goroutine within Config.WaitTimeout; the function it returns finishes the
	// request on it, and an error it returns closes the connection (nothing of the request is
	// forwarded). The session takes no further request from this client until then, so order
	// is kept.
	async func(ctx context.Context) func(s *Session, r *request) error
	// asyncWait, when above zero, bounds async instead of WaitTimeout (a request the
	// destination may hold for long, like a JoinGroup).
	asyncWait time.Duration
	// writes, set with async, says the blocking work is produce-at-offset writes of these
	// partitions and nothing else: the connection's next requests need not wait for it
	// (overlap.go). Its answer's place is the slot reserved at seq.
	writes   []writeKey
	reserved bool
	seq      uint64

	streamed bool         // its start is already on its way upstream (stream.go)
	req      kmsg.Request // the decoded body (judge.go)
	lookedUp bool         // the decision's needs were fetched from the destination
	detached bool         // frame and body are the request's own copy
	sealHeld bool         // a Produce already held for a sealed topic's promotion (00_produce_source.go)

	// plainFetch: a Fetch whose answer holds nothing to change but broker endpoints;
	// learnSession: it opens a fetch session that holds no source-view topic
	// (answer_stream.go).
	plainFetch, learnSession bool
}

// request handles one client frame. It returns asIs when the frame goes upstream unchanged,
// or another frame to send upstream in its place, or neither (answered locally or pending).
func (s *Session) request(frame []byte) (out []byte, asIs bool, err error) {
	p := frame[4:]
	h, err := parseReqHeader(p)
	if err != nil {
		return nil, false, fmt.Errorf("%w: %v", ErrFrame, err)
	}
	if h.hasID && string(h.clientID) != s.clientID {
		s.clientID = string(h.clientID)
		s.ident.ClientID = s.clientID
	}
	s.cfg.Observer.Request(h.key, len(frame))
	if !Supported(h.key, h.version) {
		return nil, false, s.unsupported(h)
	}
	if k := kmsg.Key(h.key); k != kmsg.SASLHandshake && k != kmsg.SASLAuthenticate && s.saslBusy() {
		if s.closing != nil {
			return nil, false, s.closing
		}
		return nil, false, fmt.Errorf("%w: %s sent api key %d during a SASL login (nothing but the login's next step is taken until it completes)", ErrForbidden, s.ident, h.key)
	}
	if k := kmsg.Key(h.key); s.cfg.Admit != nil && !s.admitted && k != kmsg.SASLHandshake && k != kmsg.ApiVersions && k != kmsg.SASLAuthenticate {
		if err := s.cfg.Admit(s.ident); err != nil {
			return nil, false, fmt.Errorf("%w: %s: %v", ErrForbidden, s.ident, err)
		}
		s.admitted = true
	}
	r := &request{h: h, frame: frame, body: p[h.bodyOff:], magic: h.magic, streamed: s.streamNext}
	s.streamNext = false
	hd := handlerFor(h.key)
	if hd != nil && hd.isActive(s) {
		if err := s.judge(hd, r); err != nil {
			return nil, false, err
		}
	} else if err := s.decodable(r); err != nil {
		return nil, false, err
	}
	if s.cfg.NodeShift > 0 {
		if err := s.fromSource(r); err != nil {
			return nil, false, err
		}
	}
	if r.magic.Present && !r.magic.stripped && !s.cfg.Policy().Native() && r.replace == nil && r.answer == nil && r.async == nil {
		// A header tag nobody here understands is never forwarded to a stock broker.
		r.replace = stripMagic(frame, h)
	}
	sl := slot{key: h.key, version: h.version, corr: h.corr, start: time.Now()}
	if hd != nil {
		sl.noResp = hd.noResponse != nil && hd.noResponse(h, r.body)
		if hd.response != nil && h.version >= hd.responseFrom {
			sl.rewrite = hd.response
		}
	}
	if r.async != nil {
		s.startAsync(sl, r)
		return nil, false, nil
	}
	return s.complete(sl, r), r.replace == nil && r.answer == nil && !r.drop, nil
}

// complete queues the request's slot and returns the frame to forward in place of the
// original, if any. The caller forwards the original when nothing else was decided.
func (s *Session) complete(sl slot, r *request) []byte {
	if r.onResp != nil {
		sl.rewrite = r.onResp
	}
	switch {
	case r.drop:
		if r.reserved {
			// Only an acks=0 request is dropped, and those never reserve a slot: answered
			// empty rather than held for ever.
			sl.done = true
			s.place(sl, r)
		}
		return nil
	case r.answer != nil:
		if sl.noResp {
			return nil
		}
		s.cfg.Observer.LocalAnswer(sl.key)
		sl.done, sl.out = true, r.answer
		s.held += len(sl.out)
		s.place(sl, r)
		return nil
	}
	if !sl.noResp {
		// acks=0 Produce has no response, so nothing waits for one.
		sl.upstream = true
		s.asIsFetch(&sl, r)
		s.upstream.pushSeq(s.place(sl, r))
	}
	return r.replace
}

// place puts a request's slot in the FIFO: where it was reserved when the request's write
// started (overlap.go), else at the end. It returns the slot's sequence number.
func (s *Session) place(sl slot, r *request) uint64 {
	if r.reserved {
		*s.slots.at(r.seq) = sl
		return r.seq
	}
	s.count(1)
	return s.slots.push(sl)
}

// startAsync runs a request's blocking work off the session's goroutine. Until it is finished
// the connection takes no further client request, unless the work is produce-at-offset writes
// (overlap.go): then the request's answer gets its slot now and the connection goes on.
func (s *Session) startAsync(sl slot, r *request) {
	r.detach()
	work := r.async
	r.async = nil
	switch {
	case r.reserved:
		// More work of a write already under way: its slot and partitions are held.
	case r.writes != nil && !sl.noResp:
		r.seq = s.place(sl, r)
		r.reserved = true
		s.hold(r.writes, len(r.frame))
		// A lookup of this request may have blocked the connection until now.
		s.blocked = false
	default:
		s.blocked = true
	}
	if r.streamed {
		s.streamWaiting = true
	}
	ctx := s.ctx
	go func() {
		wait := s.cfg.WaitTimeout
		if r.asyncWait > 0 {
			wait = r.asyncWait
		}
		wctx, cancel := context.WithTimeout(ctx, wait)
		fin := work(wctx)
		cancel()
		s.conn.Post(func() {
			if s.closed {
				return
			}
			if err := fin(s, r); err != nil {
				s.closed = true
				s.conn.Close(err)
				return
			}
			if r.async != nil {
				// Finishing asked for more blocking work: run it too. When that work is a
				// write the connection may go on meanwhile (overlap.go).
				s.startAsync(sl, r)
				if !s.blocked {
					s.conn.Resume()
				}
				return
			}
			if r.reserved {
				s.release(r.writes, len(r.frame))
			} else {
				s.blocked = false
			}
			out := s.complete(sl, r)
			if r.streamed {
				s.streamWaiting = false
				if err := s.streamedOutcome(r.frame, out == nil && r.answer == nil && !r.drop); err != nil {
					s.closed = true
					s.conn.Close(err)
					return
				}
				s.flush()
				s.conn.Resume()
				return
			}
			switch {
			case out != nil:
				s.conn.WriteUpstream(out)
			case r.answer == nil && !r.drop:
				s.conn.WriteUpstream(r.frame)
			}
			s.flush()
			s.conn.Resume()
		})
	}()
}

// unsupported answers or refuses a request offsetgate cannot parse.
func (s *Session) unsupported(h reqHeader) error {
	if kmsg.Key(h.key) == kmsg.ApiVersions {
		// KIP-511: a too-new ApiVersions gets a v0 answer with UNSUPPORTED_VERSION and the
		// versions of ApiVersions offsetgate does support, so the client retries lower.
		s.local(h, apiVersionsTooNew(h.corr))
		return nil
	}
	if kmsg.Key(h.key) == kmsg.SASLHandshake && h.version == 0 {
		s.local(h, saslHandshakeV0Refusal(h.corr))
		return nil
	}
	return fmt.Errorf("%w: api key %d version %d is not supported by offsetgate (never advertised)", ErrFrame, h.key, h.version)
}

// local queues an answer offsetgate makes itself; it leaves in request order.
func (s *Session) local(h reqHeader, frame []byte) {
	s.cfg.Observer.LocalAnswer(h.key)
	s.held += len(frame)
	s.slots.push(slot{key: h.key, version: h.version, corr: h.corr, start: time.Now(), done: true, out: frame})
	s.count(1)
}

// HandleUpstream consumes whole response frames from the upstream broker.
func (s *Session) HandleUpstream(buf []byte) (int, error) {
	if err := s.answerPassing(); err != nil {
		return 0, err
	}
	off := 0
	direct := -1 // start of a run of responses written to the client unchanged in one go
	flushDirect := func(end int) {
		if direct >= 0 {
			s.conn.WriteClient(buf[direct:end])
			direct = -1
		}
	}
	for len(buf)-off >= 4 {
		size, err := s.frameLen(buf[off:], "upstream")
		if err != nil {
			flushDirect(off)
			return off, err
		}
		if len(buf)-off < 4+size {
			break
		}
		frame := buf[off : off+4+size]
		if size < 4 {
			flushDirect(off)
			return off, fmt.Errorf("%w: %d-byte response from upstream", ErrFrame, size)
		}
		seq, ok := s.upstream.popSeq()
		if !ok {
			flushDirect(off)
			return off, fmt.Errorf("%w: upstream sent a response nobody asked for", ErrFrame)
		}
		sl := s.slots.at(seq)
		corr := int32(binary.BigEndian.Uint32(frame[4:]))
		if corr != sl.corr {
			flushDirect(off)
			return off, fmt.Errorf("%w: upstream answered correlation id %d, expected %d (api key %d)", ErrFrame, corr, sl.corr, sl.key)
		}
		if sl.learnSession {
			s.learnFetchSession(sl, frame)
		}
		out, segs, total, err := s.response(sl, frame)
		if err != nil {
			flushDirect(off)
			return off, err
		}
		pooled := s.outUsed
		s.outUsed = false
		s.cfg.Observer.Response(sl.key, total, time.Since(sl.start))
		atHead := s.slots.headSeq() == seq
		if segs != nil && !atHead {
			// Its slices point into buffers reused before the answer can leave.
			out, segs, pooled = flatten(segs, total), nil, false
		}
		switch {
		case segs != nil:
			flushDirect(off)
			s.conn.WriteClientv(segs)
			s.slots.pop()
			s.count(-1)
		case atHead && len(out) == len(frame) && &out[0] == &frame[0]:
			// Unchanged and next in order: goes out with its neighbours, no copy.
			if direct < 0 {
				direct = off
			}
			s.slots.pop()
			s.count(-1)
		case atHead:
			flushDirect(off)
			s.conn.WriteClient(out)
			s.slots.pop()
			s.count(-1)
		default:
			flushDirect(off)
			if pooled || (len(out) == len(frame) && &out[0] == &frame[0]) {
				out = append([]byte(nil), out...)
			}
			sl.out, sl.done = out, true
			s.held += len(out)
		}
		off += 4 + size
		if s.closing != nil {
			// The answer that ended the login goes to the client (in order, when it can);
			// the transport then closes the connection.
			break
		}
	}
	flushDirect(off)
	s.flush()
	if s.closing != nil {
		return off, s.closing
	}
	if s.paused && s.slots.len() < s.cfg.MaxInFlight {
		s.paused = false
		s.conn.Resume()
	}
	return off, nil
}

// response applies the slot's rewrite, if any, and returns the frame to send to the client:
// whole (out), or as slices (segs, vector.go) that are valid only until the next rewrite or the
// end of the upstream bytes they point into. total is the frame's length either way.
func (s *Session) response(sl *slot, frame []byte) (out []byte, segs [][]byte, total int, err error) {
	if s.unchanged(sl) {
		return frame, nil, len(frame), nil
	}
	hl, err := respHeaderLen(frame[4:], sl.key, sl.version)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("%w: response header of api key %d: %v", ErrFrame, sl.key, err)
	}
	body := frame[4+hl:]
	s.headroom, s.outUsed, s.vecUsed = 4+hl, false, false
	nb, changed, err := sl.rewrite(s, sl.version, body)
	if err != nil {
		// A response offsetgate cannot read may carry addresses it must not leak.
		return nil, nil, 0, fmt.Errorf("%w: rewriting api key %d v%d response: %v", ErrFrame, sl.key, sl.version, err)
	}
	if !changed {
		return frame, nil, len(frame), nil
	}
	s.cfg.Observer.Rewrite(sl.key)
	if s.outUsed {
		// nb starts with the headroom reserved for the frame header.
		copy(nb[4:4+hl], frame[4:4+hl])
		if s.vecUsed {
			total, err := s.vec.build(nb, s.vecFlexible)
			if err != nil {
				return nil, nil, 0, fmt.Errorf("%w: api key %d v%d response: %v", ErrFrame, sl.key, sl.version, err)
			}
			return nil, s.vec.segs, total, nil
		}
		binary.BigEndian.PutUint32(nb, uint32(len(nb)-4))
		return nb, nil, len(nb), nil
	}
	out = make([]byte, 4, 4+hl+len(nb))
	binary.BigEndian.PutUint32(out, uint32(hl+len(nb)))
	out = append(out, frame[4:4+hl]...)
	out = append(out, nb...)
	return out, nil, len(out), nil
}

// reserve returns an empty buffer for a response body of about size bytes, with the frame
// header's headroom in front (see Session.outBuf). The caller appends the body and returns the
// whole slice from its rewrite.
func (s *Session) reserve(size int) []byte {
	need := s.headroom + size
	if cap(s.outBuf) < need {
		s.outBuf = make([]byte, 0, need+need/8)
	}
	s.outUsed = true
	return s.outBuf[:s.headroom]
}

// maxKeptOutBuf bounds the buffer a session keeps between responses.
const maxKeptOutBuf = 16 << 20

// flush sends the responses that are ready at the head of the FIFO.
func (s *Session) flush() {
	for s.slots.len() > 0 {
		sl := s.slots.at(s.slots.headSeq())
		if !sl.done {
			return
		}
		if len(sl.out) > 0 {
			s.conn.WriteClient(sl.out)
		}
		s.held -= len(sl.out)
		if !sl.upstream {
			s.cfg.Observer.Response(sl.key, len(sl.out), time.Since(sl.start))
		}
		s.slots.pop()
		s.count(-1)
	}
}

func (s *Session) count(d int64) {
	if s.cfg.InFlight != nil {
		s.cfg.InFlight.Add(d)
	}
}

// Close releases what the session still counts; the transport calls it when the connection
// ends.
func (s *Session) Close() {
	s.closed = true
	s.cancel()
	if s.carrier != nil {
		s.carrier.Close()
	}
	s.count(-int64(s.slots.len()))
	for s.slots.len() > 0 {
		s.slots.pop()
	}
	s.held = 0
	s.answering = false
}

// FrameSize checks a frame's 4-byte size prefix and returns the whole frame's length, so a
// transport can wait for a whole frame before handing bytes over.
func (s *Session) FrameSize(prefix []byte) (int, error) {
	n, err := s.frameLen(prefix, "client")
	return 4 + n, err
}

// UpstreamFrameSize is FrameSize for upstream frames.
func (s *Session) UpstreamFrameSize(prefix []byte) (int, error) {
	n, err := s.frameLen(prefix, "upstream")
	return 4 + n, err
}

type nopObserver struct{}

func (nopObserver) Request(int16, int)                 {}
func (nopObserver) Response(int16, int, time.Duration) {}
func (nopObserver) Rewrite(int16)                      {}
func (nopObserver) LocalAnswer(int16)                  {}
func (nopObserver) WaitTimeout(int16)                  {}
