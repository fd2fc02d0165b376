package session

// DescribeCluster (key 60).
//
// Lists brokers (or, for EndpointType 2 in v1+, controllers, which a broker listener refuses)
// with their addresses: all rewritten to proxy listeners.

import "github.com/twmb/franz-go/pkg/kmsg"

var describeClusterHandler = handler{response: rewriteDescribeCluster}

func rewriteDescribeCluster(s *Session, version int16, body []byte) ([]byte, bool, error) {
	resp := kmsg.DescribeClusterResponse{Version: version}
	if err := resp.UnsafeReadFrom(body); err != nil {
		return nil, false, err
	}
	for i := range resp.Brokers {
		b := &resp.Brokers[i]
		s.endpoint(b.NodeID, &b.Host, &b.Port)
	}
	return resp.AppendTo(nil), true, nil
}
