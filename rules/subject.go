package rules

// Certificate subjects and subject alternative names, exactly as the certificate encodes them.
//
// A subject is rendered as an RFC 4514 string from the certificate's raw RDN sequence
// (x509.Certificate.RawSubject), never from Go's pkix.Name, which puts attributes in an order
// of its own, splits multi-valued RDNs and keeps only the last CN:
//
//   - RDNs in RFC 4514 order: the last RDN of the encoded sequence first, joined by ','. For a
//     certificate made the usual way (one attribute per RDN, country first, CN last, ASCII
//     values) this is the string pkix.Name.String() and
//     `openssl x509 -noout -subject -nameopt RFC2253` print, e.g. "CN=mirror,O=acme".
//   - The attributes of a multi-valued RDN in their encoded order, joined by '+'.
//   - Attribute names CN, L, ST, O, OU, C, STREET, DC, UID (RFC 4514) and SERIALNUMBER,
//     POSTALCODE (as Go prints them); any other attribute as its dotted OID.
//   - Values of those attributes that are character strings (UTF8String, PrintableString,
//     IA5String, NumericString, VisibleString, BMPString, UniversalString) as text, with
//     '"', '+', ',', ';', '<', '>' and '\' escaped by '\', a leading ' ' or '#' and a trailing
//     ' ' escaped by '\', NUL and the other control characters as '\' and two hex digits. Any
//     other value (another type, another attribute, a string that is not valid in its type)
//     as '#' and the hex of its whole BER encoding.
//
// Two subjects that differ in order, grouping, attribute type or value render differently. A
// subject with more than one CN (in any RDN) is refused: other software picks one CN of several
// (Go the last, others the first), so such a certificate proves no identity here.
//
// SANs are read from the certificate's subjectAltName extension as encoded: "DNS:" and
// "email:" and "URI:" followed by the string in the certificate (a URI is never parsed and
// re-serialised: "spiffe://acme/mirror#" stays that), "IP:" followed by the address
// (netip form: an IPv4-mapped IPv6 address stays in its IPv6 form).

import (
	"bytes"
	"crypto/x509"
	"encoding/asn1"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

type attributeTypeAndValue struct {
	Type  asn1.ObjectIdentifier
	Value asn1.RawValue
}

// relativeDistinguishedNameSET is a SET OF (encoding/asn1 reads a slice type named *SET so).
type relativeDistinguishedNameSET []attributeTypeAndValue

type rdnSequence []relativeDistinguishedNameSET

// attributeNames are the attribute types rendered by name.
var attributeNames = map[string]string{
	"2.5.4.3":                    "CN",
	"2.5.4.5":                    "SERIALNUMBER",
	"2.5.4.6":                    "C",
	"2.5.4.7":                    "L",
	"2.5.4.8":                    "ST",
	"2.5.4.9":                    "STREET",
	"2.5.4.10":                   "O",
	"2.5.4.11":                   "OU",
	"2.5.4.17":                   "POSTALCODE",
	"0.9.2342.19200300.100.1.25": "DC",
	"0.9.2342.19200300.100.1.1":  "UID",
}

const oidCommonName = "2.5.4.3"

// ErrDuplicateCN marks a subject with more than one CN.
var ErrDuplicateCN = errors.New("the subject has more than one CN")

// RenderSubject renders a DER-encoded Name (an RDN sequence, as in x509.Certificate.RawSubject)
// as the RFC 4514 string described above. It fails on bytes that are not an RDN sequence, on
// an empty RDN and on more than one CN (ErrDuplicateCN).
func RenderSubject(der []byte) (string, error) {
	var seq rdnSequence
	rest, err := asn1.Unmarshal(der, &seq)
	if err != nil {
		return "", fmt.Errorf("subject: %w", err)
	}
	if len(rest) > 0 {
		return "", errors.New("subject: trailing bytes after the RDN sequence")
	}
	var b strings.Builder
	cns := 0
	for i := len(seq) - 1; i >= 0; i-- {
		rdn := seq[i]
		if len(rdn) == 0 {
			return "", errors.New("subject: an empty RDN")
		}
		if i < len(seq)-1 {
			b.WriteByte(',')
		}
		for j, atv := range rdn {
			if j > 0 {
				b.WriteByte('+')
			}
			oid := atv.Type.String()
			if oid == oidCommonName {
				cns++
			}
			writeAttribute(&b, oid, atv.Value)
		}
	}
	if cns > 1 {
		return "", ErrDuplicateCN
	}
	return b.String(), nil
}

// writeAttribute renders one attribute type and value.
func writeAttribute(b *strings.Builder, oid string, v asn1.RawValue) {
	name, known := attributeNames[oid]
	if !known {
		name = oid
	}
	b.WriteString(name)
	b.WriteByte('=')
	if text, ok := stringValue(v); known && ok {
		b.WriteString(escapeValue(text))
		return
	}
	b.WriteByte('#')
	b.WriteString(hex.EncodeToString(v.FullBytes))
}

// stringValue decodes a character-string attribute value; ok is false for any other value and
// for a string that is not valid in its type.
func stringValue(v asn1.RawValue) (string, bool) {
	if v.Class != asn1.ClassUniversal || v.IsCompound {
		return "", false
	}
	b := v.Bytes
	ascii := func(valid func(c byte) bool) (string, bool) {
		for _, c := range b {
			if !valid(c) {
				return "", false
			}
		}
		return string(b), true
	}
	switch v.Tag {
	case asn1.TagUTF8String:
		if !utf8.Valid(b) {
			return "", false
		}
		return string(b), true
	case asn1.TagPrintableString:
		return ascii(func(c byte) bool {
			return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte(" '()+,-./:=?", c) >= 0
		})
	case asn1.TagIA5String:
		return ascii(func(c byte) bool { return c < 0x80 })
	case asn1.TagNumericString:
		return ascii(func(c byte) bool { return c >= '0' && c <= '9' || c == ' ' })
	case 26: // VisibleString
		return ascii(func(c byte) bool { return c >= 0x20 && c < 0x7f })
	case asn1.TagBMPString:
		if len(b)%2 != 0 {
			return "", false
		}
		u := make([]uint16, len(b)/2)
		for i := range u {
			u[i] = binary.BigEndian.Uint16(b[2*i:])
			if utf16.IsSurrogate(rune(u[i])) {
				return "", false // BMPString is UCS-2: no surrogates
			}
		}
		return string(utf16.Decode(u)), true
	case 28: // UniversalString (UCS-4)
		if len(b)%4 != 0 {
			return "", false
		}
		var s strings.Builder
		for i := 0; i < len(b); i += 4 {
			r := rune(binary.BigEndian.Uint32(b[i:]))
			if !utf8.ValidRune(r) {
				return "", false
			}
			s.WriteRune(r)
		}
		return s.String(), true
	}
	return "", false
}

// escapeValue escapes an attribute value for an RFC 4514 string (section 2.4), and control
// characters besides.
func escapeValue(s string) string {
	var b strings.Builder
	last := len(s) - 1
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"', c == '+', c == ',', c == ';', c == '<', c == '>', c == '\\',
			c == ' ' && (i == 0 || i == last), c == '#' && i == 0:
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c == 0x7f:
			fmt.Fprintf(&b, "\\%02X", c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// FromCertificate is the TLS part of an identity: the verified client certificate's subject
// and SANs, exactly as encoded. A certificate whose subject or SANs cannot be read exactly, or
// whose subject has more than one CN, proves nothing: err says why.
func FromCertificate(c *x509.Certificate) (subject string, sans []string, err error) {
	subject, err = RenderSubject(c.RawSubject)
	if err != nil {
		return "", nil, err
	}
	sans, err = certSANs(c)
	if err != nil {
		return "", nil, err
	}
	return subject, sans, nil
}

var oidSubjectAltName = asn1.ObjectIdentifier{2, 5, 29, 17}

// certSANs reads the subjectAltName extension: DNS names, URIs, email addresses and IP
// addresses, as the certificate holds them.
func certSANs(c *x509.Certificate) ([]string, error) {
	for _, ext := range c.Extensions {
		if ext.Id.Equal(oidSubjectAltName) {
			return ParseSANs(ext.Value)
		}
	}
	return nil, nil
}

// ParseSANs reads a DER-encoded GeneralNames (a subjectAltName extension's value). Other name
// forms (otherName, directoryName, ...) are left out.
func ParseSANs(der []byte) ([]string, error) {
	var seq asn1.RawValue
	rest, err := asn1.Unmarshal(der, &seq)
	if err != nil {
		return nil, fmt.Errorf("subjectAltName: %w", err)
	}
	if len(rest) > 0 || seq.Class != asn1.ClassUniversal || seq.Tag != asn1.TagSequence || !seq.IsCompound {
		return nil, errors.New("subjectAltName: not a SEQUENCE")
	}
	var dns, uris, emails, ips []string
	for b := seq.Bytes; len(b) > 0; {
		var gn asn1.RawValue
		if b, err = asn1.Unmarshal(b, &gn); err != nil {
			return nil, fmt.Errorf("subjectAltName: %w", err)
		}
		if gn.Class != asn1.ClassContextSpecific {
			return nil, errors.New("subjectAltName: a name that is not a GeneralName")
		}
		text := func() (string, error) {
			if gn.IsCompound || bytes.IndexFunc(gn.Bytes, func(r rune) bool { return r >= 0x80 || r == utf8.RuneError }) >= 0 {
				return "", fmt.Errorf("subjectAltName: name [%d] is not an IA5String", gn.Tag)
			}
			return string(gn.Bytes), nil
		}
		switch gn.Tag {
		case 1, 2, 6:
			s, err := text()
			if err != nil {
				return nil, err
			}
			switch gn.Tag {
			case 1:
				emails = append(emails, "email:"+s)
			case 2:
				dns = append(dns, "DNS:"+s)
			case 6:
				uris = append(uris, "URI:"+s)
			}
		case 7:
			a, ok := netip.AddrFromSlice(gn.Bytes)
			if !ok || gn.IsCompound {
				return nil, errors.New("subjectAltName: an IP address of a bad length")
			}
			ips = append(ips, "IP:"+a.String())
		}
	}
	return append(append(append(dns, uris...), emails...), ips...), nil
}

// subjectAttribute is one attribute of a subject string: its type (an OID) and its value as
// text, or as the BER encoding a '#' value gives.
type subjectAttribute struct {
	oid  string
	text string
	ber  []byte // set for a '#' value
}

// parseSubject reads an RFC 4514 string into RDNs (in string order: the last RDN of the
// certificate first). Attribute names are those RenderSubject writes (in any case) or dotted
// OIDs.
func parseSubject(s string) ([][]subjectAttribute, error) {
	var out [][]subjectAttribute
	if s == "" {
		return nil, nil
	}
	var rdn []subjectAttribute
	for i := 0; ; {
		eq := strings.IndexByte(s[i:], '=')
		if eq <= 0 {
			return nil, fmt.Errorf("at byte %d: an attribute type followed by '=' expected", i)
		}
		typ := s[i : i+eq]
		oid, err := attributeOID(typ)
		if err != nil {
			return nil, fmt.Errorf("at byte %d: %w", i, err)
		}
		i += eq + 1
		a := subjectAttribute{oid: oid}
		var end int
		if strings.HasPrefix(s[i:], "#") {
			end = i + 1
			for end < len(s) && s[end] != ',' && s[end] != '+' {
				end++
			}
			a.ber, err = hex.DecodeString(s[i+1 : end])
			if err != nil || len(a.ber) == 0 {
				return nil, fmt.Errorf("at byte %d: a '#' value must be hex pairs", i)
			}
			var v asn1.RawValue
			if rest, err := asn1.Unmarshal(a.ber, &v); err != nil || len(rest) > 0 {
				return nil, fmt.Errorf("at byte %d: a '#' value must be one BER element", i)
			}
		} else {
			a.text, end, err = unescapeValue(s, i)
			if err != nil {
				return nil, err
			}
		}
		rdn = append(rdn, a)
		i = end
		if i == len(s) {
			return append(out, rdn), nil
		}
		if s[i] == ',' {
			out, rdn = append(out, rdn), nil
		}
		i++
	}
}

// unescapeValue reads a string value starting at s[i] up to an unescaped ',' or '+' or the
// end, and returns it with its escapes undone and where it ended.
func unescapeValue(s string, i int) (string, int, error) {
	var b []byte
	start := i
	for i < len(s) {
		c := s[i]
		switch {
		case c == ',' || c == '+':
			return string(b), i, checkText(b, s[start:i])
		case c == '\\':
			if i+1 >= len(s) {
				return "", 0, fmt.Errorf("at byte %d: a '\\' ends the string", i)
			}
			n := s[i+1]
			if strings.IndexByte("\\ #=\"+,;<>", n) >= 0 {
				b = append(b, n)
				i += 2
				continue
			}
			h, err := hex.DecodeString(s[i+1 : min(i+3, len(s))])
			if err != nil || len(h) != 1 {
				return "", 0, fmt.Errorf("at byte %d: '\\' must escape a special character or two hex digits", i)
			}
			b = append(b, h[0])
			i += 3
		case c == '"' || c == ';' || c == '<' || c == '>' || c == 0:
			return "", 0, fmt.Errorf("at byte %d: %q must be escaped", i, c)
		default:
			b = append(b, c)
			i++
		}
	}
	return string(b), i, checkText(b, s[start:])
}

func checkText(b []byte, raw string) error {
	if !utf8.Valid(b) {
		return fmt.Errorf("value %q is not UTF-8", raw)
	}
	return nil
}

// attributeOID maps an attribute name or dotted OID to the dotted OID.
func attributeOID(typ string) (string, error) {
	for oid, name := range attributeNames {
		if strings.EqualFold(typ, name) {
			return oid, nil
		}
	}
	parts := strings.Split(typ, ".")
	if len(parts) < 2 {
		return "", fmt.Errorf("unknown attribute type %q", typ)
	}
	for _, p := range parts {
		if p == "" || strings.Trim(p, "0123456789") != "" || len(p) > 1 && p[0] == '0' {
			return "", fmt.Errorf("unknown attribute type %q", typ)
		}
	}
	return typ, nil
}

// CheckSubject reports whether a subject string from the configuration can ever equal a
// rendered certificate subject: it must be the RFC 4514 form RenderSubject writes (names in
// upper case, the escapes it uses, text rather than '#' for a character string of a named
// attribute) and name at most one CN. The error gives the form to write when there is one.
func CheckSubject(s string) error {
	if s == "" {
		return errors.New("empty")
	}
	rdns, err := parseSubject(s)
	if err != nil {
		return err
	}
	var b strings.Builder
	cns := 0
	for i, rdn := range rdns {
		if i > 0 {
			b.WriteByte(',')
		}
		for j, a := range rdn {
			if j > 0 {
				b.WriteByte('+')
			}
			if a.oid == oidCommonName {
				cns++
			}
			if a.ber != nil {
				var v asn1.RawValue
				_, _ = asn1.Unmarshal(a.ber, &v)
				writeAttribute(&b, a.oid, v)
				continue
			}
			name, known := attributeNames[a.oid]
			if !known {
				b.WriteString(a.oid + "=#" + hex.EncodeToString([]byte(a.text)))
				return fmt.Errorf("the value of %s can only match as '#' and the hex of its BER encoding", a.oid)
			}
			b.WriteString(name + "=" + escapeValue(a.text))
		}
	}
	if cns > 1 {
		return errors.New("more than one CN: certificates with several CNs prove no identity")
	}
	if b.String() != s {
		return fmt.Errorf("a certificate subject renders as %q", b.String())
	}
	return nil
}

// CheckSAN reports whether a SAN from the configuration can ever equal one read from a
// certificate: "DNS:", "URI:" or "email:" and a non-empty ASCII string, or "IP:" and an
// address in the form netip prints.
func CheckSAN(s string) error {
	kind, v, ok := strings.Cut(s, ":")
	if !ok || v == "" {
		return fmt.Errorf("%q: write DNS:name, URI:uri, email:address or IP:address", s)
	}
	switch kind {
	case "DNS", "URI", "email":
		if strings.IndexFunc(v, func(r rune) bool { return r >= 0x80 }) >= 0 {
			return fmt.Errorf("%q: certificates hold these names in ASCII (IA5String)", s)
		}
	case "IP":
		a, err := netip.ParseAddr(v)
		if err != nil {
			return fmt.Errorf("%q: %v", s, err)
		}
		if a.String() != v {
			return fmt.Errorf("%q: write it as IP:%s", s, a)
		}
	default:
		return fmt.Errorf("%q: write DNS:name, URI:uri, email:address or IP:address", s)
	}
	return nil
}
