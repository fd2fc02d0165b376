package session

// SaslAuthenticate (key 36).
//
// Passes through untouched; offsetgate reads the user name from the client's first token and
// takes it as the connection's SASL identity once the destination says the login succeeded:
// after one successful round for PLAIN, after the second for SCRAM (server-first, then
// server-final). The password is never kept. Other mechanisms (OAUTHBEARER, GSSAPI) pass
// through but prove no identity to offsetgate.

import (
	"bytes"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"
)

type saslState struct {
	mechanism string
	user      string
	rounds    int // successful SaslAuthenticate responses so far
}

var saslAuthenticateHandler = handler{
	request: func(s *Session, r *request) error {
		if s.sasl.user != "" || s.sasl.rounds > 0 {
			return nil
		}
		req := kmsg.SASLAuthenticateRequest{Version: r.h.version}
		if err := req.ReadFrom(r.body); err != nil {
			return nil
		}
		switch strings.ToUpper(s.sasl.mechanism) {
		case "PLAIN":
			s.sasl.user = plainUser(req.SASLAuthBytes)
		case "SCRAM-SHA-256", "SCRAM-SHA-512":
			s.sasl.user = scramUser(req.SASLAuthBytes)
		}
		return nil
	},
	response: func(s *Session, version int16, body []byte) ([]byte, bool, error) {
		resp := kmsg.SASLAuthenticateResponse{Version: version}
		if err := resp.ReadFrom(body); err != nil || resp.ErrorCode != 0 {
			s.sasl = saslState{}
			return nil, false, nil
		}
		s.sasl.rounds++
		need := 1
		if strings.HasPrefix(strings.ToUpper(s.sasl.mechanism), "SCRAM-") {
			need = 2
		}
		if s.sasl.rounds == need && s.sasl.user != "" {
			s.ident.SASLUser, s.ident.SASLMechanism = s.sasl.user, strings.ToUpper(s.sasl.mechanism)
			s.admitted = false
			if s.cfg.OnIdentity != nil {
				s.cfg.OnIdentity(s.ident)
			}
		}
		return nil, false, nil
	},
}

// plainUser reads "authzid NUL authcid NUL password" (RFC 4616) and returns the authcid.
func plainUser(b []byte) string {
	parts := bytes.SplitN(b, []byte{0}, 3)
	if len(parts) != 3 {
		return ""
	}
	return string(parts[1])
}

// scramUser reads the client-first message "gs2-header,n=user,r=nonce" (RFC 5802) and
// returns the user name with its =2C and =3D escapes undone.
func scramUser(b []byte) string {
	fields := strings.Split(string(b), ",")
	if len(fields) < 3 {
		return ""
	}
	for _, f := range fields[2:] {
		if strings.HasPrefix(f, "n=") {
			return strings.NewReplacer("=2C", ",", "=3D", "=").Replace(f[2:])
		}
	}
	return ""
}
