package magic

import (
	"encoding/binary"
	"testing"
)

// The tag number's bytes as docs/PROTOCOL.md shows them.
func TestTagBytes(t *testing.T) {
	if got := binary.AppendUvarint(nil, Tag); string(got) != "\xc7\x9e\x01" {
		t.Fatalf("tag 20295 encodes as % x, docs/PROTOCOL.md says c7 9e 01", got)
	}
}

// Varints Kafka would read differently (an overflowing fifth byte) or not at all (a sixth
// byte) are refused; canonical and overlong-but-equal encodings read as Kafka reads them.
func TestUvarint(t *testing.T) {
	for _, c := range []struct {
		in   []byte
		want uint32
		n    int
	}{
		{[]byte{0}, 0, 1}, {[]byte{0x7f}, 127, 1}, {[]byte{0x80, 0x01}, 128, 2},
		{[]byte{0x80, 0x00}, 0, 2}, // overlong, same value for both readers
		{[]byte{0xff, 0xff, 0xff, 0xff, 0x0f}, 1<<32 - 1, 5},
		{[]byte{0x80, 0x80, 0x80, 0x80, 0x10}, 0, -1}, // Kafka: 0; a 64-bit reader: 2^32
		{[]byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x00}, 0, -1},
		{[]byte{0x80}, 0, 0},
	} {
		got, n := Uvarint(c.in)
		if got != c.want || n != c.n {
			t.Errorf("Uvarint(% x) = %d, %d; want %d, %d", c.in, got, n, c.want, c.n)
		}
	}
}

func FuzzWalkTags(f *testing.F) {
	f.Add(AppendHeader(nil, 0, 11, 1, "c", -1)[10:])
	f.Add([]byte{2, 1, 0, 0x80, 0x80, 0x80, 0x80, 0x10, 0})
	f.Fuzz(func(t *testing.T, p []byte) {
		end, err := WalkTags(p, 0, func(tag uint32, val []byte) { _ = Parse(val) })
		if err == nil && (end < 0 || end > len(p)) {
			t.Fatalf("end %d outside %d bytes", end, len(p))
		}
	})
}

// The from offset round-trips; a tag that says it has one but does not, or a negative one, is
// invalid rather than read as a tag without it.
func TestFrom(t *testing.T) {
	for _, from := range []int64{-1, 0, 7, 1 << 40} {
		h := Parse(Value(from))
		if !h.Valid || h.From != from {
			t.Fatalf("Value(%d) parses as %+v", from, h)
		}
	}
	for _, v := range [][]byte{
		{Version, AtOffset | FromFlag},
		{Version, AtOffset | FromFlag, 0, 0, 0},
		binary.BigEndian.AppendUint64([]byte{Version, AtOffset | FromFlag}, 1<<63),
	} {
		if h := Parse(v); h.Valid {
			t.Fatalf("% x parses as valid: %+v", v, h)
		}
	}
}
