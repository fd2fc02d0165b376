// Package wire is a plain Kafka connection with request framing of offsetgate's own: it can
// put the produce-at-offset magic tag in a request header, which no client library can, and
// it logs in with SASL on a raw connection (offsetgate's mapped upstream identities, the
// mirroring client).
package wire

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"

	"offsetgate/magic"
)

// Conn is one connection to a broker (or to offsetgate). Not safe for concurrent use.
type Conn struct {
	c        net.Conn
	corr     int32
	clientID string
}

// Dial connects, with TLS when cfg is not nil and a SASL login when mech is not nil.
func Dial(ctx context.Context, addr string, cfg *tls.Config, mech sasl.Mechanism, clientID string) (*Conn, error) {
	d := net.Dialer{Timeout: 10 * time.Second}
	return DialWith(ctx, d.DialContext, addr, cfg, mech, clientID)
}

// DialWith is Dial with a dial function of the caller's.
func DialWith(ctx context.Context, dial func(ctx context.Context, network, addr string) (net.Conn, error),
	addr string, cfg *tls.Config, mech sasl.Mechanism, clientID string) (*Conn, error) {
	c, err := dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if cfg != nil {
		if cfg.ServerName == "" {
			cfg = cfg.Clone()
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
		tc := tls.Client(c, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, fmt.Errorf("TLS to %s: %w", addr, err)
		}
		c = tc
	}
	w := Wrap(c, clientID)
	if mech != nil {
		if err := w.Login(ctx, mech); err != nil {
			c.Close()
			return nil, err
		}
	}
	return w, nil
}

// Wrap uses an established connection.
func Wrap(c net.Conn, clientID string) *Conn { return &Conn{c: c, clientID: clientID} }

// SetClientID changes the client id the next requests carry (a connection that carries
// several clients' requests in turn names each one's).
func (w *Conn) SetClientID(id string) { w.clientID = id }

// Close closes the connection.
func (w *Conn) Close() error { return w.c.Close() }

// RoundTrip sends req at its set version and reads resp. With magic, the request header
// carries the produce-at-offset tag (flexible versions only).
func (w *Conn) RoundTrip(ctx context.Context, req kmsg.Request, resp kmsg.Response, magic bool) error {
	from := noTag
	if magic {
		from = -1
	}
	return w.roundTrip(ctx, req, resp, from)
}

// RoundTripFrom is RoundTrip with the produce-at-offset tag giving the source offset the
// request's one partition continues from (docs/PROTOCOL.md).
func (w *Conn) RoundTripFrom(ctx context.Context, req kmsg.Request, resp kmsg.Response, from int64) error {
	if from < 0 {
		return fmt.Errorf("from offset %d is negative", from)
	}
	return w.roundTrip(ctx, req, resp, from)
}

// noTag (as a from offset): no magic tag at all; -1: the tag without a from offset.
const noTag int64 = -2

func (w *Conn) roundTrip(ctx context.Context, req kmsg.Request, resp kmsg.Response, from int64) error {
	if dl, ok := ctx.Deadline(); ok {
		_ = w.c.SetDeadline(dl)
		defer func() { _ = w.c.SetDeadline(time.Time{}) }()
	}
	corr, err := w.send(req, from)
	if err != nil {
		return err
	}
	return w.receive(req, resp, corr)
}

// Pipeline sends every request, then reads every response in order: the broker answers a
// connection's requests in the order they came. It stops at the first failure; responses
// not read are lost with the connection, which the caller must then close.
func (w *Conn) Pipeline(ctx context.Context, reqs []kmsg.Request, resps []kmsg.Response) error {
	if dl, ok := ctx.Deadline(); ok {
		_ = w.c.SetDeadline(dl)
		defer func() { _ = w.c.SetDeadline(time.Time{}) }()
	}
	corrs := make([]int32, len(reqs))
	for i, r := range reqs {
		c, err := w.send(r, noTag)
		if err != nil {
			return err
		}
		corrs[i] = c
	}
	for i, r := range reqs {
		if err := w.receive(r, resps[i], corrs[i]); err != nil {
			return err
		}
	}
	return nil
}

// Window keeps up to depth of n requests in flight: request i is built by req(i) when a slot
// frees, and each response is handed to got(i, resp) in order as it arrives (the broker
// answers a connection's requests in the order they came, so the next request is already
// queued at the broker when one is answered). When got returns false no further request is
// sent; the answers of those in flight are read and dropped, so the connection stays usable.
// Window returns how many responses got accepted. On an error the connection is in an unknown
// state and the caller must close it.
func (w *Conn) Window(ctx context.Context, n, depth int, req func(i int) kmsg.Request, resp func(i int) kmsg.Response,
	got func(i int, r kmsg.Response) bool) (int, error) {
	return w.window(ctx, n, depth, req, func(int) int64 { return noTag }, resp, got)
}

// WindowAtOffset is Window for produce-at-offset requests: request i carries the magic header
// with the from offset from(i) (-1: none).
func (w *Conn) WindowAtOffset(ctx context.Context, n, depth int, req func(i int) kmsg.Request, from func(i int) int64,
	resp func(i int) kmsg.Response, got func(i int, r kmsg.Response) bool) (int, error) {
	return w.window(ctx, n, depth, req, from, resp, got)
}

func (w *Conn) window(ctx context.Context, n, depth int, req func(i int) kmsg.Request, tag func(i int) int64, resp func(i int) kmsg.Response,
	got func(i int, r kmsg.Response) bool) (int, error) {
	if dl, ok := ctx.Deadline(); ok {
		_ = w.c.SetDeadline(dl)
		defer func() { _ = w.c.SetDeadline(time.Time{}) }()
	}
	type sent struct {
		req  kmsg.Request
		corr int32
	}
	var inflight []sent
	next, accepted, stop := 0, 0, false
	for next < n || len(inflight) > 0 {
		for !stop && next < n && len(inflight) < max(depth, 1) {
			r := req(next)
			corr, err := w.send(r, tag(next))
			if err != nil {
				return accepted, err
			}
			inflight = append(inflight, sent{r, corr})
			next++
		}
		if len(inflight) == 0 {
			break
		}
		head := inflight[0]
		inflight = inflight[1:]
		r := resp(accepted)
		if err := w.receive(head.req, r, head.corr); err != nil {
			return accepted, err
		}
		if stop {
			continue
		}
		if !got(accepted, r) {
			stop = true
			continue
		}
		accepted++
	}
	return accepted, nil
}

// Send writes one request and returns its correlation id; Receive reads the answer to it. They
// let one goroutine write while another reads (answers come in request order): a caller that
// uses them owns the ordering and must not mix them with RoundTrip, Pipeline or Window.
func (w *Conn) Send(req kmsg.Request) (int32, error) { return w.send(req, noTag) }

// SendAtOffset sends a request with the produce-at-offset magic header (from: the source
// offset the request continues from, -1 for none) without waiting for its answer (see Receive).
func (w *Conn) SendAtOffset(req kmsg.Request, from int64) (int32, error) { return w.send(req, from) }

// SetReadDeadline bounds the next reads (see Send and Receive).
func (w *Conn) SetReadDeadline(t time.Time) error { return w.c.SetReadDeadline(t) }

// Receive reads the answer to the request sent with correlation id corr (see Send).
func (w *Conn) Receive(req kmsg.Request, resp kmsg.Response, corr int32) error {
	return w.receive(req, resp, corr)
}

func (w *Conn) send(req kmsg.Request, from int64) (int32, error) {
	w.corr++
	var b []byte
	if from != noTag {
		if !req.IsFlexible() {
			return 0, fmt.Errorf("the magic header needs a flexible request version; %s v%d is not", kmsg.NameForKey(req.Key()), req.GetVersion())
		}
		b = magic.AppendHeader([]byte{0, 0, 0, 0}, req.Key(), req.GetVersion(), w.corr, w.clientID, from)
		b = req.AppendTo(b)
		binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	} else {
		b = kmsg.NewRequestFormatter(kmsg.FormatterClientID(w.clientID)).AppendRequest(nil, req, w.corr)
	}
	if _, err := w.c.Write(b); err != nil {
		return 0, err
	}
	return w.corr, nil
}

func (w *Conn) receive(req kmsg.Request, resp kmsg.Response, corr int32) error {
	var sz [4]byte
	if _, err := io.ReadFull(w.c, sz[:]); err != nil {
		return err
	}
	p := make([]byte, binary.BigEndian.Uint32(sz[:]))
	if _, err := io.ReadFull(w.c, p); err != nil {
		return err
	}
	if len(p) < 4 || int32(binary.BigEndian.Uint32(p)) != corr {
		return errors.New("response out of order")
	}
	body := p[4:]
	if req.IsFlexible() && req.Key() != 18 {
		n, k := binary.Uvarint(body)
		if k <= 0 {
			return errors.New("bad response header")
		}
		body = body[k:]
		for i := uint64(0); i < n; i++ {
			_, k := binary.Uvarint(body)
			body = body[k:]
			sz, k := binary.Uvarint(body)
			body = body[k+int(sz):]
		}
	}
	resp.SetVersion(req.GetVersion())
	return resp.ReadFrom(body)
}

// Login runs a SASL exchange (SaslHandshake v1, SaslAuthenticate v1).
func (w *Conn) Login(ctx context.Context, mech sasl.Mechanism) error {
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.SetVersion(1)
	hs.Mechanism = mech.Name()
	hsResp := kmsg.NewPtrSASLHandshakeResponse()
	if err := w.RoundTrip(ctx, hs, hsResp, false); err != nil {
		return fmt.Errorf("SASL handshake: %w", err)
	}
	if hsResp.ErrorCode != 0 {
		return fmt.Errorf("SASL handshake: mechanism %s refused (error %d, enabled %v)", mech.Name(), hsResp.ErrorCode, hsResp.SupportedMechanisms)
	}
	host, _, _ := net.SplitHostPort(w.c.RemoteAddr().String())
	sess, msg, err := mech.Authenticate(ctx, host)
	if err != nil {
		return err
	}
	for {
		req := kmsg.NewPtrSASLAuthenticateRequest()
		req.SetVersion(1)
		req.SASLAuthBytes = msg
		resp := kmsg.NewPtrSASLAuthenticateResponse()
		if err := w.RoundTrip(ctx, req, resp, false); err != nil {
			return fmt.Errorf("SASL authenticate: %w", err)
		}
		if resp.ErrorCode != 0 {
			m := ""
			if resp.ErrorMessage != nil {
				m = *resp.ErrorMessage
			}
			return fmt.Errorf("SASL login failed: %s", m)
		}
		done, next, err := sess.Challenge(resp.SASLAuthBytes)
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		msg = next
	}
}
