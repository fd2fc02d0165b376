package rules

import (
	"fmt"
	"net/netip"
	"path"
	"slices"
	"strings"
)

// MirroringConfig is the YAML section that approves mirroring clients. It is re-read when the
// configuration file changes, without a restart.
type MirroringConfig struct {
	Clients []ClientConfig `yaml:"clients"`
	// NativeDestination says the destination understands the magic header itself (a future
	// broker); only then is the header forwarded. Stock Kafka and Redpanda never need it.
	NativeDestination bool `yaml:"native_destination"`
}

// ClientConfig approves one mirroring identity for some topics.
type ClientConfig struct {
	Name string `yaml:"name"`
	// One of TLSSubject, TLSSAN, SASLUser proves the identity. TLSSubject is compared with
	// the certificate's subject rendered as RFC 4514 from its encoded RDN sequence (last RDN
	// first; subject.go), TLSSAN with one of its
	// subject alternative names as encoded ("URI:spiffe://acme/mirror", "DNS:...",
	// "email:...", "IP:..."), SASLUser with the user of a SASL login the destination accepted.
	TLSSubject string `yaml:"tls_subject"`
	TLSSAN     string `yaml:"tls_san"`
	SASLUser   string `yaml:"sasl_user"`
	// ClientID, SourceCIDR and Listeners only narrow the match.
	ClientID   string `yaml:"client_id"`
	SourceCIDR string `yaml:"source_cidr"`
	// Listeners, when given, names the offsetgate listeners the client must come through.
	Listeners []string `yaml:"listeners"`
	// Topics are shell patterns (path.Match) of the mirror topics this client may write.
	Topics []string `yaml:"topics"`
	// AttachHeader makes offsetgate treat this client's Produce requests to its mirror topics
	// as carrying the magic header, for clients that cannot add request-header tags (kgo, the
	// Java client, librdkafka).
	AttachHeader bool `yaml:"attach_header"`
}

// Policy is an immutable snapshot of the approved mirroring clients.
type Policy struct {
	clients []client
	native  bool
}

type client struct {
	ClientConfig
	prefix netip.Prefix
	hasNet bool
}

// Approval is what an approved identity may do on one topic.
type Approval struct {
	Client       string
	AttachHeader bool
}

// NewPolicy validates a mirroring section and builds the snapshot; errors name the bad key.
func NewPolicy(c MirroringConfig) (*Policy, error) {
	p := &Policy{native: c.NativeDestination}
	var errs []string
	for i, cc := range c.Clients {
		key := fmt.Sprintf("mirroring.clients[%d]", i)
		proofs := 0
		for _, v := range []string{cc.TLSSubject, cc.TLSSAN, cc.SASLUser} {
			if v != "" {
				proofs++
			}
		}
		if proofs != 1 {
			errs = append(errs, fmt.Sprintf("config key %q: give exactly one of tls_subject, tls_san, sasl_user (client.id and source_cidr can only narrow a rule)", key))
		}
		if cc.TLSSubject != "" {
			if err := CheckSubject(cc.TLSSubject); err != nil {
				errs = append(errs, fmt.Sprintf("config key %q: can never match a certificate: %v", key+".tls_subject", err))
			}
		}
		if cc.TLSSAN != "" {
			if err := CheckSAN(cc.TLSSAN); err != nil {
				errs = append(errs, fmt.Sprintf("config key %q: can never match a certificate: %v", key+".tls_san", err))
			}
		}
		if len(cc.Topics) == 0 {
			errs = append(errs, fmt.Sprintf("config key %q: required (the mirror topics this client may write)", key+".topics"))
		}
		for j, t := range cc.Topics {
			if _, err := path.Match(t, ""); err != nil {
				errs = append(errs, fmt.Sprintf("config key %q: bad pattern %q: %v", fmt.Sprintf("%s.topics[%d]", key, j), t, err))
			}
		}
		cl := client{ClientConfig: cc}
		if cc.SourceCIDR != "" {
			pr, err := netip.ParsePrefix(cc.SourceCIDR)
			if err != nil {
				errs = append(errs, fmt.Sprintf("config key %q: %v", key+".source_cidr", err))
			}
			cl.prefix, cl.hasNet = pr, true
		}
		if cl.Name == "" {
			cl.Name = fmt.Sprintf("client-%d", i)
		}
		p.clients = append(p.clients, cl)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return p, nil
}

// Native reports whether the magic header is forwarded to the destination.
func (p *Policy) Native() bool { return p != nil && p.native }

// Approved decides whether an identity is an approved mirroring client for topic. Only a
// proven identity (mTLS or SASL) can match; client.id and the source address narrow.
func (p *Policy) Approved(id Identity, topic string) (Approval, bool) {
	if p == nil || !id.Proven() {
		return Approval{}, false
	}
	for _, c := range p.clients {
		if !c.matches(id) {
			continue
		}
		for _, pat := range c.Topics {
			if ok, _ := path.Match(pat, topic); ok {
				return Approval{Client: c.Name, AttachHeader: c.AttachHeader}, true
			}
		}
	}
	return Approval{}, false
}

// Mirroring reports whether the identity is an approved mirroring client for any topic.
func (p *Policy) Mirroring(id Identity) bool {
	if p == nil || !id.Proven() {
		return false
	}
	for _, c := range p.clients {
		if c.matches(id) {
			return true
		}
	}
	return false
}

func (c *client) matches(id Identity) bool {
	switch {
	case c.TLSSubject != "":
		if id.TLSSubject == "" || id.TLSSubject != c.TLSSubject {
			return false
		}
	case c.TLSSAN != "":
		found := false
		for _, s := range id.TLSSANs {
			if s == c.TLSSAN {
				found = true
			}
		}
		if !found {
			return false
		}
	case c.SASLUser != "":
		if id.SASLUser == "" || id.SASLUser != c.SASLUser {
			return false
		}
	default:
		return false
	}
	if c.ClientID != "" && c.ClientID != id.ClientID {
		return false
	}
	if len(c.Listeners) > 0 && !slices.Contains(c.Listeners, id.Listener) {
		return false
	}
	if c.hasNet {
		ap, err := netip.ParseAddrPort(id.Addr)
		if err != nil || !c.prefix.Contains(ap.Addr().Unmap()) {
			return false
		}
	}
	return true
}
