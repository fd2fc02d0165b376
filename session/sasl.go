package session

// The SASL login of a connection, as offsetgate follows it.
//
// An identity is what the destination accepted, nothing else. offsetgate never takes part in a
// client's login; it reads the exchange and lets it run only in the order Kafka's own server
// allows, one request at a time:
//
//	none ──SaslHandshake──▶ handshake ──ok──▶ authenticate ──ok (last round)──▶ done
//	                                           ▲   └─ok (more rounds)─┘           │
//	                                           └──────── SaslHandshake, when the ─┘
//	                                                     answer announced a session
//	                                                     lifetime (KIP-368)
//
// - The mechanism is carried by the SaslHandshake's response hook and the user by the hook of
//   the SaslAuthenticate whose token names it; the identity changes only when the answer that
//   completes that very exchange is processed (one round for PLAIN, two for SCRAM).
// - While a SASL request waits for its answer, and between the rounds of a login, no other
//   request is taken: the connection is closed (Kafka's server reads nothing else before a
//   login completes, and closes a connection that sends something else during one). So no
//   request can be judged with an identity that was not in force when it was sent.
// - A SaslHandshake or SaslAuthenticate out of order (a second login, a round before the
//   handshake was accepted or while another round waits, any SASL request after a completed
//   login the destination did not ask to renew) is answered by offsetgate with
//   ILLEGAL_SASL_STATE, changes nothing and is never forwarded.
// - An error answer to any step ends the connection once the answer is delivered (Kafka closes
//   it too); a failed re-authentication drops the SASL identity first.
// - Mechanisms offsetgate cannot read (OAUTHBEARER, GSSAPI) pass through the same way but prove
//   no identity; their login ends when the destination announces a session lifetime or when
//   the client sends another request after a successful round.

import (
	"errors"
	"fmt"

	"go.uber.org/zap"

	"offsetgate/rules"
)

// errIllegalSASLState is Kafka's ILLEGAL_SASL_STATE.
var errIllegalSASLState = rules.ErrIllegalSASLState

// ErrLogin ends a connection whose SASL login (or re-authentication) the destination refused.
var ErrLogin = errors.New("SASL login refused by the destination")

type saslPhase uint8

const (
	saslNone         saslPhase = iota // no login started
	saslHandshake                     // a SaslHandshake waits for its answer
	saslAuthenticate                  // the mechanism was accepted: SaslAuthenticate rounds
	saslDone                          // the login completed
	saslFailed                        // the destination refused a step: the connection ends
)

// saslState is where a connection's login stands.
type saslState struct {
	phase    saslPhase
	inFlight bool          // a SASL request waits for its answer
	ex       *saslExchange // the exchange under way (phases handshake and authenticate)
	// renew: the answer that completed the last login announced a session lifetime, so the
	// destination expects a re-authentication (KIP-368) and one may start.
	renew bool
}

// saslExchange is one login: a SaslHandshake and the SaslAuthenticate rounds after it.
type saslExchange struct {
	mechanism string
	user      string // named by the first round's token, once that round succeeded
	rounds    int    // successful SaslAuthenticate answers
	reauth    bool   // renews a completed login
}

// rounds is the number of successful SaslAuthenticate rounds that complete a login of the
// mechanism, or 0 when offsetgate cannot tell (a mechanism it does not read).
func saslRounds(mechanism string) int {
	switch mechanism {
	case "PLAIN":
		return 1
	case "SCRAM-SHA-256", "SCRAM-SHA-512":
		return 2
	}
	return 0
}

// startHandshake begins an exchange if a login may start now.
func (st *saslState) startHandshake(mechanism string) (*saslExchange, bool) {
	if st.inFlight || !(st.phase == saslNone || st.phase == saslDone && st.renew) {
		return nil, false
	}
	ex := &saslExchange{mechanism: mechanism, reauth: st.phase == saslDone}
	st.phase, st.inFlight, st.ex, st.renew = saslHandshake, true, ex, false
	return ex, true
}

// startRound begins a SaslAuthenticate round if one may run now.
func (st *saslState) startRound() (*saslExchange, bool) {
	if st.inFlight || st.phase != saslAuthenticate {
		return nil, false
	}
	st.inFlight = true
	return st.ex, true
}

// saslBusy reports whether a request other than SASL may not be taken now. It settles the
// login of a mechanism offsetgate cannot read when the client moves on after a successful
// round: that login proves nothing.
func (s *Session) saslBusy() bool {
	st := &s.sasl
	switch {
	case st.inFlight, st.phase == saslHandshake, st.phase == saslFailed:
		return true
	case st.phase == saslAuthenticate:
		if saslRounds(st.ex.mechanism) > 0 || st.ex.rounds == 0 {
			return true
		}
		st.phase, st.ex = saslDone, nil
		if s.ident.SASLUser != "" {
			s.ident.SASLUser, s.ident.SASLMechanism = "", ""
			s.admitted = false
		}
	}
	return false
}

// saslHandshakeAnswer takes the destination's answer to the exchange's SaslHandshake (code -1:
// unreadable).
func (s *Session) saslHandshakeAnswer(ex *saslExchange, code int16) {
	st := &s.sasl
	if st.ex != ex || st.phase != saslHandshake {
		s.saslFail(ex, fmt.Errorf("%w: a SaslHandshake answer out of order", ErrLogin))
		return
	}
	st.inFlight = false
	if code != 0 {
		s.saslFail(ex, fmt.Errorf("%w: SaslHandshake for mechanism %q answered with error %d", ErrLogin, ex.mechanism, code))
		return
	}
	st.phase = saslAuthenticate
}

// saslRoundAnswer takes the destination's answer to a SaslAuthenticate round; user is the
// name that round's token carried ("" for none).
func (s *Session) saslRoundAnswer(ex *saslExchange, user string, code int16, lifetime int64) {
	st := &s.sasl
	if st.ex != ex || st.phase != saslAuthenticate || !st.inFlight {
		s.saslFail(ex, fmt.Errorf("%w: a SaslAuthenticate answer out of order", ErrLogin))
		return
	}
	st.inFlight = false
	if code != 0 {
		s.saslFail(ex, fmt.Errorf("%w: %s login answered with error %d", ErrLogin, ex.mechanism, code))
		return
	}
	ex.rounds++
	if ex.rounds == 1 {
		ex.user = user
	}
	need := saslRounds(ex.mechanism)
	switch {
	case need > 0 && ex.rounds == need:
	case need == 0 && lifetime > 0:
		// Kafka announces the lifetime in the answer that completes a login only.
		ex.user = ""
	default:
		return // more rounds
	}
	st.phase, st.ex, st.renew = saslDone, nil, lifetime > 0
	prev := s.ident
	s.ident.SASLUser, s.ident.SASLMechanism = ex.user, ex.mechanism
	if ex.user == "" {
		s.ident.SASLMechanism = ""
	}
	if s.ident.SASLUser != prev.SASLUser || s.ident.SASLMechanism != prev.SASLMechanism || !ex.reauth {
		s.admitted = false
		if s.cfg.OnIdentity != nil && (s.ident.Proven() || prev.Proven()) {
			s.cfg.OnIdentity(s.ident)
		}
	}
}

// saslFail ends the login: the SASL identity is dropped and the connection closes once the
// answer is delivered.
func (s *Session) saslFail(ex *saslExchange, err error) {
	st := &s.sasl
	st.phase, st.inFlight, st.ex, st.renew = saslFailed, false, nil, false
	if ex != nil && ex.reauth {
		err = fmt.Errorf("re-authentication: %w", err)
	}
	s.ident.SASLUser, s.ident.SASLMechanism = "", ""
	s.log.Info("SASL login refused; closing the connection", zap.Error(err))
	if s.closing == nil {
		s.closing = err
	}
}
