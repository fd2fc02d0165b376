package session

// ApiVersions (key 18).
//
// The response is the intersection of what the destination broker supports and what
// offsetgate parses (versions.go): keys offsetgate does not handle are dropped, ranges are
// narrowed. A request newer than offsetgate knows gets the KIP-511 answer: a v0 response with
// UNSUPPORTED_VERSION listing the ApiVersions versions offsetgate supports. The broker may do
// the same (error 35 in a v0 body) when the client is newer than it; that answer is narrowed
// too. ApiVersions responses always use response header v0.

import (
	"encoding/binary"

	"github.com/twmb/franz-go/pkg/kmsg"
)

var apiVersionsHandler = handler{response: rewriteApiVersions}

const errUnsupportedVersion = 35

func rewriteApiVersions(_ *Session, version int16, body []byte) ([]byte, bool, error) {
	if len(body) >= 2 && int16(binary.BigEndian.Uint16(body)) == errUnsupportedVersion {
		version = 0
	}
	resp := kmsg.ApiVersionsResponse{Version: version}
	if err := resp.ReadFrom(body); err != nil {
		return nil, false, err
	}
	keys := resp.ApiKeys[:0]
	for _, k := range resp.ApiKeys {
		min, max, ok := Allowed(k.ApiKey)
		if !ok {
			continue
		}
		if k.MinVersion > min {
			min = k.MinVersion
		}
		if k.MaxVersion < max {
			max = k.MaxVersion
		}
		if min > max {
			continue
		}
		k.MinVersion, k.MaxVersion = min, max
		keys = append(keys, k)
	}
	resp.ApiKeys = keys
	return resp.AppendTo(nil), true, nil
}

func apiVersionsTooNew(corr int32) []byte {
	min, max, _ := Allowed(18)
	resp := kmsg.ApiVersionsResponse{Version: 0, ErrorCode: errUnsupportedVersion}
	resp.ApiKeys = []kmsg.ApiVersionsResponseApiKey{{ApiKey: 18, MinVersion: min, MaxVersion: max}}
	return responseFrame(corr, false, resp.AppendTo(nil))
}
