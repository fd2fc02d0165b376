package testcerts_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"offsetgate/internal/testcerts"
)

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, rest := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" || len(rest) != 0 {
		t.Fatalf("%s: want exactly one CERTIFICATE block", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func readKey(t *testing.T, path string) *ecdsa.PrivateKey {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, rest := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" || len(rest) != 0 {
		t.Fatalf("%s: want exactly one unencrypted PKCS#8 PRIVATE KEY block", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	ek, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		t.Fatalf("%s: key is %T", path, k)
	}
	return ek
}

func pool(c *x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c)
	return p
}

func TestFilesParseAndVerify(t *testing.T) {
	dir := t.TempDir()
	s, err := testcerts.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	ca := readCert(t, s.CA.CertFile)
	if !ca.IsCA || ca.Subject.CommonName == "" {
		t.Fatalf("CA certificate: IsCA %v, subject %v", ca.IsCA, ca.Subject)
	}
	if filepath.Dir(s.CA.CertFile) != dir || filepath.Dir(s.Server.KeyFile) != dir {
		t.Fatalf("files outside %s: %s, %s", dir, s.CA.CertFile, s.Server.KeyFile)
	}

	srv := readCert(t, s.Server.CertFile)
	if !readKey(t, s.Server.KeyFile).PublicKey.Equal(srv.PublicKey) {
		t.Fatal("server key does not match the server certificate")
	}
	for _, host := range []string{"localhost", "127.0.0.1"} {
		if _, err := srv.Verify(x509.VerifyOptions{DNSName: host, Roots: pool(ca),
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Fatalf("server certificate for %s: %v", host, err)
		}
	}
	if err := srv.VerifyHostname("example.com"); err == nil {
		t.Fatal("server certificate valid for example.com")
	}

	cl, err := s.Client("alice", testcerts.SANs{
		DNSNames: []string{"alice.test"},
		URIs:     []string{"spiffe://offsetgate.test/alice"},
		Emails:   []string{"alice@offsetgate.test"},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := readCert(t, cl.CertFile)
	if !readKey(t, cl.KeyFile).PublicKey.Equal(c.PublicKey) {
		t.Fatal("client key does not match the client certificate")
	}
	if c.Subject.CommonName != "alice" || len(c.DNSNames) != 1 || c.DNSNames[0] != "alice.test" ||
		len(c.URIs) != 1 || c.URIs[0].String() != "spiffe://offsetgate.test/alice" ||
		len(c.EmailAddresses) != 1 || c.EmailAddresses[0] != "alice@offsetgate.test" {
		t.Fatalf("client certificate names: cn %q dns %v uris %v emails %v", c.Subject.CommonName, c.DNSNames, c.URIs, c.EmailAddresses)
	}
	if _, err := c.Verify(x509.VerifyOptions{Roots: pool(ca), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("client certificate: %v", err)
	}

	exp, err := s.ExpiredClient("old")
	if err != nil {
		t.Fatal(err)
	}
	e := readCert(t, exp.CertFile)
	if !time.Now().After(e.NotAfter) {
		t.Fatalf("expired certificate valid until %v", e.NotAfter)
	}
	var inv x509.CertificateInvalidError
	if _, err := e.Verify(x509.VerifyOptions{Roots: pool(ca), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); !errors.As(err, &inv) || inv.Reason != x509.Expired {
		t.Fatalf("expired certificate verifies with %v, want an expiry error", err)
	}

	un, err := s.UntrustedClient("mallory")
	if err != nil {
		t.Fatal(err)
	}
	u := readCert(t, un.CertFile)
	var ua x509.UnknownAuthorityError
	if _, err := u.Verify(x509.VerifyOptions{Roots: pool(ca), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); !errors.As(err, &ua) {
		t.Fatalf("untrusted certificate verifies with %v, want an unknown authority error", err)
	}
	if _, err := u.Verify(x509.VerifyOptions{Roots: pool(readCert(t, s.Untrusted.CertFile)),
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("untrusted certificate against its own CA: %v", err)
	}
}

func TestWriteCombinedPEM(t *testing.T) {
	dir := t.TempDir()
	s, err := testcerts.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "keystore.pem")
	if err := testcerts.WriteCombinedPEM(path, s.Server.KeyFile, s.Server.CertFile, s.CA.CertFile); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		types = append(types, blk.Type)
	}
	if len(types) != 3 || types[0] != "PRIVATE KEY" || types[1] != "CERTIFICATE" || types[2] != "CERTIFICATE" {
		t.Fatalf("combined PEM blocks %v, want key, leaf, CA", types)
	}
	// crypto/tls reads it as a key pair with the chain.
	kp, err := tls.LoadX509KeyPair(path, path)
	if err != nil {
		t.Fatal(err)
	}
	if len(kp.Certificate) != 2 || !kp.Leaf.Equal(s.Server.Cert) {
		t.Fatalf("combined PEM: %d certificates", len(kp.Certificate))
	}
	// A certificate in place of the key is refused.
	if err := testcerts.WriteCombinedPEM(filepath.Join(dir, "bad.pem"), s.Server.CertFile, s.Server.CertFile); err == nil {
		t.Fatal("a certificate was accepted as the key")
	}
}

// The TLS configurations work together, and the server refuses the expired and the untrusted
// client certificates and a client without one.
func TestTLSHandshakes(t *testing.T) {
	s, err := testcerts.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	good, err := s.Client("alice", testcerts.SANs{})
	if err != nil {
		t.Fatal(err)
	}
	expired, err := s.ExpiredClient("old")
	if err != nil {
		t.Fatal(err)
	}
	untrusted, err := s.UntrustedClient("mallory")
	if err != nil {
		t.Fatal(err)
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", s.ServerTLS(tls.RequireAndVerifyClientCert))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				if err := c.(*tls.Conn).Handshake(); err != nil {
					return
				}
				_, _ = c.Write([]byte("ok"))
			}()
		}
	}()
	try := func(cert *testcerts.KeyPair) error {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", l.Addr().String(), s.ClientTLS(cert))
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		// With TLS 1.3 the server's verdict on the client certificate comes with the first read.
		b := make([]byte, 2)
		_, err = io.ReadFull(c, b)
		return err
	}
	if err := try(good); err != nil {
		t.Fatalf("trusted client certificate: %v", err)
	}
	for name, cert := range map[string]*testcerts.KeyPair{"no": nil, "expired": expired, "untrusted": untrusted} {
		if err := try(cert); err == nil {
			t.Fatalf("%s client certificate accepted", name)
		}
	}
}

// A subject is written RDN by RDN as given, duplicates and multi-valued RDNs included, and a
// raw URI SAN byte for byte.
func TestRawSubjectAndURIs(t *testing.T) {
	set, err := testcerts.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cn := func(v string) pkix.AttributeTypeAndValue {
		return pkix.AttributeTypeAndValue{Type: asn1.ObjectIdentifier{2, 5, 4, 3}, Value: v}
	}
	o := pkix.AttributeTypeAndValue{Type: asn1.ObjectIdentifier{2, 5, 4, 10}, Value: "acme"}
	subject := pkix.RDNSequence{{o}, {cn("evil")}, {cn("mirror"), o}}
	kp, err := set.CA.Issue(testcerts.Template{CommonName: "raw", Subject: subject,
		SANs: testcerts.SANs{DNSNames: []string{"m.acme"}}, RawURIs: []string{"spiffe://acme/mirror#"}})
	if err != nil {
		t.Fatal(err)
	}
	c := readCert(t, kp.CertFile)
	var got pkix.RDNSequence
	if _, err := asn1.Unmarshal(c.RawSubject, &got); err != nil || len(got) != 3 || len(got[2]) != 2 || got[1][0].Value != "evil" {
		t.Fatalf("subject %v (%v)", got, err)
	}
	if len(c.DNSNames) != 1 || len(c.URIs) != 1 || !bytes.Contains(c.Raw, []byte("spiffe://acme/mirror#")) {
		t.Fatalf("SANs %v %v", c.DNSNames, c.URIs)
	}
	if _, err := c.Verify(x509.VerifyOptions{Roots: set.CA.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatal(err)
	}
}
