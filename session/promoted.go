package session

// Source connections and promoted topics. Once a mirror topic is promoted, its records are
// written to the destination only; a client of a source listener keeps talking to the source
// brokers it knows, so the session carries the topic's partitions of its Fetch, ListOffsets,
// OffsetForLeaderEpoch, DescribeProducers and Produce requests to the destination's leaders
// (on the carrier's connections) and answers them in source terms with the topic's source
// view, as a destination listener would; the other partitions go to the source as before and
// the answers are put together. Metadata still names the source's brokers: the client never
// learns of the switch (docs/DESIGN.md, "Producers and consumers at promotion").

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/catalog"
	"offsetgate/view"
)

// reqTopic is one topic of a request as the client named it, and its partitions.
type reqTopic struct {
	name  string
	id    [16]byte // the source's id (requests that name topics by id)
	parts []int32
}

// promotedPart is one partition of a source connection's request that belongs to a promoted
// topic: where it is in the request, and what the destination knows of it.
type promotedPart struct {
	ti, pi    int
	name      string
	id        catalog.TopicID // the destination's
	partition int32
	pv        *view.Partition
	addr      string
	err       error // its view or its leader could not be found
	// refuse, when not zero, answers the partition without carrying it (carries says why).
	refuse int16
}

// carries reports whether this connection's requests for promoted topics may be carried to
// the destination, with offsetgate's login there. A listener that takes SASL logins passes
// them to the source, which then authorizes each client by its own login; the destination
// would see offsetgate's instead, so a client the source would have refused could read or
// write there. Such a listener carries only when told to (source.carry_logins). Without SASL
// the source saw offsetgate's connection, not the client's login, already.
func (s *Session) carries() bool {
	return s.cfg.NoSASL || s.cfg.UpstreamLoggedIn || s.cfg.CarryLogins
}

// notCarried is the refusal of a promoted topic's partition on a connection that carries
// nothing.
func notCarried(topic string) string {
	return fmt.Sprintf("offsetgate: %s was promoted and its records are on the destination, where this listener does not carry clients' requests "+
		"(their SASL login reached the source only): connect to a destination listener, or set source.carry_logins", topic)
}

// promotedParts lists the partitions of promoted topics among a request's topics (names: the
// names of source topic ids, for requests that name topics by id).
func (s *Session) promotedParts(topics []reqTopic, byID bool, names map[[16]byte]string) []promotedPart {
	var out []promotedPart
	for ti, t := range topics {
		name := t.name
		if byID {
			name = names[t.id]
		}
		info, _, promoted := s.cfg.Moves.Promotion(name)
		if !promoted {
			continue
		}
		for pi, p := range t.parts {
			pp := promotedPart{ti: ti, pi: pi, name: info.Name, id: info.ID, partition: p}
			if !s.carries() {
				pp.refuse = kerr.TopicAuthorizationFailed.Code
			}
			out = append(out, pp)
		}
	}
	return out
}

// withSourceNames runs decide with the names of the source topic ids given: at once when the
// carrier knows them all, else after asking the source, in an asynchronous step whose end
// passes the request to the source if decide did not take it.
func (s *Session) withSourceNames(r *request, ids [][16]byte, decide func(names map[[16]byte]string) (bool, error)) (bool, error) {
	if len(ids) == 0 {
		return decide(nil)
	}
	c := s.movesCarrier()
	names := map[[16]byte]string{}
	missing := false
	for _, id := range ids {
		if n, ok := c.CachedSourceName(id); ok {
			names[id] = n
		} else {
			missing = true
		}
	}
	if !missing {
		return decide(names)
	}
	key, version := kmsg.NameForKey(r.h.key), r.h.version
	r.async = func(ctx context.Context) func(*Session, *request) error {
		names, err := c.SourceNames(ctx, ids)
		return func(s *Session, r *request) error {
			if err != nil {
				// Fail closed: a partition of a promoted topic must not be served by the source.
				return fmt.Errorf("%s v%d on a source connection: the source's names of its topic ids: %w", key, version, err)
			}
			decided, err := decide(names)
			if err != nil || decided {
				return err
			}
			return s.sourcePass(r)
		}
	}
	return true, nil
}

// locate finds each part's source view and its destination leader. It blocks.
func locate(ctx context.Context, c Carrier, parts []promotedPart) {
	for i := range parts {
		p := &parts[i]
		if p.refuse != 0 {
			p.err = errNotCarried
			continue
		}
		pv, err := c.SourceView(ctx, p.name, p.partition)
		if err == nil && pv == nil {
			err = fmt.Errorf("%s has no source view on the destination", p.name)
		}
		if err != nil {
			p.err = err
			continue
		}
		p.pv = pv
		p.addr, p.err = c.DestLeader(ctx, p.name, p.id, p.partition)
	}
}

var errNotCarried = errors.New("not carried on this connection")

// leaderAnswer is one destination broker's answer to the request of its parts.
type leaderAnswer struct {
	resp kmsg.Response
	err  error
}

// sendByLeader sends, for every destination leader of the located parts, the request build
// makes of its parts, all at once, and returns each leader's answer. It blocks.
func sendByLeader(ctx context.Context, c Carrier, clientID string, parts []promotedPart, build func(idx []int) kmsg.Request) map[string]leaderAnswer {
	groups := map[string][]int{}
	for i, p := range parts {
		if p.err == nil {
			groups[p.addr] = append(groups[p.addr], i)
		}
	}
	out := make(map[string]leaderAnswer, len(groups))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for addr, idx := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := c.SendTo(ctx, clientID, addr, build(idx))
			mu.Lock()
			out[addr] = leaderAnswer{resp, err}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// partErr is the error code a part is answered with when it could not be carried: retriable,
// so the client asks again (and the carrier looks for the leader again).
func partErr(c Carrier, p promotedPart, a leaderAnswer) int16 {
	if p.refuse != 0 {
		return p.refuse
	}
	if p.err != nil || a.err != nil {
		c.ForgetLeader(p.name, p.partition)
	}
	return kerr.NotLeaderForPartition.Code
}

// leadership reports whether an error code says the broker asked is no longer the leader (the
// carrier then finds it again).
func leadership(code int16) bool {
	switch code {
	case kerr.NotLeaderForPartition.Code, kerr.UnknownTopicOrPartition.Code, kerr.FencedLeaderEpoch.Code,
		kerr.UnknownLeaderEpoch.Code, kerr.LeaderNotAvailable.Code:
		return true
	}
	return false
}

// restCount is how many of the request's partitions go to the source.
func restCount(topics []reqTopic, parts []promotedPart) int {
	n := 0
	for _, t := range topics {
		n += len(t.parts)
	}
	return n - len(parts)
}

// sourceTopics is a request's topics without the promoted parts: what goes to the source.
// partsOf points at a topic's partitions.
func sourceTopics[T, P any](topics []T, partsOf func(*T) *[]P, promoted []promotedPart) []T {
	var out []T
	for ti, t := range topics {
		var keep []P
		for pi, p := range *partsOf(&t) {
			if !isPromotedPart(promoted, ti, pi) {
				keep = append(keep, p)
			}
		}
		if len(keep) > 0 {
			*partsOf(&t) = keep
			out = append(out, t)
		}
	}
	return out
}

func isPromotedPart(parts []promotedPart, ti, pi int) bool {
	for _, p := range parts {
		if p.ti == ti && p.pi == pi {
			return true
		}
	}
	return false
}
