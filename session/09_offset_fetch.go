package session

// OffsetFetch (key 9): D's committed destination offsets go back to the client as source
// offsets with the source epoch of the record before them (see commits.go). RequireStable and
// the v8+ group batching pass unchanged.

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/catalog"
)

var offsetFetchHandler = handler{request: offsetFetchRequest}

func offsetFetchRequest(s *Session, r *request) error {
	if s.cfg.Catalog == nil {
		return nil
	}
	req := kmsg.OffsetFetchRequest{Version: r.h.version}
	if err := req.ReadFrom(r.body); err != nil {
		return r.undecodable(err)
	}
	all := false
	var names []string
	var ids []catalog.TopicID
	if r.h.version < 8 {
		all = req.Topics == nil
		for _, t := range req.Topics {
			names = append(names, t.Topic)
		}
	} else {
		for _, g := range req.Groups {
			all = all || g.Topics == nil
			for _, t := range g.Topics {
				if t.Topic != "" {
					names = append(names, t.Topic)
				} else {
					ids = append(ids, t.TopicID)
				}
			}
		}
	}
	if !s.knownIDs(r, ids, offsetFetchRequest) || !s.known(r, names, offsetFetchRequest) {
		return nil
	}
	for _, id := range ids {
		if !s.idKnown(id) {
			return fmt.Errorf("%w: OffsetFetch names topic id %s, which the destination does not show offsetgate", ErrUnjudged, catalog.IDString(id))
		}
	}
	if !s.mirrorsOn() {
		return nil
	}
	var topics []catalog.Topic
	if all {
		topics = s.cfg.Catalog.Mirrors()
	}
	for _, n := range names {
		if info := s.sourceTopic(n); info != nil {
			topics = append(topics, *info)
		}
	}
	for _, id := range ids {
		if info := s.sourceTopicByID(id); info != nil {
			topics = append(topics, *info)
		}
	}
	if len(topics) == 0 {
		return nil
	}
	if !s.viewed(r, nil, topics, offsetFetchRequest) {
		return nil
	}
	r.onResp = func(s *Session, v int16, body []byte) ([]byte, bool, error) {
		resp := kmsg.OffsetFetchResponse{Version: v}
		if err := resp.ReadFrom(body); err != nil {
			return nil, false, err
		}
		if v < 8 {
			for i := range resp.Topics {
				t := &resp.Topics[i]
				info := s.sourceTopic(t.Topic)
				if info == nil {
					continue
				}
				for j := range t.Partitions {
					p := &t.Partitions[j]
					if p.ErrorCode != 0 {
						continue
					}
					pv := s.partView(*info, p.Partition)
					if pv == nil {
						// Never hand out a destination offset as the source's.
						return nil, false, errViewUnavailable(info.Name, p.Partition)
					}
					p.Offset, p.LeaderEpoch = committedToSource(pv, p.Offset)
				}
			}
		}
		for g := range resp.Groups {
			for i := range resp.Groups[g].Topics {
				t := &resp.Groups[g].Topics[i]
				info := s.topicOf(t.Topic, t.TopicID)
				if info == nil {
					continue
				}
				for j := range t.Partitions {
					p := &t.Partitions[j]
					if p.ErrorCode != 0 {
						continue
					}
					pv := s.partView(*info, p.Partition)
					if pv == nil {
						// Never hand out a destination offset as the source's.
						return nil, false, errViewUnavailable(info.Name, p.Partition)
					}
					p.Offset, p.LeaderEpoch = committedToSource(pv, p.Offset)
				}
			}
		}
		return resp.AppendTo(nil), true, nil
	}
	return nil
}
