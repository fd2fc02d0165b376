package session

// Metadata (key 3).
//
// Every response lists the brokers with their addresses: each is replaced by the proxy
// listener that stands for that node (and the real address is remembered, so the listener
// knows where to connect). Node ids, racks, the cluster id and the controller id are kept.
//
// Mirror topics' partitions get the presented leader epoch (the highest source epoch mirrored
// plus D's leader epoch: see package view), so the epochs a consumer learns here, in batches
// and in ListOffsets form one space that only rises. The source views of the mirror topics a
// request concerns are loaded before it is forwarded (offsetgate starts loading every mirror
// topic's in the background when it starts). A partition whose view is still missing when the
// answer comes (a topic created in between, or a partition added to it since) is answered
// LEADER_NOT_AVAILABLE, which clients retry, and loaded in the background.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/catalog"
	"offsetgate/rules"
)

var metadataHandler = handler{
	active:   func(s *Session) bool { return s.mirrorsOn() },
	needs:    metadataNeeds,
	decide:   func(*Session, *request) error { return nil }, // the answer is what changes
	response: rewriteMetadata,
}

// metadataNeeds: the views of the mirror topics the answer will hold. A request for every
// topic needs every mirror topic's view; offsetgate loads them in the background when it
// starts, so this waits only for the ones not loaded yet (an answer with LEADER_NOT_AVAILABLE
// instead would end up in clients' metadata caches and fail their admin calls). A topic named
// that offsetgate has not confirmed (a mirror topic created through another instance a moment
// ago) is looked up first, so its view is loaded before the answer presents its epochs.
func metadataNeeds(_ *Session, r *request) needs {
	req := r.req.(*kmsg.MetadataRequest)
	if req.Topics == nil || (r.h.version == 0 && len(req.Topics) == 0) {
		return needs{views: func(s *Session) ([]mirrorPart, []catalog.Topic) { return nil, s.cfg.Catalog.Mirrors() }}
	}
	var n needs
	for _, t := range req.Topics {
		if t.Topic != nil {
			n.names = append(n.names, *t.Topic)
		}
	}
	n.views = func(s *Session) ([]mirrorPart, []catalog.Topic) {
		var topics []catalog.Topic
		for _, t := range req.Topics {
			var info *catalog.Topic
			if t.Topic != nil {
				info = s.sourceTopic(*t.Topic)
			} else {
				info = s.sourceTopicByID(t.TopicID)
			}
			if info != nil {
				topics = append(topics, *info)
			}
		}
		return nil, topics
	}
	return n
}

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
	if s.mirrorsOn() {
		for i := range resp.Topics {
			t := &resp.Topics[i]
			if t.Topic == nil || t.ErrorCode != 0 {
				continue
			}
			info := s.sourceTopic(*t.Topic)
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
					// Retried, and the view is loaded by then (a partition added to the topic
					// after its view was loaded whole is loaded now, in the background).
					p.ErrorCode = rules.ErrLeaderNotAvailable
					if s.cfg.View != nil {
						s.cfg.View.LoadLater(*info, p.Partition)
					}
					continue
				}
				if p.LeaderEpoch >= 0 {
					p.LeaderEpoch += pv.EpochBase()
				}
			}
		}
	}
	return resp.AppendTo(nil), true, nil
}
