package session

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/rules"
)

// saslConn drives a session through SASL exchanges, playing the client and the destination.
type saslConn struct {
	t    *testing.T
	fc   *fakeConn
	s    *Session
	corr int32
	keys map[int32]int16
	ids  []rules.Identity // what OnIdentity heard
	seen int              // upstream bytes already looked at
	read int              // client bytes already looked at
}

func newSASLConn(t *testing.T) *saslConn {
	c := &saslConn{t: t, fc: &fakeConn{}, keys: map[int32]int16{}}
	c.s = New(Config{OnIdentity: func(id rules.Identity) { c.ids = append(c.ids, id) }}, c.fc)
	c.s.SetIdentity(rules.Identity{Addr: "10.0.0.1:4000"})
	return c
}

func handshake(mech string) *kmsg.SASLHandshakeRequest {
	r := kmsg.NewPtrSASLHandshakeRequest()
	r.SetVersion(1)
	r.Mechanism = mech
	return r
}

func authenticate(token string) *kmsg.SASLAuthenticateRequest {
	r := kmsg.NewPtrSASLAuthenticateRequest()
	r.SetVersion(2)
	r.SASLAuthBytes = []byte(token)
	return r
}

func metadata() *kmsg.MetadataRequest {
	r := kmsg.NewPtrMetadataRequest()
	r.SetVersion(12)
	return r
}

// send pipelines requests (one HandleClient call) and returns their correlation ids.
func (c *saslConn) send(reqs ...kmsg.Request) ([]int32, error) {
	var in []byte
	var corrs []int32
	for _, r := range reqs {
		c.corr++
		c.keys[c.corr] = r.Key()
		corrs = append(corrs, c.corr)
		in = append(in, reqFrame(r, c.corr)...)
	}
	n, err := c.s.HandleClient(in)
	if err == nil && n != len(in) {
		c.t.Fatalf("HandleClient consumed %d of %d bytes", n, len(in))
	}
	return corrs, err
}

func (c *saslConn) mustSend(reqs ...kmsg.Request) []int32 {
	c.t.Helper()
	corrs, err := c.send(reqs...)
	if err != nil {
		c.t.Fatalf("HandleClient: %v", err)
	}
	return corrs
}

// forwarded lists the correlation ids forwarded upstream since the last call.
func (c *saslConn) forwarded() []int32 {
	var out []int32
	for _, f := range frames(c.t, c.fc.upstream.Bytes()[c.seen:]) {
		out = append(out, int32(binary.BigEndian.Uint32(f[8:]))) // request: size, key, version, corr
	}
	c.seen = c.fc.upstream.Len()
	return out
}

// answers returns the error codes of the responses the client got since the last call, by
// correlation id (SASL responses only).
func (c *saslConn) answers() map[int32]int16 {
	out := map[int32]int16{}
	for _, f := range frames(c.t, c.fc.client.Bytes()[c.read:]) {
		corr := corrOf(f)
		// Both SASL responses start their body with the error code; SaslAuthenticate v2
		// has a flexible header (one more byte).
		body := f[8:]
		if c.keys[corr] == 36 {
			body = body[1:]
		}
		out[corr] = int16(body[0])<<8 | int16(body[1])
	}
	c.read = c.fc.client.Len()
	return out
}

func (c *saslConn) handshakeAnswer(corr int32, code int16) error {
	resp := kmsg.NewPtrSASLHandshakeResponse()
	resp.SetVersion(1)
	resp.ErrorCode = code
	resp.SupportedMechanisms = []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
	_, err := c.s.HandleUpstream(respFrame(corr, false, resp))
	return err
}

func (c *saslConn) authAnswer(corr int32, code int16, lifetime int64) error {
	resp := kmsg.NewPtrSASLAuthenticateResponse()
	resp.SetVersion(2)
	resp.ErrorCode = code
	resp.SessionLifetimeMillis = lifetime
	_, err := c.s.HandleUpstream(respFrame(corr, true, resp))
	return err
}

func (c *saslConn) must(err error) {
	c.t.Helper()
	if err != nil {
		c.t.Fatal(err)
	}
}

// login runs a whole login, one step at a time as clients do.
func (c *saslConn) login(mech, first string, lifetime int64) {
	c.t.Helper()
	hs := c.mustSend(handshake(mech))
	c.must(c.handshakeAnswer(hs[0], 0))
	a := c.mustSend(authenticate(first))
	if saslRounds(mech) == 2 {
		c.must(c.authAnswer(a[0], 0, 0))
		a = c.mustSend(authenticate("c=biws,r=nonce,p=proof"))
	}
	c.must(c.authAnswer(a[0], 0, lifetime))
	c.forwarded()
	c.answers()
}

func (c *saslConn) user() string { return c.s.Identity().SASLUser }

const scramFirst = "n,,n=bob,r=abcdef"

func TestSASLLoginTakesEffectOnItsAnswer(t *testing.T) {
	for _, mech := range []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"} {
		t.Run(mech, func(t *testing.T) {
			c := newSASLConn(t)
			hs := c.mustSend(handshake(mech))
			c.must(c.handshakeAnswer(hs[0], 0))
			first := "\x00bob\x00secret"
			if mech != "PLAIN" {
				first = scramFirst
			}
			a := c.mustSend(authenticate(first))
			if c.user() != "" {
				t.Fatal("the identity changed before the destination answered")
			}
			if mech != "PLAIN" {
				c.must(c.authAnswer(a[0], 0, 0))
				if c.user() != "" {
					t.Fatal("a SCRAM identity counted after server-first")
				}
				a = c.mustSend(authenticate("c=biws,r=abcdefxyz,p=proof"))
			}
			c.must(c.authAnswer(a[0], 0, 0))
			if id := c.s.Identity(); id.SASLUser != "bob" || id.SASLMechanism != mech {
				t.Fatalf("identity %v after the login", id)
			}
			if len(c.ids) != 1 || c.ids[0].SASLUser != "bob" {
				t.Fatalf("OnIdentity heard %v", c.ids)
			}
		})
	}
}

// A second login pipelined after a completed one never reaches the destination and changes
// nothing: ILLEGAL_SASL_STATE, as Kafka answers on an authenticated connection.
func TestSASLSecondLoginRefused(t *testing.T) {
	c := newSASLConn(t)
	c.login("PLAIN", "\x00bob\x00secret", 0)
	corrs := c.mustSend(handshake("PLAIN"), authenticate("\x00alice\x00wrong"), metadata())
	if got := c.forwarded(); len(got) != 1 || got[0] != corrs[2] {
		t.Fatalf("forwarded %v, want only the Metadata request %d", got, corrs[2])
	}
	ans := c.answers()
	if ans[corrs[0]] != errIllegalSASLState || ans[corrs[1]] != errIllegalSASLState {
		t.Fatalf("answers %v, want ILLEGAL_SASL_STATE for %v", ans, corrs[:2])
	}
	if c.user() != "bob" {
		t.Fatalf("identity %q after the refused login", c.user())
	}
}

// The attack of issue 13: the last round of bob's login in flight, a second handshake and a
// token naming alice pipelined behind it. The second exchange is refused and bob's answer
// makes bob, whatever token came later.
func TestSASLPipelinedLoginCannotSwapTheUser(t *testing.T) {
	for _, mech := range []string{"PLAIN", "SCRAM-SHA-256"} {
		t.Run(mech, func(t *testing.T) {
			c := newSASLConn(t)
			hs := c.mustSend(handshake(mech))
			c.must(c.handshakeAnswer(hs[0], 0))
			first := "\x00bob\x00secret"
			if mech != "PLAIN" {
				a := c.mustSend(authenticate(scramFirst))
				c.must(c.authAnswer(a[0], 0, 0))
				first = "c=biws,r=abcdefxyz,p=proof"
			}
			c.forwarded()
			corrs := c.mustSend(authenticate(first), handshake("PLAIN"), authenticate("\x00alice\x00wrong"))
			if fwd := c.forwarded(); len(fwd) != 1 || fwd[0] != corrs[0] {
				t.Fatalf("forwarded %v; only bob's round %d may go", fwd, corrs[0])
			}
			c.must(c.authAnswer(corrs[0], 0, 0))
			if c.user() != "bob" {
				t.Fatalf("identity %q, want bob", c.user())
			}
			ans := c.answers()
			if ans[corrs[1]] != errIllegalSASLState || ans[corrs[2]] != errIllegalSASLState {
				t.Fatalf("answers %v", ans)
			}
		})
	}
}

// Out-of-order steps are refused locally: a round before the handshake was accepted, a
// second round while one waits, a second handshake while one waits.
func TestSASLOutOfOrderSteps(t *testing.T) {
	c := newSASLConn(t)
	corrs := c.mustSend(authenticate("\x00bob\x00secret"))
	if len(c.forwarded()) != 0 || c.answers()[corrs[0]] != errIllegalSASLState {
		t.Fatal("a SaslAuthenticate before any handshake was forwarded")
	}
	corrs = c.mustSend(handshake("PLAIN"), handshake("PLAIN"), authenticate("\x00bob\x00secret"))
	if fwd := c.forwarded(); len(fwd) != 1 || fwd[0] != corrs[0] {
		t.Fatalf("forwarded %v", fwd)
	}
	c.must(c.handshakeAnswer(corrs[0], 0))
	ans := c.answers()
	if ans[corrs[1]] != errIllegalSASLState || ans[corrs[2]] != errIllegalSASLState {
		t.Fatalf("answers %v", ans)
	}
	corrs = c.mustSend(authenticate("\x00bob\x00secret"), authenticate("\x00alice\x00x"))
	if fwd := c.forwarded(); len(fwd) != 1 || fwd[0] != corrs[0] {
		t.Fatalf("forwarded %v", fwd)
	}
	c.must(c.authAnswer(corrs[0], 0, 0))
	if c.user() != "bob" {
		t.Fatalf("identity %q", c.user())
	}
}

// Nothing else is taken while a login is under way: a request pipelined behind a login step
// closes the connection before it reaches anything.
func TestSASLNoRequestDuringLogin(t *testing.T) {
	for name, steps := range map[string][]kmsg.Request{
		"behind the handshake":    {handshake("PLAIN"), metadata()},
		"behind the last round":   {authenticate("\x00bob\x00secret"), metadata()},
		"between the SCRAM steps": {authenticate(scramFirst)},
	} {
		t.Run(name, func(t *testing.T) {
			c := newSASLConn(t)
			if name != "behind the handshake" {
				hs := c.mustSend(handshake(map[bool]string{true: "PLAIN", false: "SCRAM-SHA-256"}[name == "behind the last round"]))
				c.must(c.handshakeAnswer(hs[0], 0))
			}
			corrs, err := c.send(steps...)
			if name == "between the SCRAM steps" {
				if err != nil {
					t.Fatal(err)
				}
				c.must(c.authAnswer(corrs[0], 0, 0))
				_, err = c.send(metadata())
			}
			if !errors.Is(err, ErrForbidden) {
				t.Fatalf("a request during the login: %v", err)
			}
			for _, f := range c.forwarded() {
				if f == c.corr {
					t.Fatal("the request was forwarded")
				}
			}
		})
	}
}

// A refused step ends the connection after its answer reached the client; no identity.
func TestSASLFailureCloses(t *testing.T) {
	c := newSASLConn(t)
	hs := c.mustSend(handshake("PLAIN"))
	c.must(c.handshakeAnswer(hs[0], 0))
	a := c.mustSend(authenticate("\x00alice\x00wrong"))
	c.forwarded()
	if err := c.authAnswer(a[0], 58, 0); !errors.Is(err, ErrLogin) {
		t.Fatalf("failed login: %v, want ErrLogin", err)
	}
	if ans := c.answers(); ans[a[0]] != 58 {
		t.Fatalf("the client did not get the destination's refusal: %v", ans)
	}
	if c.user() != "" {
		t.Fatalf("identity %q after a failed login", c.user())
	}
	if _, err := c.send(metadata()); !errors.Is(err, ErrLogin) {
		t.Fatalf("a request after the failure: %v", err)
	}
	if len(c.forwarded()) != 0 {
		t.Fatal("something was forwarded after the failure")
	}

	c = newSASLConn(t)
	hs = c.mustSend(handshake("PLAIN"))
	if err := c.handshakeAnswer(hs[0], 33); !errors.Is(err, ErrLogin) {
		t.Fatalf("refused mechanism: %v", err)
	}
}

// Re-authentication (KIP-368): only when the destination announced a session lifetime; the
// identity is what the new exchange proves, and a failed one drops it and closes.
func TestSASLReauthentication(t *testing.T) {
	c := newSASLConn(t)
	c.login("PLAIN", "\x00bob\x00secret", 0)
	corrs := c.mustSend(handshake("PLAIN"))
	if len(c.forwarded()) != 0 || c.answers()[corrs[0]] != errIllegalSASLState {
		t.Fatal("a re-authentication the destination did not ask for was forwarded")
	}

	c = newSASLConn(t)
	c.login("SCRAM-SHA-512", scramFirst, 60000)
	c.login("SCRAM-SHA-512", scramFirst, 60000)
	if c.user() != "bob" {
		t.Fatalf("identity %q after a re-authentication", c.user())
	}
	// A request sent before the re-authentication's answer is never taken.
	hs := c.mustSend(handshake("SCRAM-SHA-512"))
	c.must(c.handshakeAnswer(hs[0], 0))
	a := c.mustSend(authenticate("n,,n=alice,r=abcdef"))
	if _, err := c.send(metadata()); !errors.Is(err, ErrForbidden) {
		t.Fatalf("a request during re-authentication: %v", err)
	}

	c = newSASLConn(t)
	c.login("PLAIN", "\x00bob\x00secret", 60000)
	hs = c.mustSend(handshake("PLAIN"))
	c.must(c.handshakeAnswer(hs[0], 0))
	a = c.mustSend(authenticate("\x00alice\x00wrong"))
	if err := c.authAnswer(a[0], 58, 0); !errors.Is(err, ErrLogin) {
		t.Fatalf("failed re-authentication: %v", err)
	}
	if c.user() != "" {
		t.Fatalf("identity %q kept after a failed re-authentication", c.user())
	}

	// The destination refusing to start a re-authentication (Kafka does within a second of
	// the last one) ends it the same way.
	c = newSASLConn(t)
	c.login("PLAIN", "\x00bob\x00secret", 60000)
	hs = c.mustSend(handshake("PLAIN"))
	if err := c.handshakeAnswer(hs[0], errIllegalSASLState); !errors.Is(err, ErrLogin) || c.user() != "" {
		t.Fatalf("refused re-authentication handshake: %v, identity %q", err, c.user())
	}
}

// Mechanisms offsetgate cannot read prove nothing, and their login ends when the client
// moves on.
func TestSASLOpaqueMechanism(t *testing.T) {
	c := newSASLConn(t)
	hs := c.mustSend(handshake("OAUTHBEARER"))
	c.must(c.handshakeAnswer(hs[0], 0))
	a := c.mustSend(authenticate("n,,\x01auth=Bearer x\x01\x01"))
	c.must(c.authAnswer(a[0], 0, 0))
	c.mustSend(metadata())
	if c.user() != "" {
		t.Fatalf("identity %q from OAUTHBEARER", c.user())
	}
	c.forwarded()
	c.mustSend(handshake("PLAIN"))
	if fwd := c.forwarded(); len(fwd) != 0 {
		t.Fatalf("a second login after an opaque one was forwarded: %v", fwd)
	}
}

// A connection offsetgate logged in itself (a mapped certificate) takes no SASL from the
// client.
func TestSASLRefusedOnMappedConnection(t *testing.T) {
	fc := &fakeConn{}
	s := New(Config{UpstreamLoggedIn: true}, fc)
	if _, err := s.HandleClient(reqFrame(handshake("PLAIN"), 1)); err != nil {
		t.Fatal(err)
	}
	if fc.upstream.Len() != 0 {
		t.Fatal("the client's SaslHandshake was forwarded on offsetgate's login")
	}
}
