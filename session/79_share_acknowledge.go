package session

// ShareAcknowledge (key 79).
//
// Responses carry NodeEndpoints like ShareFetch; they are rewritten to proxy addresses.

import "github.com/twmb/franz-go/pkg/kmsg"

var shareAcknowledgeHandler = handler{response: rewriteShareAcknowledge}

func rewriteShareAcknowledge(s *Session, version int16, body []byte) ([]byte, bool, error) {
	resp := kmsg.ShareAcknowledgeResponse{Version: version}
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
