package rules

import (
	"strings"
	"testing"
)

func mustPolicy(t *testing.T, c MirroringConfig) *Policy {
	t.Helper()
	p, err := NewPolicy(c)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Only mTLS or SASL proves an identity; client.id and the source address only narrow.
func TestApprovalNeedsProof(t *testing.T) {
	p := mustPolicy(t, MirroringConfig{Clients: []ClientConfig{
		{SASLUser: "mirror", ClientID: "offsetgate-mirror", SourceCIDR: "10.0.0.0/8", Topics: []string{"orders*"}},
		{TLSSAN: "URI:spiffe://acme/mirror", Topics: []string{"*"}},
		{TLSSubject: "CN=m,O=acme", Topics: []string{"pay"}},
	}})
	cases := []struct {
		name  string
		id    Identity
		topic string
		want  bool
	}{
		{"sasl with narrowing", Identity{SASLUser: "mirror", ClientID: "offsetgate-mirror", Addr: "10.1.2.3:5000"}, "orders-eu", true},
		{"sasl wrong client.id", Identity{SASLUser: "mirror", ClientID: "x", Addr: "10.1.2.3:5000"}, "orders-eu", false},
		{"sasl wrong network", Identity{SASLUser: "mirror", ClientID: "offsetgate-mirror", Addr: "192.168.1.1:5000"}, "orders-eu", false},
		{"client.id and address alone", Identity{ClientID: "offsetgate-mirror", Addr: "10.1.2.3:5000"}, "orders-eu", false},
		{"san", Identity{TLSSubject: "CN=whatever", TLSSANs: []string{"URI:spiffe://acme/mirror"}}, "anything", true},
		{"subject", Identity{TLSSubject: "CN=m,O=acme"}, "pay", true},
		{"subject, other topic", Identity{TLSSubject: "CN=m,O=acme"}, "payroll", false},
		{"sasl user as tls subject", Identity{TLSSubject: "mirror"}, "orders", false},
		{"anonymous", Identity{}, "orders", false},
	}
	for _, c := range cases {
		if _, got := p.Approved(c.id, c.topic); got != c.want {
			t.Errorf("%s: approved=%v, want %v", c.name, got, c.want)
		}
	}
}

func TestPolicyValidation(t *testing.T) {
	for name, c := range map[string]ClientConfig{
		"no proof":       {ClientID: "x", Topics: []string{"t"}},
		"two proofs":     {SASLUser: "a", TLSSubject: "CN=a", Topics: []string{"t"}},
		"no topics":      {SASLUser: "a"},
		"bad pattern":    {SASLUser: "a", Topics: []string{"[x"}},
		"bad source net": {SASLUser: "a", SourceCIDR: "nope", Topics: []string{"t"}},
		// Rules that no certificate can ever satisfy.
		"subject with spaces":   {TLSSubject: "CN=mirror, O=acme", Topics: []string{"t"}},
		"subject in lower case": {TLSSubject: "cn=mirror", Topics: []string{"t"}},
		"subject with two CNs":  {TLSSubject: "CN=mirror,CN=evil", Topics: []string{"t"}},
		"san without a kind":    {TLSSAN: "spiffe://acme/mirror", Topics: []string{"t"}},
		"san ip not canonical":  {TLSSAN: "IP:010.0.0.1", Topics: []string{"t"}},
	} {
		if _, err := NewPolicy(MirroringConfig{Clients: []ClientConfig{c}}); err == nil || !strings.Contains(err.Error(), "mirroring.clients[0]") {
			t.Errorf("%s: error %v does not name the key", name, err)
		}
	}
}

func TestDestinationConfigs(t *testing.T) {
	s := func(v string) *string { return &v }
	out, src, err := DestinationConfigs(map[string]*string{MarkKey: s("true"), SourcePrefix + "retention.ms": s("86400000"),
		SourcePrefix + "cleanup.policy": s("delete"), "segment.bytes": s("2097152")})
	if err != nil {
		t.Fatal(err)
	}
	for k := range out {
		if strings.HasPrefix(k, KeyPrefix) {
			t.Fatalf("offsetgate key %s would reach the broker", k)
		}
	}
	if *out["compression.type"] != "producer" || *out["retention.ms"] != "86400000" || *out["segment.bytes"] != "2097152" ||
		*out["message.timestamp.after.max.ms"] != maxLong || src["retention.ms"] != "86400000" {
		t.Fatalf("destination configs %v, source %v", out, src)
	}
	for name, in := range map[string]map[string]*string{
		"codec":            {"compression.type": s("zstd")},
		"log append time":  {"message.timestamp.type": s("LogAppendTime")},
		"short retention":  {SourcePrefix + "retention.ms": s("-1"), "retention.ms": s("1000")},
		"smaller messages": {SourcePrefix + "max.message.bytes": s("2000000"), "max.message.bytes": s("1000")},
		"unknown source":   {SourcePrefix + "segment.ms": s("1")},
		"timestamp window": {"message.timestamp.before.max.ms": s("3600000")},
		"unclean":          {"unclean.leader.election.enable": s("true")},
		"small segments":   {"segment.bytes": s("1000")},
		"other cleanup":    {SourcePrefix + "cleanup.policy": s("delete"), "cleanup.policy": s("compact")},
	} {
		in[MarkKey] = s("true")
		if _, _, err := DestinationConfigs(in); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
