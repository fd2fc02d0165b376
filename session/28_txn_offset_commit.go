package session

// TxnOffsetCommit (key 28): source offsets in, destination offsets to D (see commits.go). The
// KIP-447 generation, member and group instance fields pass unchanged.

import "github.com/twmb/franz-go/pkg/kmsg"

var txnOffsetCommitHandler = handler{request: txnOffsetCommitRequest}

func txnOffsetCommitRequest(s *Session, r *request) error {
	if !s.mirrorsOn() {
		return nil
	}
	req := kmsg.TxnOffsetCommitRequest{Version: r.h.version}
	if err := req.ReadFrom(r.body); err != nil {
		return nil
	}
	var names []string
	for _, t := range req.Topics {
		names = append(names, t.Topic)
	}
	collect := func() (parts []mirrorPart) {
		for _, t := range req.Topics {
			if info := s.sourceTopic(t.Topic); info != nil {
				for _, p := range t.Partitions {
					parts = append(parts, mirrorPart{*info, p.Partition})
				}
			}
		}
		return parts
	}
	if !s.viewsReady(r, txnOffsetCommitRequest, names, collect) {
		return nil
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
