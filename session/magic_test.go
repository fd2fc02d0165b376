package session

import (
	"bytes"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/magic"
	"offsetgate/rules"
)

// The magic header is read from the request header and never forwarded to a stock broker.
func TestMagicHeaderStripped(t *testing.T) {
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(11)
	req.Acks = -1
	frame := magic.AppendHeader([]byte{0, 0, 0, 0}, 0, 11, 42, "mirror", -1)
	frame = req.AppendTo(frame)
	putLen(frame)
	h, err := parseReqHeader(frame[4:])
	if err != nil {
		t.Fatal(err)
	}
	if !h.magic.Present || !h.magic.Valid {
		t.Fatalf("magic tag not read: %+v", h.magic)
	}
	fc := &fakeConn{}
	s := New(Config{Policy: func() *rules.Policy { return nil }}, fc)
	if _, err := s.HandleClient(frame); err != nil {
		t.Fatal(err)
	}
	fwd := fc.upstream.Bytes()
	if bytes.Equal(fwd, frame) {
		t.Fatal("the frame went upstream with the magic tag")
	}
	h2, err := parseReqHeader(fwd[4:])
	if err != nil || h2.magic.Present || h2.corr != 42 || string(h2.clientID) != "mirror" {
		t.Fatalf("forwarded header %+v, %v", h2, err)
	}
	if !bytes.Equal(fwd[4+h2.bodyOff:], frame[4+h.bodyOff:]) {
		t.Fatal("the body changed")
	}
}

func putLen(b []byte) {
	n := len(b) - 4
	b[0], b[1], b[2], b[3] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
}
