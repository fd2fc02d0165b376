// Package rules decides what a client may do: who it is (Identity), which identities are
// approved mirroring clients, which topics are mirror topics, and the policy that guards them.
// Decisions are pure functions of their inputs; the proxy and session packages ask, rules
// answers.
package rules

import (
	"fmt"
	"strings"
)

// Identity is who a client connection is, as far as offsetgate can prove it.
//
// Only a verified TLS client certificate (mTLS) or a SASL login that the destination accepted
// proves an identity; client.id and the source address are what the client says and where it
// comes from, and may only narrow a rule, never satisfy one alone.
type Identity struct {
	// TLSSubject is the verified client certificate's subject as an RFC 4514 string of its
	// encoded RDN sequence, and TLSSANs its subject alternative names as "DNS:name",
	// "URI:uri", "email:addr", "IP:addr", exactly as the certificate holds them (subject.go).
	// Both are empty when the certificate proves nothing (FromCertificate refused it).
	TLSSubject string
	TLSSANs    []string
	// SASLUser is the user name of a SASL login the destination accepted, with its mechanism.
	SASLUser      string
	SASLMechanism string
	ClientID      string
	Addr          string // source ip:port
	// Listener names the offsetgate listener the connection came through.
	Listener string
}

// Proven reports whether the identity rests on mTLS or SASL.
func (i Identity) Proven() bool { return i.TLSSubject != "" || len(i.TLSSANs) > 0 || i.SASLUser != "" }

// String is the identity for logs: never a secret.
func (i Identity) String() string {
	var parts []string
	if i.TLSSubject != "" || len(i.TLSSANs) > 0 {
		parts = append(parts, fmt.Sprintf("mtls=%q", i.TLSSubject))
	}
	if i.SASLUser != "" {
		parts = append(parts, fmt.Sprintf("sasl=%q(%s)", i.SASLUser, i.SASLMechanism))
	}
	if len(parts) == 0 {
		parts = append(parts, "anonymous")
	}
	if i.ClientID != "" {
		parts = append(parts, "client.id="+i.ClientID)
	}
	if i.Addr != "" {
		parts = append(parts, "addr="+i.Addr)
	}
	if i.Listener != "" {
		parts = append(parts, "listener="+i.Listener)
	}
	return strings.Join(parts, " ")
}
