package session

import (
	"offsetgate/catalog"
)

// idKnown reports whether offsetgate can judge a topic named by id: its name is known, or it
// has a mark (a mirror topic, or a promoted one) whose name is not known yet.
func (s *Session) idKnown(id catalog.TopicID) bool {
	if _, ok := s.cfg.Catalog.ByID(id); ok {
		return true
	}
	t, _ := s.cfg.Catalog.ByID(id)
	return t.Mark != nil || s.cfg.Catalog.Removed(id)
}

// topicName is a topic's name as a request gives it, or as offsetgate knows it for an id.
func (s *Session) topicName(name string, id catalog.TopicID) string {
	if name != "" || s.cfg.Catalog == nil {
		return name
	}
	t, _ := s.cfg.Catalog.ByID(id)
	return t.Name
}

// mark returns a topic's mirror mark, or nil.
func (s *Session) mark(name string) *catalog.Topic {
	if s.cfg.Catalog == nil {
		return nil
	}
	t, ok := s.cfg.Catalog.ByName(name)
	if !ok || t.Mark == nil {
		return nil
	}
	return &t
}
