package session

// Metadata (key 3).
//
// Every response lists the brokers with their addresses: each is replaced by the proxy
// listener that stands for that node (and the real address is remembered, so the listener
// knows where to connect). Node ids, racks, the cluster id and the controller id are kept.

import "github.com/twmb/franz-go/pkg/kmsg"

var metadataHandler = handler{response: rewriteMetadata}

func rewriteMetadata(s *Session, version int16, body []byte) ([]byte, bool, error) {
	resp := kmsg.MetadataResponse{Version: version}
	if err := resp.UnsafeReadFrom(body); err != nil {
		return nil, false, err
	}
	for i := range resp.Brokers {
		b := &resp.Brokers[i]
		s.endpoint(b.NodeID, &b.Host, &b.Port)
	}
	if s.cfg.Catalog != nil {
		// Every Metadata answer keeps the topic-id cache the rules judge by up to date.
		for _, t := range resp.Topics {
			if t.Topic != nil && t.ErrorCode == 0 {
				s.cfg.Catalog.Observe(*t.Topic, t.TopicID)
			}
		}
	}
	return resp.AppendTo(nil), true, nil
}
