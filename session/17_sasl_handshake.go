package session

// SaslHandshake (key 17).
//
// v1 passes through: the SASL tokens then travel in SaslAuthenticate requests, which are
// ordinary frames. v0 would send the tokens as bare size-prefixed frames without Kafka request
// headers, which this framing cannot follow yet, so it is refused with UNSUPPORTED_VERSION and
// only v1 is advertised.

import "github.com/twmb/franz-go/pkg/kmsg"

func saslHandshakeV0Refusal(corr int32) []byte {
	resp := kmsg.SASLHandshakeResponse{Version: 0, ErrorCode: 35}
	return responseFrame(corr, false, resp.AppendTo(nil))
}
