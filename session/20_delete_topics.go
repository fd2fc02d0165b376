package session

// DeleteTopics (key 20).
//
// offsetgate's own topics hold its durable state; clients may not delete them
// (TOPIC_AUTHORIZATION_FAILED). Everything else passes through. v6+ may name topics by id;
// those are looked up by id.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/rules"
)

var deleteTopicsHandler = handler{request: deleteTopicsRequest}

func deleteTopicsRequest(s *Session, r *request) error {
	if s.cfg.Catalog == nil {
		return nil
	}
	req := kmsg.DeleteTopicsRequest{Version: r.h.version}
	if err := req.ReadFrom(r.body); err != nil {
		return nil
	}
	own := func(name *string, id [16]byte) bool {
		if name != nil {
			return rules.IsOwnTopic(*name)
		}
		t, ok := s.cfg.Catalog.ByID(id)
		return ok && rules.IsOwnTopic(t.Name)
	}
	found := false
	for _, n := range req.TopicNames {
		found = found || rules.IsOwnTopic(n)
	}
	for _, t := range req.Topics {
		found = found || own(t.Topic, t.TopicID)
	}
	if !found {
		return nil
	}
	// Refuse the whole request: it is rare, and a partial delete would surprise.
	resp := kmsg.DeleteTopicsResponse{Version: r.h.version}
	msg := "offsetgate: the request names offsetgate's own topics (" + rules.OwnTopicPrefix + "*), which clients may not delete; nothing was deleted"
	add := func(name *string, id [16]byte) {
		t := kmsg.NewDeleteTopicsResponseTopic()
		m := msg
		t.Topic, t.TopicID, t.ErrorCode, t.ErrorMessage = name, id, rules.ErrTopicAuthorization, &m
		resp.Topics = append(resp.Topics, t)
	}
	for i := range req.TopicNames {
		add(&req.TopicNames[i], [16]byte{})
	}
	for _, t := range req.Topics {
		add(t.Topic, t.TopicID)
	}
	r.answer = responseFrame(r.h.corr, flexibleRequest(20, r.h.version), resp.AppendTo(nil))
	return nil
}
