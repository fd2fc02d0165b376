package session

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/catalog"
)

// known reports whether every topic name's id is known. When one is not, it arranges an
// asynchronous lookup on the destination after which handler runs again, and the caller must
// return at once: rules are never applied to a guess. A lookup that fails refuses the request
// (the connection is closed; the client retries).
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
	s.lookup(r, unknown, handler)
	return false
}

// knownIDs is known for topic ids: an id with neither a name nor a mark here is looked up (all
// topics are read: Metadata cannot be asked by id everywhere). After the lookup an id still
// unknown is one the destination does not show offsetgate; the handler refuses it with
// UNKNOWN_TOPIC_ID rather than forward what it cannot judge.
func (s *Session) knownIDs(r *request, ids []catalog.TopicID, handler func(*Session, *request) error) bool {
	if r.resolved || s.cfg.Catalog == nil {
		return true
	}
	var unknown []catalog.TopicID
	for _, id := range ids {
		if !s.idKnown(id) {
			unknown = append(unknown, id)
		}
	}
	if len(unknown) == 0 {
		return true
	}
	s.lookup(r, nil, handler, unknown...)
	return false
}

// idKnown reports whether offsetgate can judge a topic named by id: its name is known, or it
// has a mark (a mirror topic, or a promoted one) whose name is not known yet.
func (s *Session) idKnown(id catalog.TopicID) bool {
	if _, ok := s.cfg.Catalog.ByID(id); ok {
		return true
	}
	t, _ := s.cfg.Catalog.ByID(id)
	return t.Mark != nil || s.cfg.Catalog.Removed(id)
}

// lookup arranges a catalog refresh of names (all topics when nil), after which handler runs
// again; a failed refresh refuses the request. Ids the client named come from a broker that
// knows the topic, while the one offsetgate asks may not know it yet (a topic created a moment
// ago): the lookup is repeated a few times, for about a second, until they are known.
func (s *Session) lookup(r *request, names []string, handler func(*Session, *request) error, ids ...catalog.TopicID) {
	cat := s.cfg.Catalog
	r.async = func(ctx context.Context) func(*Session, *request) error {
		var err error
		for attempt := 1; ; attempt++ {
			if err = cat.Refresh(ctx, names); err != nil || attempt == 5 || allKnown(cat, ids) {
				break
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(attempt) * 100 * time.Millisecond):
			}
		}
		return func(s *Session, r *request) error {
			if err != nil {
				return fmt.Errorf("%w: %s: looking up its topics on the destination: %v", ErrUnjudged, kmsg.NameForKey(r.h.key), err)
			}
			r.resolved = true
			return handler(s, r)
		}
	}
}

func allKnown(cat Catalog, ids []catalog.TopicID) bool {
	for _, id := range ids {
		if _, ok := cat.ByID(id); !ok {
			return false
		}
	}
	return true
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
