package session

// OffsetFetch (key 9): D's committed destination offsets go back to the client as source
// offsets with the source epoch of the record before them (see commits.go). RequireStable and
// the v8+ group batching pass unchanged.

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/catalog"
)

var offsetFetchHandler = handler{
	needs:  offsetFetchNeeds,
	decide: offsetFetchDecide,
}

// offsetFetchNamed lists the topics an OffsetFetch names, and whether one of its groups asks
// for every topic.
func offsetFetchNamed(r *request) (all bool, names []string, ids []catalog.TopicID) {
	req := r.req.(*kmsg.OffsetFetchRequest)
	if r.h.version < 8 {
		all = req.Topics == nil
		for _, t := range req.Topics {
			names = append(names, t.Topic)
		}
		return all, names, nil
	}
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
	return all, names, ids
}

// offsetFetchNeeds: the topics named, confirmed, and the whole views of the source-view ones
// (every one when a group asks for all its topics): the answer may hold any partition.
func offsetFetchNeeds(_ *Session, r *request) needs {
	all, names, ids := offsetFetchNamed(r)
	return needs{names: names, ids: ids, views: func(s *Session) ([]mirrorPart, []catalog.Topic) {
		if !s.mirrorsOn() {
			return nil, nil
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
		return nil, topics
	}}
}

func offsetFetchDecide(s *Session, r *request) error {
	all, names, ids := offsetFetchNamed(r)
	for _, id := range ids {
		if !s.idKnown(id) {
			return fmt.Errorf("%w: OffsetFetch names topic id %s, which the destination does not show offsetgate", ErrUnjudged, catalog.IDString(id))
		}
	}
	if !s.mirrorsOn() {
		return nil
	}
	some := all
	for _, n := range names {
		some = some || s.sourceTopic(n) != nil
	}
	for _, id := range ids {
		some = some || s.sourceTopicByID(id) != nil
	}
	if !some {
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
