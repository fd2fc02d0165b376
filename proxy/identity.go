package proxy

import (
	"context"
	stdtls "crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	"go.uber.org/zap"

	"offsetgate/rules"
	"offsetgate/wire"
)

// SASLConfig is a SASL login offsetgate performs itself: for its own requests to the
// destination (upstream_sasl), or on the upstream connection of an mTLS client mapped to its
// own destination credentials (identities.mtls_upstream).
type SASLConfig struct {
	Mechanism    string `yaml:"mechanism"` // PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
	Username     string `yaml:"username"`
	Password     string `yaml:"password"`
	PasswordFile string `yaml:"password_file"`
}

// IdentitiesConfig is how client identities reach the destination.
//
// With SASL passed through, the destination authorizes each client as its own principal.
// Where offsetgate terminates mTLS and authenticates to the destination with a certificate of
// its own, a client that did not log in with SASL would act with offsetgate's rights; offsetgate
// refuses that unless the client's identity is mapped to destination credentials of its own
// (MTLSUpstream) or sharing is switched on explicitly (AllowSharedUpstreamIdentity).
type IdentitiesConfig struct {
	MTLSUpstream                []MTLSMapping `yaml:"mtls_upstream"`
	AllowSharedUpstreamIdentity bool          `yaml:"allow_shared_upstream_identity"`
}

// MTLSMapping maps a client certificate (by exact subject, or by one SAN such as
// "URI:spiffe://acme/mirror") to destination SASL credentials.
type MTLSMapping struct {
	Subject string     `yaml:"subject"`
	SAN     string     `yaml:"san"`
	SASL    SASLConfig `yaml:"sasl"`
}

func (c *SASLConfig) validate(key string) error {
	switch strings.ToUpper(c.Mechanism) {
	case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
	default:
		return fmt.Errorf("config key %q: mechanism %q is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512", key+".mechanism", c.Mechanism)
	}
	if c.Username == "" {
		return fmt.Errorf("config key %q: required", key+".username")
	}
	if (c.Password == "") == (c.PasswordFile == "") {
		return fmt.Errorf("config key %q: give exactly one of password, password_file", key)
	}
	return nil
}

// mechanism builds the franz-go SASL mechanism, reading the password file now so that a
// rotated password is picked up on the next login.
func (c *SASLConfig) mechanism() (sasl.Mechanism, error) {
	pass := c.Password
	if c.PasswordFile != "" {
		b, err := os.ReadFile(c.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("reading SASL password file: %w", err)
		}
		pass = strings.TrimRight(string(b), "\r\n")
	}
	switch strings.ToUpper(c.Mechanism) {
	case "PLAIN":
		return plain.Auth{User: c.Username, Pass: pass}.AsMechanism(), nil
	case "SCRAM-SHA-256":
		return scram.Auth{User: c.Username, Pass: pass}.AsSha256Mechanism(), nil
	case "SCRAM-SHA-512":
		return scram.Auth{User: c.Username, Pass: pass}.AsSha512Mechanism(), nil
	}
	return nil, fmt.Errorf("unsupported SASL mechanism %q", c.Mechanism)
}

// mapping returns the destination credentials of an mTLS identity, if it has any.
func (s *Server) mapping(id rules.Identity) *SASLConfig {
	if id.TLSSubject == "" && len(id.TLSSANs) == 0 {
		return nil
	}
	for i := range s.cfg.Identities.MTLSUpstream {
		m := &s.cfg.Identities.MTLSUpstream[i]
		if m.Subject != "" && m.Subject == id.TLSSubject {
			return &m.SASL
		}
		if m.SAN != "" {
			for _, san := range id.TLSSANs {
				if san == m.SAN {
					return &m.SASL
				}
			}
		}
	}
	return nil
}

// lendsIdentity reports whether offsetgate's upstream connections carry an identity of
// offsetgate's own (a client certificate to the destination).
func (s *Server) lendsIdentity() bool {
	return s.cfg.TLS.Upstream.Enabled && s.cfg.TLS.Upstream.CertFile != ""
}

var errLending = errors.New("offsetgate authenticates to the destination with its own certificate and does not lend it: " +
	"log in with SASL, map this identity in identities.mtls_upstream, or set identities.allow_shared_upstream_identity")

// admit is the session's Admit: the authorization model's one rule about rights.
func (s *Server) admit(mapped bool) func(rules.Identity) error {
	return func(id rules.Identity) error {
		if !s.lendsIdentity() || mapped || id.SASLUser != "" || s.cfg.Identities.AllowSharedUpstreamIdentity {
			return nil
		}
		return errLending
	}
}

// identityOf builds a connection's identity from its TLS state (verified certificates only).
// A verified certificate whose subject or SANs cannot be read exactly (FromCertificate) proves
// nothing; the warning says why.
func identityOf(c net.Conn, log *zap.Logger) rules.Identity {
	id := rules.Identity{Addr: c.RemoteAddr().String()}
	if tc, ok := c.(*stdtls.Conn); ok {
		st := tc.ConnectionState()
		if len(st.VerifiedChains) > 0 && len(st.PeerCertificates) > 0 {
			subject, sans, err := rules.FromCertificate(st.PeerCertificates[0])
			if err != nil {
				log.Warn("the client certificate proves no identity", zap.Error(err))
			} else {
				id.TLSSubject, id.TLSSANs = subject, sans
			}
		}
	}
	return id
}

// saslLogin authenticates a fresh upstream connection with offsetgate-held credentials before
// any client byte is forwarded on it.
func saslLogin(ctx context.Context, c net.Conn, cfg *SASLConfig) error {
	mech, err := cfg.mechanism()
	if err != nil {
		return err
	}
	if err := wire.Wrap(c, "offsetgate").Login(ctx, mech); err != nil {
		return fmt.Errorf("as %q: %w", cfg.Username, err)
	}
	return nil
}

// ownClientOpts are the kgo options for offsetgate's own requests to the destination.
func (s *Server) ownClientOpts() ([]kgo.Opt, error) {
	// offsetgate's own clients write ledger topics and read mirror topics moments after they
	// were created; at franz-go's default (5 s between metadata refreshes) the first write or
	// read of a new topic could wait that long for the client to learn its leader.
	opts := []kgo.Opt{kgo.MetadataMinAge(250 * time.Millisecond)}
	switch {
	case s.cfg.Dial != nil:
		dial := s.cfg.Dial
		opts = append(opts, kgo.Dialer(func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err != nil || s.upTLS == nil {
				return c, err
			}
			host, _, _ := net.SplitHostPort(addr)
			t := stdtls.Client(c, s.upTLS.Config(host))
			if err := t.HandshakeContext(ctx); err != nil {
				c.Close()
				return nil, err
			}
			return t, nil
		}))
	case s.upTLS != nil:
		host, _, _ := net.SplitHostPort(s.cfg.Bootstrap[0])
		opts = append(opts, kgo.DialTLSConfig(s.upTLS.Config(host)))
	}
	if s.cfg.UpstreamSASL != nil {
		m, err := s.cfg.UpstreamSASL.mechanism()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

// sourceClientOpts are offsetgate's own client options towards the source (its Metadata
// requests): the source's TLS and SASL.
func (s *Server) sourceClientOpts() ([]kgo.Opt, error) {
	var opts []kgo.Opt
	if s.srcTLS != nil {
		host, _, _ := net.SplitHostPort(s.cfg.Source.Bootstrap[0])
		opts = append(opts, kgo.DialTLSConfig(s.srcTLS.Config(host)))
	}
	if s.cfg.Source.SASL != nil {
		m, err := s.cfg.Source.SASL.mechanism()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

// dialOwn opens a raw connection of offsetgate's own to a destination broker, with its own TLS
// and SASL (the produce-at-offset writer pipelines on it).
func (s *Server) dialOwn(ctx context.Context, addr string) (*wire.Conn, error) {
	var tc *stdtls.Config
	if s.upTLS != nil {
		host, _, _ := net.SplitHostPort(addr)
		tc = s.upTLS.Config(host)
	}
	var mech sasl.Mechanism
	if s.cfg.UpstreamSASL != nil {
		m, err := s.cfg.UpstreamSASL.mechanism()
		if err != nil {
			return nil, err
		}
		mech = m
	}
	dial := (&net.Dialer{Timeout: s.cfg.Limits.DialTimeout}).DialContext
	if s.cfg.Dial != nil {
		dial = s.cfg.Dial
	}
	return wire.DialWith(ctx, dial, addr, tc, mech, "offsetgate-writer")
}

func (s *Server) logIdentity(log *zap.Logger) func(rules.Identity) {
	return func(id rules.Identity) { log.Info("client identity", zap.Stringer("identity", id)) }
}
