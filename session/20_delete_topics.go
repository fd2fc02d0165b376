package session

// DeleteTopics (key 20).
//
// offsetgate's own topics hold its durable state: clients may not delete them
// (TOPIC_AUTHORIZATION_FAILED). A mirror topic may be deleted only by an approved mirroring
// client of that topic (the operator starting a mirror over); anyone else gets
// TOPIC_AUTHORIZATION_FAILED. Everything else passes through. v6+ may name topics by id: an id
// offsetgate does not know is looked up first, and one the destination still does not show
// offsetgate is refused (UNKNOWN_TOPIC_ID) rather than forwarded unjudged. A request with any
// refused topic is refused whole: a partial delete would surprise, and nothing is deleted.

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/catalog"
	"offsetgate/rules"
)

var deleteTopicsHandler = handler{
	needs: func(_ *Session, r *request) needs {
		req := r.req.(*kmsg.DeleteTopicsRequest)
		n := needs{names: append([]string(nil), req.TopicNames...)}
		for _, t := range req.Topics {
			if t.Topic != nil {
				n.names = append(n.names, *t.Topic)
			} else {
				n.ids = append(n.ids, t.TopicID)
			}
		}
		return n
	},
	decide: deleteTopicsDecide,
	refuse: deleteTopicsRefuse,
}

func deleteTopicsDecide(s *Session, r *request) error {
	req := *r.req.(*kmsg.DeleteTopicsRequest)
	// judge returns why a topic may not be deleted, or "".
	judge := func(name *string, id catalog.TopicID) (int16, string) {
		var info catalog.Topic
		if name != nil {
			info, _ = s.cfg.Catalog.ByName(*name)
		} else {
			if !s.idKnown(id) {
				return rules.ErrUnknownTopicID, "offsetgate: the destination does not show this topic id"
			}
			info, _ = s.cfg.Catalog.ByID(id)
		}
		switch {
		case rules.IsOwnTopic(info.Name):
			return rules.ErrTopicAuthorization, fmt.Sprintf("offsetgate: %s is offsetgate's own topic (%s*); clients may not delete it", info.Name, rules.OwnTopicPrefix)
		case info.Mark != nil:
			if _, ok := s.cfg.Policy().Approved(s.ident, info.Name); !ok {
				return rules.ErrTopicAuthorization, fmt.Sprintf("offsetgate: %s is a mirror topic; only an approved mirroring client of it may delete it (this connection is %s)", info.Name, s.ident)
			}
		}
		return 0, ""
	}
	type verdict struct {
		name *string
		id   catalog.TopicID
		code int16
		msg  string
	}
	var all []verdict
	refused := false
	for i := range req.TopicNames {
		code, msg := judge(&req.TopicNames[i], catalog.TopicID{})
		all = append(all, verdict{&req.TopicNames[i], catalog.TopicID{}, code, msg})
		refused = refused || code != 0
	}
	for _, t := range req.Topics {
		code, msg := judge(t.Topic, t.TopicID)
		all = append(all, verdict{t.Topic, t.TopicID, code, msg})
		refused = refused || code != 0
	}
	if !refused {
		return nil
	}
	resp := kmsg.DeleteTopicsResponse{Version: r.h.version}
	for _, v := range all {
		t := kmsg.NewDeleteTopicsResponseTopic()
		code, msg := v.code, v.msg
		if code == 0 {
			code, msg = rules.ErrPolicyViolation, "offsetgate: not deleted: another topic of the request was refused, and a request is deleted whole or not at all"
		} else {
			msg += "; nothing was deleted"
		}
		t.Topic, t.TopicID, t.ErrorCode, t.ErrorMessage = v.name, v.id, code, &msg
		resp.Topics = append(resp.Topics, t)
	}
	r.answerWith(&resp)
	return nil
}
