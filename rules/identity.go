// Package rules decides what a client may do: who it is (Identity), which identities are
// approved mirroring clients, which topics are mirror topics, and the policy that guards them.
// Decisions are pure functions of their inputs; the proxy and session packages ask, rules
// answers.
package rules

import (
	"crypto/x509"
	"fmt"
	"strings"
)

// Identity is who a client connection is, as far as offsetgate can prove it.
//
// Only a verified TLS client certificate (mTLS) or a SASL login that the destination accepted
// proves an identity; client.id and the source address are what the client says and where it
// comes from, and may only narrow a rule, never satisfy one alone.
type Identity struct {
	// TLSSubject is the verified client certificate's subject (RFC 2253 string), and TLSSANs
	// its subject alternative names as "DNS:name", "URI:uri", "email:addr", "IP:addr".
	TLSSubject string
	TLSSANs    []string
	// SASLUser is the user name of a SASL login the destination accepted, with its mechanism.
	SASLUser      string
	SASLMechanism string
	ClientID      string
	Addr          string // source ip:port
}

// Proven reports whether the identity rests on mTLS or SASL.
func (i Identity) Proven() bool { return i.TLSSubject != "" || i.SASLUser != "" }

// String is the identity for logs: never a secret.
func (i Identity) String() string {
	var parts []string
	if i.TLSSubject != "" {
		parts = append(parts, "mtls="+i.TLSSubject)
	}
	if i.SASLUser != "" {
		parts = append(parts, fmt.Sprintf("sasl=%s(%s)", i.SASLUser, i.SASLMechanism))
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
	return strings.Join(parts, " ")
}

// FromCertificate fills the TLS part of an identity from a verified client certificate.
func FromCertificate(c *x509.Certificate) (subject string, sans []string) {
	subject = c.Subject.String()
	for _, d := range c.DNSNames {
		sans = append(sans, "DNS:"+d)
	}
	for _, u := range c.URIs {
		sans = append(sans, "URI:"+u.String())
	}
	for _, e := range c.EmailAddresses {
		sans = append(sans, "email:"+e)
	}
	for _, ip := range c.IPAddresses {
		sans = append(sans, "IP:"+ip.String())
	}
	return subject, sans
}
