package session

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// The allowlist must track kmsg exactly: a kmsg upgrade that adds versions or keys makes this
// fail until someone checks what the new versions carry and updates versions.go.
func TestAllowlistMatchesKmsg(t *testing.T) {
	for k := int16(0); k < maxKey; k++ {
		r := kmsg.RequestForKey(k)
		a, inAllow := allowed[kmsg.Key(k)]
		_, inExcl := excluded[kmsg.Key(k)]
		if r == nil {
			if inAllow || inExcl {
				t.Errorf("key %d is listed but kmsg does not know it", k)
			}
			continue
		}
		switch {
		case inAllow && inExcl:
			t.Errorf("key %d (%s) is both allowed and excluded", k, kmsg.NameForKey(k))
		case !inAllow && !inExcl:
			t.Errorf("kmsg knows key %d (%s) up to v%d, which versions.go neither allows nor excludes", k, kmsg.NameForKey(k), r.MaxVersion())
		case inAllow && a.max != r.MaxVersion():
			t.Errorf("key %d (%s): allowlist max v%d, kmsg (%s in go.mod?) knows v%d", k, kmsg.NameForKey(k), a.max, kmsgVersion, r.MaxVersion())
		}
	}
	for k := int16(maxKey); k < 1000; k++ {
		if kmsg.RequestForKey(k) != nil {
			t.Errorf("kmsg knows key %d beyond maxKey %d", k, maxKey)
		}
	}
}

func TestApiVersionsIntersection(t *testing.T) {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.SetVersion(3)
	resp.ApiKeys = []kmsg.ApiVersionsResponseApiKey{
		{ApiKey: 0, MinVersion: 3, MaxVersion: 99},  // broker newer than offsetgate
		{ApiKey: 1, MinVersion: 4, MaxVersion: 12},  // broker older
		{ApiKey: 55, MinVersion: 0, MaxVersion: 2},  // DescribeQuorum: excluded
		{ApiKey: 17, MinVersion: 0, MaxVersion: 1},  // SaslHandshake: v1 only
		{ApiKey: 999, MinVersion: 0, MaxVersion: 1}, // unknown
	}
	nb, changed, err := rewriteApiVersions(nil, 3, resp.AppendTo(nil))
	if err != nil || !changed {
		t.Fatal(err)
	}
	got := kmsg.NewPtrApiVersionsResponse()
	got.SetVersion(3)
	if err := got.ReadFrom(nb); err != nil {
		t.Fatal(err)
	}
	want := map[int16][2]int16{0: {3, 13}, 1: {4, 12}, 17: {1, 1}}
	if len(got.ApiKeys) != len(want) {
		t.Fatalf("advertised %v", got.ApiKeys)
	}
	for _, k := range got.ApiKeys {
		if w := want[k.ApiKey]; w != [2]int16{k.MinVersion, k.MaxVersion} {
			t.Errorf("key %d advertised %d-%d, want %d-%d", k.ApiKey, k.MinVersion, k.MaxVersion, w[0], w[1])
		}
	}
}
