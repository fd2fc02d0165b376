package proxy

import (
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"

	"offsetgate/rules"
	ogtls "offsetgate/tls"
)

// ListenerConfig is one named listener, as a Kafka broker has several: a bootstrap address,
// a listener next to it for each destination broker, the address clients are told for them,
// and its security.
type ListenerConfig struct {
	Name string `yaml:"name"`
	// Listen is the bootstrap address, host:port. Broker node N gets port+1+N on the same host
	// unless BrokerPorts names a port for it.
	Listen string `yaml:"listen"`
	// Advertise is the host clients of this listener are told to connect to; default: Listen's
	// host (127.0.0.1 for a wildcard).
	Advertise   string        `yaml:"advertise"`
	BrokerPorts map[int32]int `yaml:"broker_ports"`
	// SecurityProtocol is Kafka's: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL. SSL and SASL_SSL
	// need TLS; SASL_* listeners pass clients' SASL logins to the destination (which must take
	// SASL: upstream_sasl), PLAINTEXT and SSL answer a SaslHandshake with ILLEGAL_SASL_STATE.
	// Default: SSL with tls and PLAINTEXT without, SASL_ in front when upstream_sasl is set.
	SecurityProtocol string `yaml:"security_protocol"`
	// TLS, when set, is this listener's TLS (client_auth request or require lets clients prove
	// a certificate).
	TLS *ogtls.ServerConfig `yaml:"tls"`
	// Upstream is the cluster the bootstrap address fronts: destination (the default) or
	// source (source mode, with the top-level source section). A source listener also has a
	// port for every source broker, at the port of its node id raised by
	// source.node_id_offset, next to the destination brokers' ports.
	Upstream string `yaml:"upstream"`
}

// The clusters a listener's bootstrap can front.
const (
	UpstreamDestination = "destination"
	UpstreamSource      = "source"
)

// DefaultListener names the one listener of a configuration that uses the top-level listen,
// advertise, broker_ports and tls.listener keys.
const DefaultListener = "default"

// The security protocols of a listener.
const (
	ProtocolPlaintext     = "PLAINTEXT"
	ProtocolSSL           = "SSL"
	ProtocolSASLPlaintext = "SASL_PLAINTEXT"
	ProtocolSASLSSL       = "SASL_SSL"
)

var listenerName = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// legacyListener reports whether the configuration describes its one listener with the
// top-level keys (listen, advertise, broker_ports, tls.listener).
func (c *Config) legacyListener() bool { return len(c.Listeners) == 0 }

// ListenerList is the configuration's listeners: those of `listeners`, or the one named
// "default" that the top-level listen, advertise, broker_ports and tls.listener describe. The
// security protocol is filled in where it was left out.
func (c *Config) ListenerList() []ListenerConfig {
	var out []ListenerConfig
	if c.legacyListener() {
		if c.Listen == "" {
			return nil
		}
		out = []ListenerConfig{{Name: DefaultListener, Listen: c.Listen, Advertise: c.Advertise, BrokerPorts: c.BrokerPorts, TLS: c.TLS.Listener}}
	} else {
		out = append(out, c.Listeners...)
	}
	for i := range out {
		l := &out[i]
		l.SecurityProtocol = strings.ToUpper(l.SecurityProtocol)
		if l.SecurityProtocol == "" {
			l.SecurityProtocol = ProtocolPlaintext
			if l.TLS != nil {
				l.SecurityProtocol = ProtocolSSL
			}
			if c.DestinationSASL() {
				l.SecurityProtocol = "SASL_" + l.SecurityProtocol
			}
		}
	}
	return out
}

// anyTLSListener reports whether a listener serves TLS.
func (c *Config) anyTLSListener() bool {
	for _, l := range c.ListenerList() {
		if l.TLS != nil {
			return true
		}
	}
	return false
}

// SASL reports whether the listener passes clients' SASL logins on.
func (l *ListenerConfig) SASL() bool {
	return l.SecurityProtocol == ProtocolSASLPlaintext || l.SecurityProtocol == ProtocolSASLSSL
}

// ClientCertificates reports whether clients can prove a certificate on the listener.
func (l *ListenerConfig) ClientCertificates() bool {
	return l.TLS != nil && (l.TLS.ClientAuth == "request" || l.TLS.ClientAuth == "require")
}

// AdvertiseHost is the host the listener's clients are told.
func (l *ListenerConfig) AdvertiseHost() string {
	if l.Advertise != "" {
		return l.Advertise
	}
	h, _, _ := net.SplitHostPort(l.Listen)
	if h == "" || h == "0.0.0.0" || h == "::" {
		return "127.0.0.1"
	}
	return h
}

// ListenPort is the bootstrap port.
func (l *ListenerConfig) ListenPort() int {
	_, p, _ := net.SplitHostPort(l.Listen)
	n, _ := strconv.Atoi(p)
	return n
}

// ListenHost is the host the listener binds.
func (l *ListenerConfig) ListenHost() string {
	h, _, _ := net.SplitHostPort(l.Listen)
	return h
}

// BrokerPort is the port that stands for node id on this listener.
func (l *ListenerConfig) BrokerPort(node int32) int {
	if p, ok := l.BrokerPorts[node]; ok {
		return p
	}
	return l.ListenPort() + 1 + int(node)
}

// validateListeners checks every listener; keys are named as the file names them.
func (c *Config) validateListeners(bad func(key, format string, a ...any)) []error {
	var errs []error
	if !c.legacyListener() && (c.Listen != "" || c.Advertise != "" || len(c.BrokerPorts) > 0 || c.TLS.Listener != nil) {
		bad("listeners", "give listeners, or listen (with advertise, broker_ports and tls.listener) for a single listener, not both")
	}
	ls := c.ListenerList()
	if len(ls) == 0 {
		bad("listen", "required (host:port of the bootstrap listener), or listeners")
		return errs
	}
	names := map[string]bool{}
	addrs := map[string]string{}
	for i, l := range ls {
		key := func(k string) string {
			if c.legacyListener() {
				if k == "tls" {
					return "tls.listener"
				}
				return k
			}
			return fmt.Sprintf("listeners[%d].%s", i, k)
		}
		if !listenerName.MatchString(l.Name) {
			bad(key("name"), "%q: a listener needs a name of letters, digits, - and _", l.Name)
		} else if names[l.Name] {
			bad(key("name"), "%q is the name of another listener", l.Name)
		}
		names[l.Name] = true
		if l.Listen == "" {
			bad(key("listen"), "required (host:port of the bootstrap listener)")
		} else if _, p, err := net.SplitHostPort(l.Listen); err != nil {
			bad(key("listen"), "%v", err)
		} else if n, err := strconv.Atoi(p); err != nil || n <= 0 || n > 65535 {
			bad(key("listen"), "port %q must be 1-65535 (port 0 cannot number the broker listeners)", p)
		} else if other, ok := addrs[l.Listen]; ok {
			bad(key("listen"), "%s is also the address of listener %s", l.Listen, other)
		}
		addrs[l.Listen] = l.Name
		for id, p := range l.BrokerPorts {
			if id < 0 || p <= 0 || p > 65535 {
				bad(fmt.Sprintf("%s.%d", key("broker_ports"), id), "node id must be >= 0 and port 1-65535")
			}
		}
		switch l.Upstream {
		case "", UpstreamDestination, UpstreamSource:
		default:
			bad(key("upstream"), "%q is not one of destination, source", l.Upstream)
		}
		switch l.SecurityProtocol {
		case ProtocolPlaintext, ProtocolSASLPlaintext:
			if l.TLS != nil {
				bad(key("tls"), "a %s listener has no TLS: use SSL or SASL_SSL", l.SecurityProtocol)
			}
		case ProtocolSSL, ProtocolSASLSSL:
			if l.TLS == nil {
				bad(key("tls"), "required: a %s listener serves TLS", l.SecurityProtocol)
			}
		default:
			bad(key("security_protocol"), "%q is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL", l.SecurityProtocol)
		}
		if l.SASL() && !c.DestinationSASL() {
			bad(key("security_protocol"), "%s passes SASL logins to the destination, which takes them only when offsetgate logs in there too (upstream_sasl)", l.SecurityProtocol)
		}
		if l.TLS != nil {
			if err := l.TLS.Validate(key("tls")); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errs
}

// ruleListeners is the listeners a mirroring rule can match on: those it names, or all. An
// error names a listener that is not configured.
func (c *Config) ruleListeners(cl rules.ClientConfig) ([]ListenerConfig, error) {
	ls := c.ListenerList()
	if len(cl.Listeners) == 0 {
		return ls, nil
	}
	var out, none []ListenerConfig
	for _, n := range cl.Listeners {
		found := false
		for _, l := range ls {
			if l.Name == n {
				out, found = append(out, l), true
			}
		}
		if !found {
			var names []string
			for _, l := range ls {
				names = append(names, l.Name)
			}
			return none, fmt.Errorf("names listener %q, which is not configured (listeners: %s)", n, strings.Join(names, ", "))
		}
	}
	return out, nil
}

func listenerNames(ls []ListenerConfig) string {
	var out []string
	for _, l := range ls {
		out = append(out, fmt.Sprintf("%s (%s)", l.Name, l.SecurityProtocol))
	}
	return strings.Join(out, ", ")
}

// first is the first listener (the only one of a single-listener configuration).
func (c *Config) first() ListenerConfig {
	if ls := c.ListenerList(); len(ls) > 0 {
		return ls[0]
	}
	return ListenerConfig{}
}

// AdvertiseHost is the host the first listener's clients are told.
func (c *Config) AdvertiseHost() string { l := c.first(); return l.AdvertiseHost() }

// BrokerPort is the first listener's port for node id.
func (c *Config) BrokerPort(node int32) int { l := c.first(); return l.BrokerPort(node) }

// BootstrapListen is the first listener's bootstrap address.
func (c *Config) BootstrapListen() string { return c.first().Listen }
