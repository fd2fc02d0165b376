package session

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"offsetgate/catalog"
	"offsetgate/view"
)

// partKey names a partition by topic name, for the answers of requests that name topics so.
type partKey struct {
	topic     string
	partition int32
}

// mirrorPart is one partition of a mirror topic that a request names.
type mirrorPart struct {
	t         catalog.Topic
	partition int32
}

// mirrorsOn reports whether any mirror topic exists, so requests that could only matter for
// mirror topics are not even decoded otherwise.
func (s *Session) mirrorsOn() bool {
	return s.cfg.View != nil && s.cfg.Catalog != nil && s.cfg.Catalog.HasMirrors()
}

// viewed reports whether the source views of these mirror partitions and whole topics are
// loaded and fresh. When one is not, it arranges the loads on an asynchronous step, after
// which handler runs again (then with whatever could be loaded), and the caller must return at
// once.
func (s *Session) viewed(r *request, parts []mirrorPart, topics []catalog.Topic, handler func(*Session, *request) error) bool {
	if r.viewed || s.cfg.View == nil {
		return true
	}
	v := s.cfg.View
	var needP []mirrorPart
	for _, p := range parts {
		if pv := v.Get(p.t.ID, p.partition); pv == nil || pv.NeedsRefresh() {
			needP = append(needP, p)
		}
	}
	var needT []catalog.Topic
	for _, t := range topics {
		if !v.TopicLoaded(t.ID) {
			needT = append(needT, t)
		}
	}
	if len(needP) == 0 && len(needT) == 0 {
		return true
	}
	r.async = func(ctx context.Context) func(*Session, *request) error {
		var failed error
		for _, p := range needP {
			if _, err := v.Load(ctx, p.t, p.partition); err != nil {
				failed = err
			}
		}
		for _, t := range needT {
			if err := v.LoadTopic(ctx, t); err != nil {
				failed = err
			}
		}
		return func(s *Session, r *request) error {
			if failed != nil {
				s.log.Warn("source view unavailable", zap.Error(failed))
			}
			r.viewed = true
			return handler(s, r)
		}
	}
	return false
}

// namedTopic is a topic a request names (by name, or by id where newer versions leave the
// name empty) and the partitions it names.
type namedTopic struct {
	name  string
	id    catalog.TopicID
	parts []int32
}

// topicOf finds a topic with a source view named by name or, when name is empty, by id.
func (s *Session) topicOf(name string, id catalog.TopicID) *catalog.Topic {
	if name != "" {
		return s.sourceTopic(name)
	}
	if id != (catalog.TopicID{}) {
		return s.sourceTopicByID(id)
	}
	return nil
}

// viewsReady is the common start of handlers that translate named partitions: it makes sure
// every topic the request names is known (names and ids offsetgate has not confirmed are looked
// up, the marks read up to date), finds the partitions with a source view (each, when set, sees
// every one), and makes sure their views are loaded. When it reports false the handler returns
// at once with the error it gives: either no partition has a view (nil: the request passes
// unchanged) or a lookup or load was arranged, after which handler runs again, or an id stayed
// unknown after the lookup (the request is refused: it cannot be translated or judged).
func (s *Session) viewsReady(r *request, handler func(*Session, *request) error, topics []namedTopic, each func(mirrorPart)) (bool, error) {
	var names []string
	var ids []catalog.TopicID
	for _, t := range topics {
		switch {
		case t.name != "":
			names = append(names, t.name)
		case t.id != (catalog.TopicID{}):
			ids = append(ids, t.id)
		}
	}
	if !s.knownIDs(r, ids, handler) || !s.known(r, names, handler) {
		return false, nil
	}
	for _, id := range ids {
		if !s.idKnown(id) {
			return false, fmt.Errorf("%w: %s names topic id %s, which the destination does not show offsetgate", ErrUnjudged, kmsg.NameForKey(r.h.key), catalog.IDString(id))
		}
	}
	if !s.mirrorsOn() {
		return false, nil
	}
	var parts []mirrorPart
	for _, t := range topics {
		info := s.topicOf(t.name, t.id)
		if info == nil {
			continue
		}
		for _, p := range t.parts {
			mp := mirrorPart{*info, p}
			if each != nil {
				each(mp)
			}
			parts = append(parts, mp)
		}
	}
	return len(parts) > 0 && s.viewed(r, parts, nil, handler), nil
}

// partView returns a loaded partition view, or nil.
func (s *Session) partView(t catalog.Topic, partition int32) *view.Partition {
	if s.cfg.View == nil {
		return nil
	}
	return s.cfg.View.Get(t.ID, partition)
}

// toDestEpoch turns a leader epoch a client sends (in the presented space) into the
// destination's. An epoch below the base is older than anything presented: it becomes -2,
// which the destination fences as it would any stale epoch (-1 means "no check" and stays).
func toDestEpoch(e, base int32) int32 {
	if e < 0 {
		return e
	}
	if d := e - base; d >= 0 {
		return d
	}
	return -2
}

// sourceTopic finds a topic with a source view by name: a mirror topic, or one promoted from
// it (Mark nil), whose consumers keep the source's offsets and epochs after promotion.
func (s *Session) sourceTopic(name string) *catalog.Topic {
	if s.cfg.Catalog == nil {
		return nil
	}
	t, ok := s.cfg.Catalog.ByName(name)
	if !ok || (t.Mark == nil && !s.cfg.Catalog.Removed(t.ID)) {
		return nil
	}
	return &t
}

// sourceTopicByID is sourceTopic by topic id.
func (s *Session) sourceTopicByID(id catalog.TopicID) *catalog.Topic {
	if s.cfg.Catalog == nil {
		return nil
	}
	// A marked id is a source-view topic even while its name is not known here: the view is
	// kept by id.
	t, _ := s.cfg.Catalog.ByID(id)
	if t.Mark == nil && !s.cfg.Catalog.Removed(id) {
		return nil
	}
	return &t
}

// errViewUnavailable closes a connection whose request needs a source view that could not be
// read: answering with the destination's offsets would be worse than a reconnect.
func errViewUnavailable(topic string, partition int32) error {
	return fmt.Errorf("%w: the source view of %s[%d] is unavailable (the ledger could not be read); closing so the client retries", ErrUnjudged, topic, partition)
}
