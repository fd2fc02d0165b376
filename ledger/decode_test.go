package ledger

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// Decode takes every entry this version writes and refuses what it cannot read exactly.
func TestDecode(t *testing.T) {
	for _, e := range []Entry{
		{V: Version, Kind: KindBatch, Src: 10, Last: 19, D: 0, Count: 10, Epoch: 2, CRC: 7, Len: 100, PID: 3},
		{V: Version, Kind: KindFiller, Src: 20, Last: 24, D: 10, Count: 5},
		{V: Version, Kind: KindSegment, Src: 1000, Delta: 975},
		{V: Version, Kind: KindHalt, Reason: "x"},
		{V: 2, Kind: KindControl, Src: 30, Last: 30, D: 20, Count: 1, Marker: MarkerAbort, Raw: []byte{1, 2, 3}, SrcPID: 9},
	} {
		b, _ := json.Marshal(e)
		got, err := Decode(b)
		if err != nil || !reflect.DeepEqual(got, e) {
			t.Fatalf("Decode(%s) = %+v, %v", b, got, err)
		}
	}
	for name, in := range map[string]string{
		"not json":     `{"v":1,"k":"batch"`,
		"newer format": `{"v":3,"k":"batch","src":1}`,
		"bare control": `{"v":2,"k":"control","src":5}`,
		"unknown kind": `{"v":1,"k":"snapshot"}`,
		"no kind":      `{"v":1}`,
		"wrong type":   `{"v":1,"k":"batch","src":"ten"}`,
	} {
		if _, err := Decode([]byte(in)); err == nil {
			t.Errorf("%s: %s was taken", name, in)
		}
	}
}

// Decode never panics, and what it takes survives a round trip unchanged.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"v":1,"k":"batch","src":10,"last":19,"d":0,"n":10,"epoch":2,"crc":7,"len":100}`))
	f.Add([]byte(`{"v":1,"k":"segment","src":1000,"delta":975}`))
	f.Add([]byte(`{"v":1,"k":"owner","owner":"a","until":"2026-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"v":9,"k":"batch"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := Decode(b)
		if err != nil {
			if !strings.Contains(err.Error(), "entry") {
				t.Fatalf("an error that does not say what: %v", err)
			}
			return
		}
		again, _ := json.Marshal(e)
		e2, err := Decode(again)
		if err != nil || !reflect.DeepEqual(e, e2) {
			t.Fatalf("round trip of %+v: %+v, %v", e, e2, err)
		}
	})
}

// The fast path takes only what encoding/json reads the same: whatever the input, when it says
// it read an entry, encoding/json reads that very entry from it.
func FuzzFastDecode(f *testing.F) {
	for _, e := range []Entry{
		{V: 1, Kind: KindBatch, Src: 123456789, Last: 123456799, D: 123456789, Count: 11, Epoch: 7, CRC: 3735928559, Len: 1400,
			MaxTS: 1733550000123, SrcPID: 123456, SrcPEpoch: 3, SrcSeq: 99887, PID: 4567, PEpoch: 1, Seq: 12345, Records: 11},
		{V: 1, Kind: KindFiller, Src: -1, Last: 4, D: 0, Count: 5, Attrs: -32768, Delta: math.MinInt64},
		{V: 1, Kind: KindOwner, Owner: "a", Until: time.Unix(1, 0).UTC()},
	} {
		b, _ := json.Marshal(e)
		f.Add(b)
	}
	f.Add([]byte(`{"v":1,"k":"batch","src":1,"until":"0001-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"v":1,"k":"batch","src":01}`))
	f.Add([]byte(`{"v":1,"k":"batch","SRC":1}`))
	f.Add([]byte(`{"v":1,"k":"batch","n":2147483648}`))
	f.Add([]byte(`{"v":1,"k":"batch","crc":-1,}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var fast Entry
		if !fastDecode(b, &fast) {
			return
		}
		var std Entry
		if err := json.Unmarshal(b, &std); err != nil {
			t.Fatalf("the fast path read %q, which encoding/json refuses: %v", b, err)
		}
		if !reflect.DeepEqual(fast, std) {
			t.Fatalf("%q: fast path %+v, encoding/json %+v", b, fast, std)
		}
	})
}

// The entries this version writes take the fast path (the load's speed depends on it), and so
// do those of earlier builds, which wrote a zero "until" in every entry.
func TestFastDecodeTakesWhatIsWritten(t *testing.T) {
	for _, e := range []Entry{
		{V: 1, Kind: KindBatch, Src: 10, Last: 19, D: 0, Count: 10, Epoch: 2, CRC: 7, Len: 100, PID: 3, Seq: 5, Records: 10},
		{V: 1, Kind: KindFiller, Src: 20, Last: 24, D: 10, Count: 5},
		{V: 1, Kind: KindSegment, Src: 1000, Delta: 975},
	} {
		b, _ := json.Marshal(e)
		if bytes.Contains(b, []byte("until")) {
			t.Fatalf("a zero until is written: %s", b)
		}
		var got Entry
		if !fastDecode(b, &got) || !reflect.DeepEqual(got, e) {
			t.Fatalf("fast path of %s: %+v", b, got)
		}
		old := append(bytes.TrimSuffix(b, []byte("}")), []byte(`,"until":"0001-01-01T00:00:00Z"}`)...)
		if !fastDecode(old, &got) || !reflect.DeepEqual(got, e) {
			t.Fatalf("fast path of an earlier build's %s: %+v", old, got)
		}
	}
}

// BenchmarkDecode reads a batch entry as written (the fast path) and through encoding/json.
//
//	go test -run XXX -bench Decode ./ledger/
func BenchmarkDecode(b *testing.B) {
	e := Entry{V: 1, Kind: KindBatch, Src: 123456789, Last: 123456799, D: 123456789, Count: 11, Epoch: 7, CRC: 3735928559, Len: 1400,
		MaxTS: 1733550000123, SrcPID: 123456, SrcPEpoch: 3, SrcSeq: 99887, PID: 4567, PEpoch: 1, Seq: 12345, Records: 11}
	raw, _ := json.Marshal(e)
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := Decode(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			var got Entry
			if err := json.Unmarshal(raw, &got); err != nil {
				b.Fatal(err)
			}
		}
	})
}
