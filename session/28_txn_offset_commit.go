package session

// TxnOffsetCommit (key 28): source offsets in, destination offsets to D (see commits.go). The
// KIP-447 generation, member and group instance fields pass unchanged.

import "github.com/twmb/franz-go/pkg/kmsg"

var txnOffsetCommitHandler = handler{request: txnOffsetCommitRequest}

func txnOffsetCommitRequest(s *Session, r *request) error {
	if s.cfg.Catalog == nil {
		return nil
	}
	req := kmsg.TxnOffsetCommitRequest{Version: r.h.version}
	if err := req.ReadFrom(r.body); err != nil {
		return r.undecodable(err)
	}
	topics := make([]namedTopic, len(req.Topics))
	for i, t := range req.Topics {
		topics[i].name = t.Topic
		for _, p := range t.Partitions {
			topics[i].parts = append(topics[i].parts, p.Partition)
		}
	}
	if ok, err := s.viewsReady(r, txnOffsetCommitRequest, topics, nil); !ok {
		return err
	}
	for i := range req.Topics {
		t := &req.Topics[i]
		info := s.sourceTopic(t.Topic)
		if info == nil {
			continue
		}
		for j := range t.Partitions {
			p := &t.Partitions[j]
			pv := s.partView(*info, p.Partition)
			if pv == nil {
				return errViewUnavailable(info.Name, p.Partition)
			}
			p.Offset, p.LeaderEpoch = committedToDest(pv, p.Offset)
		}
	}
	r.replace = rebuild(r.frame, r.h, req.AppendTo(nil), s.cfg.Policy().Native())
	return nil
}
