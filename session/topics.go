package session

import (
	"context"
	"strings"

	"offsetgate/catalog"
)

// known reports whether every topic name's id is known. When one is not, it arranges an
// asynchronous lookup on the destination after which handler runs again, and the caller must
// return at once: rules are never applied to a guess.
func (s *Session) known(r *request, names []string, handler func(*Session, *request) error) bool {
	if r.resolved || s.cfg.Catalog == nil {
		return true
	}
	var unknown []string
	for _, n := range names {
		if _, ok := s.cfg.Catalog.ByName(n); !ok {
			unknown = append(unknown, strings.Clone(n)) // the lookup outlives the request's buffer
		}
	}
	if len(unknown) == 0 {
		return true
	}
	cat := s.cfg.Catalog
	r.async = func(ctx context.Context) func(*Session, *request) {
		err := cat.Refresh(ctx, unknown)
		return func(s *Session, r *request) {
			if err != nil {
				s.log.Warn("topic lookup failed; judging with what is known")
			}
			r.resolved = true
			_ = handler(s, r)
		}
	}
	return false
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
