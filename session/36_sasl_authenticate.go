package session

// SaslAuthenticate (key 36).
//
// Passes through untouched, one round at a time, and only after the destination accepted the
// SaslHandshake of the same login (sasl.go). offsetgate reads the user name from the client's
// first token and keeps it in that request's response hook; it becomes the connection's SASL
// identity only when the destination says the login succeeded: after one successful round for
// PLAIN, after the second for SCRAM (server-first, then server-final). The password is never
// kept. Other mechanisms (OAUTHBEARER, GSSAPI) pass through but prove no identity to
// offsetgate. A failed round ends the connection once its answer is delivered.

import (
	"bytes"
	"strings"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kmsg"
)

var saslAuthenticateHandler = handler{
	active: always,
	decide: func(s *Session, r *request) error {
		ex, ok := s.sasl.startRound()
		if !ok {
			s.log.Debug("SaslAuthenticate refused: no login round may run now")
			r.answerWith(&kmsg.SASLAuthenticateResponse{ErrorCode: errIllegalSASLState})
			return nil
		}
		req := r.req.(*kmsg.SASLAuthenticateRequest)
		// The user this round's token names, if it is the one that names it.
		user := ""
		if ex.rounds == 0 {
			switch ex.mechanism {
			case "PLAIN":
				user = plainUser(req.SASLAuthBytes)
			case "SCRAM-SHA-256", "SCRAM-SHA-512":
				user = scramUser(req.SASLAuthBytes)
			}
		}
		r.onResp = func(s *Session, version int16, body []byte) ([]byte, bool, error) {
			resp := kmsg.SASLAuthenticateResponse{Version: version}
			code, lifetime := int16(-1), int64(0)
			if err := resp.ReadFrom(body); err == nil {
				code, lifetime = resp.ErrorCode, resp.SessionLifetimeMillis
			}
			s.saslRoundAnswer(ex, user, code, lifetime)
			return nil, false, nil
		}
		return nil
	},
}

// plainUser reads "authzid NUL authcid NUL password" (RFC 4616) and returns the authcid, the
// name Kafka's PLAIN server authenticates (it refuses an authzid other than the authcid).
// Anything Kafka would not take as written, or would read differently (not exactly three
// tokens, an empty or non-UTF-8 name, a different authzid), gives "": no identity.
func plainUser(b []byte) string {
	parts := bytes.Split(b, []byte{0})
	if len(parts) != 3 {
		return ""
	}
	authz, authc := parts[0], parts[1]
	if len(authc) == 0 || !utf8.Valid(authc) || len(authz) > 0 && !bytes.Equal(authz, authc) {
		return ""
	}
	return string(authc)
}

// scramUser reads the client-first message (RFC 5802) as Kafka's SCRAM server does,
//
//	n,[a=authzid],[m=ext,]n=saslname,r=nonce[,extensions]
//
// and returns the user name with its =2C and =3D escapes undone. Anything else gives "": a
// channel-binding flag other than "n", a name outside Kafka's SASLNAME grammar (ASCII without
// '=' and ',' except as =2C and =3D), an authzid other than the user, or a delegation-token
// login (extension tokenauth), whose principal is the token's owner, not the name sent.
// Kafka refuses such logins or authenticates another principal; either way the name proves
// nothing here.
func scramUser(b []byte) string {
	rest, ok := strings.CutPrefix(string(b), "n,")
	if !ok {
		return ""
	}
	authz, rest, ok := strings.Cut(rest, ",")
	if !ok {
		return ""
	}
	if authz != "" {
		// Kafka compares the authzid as sent with the unescaped user name.
		a, ok := strings.CutPrefix(authz, "a=")
		if _, valid := saslName(a); !ok || !valid {
			return ""
		}
		authz = a
	}
	if m, after, ok := strings.Cut(rest, ","); ok && strings.HasPrefix(m, "m=") {
		if !scramValue(m[2:]) {
			return ""
		}
		rest = after
	}
	field, rest, ok := strings.Cut(rest, ",")
	if !ok {
		return ""
	}
	n, ok := strings.CutPrefix(field, "n=")
	if !ok {
		return ""
	}
	user, ok := saslName(n)
	if !ok || authz != "" && authz != user {
		return ""
	}
	nonce, ext, hasExt := strings.Cut(rest, ",")
	r, ok := strings.CutPrefix(nonce, "r=")
	if !ok || r == "" || strings.IndexFunc(r, func(c rune) bool { return c < 0x21 || c > 0x7e }) >= 0 {
		return ""
	}
	if hasExt {
		for _, e := range strings.Split(ext, ",") {
			k, v, ok := strings.Cut(e, "=")
			if !ok || k == "" || strings.IndexFunc(k, func(c rune) bool { return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') }) >= 0 ||
				!scramValue(v) || k == "tokenauth" {
				return ""
			}
		}
	}
	return user
}

// scramValue reports whether s is a SCRAM VALUE as Kafka reads one: one or more of ASCII
// 0x01-0x7F but ','.
func scramValue(s string) bool {
	return s != "" && strings.IndexFunc(s, func(c rune) bool { return c == 0 || c > 0x7f || c == ',' }) < 0
}

// saslName undoes RFC 5802's escapes of a SASLNAME as Kafka reads one: one or more of ASCII
// 0x01-0x7F but '=' and ',', "=2C" (',') and "=3D" ('=').
func saslName(s string) (string, bool) {
	if s == "" {
		return "", false
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '=' && strings.HasPrefix(s[i:], "=2C"):
			b.WriteByte(',')
			i += 2
		case c == '=' && strings.HasPrefix(s[i:], "=3D"):
			b.WriteByte('=')
			i += 2
		case c == 0 || c > 0x7f || c == '=' || c == ',':
			return "", false
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), true
}
