package main

import (
	"bufio"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
)

// clientFlags are the flags every subcommand that talks to offsetgate takes, from one place:
// the addresses and offsetgate identity (TLS, SASL). A flag left out is taken from the client
// config file (--client-config FILE, or OFFSETGATE_CLIENT_CONFIG), then from the environment
// (OFFSETGATE_PROXY, ...): flags first, the file second, the environment last.
type clientFlags struct {
	cmd          string
	fs           *flag.FlagSet
	withSource   bool
	proxy        string
	source       string
	tlsCA        string
	tlsCert      string
	tlsKey       string
	saslMech     string
	saslUser     string
	saslPassFile string
	saslPass     string // from the client config file or OFFSETGATE_SASL_PASSWORD only
	configFile   string
}

// clientSettings names each setting: its flag (and client config key) and its environment
// variable.
var clientSettings = []struct{ key, env, usage string }{
	{"proxy", "OFFSETGATE_PROXY", "offsetgate bootstrap address, host:port[,...]"},
	{"source", "OFFSETGATE_SOURCE", "source cluster brokers, host:port[,...]"},
	{"tls-ca", "OFFSETGATE_TLS_CA", "CA bundle to verify offsetgate's certificate (turns TLS on)"},
	{"tls-cert", "OFFSETGATE_TLS_CERT", "client certificate for offsetgate (mTLS identity; turns TLS on)"},
	{"tls-key", "OFFSETGATE_TLS_KEY", "client key for offsetgate"},
	{"sasl-mechanism", "OFFSETGATE_SASL_MECHANISM", "SASL towards offsetgate: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"},
	{"sasl-user", "OFFSETGATE_SASL_USER", "SASL user"},
	{"sasl-password-file", "OFFSETGATE_SASL_PASSWORD_FILE", "file holding the SASL password (or sasl-password in the client config file, or OFFSETGATE_SASL_PASSWORD)"},
}

// newClientFlags registers the shared flags on fs. withSource adds --source (required or not
// is the command's business).
func newClientFlags(fs *flag.FlagSet, withSource bool) *clientFlags {
	c := &clientFlags{cmd: fs.Name(), fs: fs, withSource: withSource}
	for _, s := range clientSettings {
		if s.key == "source" && !withSource {
			continue
		}
		fs.StringVar(c.field(s.key), s.key, "", s.usage)
	}
	fs.StringVar(&c.configFile, "client-config", "", "client config file: key=value lines with the keys of these flags (proxy, source, tls-ca, tls-cert, tls-key, sasl-mechanism, sasl-user, sasl-password-file, sasl-password); or OFFSETGATE_CLIENT_CONFIG")
	return c
}

func (c *clientFlags) field(key string) *string {
	switch key {
	case "proxy":
		return &c.proxy
	case "source":
		return &c.source
	case "tls-ca":
		return &c.tlsCA
	case "tls-cert":
		return &c.tlsCert
	case "tls-key":
		return &c.tlsKey
	case "sasl-mechanism":
		return &c.saslMech
	case "sasl-user":
		return &c.saslUser
	case "sasl-password-file":
		return &c.saslPassFile
	case "sasl-password":
		return &c.saslPass
	}
	return nil
}

// resolve fills what no flag gave from the client config file and the environment. Call it
// after the flags are parsed.
func (c *clientFlags) resolve() error {
	set := map[string]bool{}
	c.fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if c.configFile == "" {
		c.configFile = os.Getenv("OFFSETGATE_CLIENT_CONFIG")
	}
	if c.configFile != "" {
		kv, err := readClientConfig(c.configFile)
		if err != nil {
			return err
		}
		for k, v := range kv {
			if k == "source" && !c.withSource {
				continue
			}
			if p := c.field(k); p != nil && !set[k] {
				*p = v
				set[k] = true
			}
		}
	}
	for _, s := range clientSettings {
		if s.key == "source" && !c.withSource || set[s.key] {
			continue
		}
		if v := os.Getenv(s.env); v != "" {
			*c.field(s.key) = v
		}
	}
	if c.saslPass == "" {
		c.saslPass = os.Getenv("OFFSETGATE_SASL_PASSWORD")
	}
	return nil
}

// readClientConfig reads key=value lines; # and ! start comments, as in Java properties files.
func readClientConfig(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--client-config: %w", err)
	}
	defer f.Close()
	return parseClientConfig(f, path)
}

func parseClientConfig(r io.Reader, path string) (map[string]string, error) {
	out := map[string]string{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "!") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			k, v, ok = strings.Cut(line, ":")
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" {
			return nil, fmt.Errorf("%s line %d: want key=value, got %q", path, n, line)
		}
		known := k == "sasl-password"
		for _, s := range clientSettings {
			known = known || s.key == k
		}
		if !known {
			return nil, fmt.Errorf("%s line %d: unknown key %q (proxy, source, tls-ca, tls-cert, tls-key, sasl-mechanism, sasl-user, sasl-password-file, sasl-password)", path, n, k)
		}
		out[k] = v
	}
	return out, sc.Err()
}

// proxyAddrs is --proxy split.
func (c *clientFlags) proxyAddrs() []string { return splitAddrs(c.proxy) }

// sourceAddrs is --source split.
func (c *clientFlags) sourceAddrs() []string { return splitAddrs(c.source) }

func splitAddrs(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// tls is the TLS configuration towards offsetgate, nil for plaintext.
func (c *clientFlags) tls() (*tls.Config, error) {
	if c.tlsCA == "" && c.tlsCert == "" {
		if c.tlsKey != "" {
			return nil, fmt.Errorf("--tls-key needs --tls-cert")
		}
		return nil, nil
	}
	if (c.tlsCert == "") != (c.tlsKey == "") {
		return nil, fmt.Errorf("--tls-cert and --tls-key go together")
	}
	return clientTLS(c.tlsCA, c.tlsCert, c.tlsKey)
}

// sasl is the SASL login towards offsetgate, nil for none.
func (c *clientFlags) sasl() (sasl.Mechanism, error) {
	if c.saslMech == "" {
		if c.saslUser != "" {
			return nil, fmt.Errorf("--sasl-user needs --sasl-mechanism")
		}
		return nil, nil
	}
	return saslMechanism(c.saslMech, c.saslUser, c.saslPassFile, c.saslPass)
}

// proxyClient is a client of offsetgate with this identity.
func (c *clientFlags) proxyClient(clientID string, extra ...kgo.Opt) (*kgo.Client, error) {
	opts := []kgo.Opt{kgo.SeedBrokers(c.proxyAddrs()...), kgo.ClientID(clientID)}
	tc, err := c.tls()
	if err != nil {
		return nil, err
	}
	if tc != nil {
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	m, err := c.sasl()
	if err != nil {
		return nil, err
	}
	if m != nil {
		opts = append(opts, kgo.SASL(m))
	}
	return kgo.NewClient(append(opts, extra...)...)
}

// sourceClient is a client of the source cluster.
func (c *clientFlags) sourceClient(clientID string) (*kgo.Client, error) {
	return kgo.NewClient(kgo.SeedBrokers(c.sourceAddrs()...), kgo.ClientID(clientID))
}
