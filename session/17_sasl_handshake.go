package session

// SaslHandshake (key 17).
//
// v1 passes through: the SASL tokens then travel in SaslAuthenticate requests, which are
// ordinary frames. The mechanism the client asks for is noted, so the SaslAuthenticate
// exchange can be read for the user name (36_sasl_authenticate.go). v0 would send the tokens
// as bare size-prefixed frames without Kafka request headers, which this framing cannot
// follow, so it is refused with UNSUPPORTED_VERSION and only v1 is advertised: every current
// client (Java 1.0+, librdkafka, franz-go) uses v1.

import "github.com/twmb/franz-go/pkg/kmsg"

var saslHandshakeHandler = handler{
	request: func(s *Session, r *request) error {
		req := kmsg.SASLHandshakeRequest{Version: r.h.version}
		if err := req.ReadFrom(r.body); err != nil {
			return nil // the broker will answer the malformed request itself
		}
		s.sasl = saslState{mechanism: req.Mechanism}
		return nil
	},
	response: func(s *Session, version int16, body []byte) ([]byte, bool, error) {
		resp := kmsg.SASLHandshakeResponse{Version: version}
		if err := resp.ReadFrom(body); err == nil && resp.ErrorCode != 0 {
			s.sasl = saslState{}
		}
		return nil, false, nil
	},
}

func saslHandshakeV0Refusal(corr int32) []byte {
	resp := kmsg.SASLHandshakeResponse{Version: 0, ErrorCode: 35}
	return responseFrame(corr, false, resp.AppendTo(nil))
}
