// Package tls builds offsetgate's TLS configurations on crypto/tls: termination for clients
// (server certificate, optional or required client certificates) and origination to the
// destination cluster (CA bundle, client certificate, server name). Certificates and CA
// bundles are re-read from disk when their files change, without a restart. gnet has no TLS,
// so TLS connections are served by the goroutine transport; nothing here is written by hand
// below crypto/tls.
package tls

import (
	stdtls "crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// ServerConfig configures TLS termination for clients.
type ServerConfig struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ClientCAFile holds the CAs that sign client certificates; required unless ClientAuth is
	// "none".
	ClientCAFile string `yaml:"client_ca_file"`
	// ClientAuth is "none", "request" (verified when given) or "require".
	ClientAuth string `yaml:"client_auth"`
	// HandshakeTimeout bounds a client's TLS handshake; 0 means 10s.
	HandshakeTimeout time.Duration `yaml:"handshake_timeout"`
}

// ClientConfig configures TLS to the destination brokers.
type ClientConfig struct {
	Enabled  bool   `yaml:"enabled"`
	CAFile   string `yaml:"ca_file"` // empty: the system roots
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName overrides the name verified in the brokers' certificates (default: the host
	// dialed).
	ServerName string `yaml:"server_name"`
}

// Validate names the bad key.
func (c *ServerConfig) Validate(prefix string) error {
	var errs []error
	if c.CertFile == "" || c.KeyFile == "" {
		errs = append(errs, fmt.Errorf("config key %q: cert_file and key_file are both required", prefix))
	}
	switch c.ClientAuth {
	case "", "none":
	case "request", "require":
		if c.ClientCAFile == "" {
			errs = append(errs, fmt.Errorf("config key %q: client_auth %q needs client_ca_file", prefix+".client_ca_file", c.ClientAuth))
		}
	default:
		errs = append(errs, fmt.Errorf("config key %q: %q is not one of none, request, require", prefix+".client_auth", c.ClientAuth))
	}
	if c.HandshakeTimeout < 0 {
		errs = append(errs, fmt.Errorf("config key %q: must not be negative", prefix+".handshake_timeout"))
	}
	return errors.Join(errs...)
}

// Validate names the bad key.
func (c *ClientConfig) Validate(prefix string) error {
	if (c.CertFile == "") != (c.KeyFile == "") {
		return fmt.Errorf("config key %q: cert_file and key_file go together", prefix)
	}
	return nil
}

// Timeout is the handshake timeout in force.
func (c *ServerConfig) Timeout() time.Duration {
	if c.HandshakeTimeout == 0 {
		return 10 * time.Second
	}
	return c.HandshakeTimeout
}

// files re-reads a set of files when any of them changes (size or modification time), at most
// once per checkEvery. It is safe for concurrent use.
type files struct {
	paths      []string
	checkEvery time.Duration
	load       func() error

	mu      sync.Mutex
	checked time.Time
	stamps  []string
}

func (f *files) stamp() ([]string, error) {
	out := make([]string, len(f.paths))
	for i, p := range f.paths {
		if p == "" {
			continue
		}
		st, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		out[i] = fmt.Sprintf("%d/%d", st.Size(), st.ModTime().UnixNano())
	}
	return out, nil
}

// refresh reloads when a file changed. A failed reload keeps the previous material and
// returns the error, so a half-written file never takes the listener down.
func (f *files) refresh() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.checked.IsZero() && time.Since(f.checked) < f.checkEvery {
		return nil
	}
	f.checked = time.Now()
	st, err := f.stamp()
	if err != nil {
		return err
	}
	if equal(st, f.stamps) {
		return nil
	}
	if err := f.load(); err != nil {
		return err
	}
	f.stamps = st
	return nil
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Server is the reloading TLS termination for clients.
type Server struct {
	cfg   ServerConfig
	f     *files
	mu    sync.RWMutex
	cert  *stdtls.Certificate
	pool  *x509.CertPool
	onErr func(error)
}

// NewServer loads the certificate (and client CAs) and returns the termination. onErr hears
// about failed reloads (the old material stays in use).
func NewServer(cfg ServerConfig, onErr func(error)) (*Server, error) {
	s := &Server{cfg: cfg, onErr: onErr}
	s.f = &files{paths: []string{cfg.CertFile, cfg.KeyFile, cfg.ClientCAFile}, checkEvery: time.Second, load: s.load}
	if err := s.f.refresh(); err != nil {
		return nil, fmt.Errorf("tls listener: %w", err)
	}
	return s, nil
}

func (s *Server) load() error {
	cert, err := stdtls.LoadX509KeyPair(s.cfg.CertFile, s.cfg.KeyFile)
	if err != nil {
		return fmt.Errorf("loading %s / %s: %w", s.cfg.CertFile, s.cfg.KeyFile, err)
	}
	var pool *x509.CertPool
	if s.cfg.ClientCAFile != "" {
		pool, err = loadPool(s.cfg.ClientCAFile)
		if err != nil {
			return err
		}
	}
	s.mu.Lock()
	s.cert, s.pool = &cert, pool
	s.mu.Unlock()
	return nil
}

func loadPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("no certificate in CA bundle %s", path)
	}
	return pool, nil
}

// Config returns the crypto/tls server configuration. Each handshake picks up changed files.
func (s *Server) Config() *stdtls.Config {
	return &stdtls.Config{
		MinVersion: stdtls.VersionTLS12,
		GetConfigForClient: func(*stdtls.ClientHelloInfo) (*stdtls.Config, error) {
			if err := s.f.refresh(); err != nil && s.onErr != nil {
				s.onErr(err)
			}
			s.mu.RLock()
			cert, pool := s.cert, s.pool
			s.mu.RUnlock()
			c := &stdtls.Config{
				MinVersion:   stdtls.VersionTLS12,
				Certificates: []stdtls.Certificate{*cert},
				ClientCAs:    pool,
			}
			switch s.cfg.ClientAuth {
			case "request":
				c.ClientAuth = stdtls.VerifyClientCertIfGiven
			case "require":
				c.ClientAuth = stdtls.RequireAndVerifyClientCert
			}
			return c, nil
		},
	}
}

// Client is the reloading TLS origination to the destination.
type Client struct {
	cfg   ClientConfig
	f     *files
	mu    sync.RWMutex
	cert  *stdtls.Certificate
	pool  *x509.CertPool
	onErr func(error)
}

// NewClient loads the CA bundle and client certificate.
func NewClient(cfg ClientConfig, onErr func(error)) (*Client, error) {
	c := &Client{cfg: cfg, onErr: onErr}
	c.f = &files{paths: []string{cfg.CAFile, cfg.CertFile, cfg.KeyFile}, checkEvery: time.Second, load: c.load}
	if err := c.f.refresh(); err != nil {
		return nil, fmt.Errorf("tls to the destination: %w", err)
	}
	return c, nil
}

func (c *Client) load() error {
	var pool *x509.CertPool
	var err error
	if c.cfg.CAFile != "" {
		if pool, err = loadPool(c.cfg.CAFile); err != nil {
			return err
		}
	}
	var cert *stdtls.Certificate
	if c.cfg.CertFile != "" {
		kp, err := stdtls.LoadX509KeyPair(c.cfg.CertFile, c.cfg.KeyFile)
		if err != nil {
			return fmt.Errorf("loading %s / %s: %w", c.cfg.CertFile, c.cfg.KeyFile, err)
		}
		cert = &kp
	}
	c.mu.Lock()
	c.cert, c.pool = cert, pool
	c.mu.Unlock()
	return nil
}

// Config returns the crypto/tls client configuration for a broker at host.
func (c *Client) Config(host string) *stdtls.Config {
	if err := c.f.refresh(); err != nil && c.onErr != nil {
		c.onErr(err)
	}
	c.mu.RLock()
	pool := c.pool
	c.mu.RUnlock()
	name := c.cfg.ServerName
	if name == "" {
		name = host
	}
	return &stdtls.Config{
		MinVersion: stdtls.VersionTLS12,
		RootCAs:    pool,
		ServerName: name,
		GetClientCertificate: func(*stdtls.CertificateRequestInfo) (*stdtls.Certificate, error) {
			c.mu.RLock()
			defer c.mu.RUnlock()
			if c.cert == nil {
				return &stdtls.Certificate{}, nil
			}
			return c.cert, nil
		},
		Renegotiation: stdtls.RenegotiateNever,
	}
}
