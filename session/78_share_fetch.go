package session

// ShareFetch (key 78).
//
// Responses carry NodeEndpoints (the leaders of partitions that moved); they are rewritten to
// proxy addresses.

import "github.com/twmb/franz-go/pkg/kmsg"

var shareFetchHandler = handler{response: rewriteShareFetch}

func rewriteShareFetch(s *Session, version int16, body []byte) ([]byte, bool, error) {
	resp := kmsg.ShareFetchResponse{Version: version}
	if err := resp.UnsafeReadFrom(body); err != nil {
		return nil, false, err
	}
	if len(resp.NodeEndpoints) == 0 {
		return nil, false, nil
	}
	for i := range resp.NodeEndpoints {
		e := &resp.NodeEndpoints[i]
		s.endpoint(e.NodeID, &e.Host, &e.Port)
	}
	return resp.AppendTo(nil), true, nil
}
