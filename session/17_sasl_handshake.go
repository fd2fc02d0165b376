package session

// SaslHandshake (key 17).
//
// v1 passes through when a login may start (sasl.go says when): no login yet, or a completed
// login whose answer announced a session lifetime, which is the destination asking for a
// re-authentication (KIP-368). The mechanism travels in the request's own response hook; only
// a successful answer lets SaslAuthenticate rounds follow. Any other SaslHandshake is answered
// by offsetgate with ILLEGAL_SASL_STATE and never forwarded, and so is every SaslHandshake on a
// listener that takes no SASL login (PLAINTEXT, SSL).
//
// v0 would send the tokens as bare size-prefixed frames without Kafka request headers, which
// this framing cannot follow, so it is refused with UNSUPPORTED_VERSION and only v1 is
// advertised: every current client (Java 1.0+, librdkafka, franz-go) uses v1.

import (
	"github.com/twmb/franz-go/pkg/kmsg"
)

var saslHandshakeHandler = handler{
	active: always,
	decide: func(s *Session, r *request) error {
		req := r.req.(*kmsg.SASLHandshakeRequest)
		if s.cfg.NoSASL {
			s.log.Debug("SaslHandshake refused: the listener takes no SASL login")
			r.answerWith(&kmsg.SASLHandshakeResponse{ErrorCode: errIllegalSASLState})
			return nil
		}
		ex, ok := s.sasl.startHandshake(req.Mechanism)
		if !ok {
			s.log.Debug("SaslHandshake refused: no login may start now")
			r.answerWith(&kmsg.SASLHandshakeResponse{ErrorCode: errIllegalSASLState})
			return nil
		}
		r.onResp = func(s *Session, version int16, body []byte) ([]byte, bool, error) {
			resp := kmsg.SASLHandshakeResponse{Version: version}
			code := int16(-1)
			if err := resp.ReadFrom(body); err == nil {
				code = resp.ErrorCode
			}
			s.saslHandshakeAnswer(ex, code)
			return nil, false, nil
		}
		return nil
	},
}

func saslHandshakeV0Refusal(corr int32) []byte {
	resp := kmsg.SASLHandshakeResponse{Version: 0, ErrorCode: 35}
	return responseFrame(corr, false, resp.AppendTo(nil))
}
