package ledger

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
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
