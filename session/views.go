package session

import (
	"fmt"

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
	// hasAt: the index page holding offset at must be in memory before the request is
	// decided, at being a source offset (atSrc: where a fetch starts) or a destination one
	// (where an answer stopped for want of the page).
	at           int64
	hasAt, atSrc bool
}

// page is the destination offset whose index page the request needs in memory, if any.
func (m mirrorPart) page(pv *view.Partition) (int64, bool) {
	switch {
	case !m.hasAt:
		return 0, false
	case m.atSrc:
		return pv.ToDest(m.at), true
	}
	return m.at, true
}

// mirrorsOn reports whether any mirror topic exists, so requests that could only matter for
// mirror topics are not even decoded otherwise.
func (s *Session) mirrorsOn() bool {
	return s.cfg.View != nil && s.cfg.Catalog != nil && s.cfg.Catalog.HasMirrors()
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
