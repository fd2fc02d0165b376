package session

// FindCoordinator (key 10).
//
// v0-3 answer one coordinator (NodeID, Host, Port); v4+ batch the lookups and answer a list of
// Coordinators. Both forms are rewritten. A failed lookup (node -1, empty host) stays as is.

import "github.com/twmb/franz-go/pkg/kmsg"

var findCoordinatorHandler = handler{response: rewriteFindCoordinator}

func rewriteFindCoordinator(s *Session, version int16, body []byte) ([]byte, bool, error) {
	resp := kmsg.FindCoordinatorResponse{Version: version}
	if err := resp.UnsafeReadFrom(body); err != nil {
		return nil, false, err
	}
	if resp.NodeID >= 0 && resp.Host != "" {
		s.endpoint(resp.NodeID, &resp.Host, &resp.Port)
	}
	for i := range resp.Coordinators {
		c := &resp.Coordinators[i]
		if c.NodeID >= 0 && c.Host != "" {
			s.endpoint(c.NodeID, &c.Host, &c.Port)
		}
	}
	return resp.AppendTo(nil), true, nil
}
