package session

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// fakeConn records what a session sends.
type fakeConn struct {
	client, upstream bytes.Buffer
	pending          int
	resumed, waited  int
	closedWith       error
}

func (f *fakeConn) WriteClient(b []byte) { f.client.Write(b) }
func (f *fakeConn) WriteClientv(bs [][]byte) {
	for _, b := range bs {
		f.client.Write(b)
	}
}
func (f *fakeConn) WriteUpstream(b []byte) { f.upstream.Write(b) }
func (f *fakeConn) ClientPending() int     { return f.pending }
func (f *fakeConn) Resume()                { f.resumed++ }
func (f *fakeConn) WaitClientDrain()       { f.waited++ }
func (f *fakeConn) Post(fn func())         { fn() }
func (f *fakeConn) Close(err error)        { f.closedWith = err }

// reqFrame encodes a whole request frame with kmsg's own request header writer.
func reqFrame(r kmsg.Request, corr int32) []byte {
	return kmsg.NewRequestFormatter(kmsg.FormatterClientID("test-client")).AppendRequest(nil, r, corr)
}

func respFrame(corr int32, flexible bool, r kmsg.Response) []byte {
	return responseFrame(corr, flexible, r.AppendTo(nil))
}

// frames splits a byte stream into frames.
func frames(t *testing.T, b []byte) [][]byte {
	t.Helper()
	var out [][]byte
	for len(b) > 0 {
		n := 4 + int(binary.BigEndian.Uint32(b))
		if n > len(b) {
			t.Fatalf("truncated frame")
		}
		out = append(out, b[:n])
		b = b[n:]
	}
	return out
}

func corrOf(f []byte) int32 { return int32(binary.BigEndian.Uint32(f[4:])) }

// Responses leave in request order even when offsetgate answers a request itself between
// two forwarded ones.
func TestPipelinedOrderWithLocalAnswer(t *testing.T) {
	fc := &fakeConn{}
	s := New(Config{}, fc)
	var in []byte
	md := kmsg.NewPtrMetadataRequest()
	md.SetVersion(12)
	in = append(in, reqFrame(md, 1)...)
	av := kmsg.NewPtrApiVersionsRequest()
	av.SetVersion(4)
	tooNew := reqFrame(av, 2)
	binary.BigEndian.PutUint16(tooNew[6:], 99) // version 99
	in = append(in, tooNew...)
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.SetVersion(4)
	in = append(in, reqFrame(hb, 3)...)

	n, err := s.HandleClient(in)
	if err != nil || n != len(in) {
		t.Fatalf("HandleClient consumed %d of %d: %v", n, len(in), err)
	}
	if fc.client.Len() != 0 {
		t.Fatalf("the local answer left before the earlier Metadata response")
	}
	if s.Held() == 0 || !s.Busy() {
		t.Fatalf("the local answer waiting in its slot is not counted: held %d, busy %v", s.Held(), s.Busy())
	}
	if got := len(frames(t, fc.upstream.Bytes())); got != 2 {
		t.Fatalf("%d frames forwarded, want 2 (the too-new ApiVersions is answered locally)", got)
	}
	mresp := kmsg.NewPtrMetadataResponse()
	mresp.SetVersion(12)
	mresp.Brokers = []kmsg.MetadataResponseBroker{{NodeID: 1, Host: "10.1.2.3", Port: 9092}}
	hresp := kmsg.NewPtrHeartbeatResponse()
	hresp.SetVersion(4)
	up := append(respFrame(1, true, mresp), respFrame(3, true, hresp)...)
	if n, err := s.HandleUpstream(up); err != nil || n != len(up) {
		t.Fatalf("HandleUpstream consumed %d of %d: %v", n, len(up), err)
	}
	out := frames(t, fc.client.Bytes())
	if len(out) != 3 {
		t.Fatalf("%d responses, want 3", len(out))
	}
	for i, want := range []int32{1, 2, 3} {
		if c := corrOf(out[i]); c != want {
			t.Fatalf("response %d has correlation id %d, want %d", i, c, want)
		}
	}
	// The local ApiVersions answer is a v0 UNSUPPORTED_VERSION (KIP-511).
	var avr kmsg.ApiVersionsResponse
	if err := avr.ReadFrom(out[1][8:]); err != nil || avr.ErrorCode != 35 {
		t.Fatalf("too-new ApiVersions answer: error %d, %v", avr.ErrorCode, err)
	}
	if s.InFlight() != 0 || s.Held() != 0 || s.Busy() {
		t.Fatalf("%d requests still in flight, %d bytes held", s.InFlight(), s.Held())
	}
}

// Metadata broker addresses are replaced by the address map's.
func TestMetadataRewrite(t *testing.T) {
	fc := &fakeConn{}
	s := New(Config{Addresses: mapAddrs{}}, fc)
	md := kmsg.NewPtrMetadataRequest()
	md.SetVersion(9)
	if _, err := s.HandleClient(reqFrame(md, 7)); err != nil {
		t.Fatal(err)
	}
	resp := kmsg.NewPtrMetadataResponse()
	resp.SetVersion(9)
	resp.Brokers = []kmsg.MetadataResponseBroker{{NodeID: 1, Host: "real-1", Port: 9092}, {NodeID: 2, Host: "real-2", Port: 9093}}
	if _, err := s.HandleUpstream(respFrame(7, true, resp)); err != nil {
		t.Fatal(err)
	}
	out := fc.client.Bytes()
	hl, _ := respHeaderLen(out[4:], 3, 9)
	got := kmsg.NewPtrMetadataResponse()
	got.SetVersion(9)
	if err := got.ReadFrom(out[4+hl:]); err != nil {
		t.Fatal(err)
	}
	for _, b := range got.Brokers {
		if b.Host != "proxy" || b.Port != 10000+b.NodeID {
			t.Fatalf("broker %d advertised as %s:%d", b.NodeID, b.Host, b.Port)
		}
	}
}

type mapAddrs struct{}

func (mapAddrs) Broker(node int32, _ string, _ int32) (string, int32) { return "proxy", 10000 + node }

func TestFrameLimits(t *testing.T) {
	for name, tc := range map[string]struct {
		in   []byte
		want string
	}{
		"tls hello":   {[]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03}, "TLS handshake"},
		"too large":   {[]byte{0x10, 0, 0, 0, 1, 2, 3, 4}, "exceeds"},
		"negative":    {[]byte{0xff, 0xff, 0xff, 0xfe, 1, 2, 3, 4}, "exceeds"},
		"tiny":        {[]byte{0, 0, 0, 2, 0, 0}, "shorter than a request header"},
		"bad version": {append([]byte{0, 0, 0, 10}, 0, 3, 0x7f, 0, 0, 0, 0, 1, 0xff, 0xff), "not supported"},
	} {
		t.Run(name, func(t *testing.T) {
			s := New(Config{MaxFrame: 1 << 20}, &fakeConn{})
			_, err := s.HandleClient(tc.in)
			if !errors.Is(err, ErrFrame) || !bytes.Contains([]byte(err.Error()), []byte(tc.want)) {
				t.Fatalf("error %v, want ErrFrame mentioning %q", err, tc.want)
			}
		})
	}
}

// A partial frame is left for later and nothing is forwarded.
func TestPartialFrameWaits(t *testing.T) {
	fc := &fakeConn{}
	s := New(Config{}, fc)
	hb := kmsg.NewPtrHeartbeatRequest()
	f := reqFrame(hb, 1)
	n, err := s.HandleClient(f[:len(f)-1])
	if err != nil || n != 0 || fc.upstream.Len() != 0 {
		t.Fatalf("partial frame: consumed %d, forwarded %d, err %v", n, fc.upstream.Len(), err)
	}
}

// The in-flight cap stops consumption until responses arrive; the session then asks to resume.
func TestInFlightCap(t *testing.T) {
	fc := &fakeConn{}
	s := New(Config{MaxInFlight: 2}, fc)
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.SetVersion(4)
	var in []byte
	for i := int32(0); i < 3; i++ {
		in = append(in, reqFrame(hb, i)...)
	}
	n, _ := s.HandleClient(in)
	if s.InFlight() != 2 || n == len(in) {
		t.Fatalf("in flight %d, consumed %d of %d: the cap did not hold", s.InFlight(), n, len(in))
	}
	resp := kmsg.NewPtrHeartbeatResponse()
	resp.SetVersion(4)
	if _, err := s.HandleUpstream(respFrame(0, true, resp)); err != nil {
		t.Fatal(err)
	}
	if fc.resumed != 1 {
		t.Fatalf("resumed %d times, want 1", fc.resumed)
	}
	if m, _ := s.HandleClient(in[n:]); m != len(in)-n {
		t.Fatalf("after resume consumed %d of %d", m, len(in)-n)
	}
}

// Unread responses over the high-water mark stop forwarding and ask to be told of the drain.
func TestClientHighWater(t *testing.T) {
	fc := &fakeConn{pending: 100}
	s := New(Config{ClientHighWater: 50}, fc)
	hb := kmsg.NewPtrHeartbeatRequest()
	n, _ := s.HandleClient(reqFrame(hb, 1))
	if n != 0 || fc.waited != 1 || fc.upstream.Len() != 0 {
		t.Fatalf("consumed %d, waited %d: forwarding did not stop", n, fc.waited)
	}
}

// A response whose correlation id is not the one expected closes the connection.
func TestCorrelationMismatch(t *testing.T) {
	fc := &fakeConn{}
	s := New(Config{}, fc)
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.SetVersion(4)
	if _, err := s.HandleClient(reqFrame(hb, 5)); err != nil {
		t.Fatal(err)
	}
	resp := kmsg.NewPtrHeartbeatResponse()
	resp.SetVersion(4)
	if _, err := s.HandleUpstream(respFrame(6, true, resp)); !errors.Is(err, ErrFrame) {
		t.Fatalf("error %v, want ErrFrame", err)
	}
}
