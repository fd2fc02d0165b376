package testkafka

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"offsetgate/internal/testcerts"
)

// Client listener names. PLAINTEXT is always there; the others come with Options.Secure.
const (
	ListenerPlaintext     = "PLAINTEXT"
	ListenerSSL           = "SSL"
	ListenerSASLPlaintext = "SASL_PLAINTEXT"
	ListenerSASLSSL       = "SASL_SSL"
)

// SASLMechanisms are the mechanisms the SASL_PLAINTEXT and SASL_SSL listeners accept.
const SASLMechanisms = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"

// CertFiles are the PEM files of a secure cluster (testcerts writes them).
type CertFiles struct {
	// CA holds the certificate(s) client certificates are checked against (the trust store).
	CA string
	// ServerCert holds the brokers' certificate, leaf first, optionally followed by its chain;
	// it must be valid for 127.0.0.1.
	ServerCert string
	// ServerKey holds the brokers' private key as an unencrypted PKCS#8 "PRIVATE KEY" block.
	ServerKey string
}

// SecureOptions describe the secure client listeners of a cluster.
type SecureOptions struct {
	Certs CertFiles
	// SASLUsers maps user names to passwords. Every user can log in with PLAIN, SCRAM-SHA-256
	// and SCRAM-SHA-512 (the SCRAM credentials are written when the storage is formatted).
	// Names are letters, digits, '.', '_' and '-'; passwords are printable ASCII without
	// spaces, quotes, backslashes, commas, brackets or '='.
	SASLUsers map[string]string
	// ClientAuth is the SSL listener's ssl.client.auth: "required", "requested" or "none"
	// (empty means "none"). The SASL_SSL listener never asks for client certificates.
	ClientAuth string
}

// clientListeners are the client listener names of a cluster, PLAINTEXT first.
func clientListeners(s *SecureOptions) []string {
	if s == nil {
		return []string{ListenerPlaintext}
	}
	return []string{ListenerPlaintext, ListenerSSL, ListenerSASLPlaintext, ListenerSASLSSL}
}

func protocolMap(s *SecureOptions, alias bool) string {
	var b strings.Builder
	for _, name := range clientListeners(s) {
		fmt.Fprintf(&b, "%s:%s,", name, name)
	}
	if alias {
		fmt.Fprintf(&b, "%s:PLAINTEXT,", ListenerAlias)
	}
	b.WriteString("CONTROLLER:PLAINTEXT")
	return b.String()
}

func (s *SecureOptions) validate() error {
	if s == nil {
		return nil
	}
	for what, f := range map[string]string{"CA": s.Certs.CA, "ServerCert": s.Certs.ServerCert, "ServerKey": s.Certs.ServerKey} {
		if f == "" {
			return fmt.Errorf("testkafka: Secure.Certs.%s is empty", what)
		}
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("testkafka: Secure.Certs.%s: %w", what, err)
		}
	}
	switch s.ClientAuth {
	case "", "none", "requested", "required":
	default:
		return fmt.Errorf("testkafka: Secure.ClientAuth %q: want required, requested or none", s.ClientAuth)
	}
	for u, p := range s.SASLUsers {
		if u == "" || strings.IndexFunc(u, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-')
		}) >= 0 {
			return fmt.Errorf("testkafka: SASL user name %q: use letters, digits, '.', '_' and '-'", u)
		}
		if p == "" || strings.IndexFunc(p, func(r rune) bool {
			return r <= ' ' || r > '~' || strings.ContainsRune("\"'\\,[]=", r)
		}) >= 0 {
			return fmt.Errorf("testkafka: password of SASL user %q: use printable ASCII without spaces, quotes, backslashes, commas, brackets or '='", u)
		}
	}
	return nil
}

// secureSetup is what Start derives from SecureOptions: server.properties entries and format
// arguments.
type secureSetup struct {
	config     [][2]string
	formatArgs []string
}

// setup writes the brokers' PEM key store (key followed by certificate chain) into the cluster
// folder and prepares the configuration.
func (s *SecureOptions) setup(dir string) (*secureSetup, error) {
	tdir := filepath.Join(dir, "tls")
	if err := os.MkdirAll(tdir, 0o755); err != nil {
		return nil, fmt.Errorf("testkafka: tls folder: %w", err)
	}
	keystore := filepath.Join(tdir, "server-keystore.pem")
	if err := testcerts.WriteCombinedPEM(keystore, s.Certs.ServerKey, s.Certs.ServerCert); err != nil {
		return nil, fmt.Errorf("testkafka: broker key store: %w", err)
	}
	truststore, err := filepath.Abs(s.Certs.CA)
	if err != nil {
		return nil, err
	}
	if strings.ContainsAny(keystore+truststore, "\\\n\r") {
		return nil, errors.New("testkafka: certificate paths may not contain backslashes or line breaks")
	}
	clientAuth := s.ClientAuth
	if clientAuth == "" {
		clientAuth = "none"
	}

	users := make([]string, 0, len(s.SASLUsers))
	for u := range s.SASLUsers {
		users = append(users, u)
	}
	sort.Strings(users)

	out := &secureSetup{}
	add := func(k, v string) { out.config = append(out.config, [2]string{k, v}) }
	for _, l := range []string{ListenerSSL, ListenerSASLSSL} {
		p := "listener.name." + strings.ToLower(l) + "."
		add(p+"ssl.keystore.type", "PEM")
		add(p+"ssl.keystore.location", keystore)
		add(p+"ssl.truststore.type", "PEM")
		add(p+"ssl.truststore.location", truststore)
		if l == ListenerSSL {
			add(p+"ssl.client.auth", clientAuth)
		} else {
			add(p+"ssl.client.auth", "none")
		}
	}
	add("sasl.enabled.mechanisms", SASLMechanisms)
	var plain strings.Builder
	plain.WriteString("org.apache.kafka.common.security.plain.PlainLoginModule required")
	for _, u := range users {
		fmt.Fprintf(&plain, " user_%s=\"%s\"", u, s.SASLUsers[u])
	}
	plain.WriteString(";")
	const scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
	for _, l := range []string{ListenerSASLPlaintext, ListenerSASLSSL} {
		p := "listener.name." + strings.ToLower(l) + "."
		add(p+"plain.sasl.jaas.config", plain.String())
		add(p+"scram-sha-256.sasl.jaas.config", scram)
		add(p+"scram-sha-512.sasl.jaas.config", scram)
	}
	for _, u := range users {
		for _, m := range []string{"SCRAM-SHA-256", "SCRAM-SHA-512"} {
			out.formatArgs = append(out.formatArgs, "--add-scram", fmt.Sprintf("%s=[name=%s,password=%s]", m, u, s.SASLUsers[u]))
		}
	}
	return out, nil
}
