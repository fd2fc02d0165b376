package session

// CreateTopics (key 19).
//
// A topic becomes a mirror topic only here, at creation, with the config
// offsetgate.produce.at.offset=true (and the source's settings as offsetgate.source.* keys).
// Only an approved mirroring client for that topic may create one. offsetgate removes its keys
// (the broker never sees them), sets the settings exactness needs, refuses settings that would
// break it (INVALID_CONFIG naming the setting), creates the topic with its own client, and
// stores the mark keyed by the new topic id before it answers. A request that creates mirror
// topics creates nothing else; offsetgate's own topics are never created by clients. Requests
// without offsetgate keys pass through untouched.

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/catalog"
	"offsetgate/rules"
)

var createTopicsHandler = handler{decide: createTopicsDecide}

type topicRefusal struct {
	topic string
	code  int16
	msg   string
}

func createTopicsDecide(s *Session, r *request) error {
	req := *r.req.(*kmsg.CreateTopicsRequest)
	var refused []topicRefusal
	mirrors := map[string]map[string]string{} // topic -> source settings
	plain := 0
	for i := range req.Topics {
		t := &req.Topics[i]
		cfg := map[string]*string{}
		ours := false
		for _, c := range t.Configs {
			cfg[c.Name] = c.Value
			if strings.HasPrefix(c.Name, rules.KeyPrefix) {
				ours = true
			}
		}
		switch {
		case rules.IsOwnTopic(t.Topic):
			refused = append(refused, topicRefusal{t.Topic, rules.ErrTopicAuthorization, "offsetgate: topics named " + rules.OwnTopicPrefix + "* are offsetgate's own"})
			continue
		case !ours:
			plain++
			continue
		}
		mark := cfg[rules.MarkKey]
		if mark == nil || *mark != "true" {
			refused = append(refused, topicRefusal{t.Topic, rules.ErrInvalidConfig, "offsetgate: offsetgate.* settings need " + rules.MarkKey + "=true"})
			continue
		}
		if _, ok := s.cfg.Policy().Approved(s.ident, t.Topic); !ok {
			refused = append(refused, topicRefusal{t.Topic, rules.ErrTopicAuthorization, fmt.Sprintf("offsetgate: only an approved mirroring client may create mirror topic %s (this connection is %s)", t.Topic, s.ident)})
			continue
		}
		out, source, err := rules.DestinationConfigs(cfg)
		if err != nil {
			refused = append(refused, topicRefusal{t.Topic, rules.ErrInvalidConfig, "offsetgate: " + err.Error()})
			continue
		}
		t.Configs = t.Configs[:0]
		for k, v := range out {
			c := kmsg.NewCreateTopicsRequestTopicConfig()
			c.Name, c.Value = k, v
			t.Configs = append(t.Configs, c)
		}
		mirrors[t.Topic] = source
	}
	if len(refused) == 0 && len(mirrors) == 0 {
		return nil
	}
	if len(mirrors) > 0 && plain > 0 {
		for _, t := range req.Topics {
			if _, ok := mirrors[t.Topic]; !ok && !refusedTopic(refused, t.Topic) {
				refused = append(refused, topicRefusal{t.Topic, rules.ErrPolicyViolation, "offsetgate: create mirror topics in a request of their own"})
			}
		}
		for name := range mirrors {
			refused = append(refused, topicRefusal{name, rules.ErrPolicyViolation, "offsetgate: create mirror topics in a request of their own"})
		}
		mirrors = nil
	}
	keep := req.Topics[:0]
	for _, t := range req.Topics {
		if !refusedTopic(refused, t.Topic) {
			keep = append(keep, t)
		}
	}
	req.Topics = keep
	version, corr := r.h.version, r.h.corr
	if len(mirrors) == 0 {
		// Only refusals and ordinary topics: forward the rest, splice the refusals in.
		if len(keep) == 0 {
			r.answer = createTopicsAnswer(corr, version, kmsg.CreateTopicsResponse{Version: version}, refused)
			return nil
		}
		forwardSpliced(s, r, req.AppendTo(nil), func(resp *kmsg.CreateTopicsResponse) { spliceCreateTopics(resp, refused) })
		return nil
	}
	who := s.ident.String()
	cat := s.cfg.Catalog
	r.async = func(ctx context.Context) func(*Session, *request) error {
		resp := createMirrorTopics(ctx, cat, &req, mirrors, who)
		return func(s *Session, r *request) error {
			resp.Version = version
			r.answer = createTopicsAnswer(corr, version, resp, refused)
			return nil
		}
	}
	return nil
}

func refusedTopic(rs []topicRefusal, t string) bool {
	for _, r := range rs {
		if r.topic == t {
			return true
		}
	}
	return false
}

// createMirrorTopics creates the topics with offsetgate's own client and stores their marks.
// Each name is held back by a creation intent from before the topic exists until its mark is
// stored (catalog/creating.go), so no instance judges the new topic as an ordinary one.
func createMirrorTopics(ctx context.Context, cat Catalog, req *kmsg.CreateTopicsRequest, mirrors map[string]map[string]string, who string) kmsg.CreateTopicsResponse {
	var out kmsg.CreateTopicsResponse
	own := kmsg.NewPtrCreateTopicsRequest()
	own.Topics, own.TimeoutMillis, own.ValidateOnly = req.Topics, req.TimeoutMillis, req.ValidateOnly
	fail := func(code int16, msg string) kmsg.CreateTopicsResponse {
		for _, t := range req.Topics {
			rt := kmsg.NewCreateTopicsResponseTopic()
			rt.Topic, rt.ErrorCode, rt.ErrorMessage = t.Topic, code, &msg
			out.Topics = append(out.Topics, rt)
		}
		return out
	}
	if !req.ValidateOnly {
		var held []string
		defer func() {
			// Withdrawn even when the request ran out of time: an intent left behind holds
			// its name back until it runs out.
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			for _, key := range held {
				_ = cat.WithdrawIntent(wctx, key)
			}
		}()
		for name := range mirrors {
			key, err := cat.StoreIntent(ctx, name, who)
			if err != nil {
				return fail(-1, "offsetgate: creating mirror topics: "+err.Error()+"; nothing was created")
			}
			held = append(held, key)
		}
	}
	kr, err := cat.Request(ctx, own)
	if err != nil {
		return fail(-1, "offsetgate: creating mirror topics: "+err.Error())
	}
	resp := kr.(*kmsg.CreateTopicsResponse)
	var unnamed []string
	for _, t := range resp.Topics {
		if t.ErrorCode == 0 && t.TopicID == (catalog.TopicID{}) {
			unnamed = append(unnamed, t.Topic)
		}
	}
	var ids map[string]catalog.TopicID
	if len(unnamed) > 0 && !req.ValidateOnly {
		// Not Refresh: it waits for these very names' marks. A failed lookup leaves the ids
		// unknown, which the answer says below.
		ids, _ = catalog.TopicIDs(ctx, cat.Request, unnamed)
	}
	for i := range resp.Topics {
		t := &resp.Topics[i]
		if t.ErrorCode != 0 || req.ValidateOnly {
			continue
		}
		id := t.TopicID
		if id == (catalog.TopicID{}) {
			id = ids[t.Topic]
		}
		var err error
		if id == (catalog.TopicID{}) {
			err = fmt.Errorf("its topic id is not known")
		} else {
			err = cat.Store(ctx, id, rules.Mark{Topic: t.Topic, Source: mirrors[t.Topic], MarkedAt: time.Now().UTC(), MarkedBy: who})
		}
		if err != nil {
			msg := fmt.Sprintf("offsetgate: topic %s was created but its mirror mark could not be stored (%v); delete it and create it again", t.Topic, err)
			t.ErrorCode, t.ErrorMessage = -1, &msg
		}
	}
	return *resp
}

func spliceCreateTopics(resp *kmsg.CreateTopicsResponse, refused []topicRefusal) {
	for _, rf := range refused {
		t := kmsg.NewCreateTopicsResponseTopic()
		msg := rf.msg
		t.Topic, t.ErrorCode, t.ErrorMessage = rf.topic, rf.code, &msg
		t.NumPartitions, t.ReplicationFactor = -1, -1
		resp.Topics = append(resp.Topics, t)
	}
}

func createTopicsAnswer(corr int32, version int16, resp kmsg.CreateTopicsResponse, refused []topicRefusal) []byte {
	resp.Version = version
	spliceCreateTopics(&resp, refused)
	return responseFrame(corr, flexibleRequest(int16(kmsg.CreateTopics), version), resp.AppendTo(nil))
}
