// Package testcerts makes throw-away X.509 certificates for tests: a test CA, a server
// certificate for localhost and 127.0.0.1, client certificates, an expired client certificate
// and a certificate from a second CA that nothing trusts.
//
// Every key is ECDSA P-256 and is written as an unencrypted PKCS#8 PEM block ("PRIVATE KEY"),
// the form Kafka's PEM key stores read; certificates are written as "CERTIFICATE" blocks.
package testcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// KeyPair is a certificate with its private key, in memory and as PEM files.
type KeyPair struct {
	// CertFile holds the certificate alone, one "CERTIFICATE" PEM block.
	CertFile string
	// KeyFile holds the private key as an unencrypted PKCS#8 "PRIVATE KEY" PEM block.
	KeyFile string

	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// TLSCertificate is the pair as a crypto/tls certificate (for a tls.Config's Certificates).
func (p *KeyPair) TLSCertificate() tls.Certificate {
	return tls.Certificate{Certificate: [][]byte{p.Cert.Raw}, PrivateKey: p.Key, Leaf: p.Cert}
}

// CA is a certificate authority that signs certificates.
type CA struct {
	KeyPair
	dir string
}

// SANs are the subject alternative names of a certificate.
type SANs struct {
	DNSNames []string
	IPs      []net.IP
	URIs     []string // parsed with url.Parse, e.g. "spiffe://example.org/alice"
	Emails   []string
}

// Template describes a certificate for CA.Issue.
type Template struct {
	CommonName string
	// Subject, when set, is the subject exactly as encoded, RDN by RDN (a multi-valued RDN
	// is one element with several attributes; each RDN's attributes are written in DER order),
	// in place of CN=CommonName,O=offsetgate tests. CommonName then only names the files.
	Subject pkix.RDNSequence
	SANs    SANs
	// RawURIs are URI SANs written byte for byte as given (SANs.URIs go through url.URL,
	// which drops an empty fragment, say).
	RawURIs []string
	// Server makes a TLS server certificate (ExtKeyUsageServerAuth); otherwise it is a client
	// certificate (ExtKeyUsageClientAuth).
	Server bool
	// NotBefore and NotAfter default to an hour ago and a day from now.
	NotBefore, NotAfter time.Time
	// File is the base file name (without extension); empty means one made from CommonName.
	File string
}

// NewCA makes a self-signed CA and writes it to dir as <file>.pem and <file>.key.
func NewCA(dir, commonName, file string) (*CA, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("testcerts: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("testcerts: CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{"offsetgate tests"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("testcerts: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("testcerts: CA certificate: %w", err)
	}
	ca := &CA{KeyPair: KeyPair{Cert: cert, Key: key}, dir: dir}
	if err := ca.KeyPair.write(dir, file); err != nil {
		return nil, err
	}
	return ca, nil
}

// Pool is a certificate pool holding only this CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Issue makes a certificate signed by the CA and writes it to the CA's folder as
// <file>.pem and <file>.key.
func (ca *CA) Issue(t Template) (*KeyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("testcerts: key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	nb, na := t.NotBefore, t.NotAfter
	if nb.IsZero() {
		nb = now.Add(-time.Hour)
	}
	if na.IsZero() {
		na = now.Add(24 * time.Hour)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: t.CommonName, Organization: []string{"offsetgate tests"}},
		NotBefore:             nb,
		NotAfter:              na,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		DNSNames:              t.SANs.DNSNames,
		IPAddresses:           t.SANs.IPs,
		EmailAddresses:        t.SANs.Emails,
	}
	if t.Server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	for _, s := range t.SANs.URIs {
		u, err := url.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("testcerts: URI SAN %q: %w", s, err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	if t.Subject != nil {
		raw, err := asn1.Marshal(t.Subject)
		if err != nil {
			return nil, fmt.Errorf("testcerts: subject: %w", err)
		}
		tmpl.RawSubject = raw
	}
	if len(t.RawURIs) > 0 {
		ext, err := rawSANs(t.SANs, t.RawURIs)
		if err != nil {
			return nil, err
		}
		tmpl.ExtraExtensions = append(tmpl.ExtraExtensions, ext)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("testcerts: certificate for %q: %w", t.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("testcerts: certificate for %q: %w", t.CommonName, err)
	}
	file := t.File
	if file == "" {
		file = fileName(t.CommonName)
	}
	kp := &KeyPair{Cert: cert, Key: key}
	if err := kp.write(ca.dir, file); err != nil {
		return nil, err
	}
	return kp, nil
}

// Set is a test CA with a server certificate, plus a second CA that the first does not trust.
type Set struct {
	Dir string
	// CA signs Server and the client certificates; CA.CertFile is the trust store to give to
	// servers and clients.
	CA *CA
	// Server is valid for "localhost" and 127.0.0.1 (and ::1).
	Server *KeyPair
	// Untrusted is a second, unrelated CA; UntrustedClient certificates come from it.
	Untrusted *CA
}

// New writes a test CA (ca.pem, ca.key), a server certificate signed by it (server.pem,
// server.key) and a second, untrusted CA (untrusted-ca.pem, untrusted-ca.key) into dir.
func New(dir string) (*Set, error) {
	ca, err := NewCA(dir, "offsetgate test CA", "ca")
	if err != nil {
		return nil, err
	}
	srv, err := ca.Issue(Template{
		CommonName: "localhost",
		SANs:       SANs{DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}},
		Server:     true,
		File:       "server",
	})
	if err != nil {
		return nil, err
	}
	other, err := NewCA(dir, "offsetgate untrusted test CA", "untrusted-ca")
	if err != nil {
		return nil, err
	}
	return &Set{Dir: dir, CA: ca, Server: srv, Untrusted: other}, nil
}

// Client makes a client certificate signed by the CA, written as client-<cn>.pem/.key.
func (s *Set) Client(cn string, sans SANs) (*KeyPair, error) {
	return s.CA.Issue(Template{CommonName: cn, SANs: sans, File: "client-" + fileName(cn)})
}

// ExpiredClient makes a client certificate signed by the CA whose validity ended a day ago,
// written as expired-<cn>.pem/.key.
func (s *Set) ExpiredClient(cn string) (*KeyPair, error) {
	now := time.Now()
	return s.CA.Issue(Template{CommonName: cn, NotBefore: now.Add(-72 * time.Hour), NotAfter: now.Add(-24 * time.Hour),
		File: "expired-" + fileName(cn)})
}

// UntrustedClient makes a client certificate signed by the untrusted CA, written as
// untrusted-<cn>.pem/.key.
func (s *Set) UntrustedClient(cn string) (*KeyPair, error) {
	return s.Untrusted.Issue(Template{CommonName: cn, File: "untrusted-" + fileName(cn)})
}

// ClientTLS is a client TLS configuration trusting the CA, presenting cert when it is not nil.
// The server name is left empty: kgo.DialTLSConfig and tls.Dial fill it in from the address.
func (s *Set) ClientTLS(cert *KeyPair) *tls.Config {
	cfg := &tls.Config{RootCAs: s.CA.Pool(), MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{cert.TLSCertificate()}
	}
	return cfg
}

// ServerTLS is a server TLS configuration with the server certificate, verifying client
// certificates against the CA as clientAuth says.
func (s *Set) ServerTLS(clientAuth tls.ClientAuthType) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{s.Server.TLSCertificate()},
		ClientCAs:    s.CA.Pool(),
		ClientAuth:   clientAuth,
		MinVersion:   tls.VersionTLS12,
	}
}

// WriteCombinedPEM writes one PEM file holding the private key of keyFile followed by the
// certificates of certFiles in order (leaf first, then its chain), the form of a Kafka PEM key
// store given by file (ssl.keystore.type=PEM with ssl.keystore.location). The key must be an
// unencrypted PKCS#8 "PRIVATE KEY" block.
func WriteCombinedPEM(path, keyFile string, certFiles ...string) error {
	if len(certFiles) == 0 {
		return errors.New("testcerts: combined PEM needs at least one certificate file")
	}
	var out []byte
	kb, err := os.ReadFile(keyFile)
	if err != nil {
		return fmt.Errorf("testcerts: %w", err)
	}
	blocks, err := pemBlocks(kb, keyFile)
	if err != nil {
		return err
	}
	if len(blocks) != 1 || blocks[0].Type != "PRIVATE KEY" {
		return fmt.Errorf("testcerts: %s must hold exactly one unencrypted PKCS#8 \"PRIVATE KEY\" block", keyFile)
	}
	if _, err := x509.ParsePKCS8PrivateKey(blocks[0].Bytes); err != nil {
		return fmt.Errorf("testcerts: %s: %w", keyFile, err)
	}
	out = append(out, pem.EncodeToMemory(blocks[0])...)
	for _, f := range certFiles {
		cb, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("testcerts: %w", err)
		}
		blocks, err := pemBlocks(cb, f)
		if err != nil {
			return err
		}
		for _, b := range blocks {
			if b.Type != "CERTIFICATE" {
				return fmt.Errorf("testcerts: %s holds a %q block, want only certificates", f, b.Type)
			}
			out = append(out, pem.EncodeToMemory(b)...)
		}
	}
	return os.WriteFile(path, out, 0o600)
}

func pemBlocks(b []byte, name string) ([]*pem.Block, error) {
	var out []*pem.Block
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		out = append(out, blk)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("testcerts: no PEM block in %s", name)
	}
	return out, nil
}

func (p *KeyPair) write(dir, file string) error {
	p.CertFile = filepath.Join(dir, file+".pem")
	p.KeyFile = filepath.Join(dir, file+".key")
	kder, err := x509.MarshalPKCS8PrivateKey(p.Key)
	if err != nil {
		return fmt.Errorf("testcerts: %w", err)
	}
	if err := os.WriteFile(p.CertFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.Cert.Raw}), 0o644); err != nil {
		return fmt.Errorf("testcerts: %w", err)
	}
	if err := os.WriteFile(p.KeyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return fmt.Errorf("testcerts: %w", err)
	}
	return nil
}

// rawSANs builds a subjectAltName extension with the names of sans and the raw URIs, written
// as given.
func rawSANs(sans SANs, rawURIs []string) (pkix.Extension, error) {
	var names []asn1.RawValue
	for _, d := range sans.DNSNames {
		names = append(names, asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 2, Bytes: []byte(d)})
	}
	for _, e := range sans.Emails {
		names = append(names, asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 1, Bytes: []byte(e)})
	}
	for _, u := range append(append([]string(nil), sans.URIs...), rawURIs...) {
		names = append(names, asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 6, Bytes: []byte(u)})
	}
	for _, ip := range sans.IPs {
		b := ip.To4()
		if b == nil {
			b = ip
		}
		names = append(names, asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 7, Bytes: b})
	}
	der, err := asn1.Marshal(names)
	if err != nil {
		return pkix.Extension{}, fmt.Errorf("testcerts: subjectAltName: %w", err)
	}
	return pkix.Extension{Id: asn1.ObjectIdentifier{2, 5, 29, 17}, Value: der}, nil
}

func newSerial() (*big.Int, error) {
	s, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		return nil, fmt.Errorf("testcerts: serial: %w", err)
	}
	return s.Add(s, big.NewInt(1)), nil
}

// fileName keeps letters, digits, '-', '_' and '.' of a name, so that a common name can be
// part of a file name.
func fileName(s string) string {
	f := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '_'
	}, s)
	if f == "" || strings.Trim(f, ".") == "" {
		f = "cert"
	}
	return f
}
