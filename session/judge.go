package session

// The handler contract. A handler of a request (handlers.go) is run by the session in three
// steps, and owns none of the plumbing between them:
//
//  1. decode: the request body is decoded once into its kmsg type (r.req). A body kmsg cannot
//     decode closes the connection (ErrUndecodable).
//  2. needs: the handler declares what its decision reads from the destination: topic names
//     and ids to confirm (their ids and mirror marks, read up to date), and the partitions and
//     topics whose source views it reads. What is missing is fetched in one asynchronous step,
//     bounded by Config.WaitTimeout; a lookup that fails, or the time running out, refuses the
//     request (answered with REQUEST_TIMED_OUT where the handler can build a refusal, else the
//     connection is closed) and is counted.
//  3. decide: with everything at hand the handler applies its rules and sets the outcome
//     (forward as is, forward a rebuilt request, answer locally, splice refusals into the
//     answer). A decision may still need durable work (storing a mark, mirror writes): it sets
//     r.async, which runs with the same time bound.
//
// kfake and Kroxylicious are the models: a handler is a small function from a typed request to
// a decision; ordering, waiting and time limits belong to the runtime.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
	"golang.org/x/sync/errgroup"

	"offsetgate/catalog"
	"offsetgate/rules"
	"offsetgate/view"
)

// DefaultWaitTimeout bounds a request's wait for the destination (lookups, view loads,
// durable writes).
const DefaultWaitTimeout = 30 * time.Second

// needs is what a decision reads from the destination.
type needs struct {
	names []string          // topic names to confirm
	ids   []catalog.TopicID // topic ids to confirm (retried a moment: a client learned them from a broker)
	// views, when set, lists (once the names and ids are confirmed) the partitions and whole
	// topics whose source views the decision reads. It runs on the session's goroutine and on
	// the asynchronous step's, so it may read only the decoded request, the catalog and the
	// view.
	views func(s *Session) ([]mirrorPart, []catalog.Topic)
	// refresh reads the partitions' views to the ledger's end even when they are loaded.
	refresh bool
}

// unsafeReader is kmsg's decoder that keeps byte slices in the frame.
type unsafeReader interface{ UnsafeReadFrom([]byte) error }

// judge runs a handler's decode, needs and decide steps for one request.
func (s *Session) judge(hd *handler, r *request) error {
	req := kmsg.RequestForKey(r.h.key)
	if req == nil {
		return r.undecodable(errors.New("kmsg has no request type for this key"))
	}
	req.SetVersion(r.h.version)
	if err := r.decode(req, hd.unsafe); err != nil {
		return r.undecodable(err)
	}
	r.req = req
	if hd.needs != nil {
		n := hd.needs(s, r)
		if !s.satisfied(n) {
			s.wait(hd, r, n)
			return nil
		}
	}
	return hd.decide(s, r)
}

// decodable refuses, with the rules on, a request of an api offsetgate does not pass as bytes
// (apiRules) that was not judged (its handler only rewrites the answer, or is not active now)
// and that kmsg cannot decode: a broker's decoder may read such a body differently, and
// offsetgate forwards nothing it could not have judged.
func (s *Session) decodable(r *request) error {
	if s.cfg.Catalog == nil || apiRules[kmsg.Key(r.h.key)].class == passed {
		return nil
	}
	req := kmsg.RequestForKey(r.h.key)
	if req == nil {
		return r.undecodable(errors.New("kmsg has no request type for this key"))
	}
	req.SetVersion(r.h.version)
	if err := r.decode(req, true); err != nil {
		return r.undecodable(err)
	}
	return nil
}

func (r *request) decode(req kmsg.Request, unsafe bool) error {
	if u, ok := req.(unsafeReader); ok && unsafe {
		if err := u.UnsafeReadFrom(r.body); err != nil {
			return err
		}
		ownStrings(req)
		return nil
	}
	return req.ReadFrom(r.body)
}

// ownStrings copies the strings of an unsafely decoded request out of the frame: only its
// byte slices (record sets) may point into a buffer that is reused once the request is done,
// while names end up kept for good (the writer's partitions, metric labels, the catalog).
// A name that stayed in the frame would later read as another request's bytes: a write
// planned for one topic sent to another of the same name length.
func ownStrings(req kmsg.Request) {
	switch q := req.(type) {
	case *kmsg.ProduceRequest:
		if q.TransactionID != nil {
			id := strings.Clone(*q.TransactionID)
			q.TransactionID = &id
		}
		for i := range q.Topics {
			q.Topics[i].Topic = strings.Clone(q.Topics[i].Topic)
		}
	}
}

// satisfied reports whether everything a decision needs is at hand now.
func (s *Session) satisfied(n needs) bool {
	if s.cfg.Catalog == nil {
		return true
	}
	for _, name := range n.names {
		if _, ok := s.cfg.Catalog.ByName(name); !ok {
			return false
		}
	}
	for _, id := range n.ids {
		if !s.idKnown(id) {
			return false
		}
	}
	if n.views == nil || s.cfg.View == nil {
		return true
	}
	parts, topics := n.views(s)
	if n.refresh && len(parts) > 0 {
		return false
	}
	for _, p := range parts {
		pv := s.cfg.View.Get(p.t.ID, p.partition)
		if pv == nil || pv.NeedsRefresh() {
			return false
		}
		if d, ok := p.page(pv); ok && !pv.Resident(d) {
			return false
		}
	}
	for _, t := range topics {
		if !s.cfg.View.TopicLoaded(t.ID) {
			return false
		}
	}
	return true
}

// wait fetches what a decision needs in one asynchronous step, then decides.
func (s *Session) wait(hd *handler, r *request, n needs) {
	cat, v := s.cfg.Catalog, s.cfg.View
	var unknownNames []string
	for _, name := range n.names {
		if _, ok := cat.ByName(name); !ok {
			// The name may point into the transport's buffer, which the lookup outlives.
			unknownNames = append(unknownNames, strings.Clone(name))
		}
	}
	var unknownIDs []catalog.TopicID
	for _, id := range n.ids {
		if !s.idKnown(id) {
			unknownIDs = append(unknownIDs, id)
		}
	}
	r.detach()
	if hd.unsafe {
		// The decoded request pointed into the transport's buffer; it points into the
		// request's own copy from now on (decoded again, in place: needs.views reads it).
		_ = r.decode(r.req, true)
	}
	r.async = func(ctx context.Context) func(*Session, *request) error {
		err := lookup(ctx, cat, unknownNames, unknownIDs)
		if err == nil && n.views != nil && v != nil {
			parts, topics := n.views(s)
			err = load(ctx, v, parts, topics, n.refresh)
		}
		return func(s *Session, r *request) error {
			if err != nil {
				return s.unjudged(hd, r, err)
			}
			r.lookedUp = true
			return hd.decide(s, r)
		}
	}
}

// lookup confirms topic names and ids on the destination (the marks read up to date). Ids a
// client named come from a broker that knows the topic, while the one offsetgate asks may not
// know it yet (a topic created a moment ago): the lookup is repeated, for about a second, until
// they are known.
func lookup(ctx context.Context, cat Catalog, names []string, ids []catalog.TopicID) error {
	if len(names) == 0 && len(ids) == 0 {
		return nil
	}
	if len(ids) > 0 {
		names = nil // every topic: Metadata cannot be asked by id everywhere
	}
	for attempt := 1; ; attempt++ {
		if err := cat.Refresh(ctx, names); err != nil {
			return fmt.Errorf("looking up topics on the destination: %w", err)
		}
		if attempt == 5 || allKnown(cat, ids) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(attempt) * 100 * time.Millisecond):
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

// loadParallel is how many partitions' views one request reads at once. Each read is a few
// round trips to the destination (the ledger partition's leader, its end, its entries), and a
// request may name every partition of a topic: a mirroring client starting on 1,000
// partitions asks their mirrored ends in one ListOffsets, which read one after the other took
// longer than its wait for the destination.
const loadParallel = 16

// load reads the source views a decision needs, several partitions at once. One that cannot
// be read is left missing: the decision refuses what it cannot translate (a source view is
// never guessed).
func load(ctx context.Context, v View, parts []mirrorPart, topics []catalog.Topic, refresh bool) error {
	var g errgroup.Group
	g.SetLimit(loadParallel)
	for _, p := range parts {
		g.Go(func() error {
			if pv := v.Get(p.t.ID, p.partition); refresh && pv != nil {
				pv.Stale()
			}
			pv := v.Get(p.t.ID, p.partition)
			if pv == nil || pv.NeedsRefresh() {
				var err error
				if pv, err = v.Load(ctx, p.t, p.partition); err != nil {
					return err
				}
			}
			if d, ok := p.page(pv); ok {
				return pv.LoadAt(ctx, d)
			}
			return nil
		})
	}
	// The group is not cancelled by an error: every view is tried, and what was read serves.
	failed := g.Wait()
	if err := v.LoadTopics(ctx, topics); err != nil {
		failed = err
	}
	if failed != nil && ctx.Err() != nil {
		return ctx.Err() // out of time: the request is refused as such
	}
	return nil
}

// errWaitTimedOut marks a request whose wait for the destination ran out of time.
var errWaitTimedOut = errors.New("timed out waiting for the destination")

// unjudged refuses a request whose needs could not be fetched: with the handler's refusal
// (REQUEST_TIMED_OUT) when it has one, else by closing the connection.
func (s *Session) unjudged(hd *handler, r *request, err error) error {
	timedOut := errors.Is(err, context.DeadlineExceeded) || errors.Is(err, errWaitTimedOut)
	if timedOut {
		s.cfg.Observer.WaitTimeout(r.h.key)
		err = fmt.Errorf("%w after %v: %v", errWaitTimedOut, s.cfg.WaitTimeout, err)
	}
	if hd != nil && hd.refuse != nil && r.req != nil {
		hd.refuse(s, r, rules.ErrTimedOut, "offsetgate: "+err.Error()+"; nothing was done, retry")
		return nil
	}
	return fmt.Errorf("%w: %s: %v", ErrUnjudged, kmsg.NameForKey(r.h.key), err)
}

// detach copies the request's frame out of the transport's buffer (it outlives the call).
func (r *request) detach() {
	if r.detached {
		return
	}
	r.frame = append([]byte(nil), r.frame...)
	r.body = r.frame[4+r.h.bodyOff:]
	// The header's client id points into the frame it was read from, which the connection
	// reuses: a finishing step that reads it (a carrier's client id) must see a copy.
	r.h.clientID = append([]byte(nil), r.h.clientID...)
	r.detached = true
}

// namedNeeds is the needs of a request that names partitions of topics (by name, or by id
// where newer versions leave the name empty): the names and ids confirmed, and the views of
// the partitions of source-view topics.
func namedNeeds(topics []namedTopic) needs {
	var n needs
	for _, t := range topics {
		switch {
		case t.name != "":
			n.names = append(n.names, t.name)
		case t.id != (catalog.TopicID{}):
			n.ids = append(n.ids, t.id)
		}
	}
	n.views = func(s *Session) ([]mirrorPart, []catalog.Topic) {
		if !s.mirrorsOn() {
			return nil, nil
		}
		var parts []mirrorPart
		for _, t := range topics {
			if info := s.topicOf(t.name, t.id); info != nil {
				for _, p := range t.parts {
					parts = append(parts, mirrorPart{t: *info, partition: p})
				}
			}
		}
		return parts, nil
	}
	return n
}

// eachView calls fn for every partition of a source-view topic the request names, with the
// topic's and the partition's indexes in the request, the topic and its view. A name or id the
// destination does not show offsetgate after the lookup refuses the request (it cannot be
// translated or judged), and so does a view that could not be loaded.
func (s *Session) eachView(r *request, topics []namedTopic, fn func(ti, pi int, t *catalog.Topic, pv *view.Partition)) error {
	for ti, t := range topics {
		if t.name == "" && t.id != (catalog.TopicID{}) && !s.idKnown(t.id) {
			return fmt.Errorf("%w: %s names topic id %s, which the destination does not show offsetgate", ErrUnjudged, kmsg.NameForKey(r.h.key), catalog.IDString(t.id))
		}
		if !s.mirrorsOn() {
			continue
		}
		info := s.topicOf(t.name, t.id)
		if info == nil {
			continue
		}
		for pi, p := range t.parts {
			pv := s.partView(*info, p)
			if pv == nil {
				return errViewUnavailable(info.Name, p)
			}
			fn(ti, pi, info, pv)
		}
	}
	return nil
}
