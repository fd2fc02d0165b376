package rules

import (
	"bytes"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"strings"
	"testing"
)

// tlv is one DER element with a definite length.
func tlv(tag byte, content ...[]byte) []byte {
	body := bytes.Join(content, nil)
	n := len(body)
	var l []byte
	switch {
	case n < 0x80:
		l = []byte{byte(n)}
	case n < 0x100:
		l = []byte{0x81, byte(n)}
	default:
		l = []byte{0x82, byte(n >> 8), byte(n)}
	}
	return append(append([]byte{tag}, l...), body...)
}

var (
	oidCN    = asn1.ObjectIdentifier{2, 5, 4, 3}
	oidO     = asn1.ObjectIdentifier{2, 5, 4, 10}
	oidDC    = asn1.ObjectIdentifier{0, 9, 2342, 19200300, 100, 1, 25}
	oidEmail = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 1}
)

func atv(oid asn1.ObjectIdentifier, value []byte) []byte {
	o, err := asn1.Marshal(oid)
	if err != nil {
		panic(err)
	}
	return tlv(0x30, o, value)
}

func utf8s(s string) []byte     { return tlv(0x0c, []byte(s)) }
func printable(s string) []byte { return tlv(0x13, []byte(s)) }
func rdn(atvs ...[]byte) []byte { return tlv(0x31, atvs...) }
func name(rdns ...[]byte) []byte {
	return tlv(0x30, rdns...)
}

func bmp(s string) []byte {
	var b []byte
	for _, r := range s {
		b = append(b, byte(r>>8), byte(r))
	}
	return tlv(0x1e, b)
}

func TestRenderSubject(t *testing.T) {
	for _, c := range []struct {
		what string
		der  []byte
		want string
	}{
		{"usual order", name(rdn(atv(oidO, printable("acme"))), rdn(atv(oidCN, utf8s("mirror")))), "CN=mirror,O=acme"},
		{"reversed order", name(rdn(atv(oidCN, utf8s("mirror"))), rdn(atv(oidO, printable("acme")))), "O=acme,CN=mirror"},
		{"multi-valued RDN, encoded order", name(rdn(atv(oidCN, utf8s("mirror")), atv(oidO, printable("acme")))), "CN=mirror+O=acme"},
		{"multi-valued RDN, other order", name(rdn(atv(oidO, printable("acme")), atv(oidCN, utf8s("mirror")))), "O=acme+CN=mirror"},
		{"escapes", name(rdn(atv(oidCN, utf8s(`a,b+c"d\e<f>g;h=i`)))), `CN=a\,b\+c\"d\\e\<f\>g\;h=i`},
		{"leading and trailing", name(rdn(atv(oidCN, utf8s(" #x# ")))), `CN=\ #x#\ `},
		{"leading sharp", name(rdn(atv(oidCN, utf8s("#x")))), `CN=\#x`},
		{"one space", name(rdn(atv(oidCN, utf8s(" ")))), `CN=\ `},
		{"controls", name(rdn(atv(oidCN, utf8s("a\x00b\nc\x7f")))), `CN=a\00b\0Ac\7F`},
		{"empty value", name(rdn(atv(oidCN, utf8s("")))), "CN="},
		{"unicode", name(rdn(atv(oidCN, utf8s("j\u00fcrgen")))), "CN=j\u00fcrgen"},
		{"bmp string", name(rdn(atv(oidCN, bmp("mirror")))), "CN=mirror"},
		{"bmp surrogate", name(rdn(atv(oidCN, tlv(0x1e, []byte{0xd8, 0x00})))), "CN=#1e02d800"},
		{"bad utf8", name(rdn(atv(oidCN, tlv(0x0c, []byte{'m', 0xff})))), "CN=#0c026dff"},
		{"bad printable", name(rdn(atv(oidCN, printable("a@b")))), "CN=#1303614062"},
		{"not a string", name(rdn(atv(oidCN, tlv(0x02, []byte{5})))), "CN=#020105"},
		{"teletex", name(rdn(atv(oidCN, tlv(0x14, []byte("x"))))), "CN=#140178"},
		{"DC", name(rdn(atv(oidDC, tlv(0x16, []byte("com")))), rdn(atv(oidDC, tlv(0x16, []byte("acme"))))), "DC=acme,DC=com"},
		{"unknown attribute", name(rdn(atv(oidEmail, tlv(0x16, []byte("a@b"))))), "1.2.840.113549.1.9.1=#1603614062"},
		{"empty subject", name(), ""},
	} {
		got, err := RenderSubject(c.der)
		if err != nil || got != c.want {
			t.Errorf("%s: %q, %v; want %q", c.what, got, err, c.want)
		}
	}
	for what, der := range map[string][]byte{
		"two CNs":                name(rdn(atv(oidO, printable("acme"))), rdn(atv(oidCN, utf8s("evil"))), rdn(atv(oidCN, utf8s("mirror")))),
		"two CNs in one RDN":     name(rdn(atv(oidCN, utf8s("evil")), atv(oidCN, utf8s("mirror")))),
		"same CN twice":          name(rdn(atv(oidCN, utf8s("mirror"))), rdn(atv(oidCN, utf8s("mirror")))),
		"empty RDN":              name(rdn()),
		"trailing bytes":         append(name(rdn(atv(oidCN, utf8s("x")))), 0),
		"not a sequence":         utf8s("CN=mirror"),
		"truncated":              name(rdn(atv(oidCN, utf8s("mirror"))))[:5],
		"attribute without type": name(rdn(tlv(0x30, utf8s("x")))),
	} {
		if got, err := RenderSubject(der); err == nil {
			t.Errorf("%s: rendered as %q, want an error", what, got)
		} else if strings.HasPrefix(what, "two CNs") || what == "same CN twice" {
			if !errors.Is(err, ErrDuplicateCN) {
				t.Errorf("%s: %v, want ErrDuplicateCN", what, err)
			}
		}
	}
}

// For subjects made the usual way, the rendering is what pkix.Name.String() prints, so
// configurations written from it keep working.
func TestRenderSubjectMatchesGoForUsualNames(t *testing.T) {
	for _, n := range []pkix.Name{
		{CommonName: "alice", Organization: []string{"offsetgate tests"}},
		{CommonName: "mirror", Organization: []string{"acme"}, OrganizationalUnit: []string{"dr"}, Country: []string{"CH"}, Locality: []string{"Bern"}},
		{CommonName: "a,b+c", Organization: []string{" lead#"}},
		{SerialNumber: "42", CommonName: "x", Province: []string{"ZH"}, StreetAddress: []string{"Main 1"}, PostalCode: []string{"8000"}},
	} {
		der, err := asn1.Marshal(n.ToRDNSequence())
		if err != nil {
			t.Fatal(err)
		}
		got, err := RenderSubject(der)
		if err != nil || got != n.String() {
			t.Errorf("%q, %v; Go prints %q", got, err, n.String())
		}
	}
}

func TestParseSANs(t *testing.T) {
	ext := tlv(0x30,
		tlv(0x82, []byte("mirror.acme")),
		tlv(0x86, []byte("spiffe://acme/mirror#")),
		tlv(0x86, []byte("spiffe://acme/%6Dirror")),
		tlv(0x81, []byte("m@acme")),
		tlv(0x87, []byte{10, 0, 0, 1}),
		tlv(0x87, []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1}),
		tlv(0xa4, name(rdn(atv(oidCN, utf8s("dir"))))), // directoryName: left out
	)
	got, err := ParseSANs(ext)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"DNS:mirror.acme", "URI:spiffe://acme/mirror#", "URI:spiffe://acme/%6Dirror", "email:m@acme", "IP:10.0.0.1", "IP:::ffff:10.0.0.1"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("SANs %q, want %q", got, want)
	}
	for what, der := range map[string][]byte{
		"bad IP":      tlv(0x30, tlv(0x87, []byte{1, 2, 3})),
		"non-ASCII":   tlv(0x30, tlv(0x86, []byte("spiffe://\xc3\xa4"))),
		"not a GN":    tlv(0x30, utf8s("x")),
		"not a SEQ":   utf8s("x"),
		"trailing":    append(tlv(0x30, tlv(0x82, []byte("a"))), 0),
		"truncated":   tlv(0x30, tlv(0x82, []byte("abc")))[:4],
		"compound IA": tlv(0x30, tlv(0xa2, utf8s("a"))),
	} {
		if got, err := ParseSANs(der); err == nil {
			t.Errorf("%s: %q, want an error", what, got)
		}
	}
}

func TestCheckSubject(t *testing.T) {
	for _, ok := range []string{"CN=mirror,O=acme", "CN=mirror+O=acme", `CN=a\,b`, `CN=\ x\ `, "1.2.840.113549.1.9.1=#1603614062", "CN=#020105", "DC=acme,DC=com"} {
		if err := CheckSubject(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for bad, want := range map[string]string{
		"CN=mirror, O=acme":        `unknown attribute type " O"`,
		"CN=mirror,O= acme":        `renders as "CN=mirror,O=\\ acme"`,
		"cn=mirror,o=acme":         `renders as "CN=mirror,O=acme"`,
		"CN=#13066d6972726f72":     `renders as "CN=mirror"`,
		`CN=a\2Cb`:                 `renders as "CN=a\\,b"`,
		"CN=evil,CN=mirror,O=acme": "more than one CN",
		"CN=a;b":                   "must be escaped",
		"CN=x,EMAIL=y":             "unknown attribute type",
		"1.2.840.113549.1.9.1=a@b": "hex of its BER",
		"CN=#zz":                   "hex pairs",
		"mirror":                   "attribute type",
		"":                         "empty",
	} {
		if err := CheckSubject(bad); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error with %q", bad, err, want)
		}
	}
}

// FuzzRenderSubject: whatever DER comes in, a rendering parses back into the same RDNs, in
// the same order, with the same attribute types and values, and is in the form configuration
// strings must take; nothing panics.
func FuzzRenderSubject(f *testing.F) {
	for _, der := range [][]byte{
		name(rdn(atv(oidO, printable("acme"))), rdn(atv(oidCN, utf8s("mirror")))),
		name(rdn(atv(oidCN, utf8s("mirror")), atv(oidO, printable("acme")))),
		name(rdn(atv(oidCN, utf8s(` #a,b+c"d\e<f>g;h=i`+"\x00\n "))), rdn(atv(oidEmail, tlv(0x16, []byte("a@b"))))),
		name(rdn(atv(oidCN, bmp("m\u00fc")), atv(oidDC, tlv(0x02, []byte{1})))),
		name(),
	} {
		f.Add(der)
	}
	f.Fuzz(func(t *testing.T, der []byte) {
		out, err := RenderSubject(der)
		if err != nil {
			return
		}
		var seq rdnSequence
		if _, err := asn1.Unmarshal(der, &seq); err != nil {
			t.Fatalf("rendered %q from bytes that do not parse: %v", out, err)
		}
		parsed, err := parseSubject(out)
		if err != nil {
			t.Fatalf("rendering %q does not parse: %v", out, err)
		}
		if len(parsed) != len(seq) {
			t.Fatalf("%q: %d RDNs parsed, %d encoded", out, len(parsed), len(seq))
		}
		for i, r := range parsed {
			enc := seq[len(seq)-1-i]
			if len(r) != len(enc) {
				t.Fatalf("%q: RDN %d has %d attributes, %d encoded", out, i, len(r), len(enc))
			}
			for j, a := range r {
				e := enc[j]
				if a.oid != e.Type.String() {
					t.Fatalf("%q: attribute type %s, encoded %s", out, a.oid, e.Type)
				}
				if a.ber != nil {
					if !bytes.Equal(a.ber, e.Value.FullBytes) {
						t.Fatalf("%q: value %x, encoded %x", out, a.ber, e.Value.FullBytes)
					}
				} else if text, ok := stringValue(e.Value); !ok || text != a.text {
					t.Fatalf("%q: value %q, encoded %x", out, a.text, e.Value.FullBytes)
				}
			}
		}
		if out != "" {
			if err := CheckSubject(out); err != nil {
				t.Fatalf("rendering %q is not in configuration form: %v", out, err)
			}
		}
	})
}
