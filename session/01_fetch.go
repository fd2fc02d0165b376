package session

// Fetch (key 1).
//
// Requests pass as bytes. Responses from v16 (KIP-951) may carry NodeEndpoints for partitions
// whose leader moved; they are rewritten to proxy addresses. The response is decoded without
// copying record bytes, and sent as it came when it has no endpoints (the common case).

import "github.com/twmb/franz-go/pkg/kmsg"

var fetchHandler = handler{response: rewriteFetch, responseFrom: 16}

func rewriteFetch(s *Session, version int16, body []byte) ([]byte, bool, error) {
	resp := kmsg.FetchResponse{Version: version}
	if err := resp.UnsafeReadFrom(body); err != nil {
		return nil, false, err
	}
	if len(resp.Brokers) == 0 {
		return nil, false, nil
	}
	for i := range resp.Brokers {
		e := &resp.Brokers[i]
		s.endpoint(e.NodeID, &e.Host, &e.Port)
	}
	return resp.AppendTo(nil), true, nil
}
