package session

// IncrementalAlterConfigs (key 44) and AlterConfigs (key 33).
//
// Topic config changes are judged before they reach the broker:
//   - the mark can never be added afterwards, not even to an empty topic (INVALID_CONFIG);
//   - removing it (DELETE, or setting it to false) promotes a mirror topic: only an approved
//     mirroring client for the topic may, and the removal is stored before anything else
//     happens; the topic then takes ordinary writes;
//   - setting it to "sealed" seals a mirror topic for its promotion (source connections refuse
//     its writes, retriably, so that the source's end stops moving while the mirror reaches
//     it), and "true" unseals it: the same approved clients only;
//   - on a mirror topic, changes that would break exactness (rules.Guarded: codec, timestamp
//     type and window, retention shorter than the source's, cleanup policy, max message size,
//     segment size, unclean elections), and removing any of them (the broker's default would
//     apply), are refused with INVALID_CONFIG naming the setting; AlterConfigs replaces every
//     setting, so the config it results in is judged: every guarded setting must be in it;
//   - offsetgate's own topics are not changed by clients.
// offsetgate keys never reach the broker.

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"offsetgate/catalog"
	"offsetgate/rules"
)

var incrementalAlterConfigsHandler = handler{
	needs: func(_ *Session, r *request) needs {
		var n needs
		for _, res := range r.req.(*kmsg.IncrementalAlterConfigsRequest).Resources {
			if res.ResourceType == kmsg.ConfigResourceTypeTopic {
				n.names = append(n.names, res.ResourceName)
			}
		}
		return n
	},
	decide: incrementalAlterConfigsDecide,
	refuse: incrementalAlterConfigsRefuse,
}

var alterConfigsHandler = handler{
	needs: func(_ *Session, r *request) needs {
		var n needs
		for _, res := range r.req.(*kmsg.AlterConfigsRequest).Resources {
			if res.ResourceType == kmsg.ConfigResourceTypeTopic {
				n.names = append(n.names, res.ResourceName)
			}
		}
		return n
	},
	decide: alterConfigsDecide,
	refuse: alterConfigsRefuse,
}

type configRefusal struct {
	typ  kmsg.ConfigResourceType
	name string
	code int16
	msg  string
}

// markChange is what a change of the mark key does to a mirror topic.
type markChange int

const (
	markNone    markChange = iota
	markPromote            // DELETE, or any value but "true" and "sealed": the topic is promoted
	markSeal               // "sealed": source connections stop writing it (promote's first step)
	markUnseal             // "true" on a sealed mirror topic: a promotion given up
)

// judgeConfig decides one resource's change. settings maps each key to its new value (nil:
// deleted or reset). It returns a refusal, or what the change does to the topic's mark.
func (s *Session) judgeConfig(name string, settings map[string]*string, full bool) (*configRefusal, markChange) {
	refuse := func(code int16, format string, a ...any) (*configRefusal, markChange) {
		return &configRefusal{kmsg.ConfigResourceTypeTopic, name, code, "offsetgate: " + fmt.Sprintf(format, a...)}, markNone
	}
	if rules.IsOwnTopic(name) {
		return refuse(rules.ErrTopicAuthorization, "%s is offsetgate's own topic", name)
	}
	t := s.mark(name)
	change := markNone
	for k, v := range settings {
		if !strings.HasPrefix(k, rules.KeyPrefix) {
			continue
		}
		switch {
		case k != rules.MarkKey:
			return refuse(rules.ErrInvalidConfig, "%s can only be given at creation", k)
		case v != nil && *v == "true":
			if t == nil {
				return refuse(rules.ErrInvalidConfig, "%s cannot be added to an existing topic, not even an empty one: a topic becomes a mirror topic only at creation", rules.MarkKey)
			}
			if t.Mark.Sealed {
				if _, ok := s.cfg.Policy().Approved(s.ident, name); !ok {
					return refuse(rules.ErrTopicAuthorization, "only an approved mirroring client of %s may unseal it (this connection is %s)", name, s.ident)
				}
				change = markUnseal
			}
		default:
			if t == nil {
				return refuse(rules.ErrInvalidConfig, "%s is not a mirror topic", name)
			}
			if _, ok := s.cfg.Policy().Approved(s.ident, name); !ok {
				return refuse(rules.ErrTopicAuthorization, "only an approved mirroring client of %s may promote it (this connection is %s)", name, s.ident)
			}
			change = markPromote
			if v != nil && *v == rules.MarkSealed {
				change = markSeal
			}
		}
	}
	if t == nil || change == markPromote {
		return nil, change
	}
	for k, v := range settings {
		if strings.HasPrefix(k, rules.KeyPrefix) {
			continue
		}
		if err := rules.ConfigChange(k, v, t.Mark); err != nil {
			return refuse(rules.ErrInvalidConfig, "%v", err)
		}
	}
	if full {
		// AlterConfigs replaces the whole config: a guarded setting it leaves out goes back to
		// the broker's default. The resulting config is what is judged.
		for _, k := range rules.Guarded {
			if _, ok := settings[k]; !ok {
				return refuse(rules.ErrInvalidConfig, "AlterConfigs replaces every setting of mirror topic %s and would reset %s to the broker's default: include it, or use IncrementalAlterConfigs", name, k)
			}
		}
	}
	return nil, change
}

func incrementalAlterConfigsDecide(s *Session, r *request) error {
	req := *r.req.(*kmsg.IncrementalAlterConfigsRequest)
	var refused []configRefusal
	var promote []markEdit
	touched := false
	keep := req.Resources[:0]
	for _, res := range req.Resources {
		if res.ResourceType != kmsg.ConfigResourceTypeTopic {
			keep = append(keep, res)
			continue
		}
		settings := map[string]*string{}
		for _, c := range res.Configs {
			switch c.Op {
			case kmsg.IncrementalAlterConfigOpSet:
				settings[c.Name] = c.Value
			case kmsg.IncrementalAlterConfigOpDelete:
				settings[c.Name] = nil
			default: // APPEND, SUBTRACT: list settings; judged as a change to an unknown value
				v := "?"
				settings[c.Name] = &v
			}
		}
		rf, pr := s.judgeConfig(res.ResourceName, settings, false)
		if rf != nil {
			refused = append(refused, *rf)
			touched = true
			continue
		}
		if pr != markNone {
			promote = append(promote, markEdit{res.ResourceName, pr})
		}
		cfgs := res.Configs[:0]
		for _, c := range res.Configs {
			if strings.HasPrefix(c.Name, rules.KeyPrefix) {
				touched = true
				continue
			}
			cfgs = append(cfgs, c)
		}
		res.Configs = cfgs
		if len(cfgs) == 0 && pr != markNone {
			continue // the mark's change was the whole change
		}
		keep = append(keep, res)
	}
	if !touched && len(promote) == 0 {
		return nil
	}
	req.Resources = keep
	version, corr := r.h.version, r.h.corr
	finish := func(s *Session, r *request, promoted []configRefusal) {
		all := append(refused, promoted...)
		if len(req.Resources) == 0 {
			resp := kmsg.IncrementalAlterConfigsResponse{Version: version}
			spliceIncremental(&resp, all)
			r.answer = responseFrame(corr, flexibleRequest(int16(kmsg.IncrementalAlterConfigs), version), resp.AppendTo(nil))
			return
		}
		forwardSpliced(s, r, req.AppendTo(nil), func(resp *kmsg.IncrementalAlterConfigsResponse) { spliceIncremental(resp, all) })
	}
	if len(promote) == 0 {
		finish(s, r, nil)
		return nil
	}
	s.promote(r, promote, finish)
	return nil
}

// markEdit is a change of one topic's mark.
type markEdit struct {
	name   string
	change markChange
}

// promote stores the marks' changes first (asynchronously), then finishes the request. Topics
// that had nothing else to change get a success entry.
func (s *Session) promote(r *request, edits []markEdit, finish func(*Session, *request, []configRefusal)) {
	cat := s.cfg.Catalog
	who := s.ident.String()
	type done struct {
		name   string
		change markChange
		err    error
	}
	type edit struct {
		t      catalog.Topic
		change markChange
	}
	var es []edit
	for _, e := range edits {
		if t := s.mark(e.name); t != nil {
			es = append(es, edit{*t, e.change})
		}
	}
	r.async = func(ctx context.Context) func(*Session, *request) error {
		var results []done
		for _, e := range es {
			m := *e.t.Mark
			switch e.change {
			case markPromote:
				m.Removed, m.Sealed = true, false
			case markSeal:
				m.Sealed = true
			case markUnseal:
				m.Sealed = false
			}
			m.MarkedAt, m.MarkedBy = time.Now().UTC(), who
			results = append(results, done{e.t.Name, e.change, cat.Store(ctx, e.t.ID, m)})
		}
		return func(s *Session, r *request) error {
			var out []configRefusal
			for _, d := range results {
				if d.err != nil {
					out = append(out, configRefusal{kmsg.ConfigResourceTypeTopic, d.name, -1, "offsetgate: storing the mark's change failed: " + d.err.Error()})
					continue
				}
				switch d.change {
				case markPromote:
					s.log.Info("mirror topic promoted: it takes ordinary writes from now on", zap.String("topic", d.name))
				case markSeal:
					s.log.Info("mirror topic sealed for its promotion: source connections refuse its writes", zap.String("topic", d.name))
				case markUnseal:
					s.log.Info("mirror topic unsealed: its promotion was given up", zap.String("topic", d.name))
				}
				out = append(out, configRefusal{kmsg.ConfigResourceTypeTopic, d.name, 0, ""})
			}
			finish(s, r, out)
			return nil
		}
	}
}

func spliceIncremental(resp *kmsg.IncrementalAlterConfigsResponse, rs []configRefusal) {
	for _, rf := range rs {
		if rf.code == 0 && hasIncremental(resp, rf.name) {
			continue
		}
		res := kmsg.NewIncrementalAlterConfigsResponseResource()
		res.ResourceType, res.ResourceName, res.ErrorCode = rf.typ, rf.name, rf.code
		if rf.msg != "" {
			msg := rf.msg
			res.ErrorMessage = &msg
		}
		resp.Resources = append(resp.Resources, res)
	}
}

func hasIncremental(resp *kmsg.IncrementalAlterConfigsResponse, name string) bool {
	for _, r := range resp.Resources {
		if r.ResourceName == name {
			return true
		}
	}
	return false
}

func alterConfigsDecide(s *Session, r *request) error {
	req := *r.req.(*kmsg.AlterConfigsRequest)
	var refused []configRefusal
	keep := req.Resources[:0]
	for _, res := range req.Resources {
		if res.ResourceType != kmsg.ConfigResourceTypeTopic {
			keep = append(keep, res)
			continue
		}
		settings := map[string]*string{}
		for _, c := range res.Configs {
			settings[c.Name] = c.Value
		}
		if _, ok := settings[rules.MarkKey]; ok {
			refused = append(refused, configRefusal{res.ResourceType, res.ResourceName, rules.ErrInvalidConfig,
				"offsetgate: the mirror mark is removed with IncrementalAlterConfigs (DELETE " + rules.MarkKey + "), and never added"})
			continue
		}
		if rf, _ := s.judgeConfig(res.ResourceName, settings, s.mark(res.ResourceName) != nil); rf != nil {
			refused = append(refused, *rf)
			continue
		}
		keep = append(keep, res)
	}
	if len(refused) == 0 {
		return nil
	}
	req.Resources = keep
	if len(keep) == 0 {
		var resp kmsg.AlterConfigsResponse
		spliceAlter(&resp, refused)
		r.answerWith(&resp)
		return nil
	}
	forwardSpliced(s, r, req.AppendTo(nil), func(resp *kmsg.AlterConfigsResponse) { spliceAlter(resp, refused) })
	return nil
}

func spliceAlter(resp *kmsg.AlterConfigsResponse, rs []configRefusal) {
	for _, rf := range rs {
		res := kmsg.NewAlterConfigsResponseResource()
		msg := rf.msg
		res.ResourceType, res.ResourceName, res.ErrorCode, res.ErrorMessage = rf.typ, rf.name, rf.code, &msg
		resp.Resources = append(resp.Resources, res)
	}
}
