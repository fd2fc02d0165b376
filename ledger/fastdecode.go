package ledger

import (
	"bytes"
	"math"
	"strconv"
	"time"
)

// zeroUntil is how encoding/json writes a zero time.
var zeroUntil = []byte(`"0001-01-01T00:00:00Z"`)

// A partition's load (a takeover without a snapshot, a source view, a page of it read back)
// decodes every entry, and encoding/json took about 3 µs an entry, the whole of a load's
// time (3 s per million entries). Nearly every entry is a batch, a filler or a segment:
// flat, integer fields and a kind, as Entry's own encoding writes them. fastDecode reads
// exactly that shape and nothing else; anything else (another field, a string with escapes,
// a number that is not a plain integer in its field's range, spaces) it leaves to
// encoding/json. So it only ever returns what encoding/json would have (FuzzFastDecode).

// fastDecode fills e from value when value is a flat object of integer fields and a plain
// kind; ok is false when it is anything else (e is then to be read by encoding/json).
func fastDecode(value []byte, e *Entry) (ok bool) {
	b := value
	if len(b) < 2 || b[0] != '{' || b[len(b)-1] != '}' {
		return false
	}
	b = b[1 : len(b)-1]
	*e = Entry{}
	for len(b) > 0 {
		// "key":
		if b[0] != '"' {
			return false
		}
		end := 1
		for end < len(b) && b[end] >= 'a' && b[end] <= 'z' {
			end++
		}
		if end >= len(b)-1 || b[end] != '"' || b[end+1] != ':' {
			return false
		}
		key := b[1:end]
		b = b[end+2:]
		switch string(key) {
		case "k":
			s, rest, ok := plainString(b)
			if !ok {
				return false
			}
			e.Kind, b = s, rest
		case "until":
			// Entries written before the field was left out when zero carry it so.
			if !bytes.HasPrefix(b, zeroUntil) {
				return false
			}
			e.Until, b = time.Time{}, b[len(zeroUntil):]
		default:
			n, rest, ok := plainInt(b)
			if !ok || !e.setInt(key, n) {
				return false
			}
			b = rest
		}
		switch {
		case len(b) == 0:
		case b[0] == ',' && len(b) > 1:
			b = b[1:]
		default:
			return false
		}
	}
	return true
}

// plainString reads a string of lower-case letters (a kind), with nothing to unescape.
func plainString(b []byte) (string, []byte, bool) {
	if len(b) < 2 || b[0] != '"' {
		return "", nil, false
	}
	end := 1
	for end < len(b) && b[end] >= 'a' && b[end] <= 'z' {
		end++
	}
	if end >= len(b) || b[end] != '"' {
		return "", nil, false
	}
	return kindString(b[1:end]), b[end+1:], true
}

// kindString returns the kinds' own strings (no allocation for them).
func kindString(b []byte) string {
	for _, k := range [...]string{KindBatch, KindFiller, KindSegment, KindOwner, KindHalt, KindRewrite, KindControl} {
		if string(b) == k {
			return k
		}
	}
	return string(b)
}

// plainInt reads an integer as JSON writes it: an optional minus, then 0 or digits without a
// leading zero, followed by a comma or the end.
func plainInt(b []byte) (int64, []byte, bool) {
	end := 0
	if end < len(b) && b[end] == '-' {
		end++
	}
	digits := end
	for end < len(b) && b[end] >= '0' && b[end] <= '9' {
		end++
	}
	switch {
	case end == digits:
		return 0, nil, false
	case b[digits] == '0' && end-digits > 1:
		return 0, nil, false
	case end < len(b) && b[end] != ',':
		return 0, nil, false
	}
	if end-digits > 18 {
		// Beyond what 18 digits hold: strconv says whether it fits in 64 bits.
		n, err := strconv.ParseInt(string(b[:end]), 10, 64)
		if err != nil {
			return 0, nil, false
		}
		return n, b[end:], true
	}
	var n int64
	for _, c := range b[digits:end] {
		n = n*10 + int64(c-'0')
	}
	if digits == 1 {
		n = -n
	}
	return n, b[end:], true
}

// setInt sets an integer field by its JSON name; false for another name, or a value out of the
// field's range (encoding/json refuses it: left to it, to say so).
func (e *Entry) setInt(key []byte, n int64) bool {
	in32 := n >= math.MinInt32 && n <= math.MaxInt32
	in16 := n >= math.MinInt16 && n <= math.MaxInt16
	switch string(key) {
	case "v":
		e.V = int(n)
	case "src":
		e.Src = n
	case "last":
		e.Last = n
	case "d":
		e.D = n
	case "n":
		e.Count = int32(n)
		return in32
	case "epoch":
		e.Epoch = int32(n)
		return in32
	case "crc":
		e.CRC = uint32(n)
		return n >= 0 && n <= math.MaxUint32
	case "len":
		e.Len = int32(n)
		return in32
	case "attrs":
		e.Attrs = int16(n)
		return in16
	case "maxts":
		e.MaxTS = n
	case "spid":
		e.SrcPID = n
	case "sepoch":
		e.SrcPEpoch = int16(n)
		return in16
	case "sseq":
		e.SrcSeq = int32(n)
		return in32
	case "pid":
		e.PID = n
	case "pepoch":
		e.PEpoch = int16(n)
		return in16
	case "seq":
		e.Seq = int32(n)
		return in32
	case "delta":
		e.Delta = n
	case "records":
		e.Records = int32(n)
		return in32
	default:
		return false
	}
	return true
}
