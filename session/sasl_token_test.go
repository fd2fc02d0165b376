package session

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestPlainUser(t *testing.T) {
	for in, want := range map[string]string{
		"\x00bob\x00secret":          "bob",
		"bob\x00bob\x00secret":       "bob",
		"alice\x00bob\x00secret":     "", // Kafka refuses an authzid other than the user
		"\x00\x00secret":             "",
		"\x00bob\x00sec\x00ret":      "", // Kafka wants exactly three tokens
		"\x00bob":                    "",
		"":                           "",
		"\x00b\xffob\x00secret":      "", // Kafka would read U+FFFD: not the name sent
		"\x00j\u00fcrgen\x00secret":  "j\u00fcrgen",
		"\x00mirror\x00wrong-passwd": "mirror",
	} {
		if got := plainUser([]byte(in)); got != want {
			t.Errorf("plainUser(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestScramUser(t *testing.T) {
	for in, want := range map[string]string{
		"n,,n=bob,r=abc":                    "bob",
		"n,a=bob,n=bob,r=abc":               "bob",
		"n,a=alice,n=bob,r=abc":             "",
		"n,,n=a=2Cb=3Dc,r=abc":              "a,b=c",
		"n,,n=a=3D2C,r=abc":                 "a=2C",
		"n,,m=ext,n=bob,r=abc":              "bob",
		"n,,n=bob,r=abc,tokenauth=true":     "", // a delegation token: its owner is the principal
		"n,,n=bob,r=abc,ext=1,tokenauth=no": "",
		"n,,n=bob,r=abc,ext=1":              "bob",
		"n,,n=bob,r=abc,":                   "",
		"y,,n=bob,r=abc":                    "", // channel binding flags Kafka refuses
		"p=tls-unique,,n=bob,r=abc":         "",
		"n,,n=b=ob,r=abc":                   "",
		"n,,n=,r=abc":                       "",
		"n,,n=bob":                          "",
		"n,,n=bob,r=":                       "",
		"n,,r=abc,n=bob":                    "",
		"n,,n=b\u00f6b,r=abc":               "", // Kafka's SASLNAME is ASCII
		"n,,n=b\x00b,r=abc":                 "",
	} {
		if got := scramUser([]byte(in)); got != want {
			t.Errorf("scramUser(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzPlainUser(f *testing.F) {
	for _, s := range []string{"\x00bob\x00secret", "bob\x00bob\x00x", "a\x00b\x00c\x00d", "\x00\x00", "\x00\xff\x00p", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		u := plainUser(b)
		if u == "" {
			return
		}
		parts := bytes.Split(b, []byte{0})
		if len(parts) != 3 || string(parts[1]) != u || !utf8.ValidString(u) ||
			len(parts[0]) > 0 && string(parts[0]) != u {
			t.Fatalf("plainUser(%q) = %q", b, u)
		}
	})
}

// scramEscape is RFC 5802's saslname escaping.
func scramEscape(u string) string {
	return strings.NewReplacer("=", "=3D", ",", "=2C").Replace(u)
}

func FuzzScramUser(f *testing.F) {
	for _, s := range []string{"n,,n=bob,r=abc", "n,a=bob,n=bob,r=abc", "n,,n=a=2Cb,r=x,ext=1", "n,,m=q,n=u,r=r,tokenauth=true", "y,,n=u,r=r"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		u := scramUser(b)
		if u == "" {
			// A well-formed client-first message built around what the fuzzer gave must
			// name its user, when the user is one Kafka takes.
			name := string(b)
			if name != "" && strings.IndexFunc(name, func(r rune) bool { return r == 0 || r > 0x7f }) < 0 {
				msg := "n,,n=" + scramEscape(name) + ",r=nonce"
				if got := scramUser([]byte(msg)); got != name {
					t.Fatalf("scramUser(%q) = %q, want %q", msg, got, name)
				}
			}
			return
		}
		if !strings.HasPrefix(string(b), "n,") || strings.ContainsRune(u, 0) ||
			strings.IndexFunc(string(b), func(r rune) bool { return r > 0x7f }) >= 0 {
			t.Fatalf("scramUser(%q) = %q", b, u)
		}
		// The name read is the one the message carries, escapes undone.
		if !strings.Contains(string(b), ",n="+scramEscape(u)+",r=") {
			t.Fatalf("scramUser(%q) = %q: not the n= field", b, u)
		}
	})
}
