package moves

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"offsetgate/view"
	"offsetgate/wire"
)

// Carrier carries one client connection's requests for moved groups to the groups'
// coordinators on the destination (session.Carrier). It owns one connection, to the
// coordinator of the group it last carried for: a member's requests keep their order, and a
// JoinGroup the coordinator holds blocks only this client connection, as it would on a broker.
// Offsets are translated as the destination's listener translates a consumer's commits: source
// offsets in through the source view's CommitToDest, back out through ToSource.
type Carrier struct {
	cfg *Config

	mu     sync.Mutex
	closed bool
	conn   *wire.Conn
	addr   string            // the address conn reaches
	coords map[string]string // group -> its coordinator's address, as last found
	// Carried writes of promoted topics (produce.go): the destination's partition leaders as
	// last found, and a connection per destination broker written to.
	leaders map[leaderKey]string
	brokers map[string]*wire.Conn
	names   map[[16]byte]string // source topic ids' names
}

// NewCarrier makes a carrier; cfg.Dest finds coordinators and cfg.Dial connects to them.
func NewCarrier(cfg *Config) *Carrier {
	return &Carrier{cfg: cfg, coords: map[string]string{}, leaders: map[leaderKey]string{}, brokers: map[string]*wire.Conn{},
		names: map[[16]byte]string{}}
}

// errClosed is a Carry on a carrier whose client connection ended.
var errClosed = errors.New("the client connection ended")

// Close ends the carrier's connection.
func (c *Carrier) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
	for addr, conn := range c.brokers {
		conn.Close()
		delete(c.brokers, addr)
	}
}

// Carry sends a moved group's request to the group's coordinator on the destination.
func (c *Carrier) Carry(ctx context.Context, clientID, group string, req kmsg.Request) (resp kmsg.Response, err error) {
	defer func() { c.cfg.Metrics.carry(err) }()
	ids, err := c.idsToDest(ctx, req)
	if err != nil {
		return nil, err
	}
	held, err := c.commitsToDest(ctx, req)
	if err != nil {
		return nil, err
	}
	finish := func(resp kmsg.Response) (kmsg.Response, error) {
		held.into(resp)
		if err := c.idsToSource(ctx, ids, resp); err != nil {
			return nil, err
		}
		if err := c.offsetsToSource(ctx, resp); err != nil {
			return nil, err
		}
		return resp, nil
	}
	if held.all {
		resp := req.ResponseKind()
		resp.SetVersion(req.GetVersion())
		return finish(resp)
	}
	var last error
	for attempt := 0; attempt < 3 && ctx.Err() == nil; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(attempt) * 100 * time.Millisecond):
			}
		}
		conn, err := c.connFor(ctx, group)
		if err != nil {
			last = err
			continue
		}
		conn.SetClientID(clientID)
		resp := req.ResponseKind()
		if err := conn.RoundTrip(ctx, req, resp, false); err != nil {
			c.drop(group, conn)
			last = fmt.Errorf("to the destination's coordinator: %w", err)
			continue
		}
		if code := coordinatorError(resp); code != 0 {
			// The coordinator moved on the destination: find it again.
			c.forget(group)
			last = fmt.Errorf("the destination's coordinator: %w", kerr.ErrorForCode(code))
			continue
		}
		return finish(resp)
	}
	if last == nil {
		last = ctx.Err()
	}
	return nil, last
}

// connFor returns the connection to the group's coordinator, finding and dialing it when needed.
func (c *Carrier) connFor(ctx context.Context, group string) (*wire.Conn, error) {
	c.mu.Lock()
	addr, known := c.coords[group]
	c.mu.Unlock()
	if !known {
		_, host, port, err := DestCoordinator(ctx, c.cfg.Dest, group)
		if err != nil {
			return nil, fmt.Errorf("finding the destination's coordinator of group %s: %w", group, err)
		}
		addr = net.JoinHostPort(host, strconv.Itoa(int(port)))
		c.mu.Lock()
		c.coords[group] = addr
		c.mu.Unlock()
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, errClosed
	}
	if c.conn != nil && c.addr == addr {
		conn := c.conn
		c.mu.Unlock()
		return conn, nil
	}
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
	c.mu.Unlock()
	conn, err := c.cfg.Dial(ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("connecting to the destination's coordinator %s: %w", addr, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		conn.Close()
		return nil, errClosed
	}
	c.conn, c.addr = conn, addr
	return conn, nil
}

// drop closes a connection that failed and forgets the group's coordinator.
func (c *Carrier) drop(group string, conn *wire.Conn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == conn {
		c.conn.Close()
		c.conn = nil
	}
	delete(c.coords, group)
}

func (c *Carrier) forget(group string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.coords, group)
}

// coordinatorError is the error of an answer that says its broker is not (or not yet) the
// group's coordinator: the request was not carried out, and goes again to the one found anew.
func coordinatorError(resp kmsg.Response) int16 {
	is := func(code int16) bool {
		return code == kerr.NotCoordinator.Code || code == kerr.CoordinatorNotAvailable.Code
	}
	switch r := resp.(type) {
	case *kmsg.JoinGroupResponse:
		if is(r.ErrorCode) {
			return r.ErrorCode
		}
	case *kmsg.SyncGroupResponse:
		if is(r.ErrorCode) {
			return r.ErrorCode
		}
	case *kmsg.HeartbeatResponse:
		if is(r.ErrorCode) {
			return r.ErrorCode
		}
	case *kmsg.LeaveGroupResponse:
		if is(r.ErrorCode) {
			return r.ErrorCode
		}
	case *kmsg.OffsetFetchResponse:
		if is(r.ErrorCode) {
			return r.ErrorCode
		}
		for _, g := range r.Groups {
			if is(g.ErrorCode) {
				return g.ErrorCode
			}
		}
	case *kmsg.OffsetCommitResponse:
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				if is(p.ErrorCode) {
					return p.ErrorCode
				}
			}
		}
	}
	return 0
}

// sourceView is the view of a topic whose consumers speak source offsets on the destination
// (a mirror topic, or one promoted from it), or nil for any other topic.
func (c *Carrier) sourceView(ctx context.Context, name string, partition int32) (*view.Partition, error) {
	t, ok := c.cfg.Catalog.ByName(name)
	if !ok {
		if err := c.cfg.Catalog.Refresh(ctx, []string{name}); err != nil {
			return nil, fmt.Errorf("looking up %s on the destination: %w", name, err)
		}
		if t, ok = c.cfg.Catalog.ByName(name); !ok {
			return nil, nil
		}
	}
	if t.Mark == nil && !c.cfg.Catalog.Removed(t.ID) {
		return nil, nil
	}
	pv, err := c.cfg.View.Load(ctx, t, partition)
	if err != nil {
		return nil, fmt.Errorf("the source view of %s[%d]: %w", name, partition, err)
	}
	return pv, nil
}

// heldCommits are the partitions of a commit answered here: the mirror had not reached their
// offsets in time (REQUEST_TIMED_OUT, which clients retry), or the request named a topic by
// id only (UNKNOWN_TOPIC_ID: a source topic id means nothing on the destination).
type heldCommits struct {
	all   bool // nothing is left to send
	parts []heldPart
}

type heldPart struct {
	topic     string
	id        [16]byte
	partition int32
	code      int16
}

// into adds the held partitions to a commit's answer, each under its topic's entry: clients
// match an answer's topics to their request's (franz-go refuses an answer with more topics).
func (h *heldCommits) into(resp kmsg.Response) {
	r, ok := resp.(*kmsg.OffsetCommitResponse)
	if !ok {
		return
	}
	for _, p := range h.parts {
		i := 0
		for ; i < len(r.Topics); i++ {
			if r.Topics[i].Topic == p.topic && r.Topics[i].TopicID == p.id {
				break
			}
		}
		if i == len(r.Topics) {
			r.Topics = append(r.Topics, kmsg.OffsetCommitResponseTopic{Topic: p.topic, TopicID: p.id})
		}
		r.Topics[i].Partitions = append(r.Topics[i].Partitions, kmsg.OffsetCommitResponseTopicPartition{Partition: p.partition, ErrorCode: p.code})
	}
}

// commitsToDest translates an OffsetCommit's offsets for the destination, waiting for the
// mirror to reach each one (the members fetch from the source, ahead of the mirror by its lag).
func (c *Carrier) commitsToDest(ctx context.Context, req kmsg.Request) (heldCommits, error) {
	var held heldCommits
	r, ok := req.(*kmsg.OffsetCommitRequest)
	if !ok {
		return held, nil
	}
	kept := r.Topics[:0:0]
	for _, t := range r.Topics {
		keptParts := t.Partitions[:0:0]
		for _, p := range t.Partitions {
			if t.Topic == "" {
				held.parts = append(held.parts, heldPart{t.Topic, t.TopicID, p.Partition, kerr.UnknownTopicID.Code})
				continue
			}
			pv, err := c.sourceView(ctx, t.Topic, p.Partition)
			if err != nil {
				return held, err
			}
			_, _, promoted := c.cfg.Catalog.Promotion(t.Topic)
			if pv != nil && p.Offset >= 0 {
				// A promoted topic's records past the mirrored end are the destination's own:
				// there is no mirror to wait for.
				var err error
				if !promoted {
					err = c.reached(ctx, t.Topic, p.Partition, &pv, p.Offset)
				}
				if err != nil {
					c.cfg.Log.Warn("a moved group's commit is answered REQUEST_TIMED_OUT (the client retries)",
						zap.String("topic", t.Topic), zap.Int32("partition", p.Partition), zap.Int64("offset", p.Offset), zap.Error(err))
					held.parts = append(held.parts, heldPart{t.Topic, t.TopicID, p.Partition, kerr.RequestTimedOut.Code})
					continue
				}
				p.Offset, p.LeaderEpoch = pv.CommitToDest(p.Offset), -1
			}
			keptParts = append(keptParts, p)
		}
		if len(keptParts) > 0 {
			t.Partitions = keptParts
			kept = append(kept, t)
		}
	}
	r.Topics = kept
	held.all = len(kept) == 0 && len(held.parts) > 0
	return held, nil
}

// reached waits until the mirror holds a partition up to offset; an error when ctx ends first
// or the view cannot be read.
func (c *Carrier) reached(ctx context.Context, topic string, partition int32, pv **view.Partition, offset int64) error {
	for (*pv).End() < offset {
		(*pv).Stale() // read the ledger again: the mirror may write through another instance
		select {
		case <-ctx.Done():
			return fmt.Errorf("the mirror is at %d: %w", (*pv).End(), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
		next, err := c.sourceView(ctx, topic, partition)
		if err != nil {
			return err
		}
		if next == nil {
			return errors.New("no longer a mirror topic")
		}
		*pv = next
	}
	return nil
}

// offsetsToSource turns the offsets of an OffsetFetch answer back into source offsets, with
// the source epoch of the record before each (what a consumer commits and later validates).
func (c *Carrier) offsetsToSource(ctx context.Context, resp kmsg.Response) error {
	r, ok := resp.(*kmsg.OffsetFetchResponse)
	if !ok {
		return nil
	}
	fix := func(topic string, partition int32, offset *int64, epoch *int32) error {
		if *offset < 0 {
			return nil
		}
		if topic == "" {
			// Version 10 names topics by id, and the destination's ids are not the
			// source's the client knows.
			return errors.New("an OffsetFetch answer names a topic by id only; carrying it would hand the client the destination's offsets")
		}
		pv, err := c.sourceView(ctx, topic, partition)
		if err != nil || pv == nil {
			return err
		}
		src := pv.ToSource(*offset)
		*offset, *epoch = src, -1
		if src > 0 {
			*epoch = pv.EpochAt(src - 1)
		}
		return nil
	}
	for i := range r.Topics {
		t := &r.Topics[i]
		for j := range t.Partitions {
			p := &t.Partitions[j]
			if err := fix(t.Topic, p.Partition, &p.Offset, &p.LeaderEpoch); err != nil {
				return err
			}
		}
	}
	for i := range r.Groups {
		for j := range r.Groups[i].Topics {
			t := &r.Groups[i].Topics[j]
			for k := range t.Partitions {
				p := &t.Partitions[k]
				if err := fix(t.Topic, p.Partition, &p.Offset, &p.LeaderEpoch); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// topicIDs carries version 10+ commit traffic, which names topics by id: the client knows the
// source's ids, the destination its own. Requests go with the destination's ids (and the names
// filled in for the translation of offsets); answers come back with the source's.
type topicIDs struct {
	toDest, toSource map[[16]byte][16]byte
}

// sourceTopics asks the source for the names of topic ids, or the ids of names.
func (c *Carrier) sourceTopics(ctx context.Context, ids [][16]byte, names []string) (map[[16]byte]string, map[string][16]byte, error) {
	req := kmsg.NewPtrMetadataRequest()
	for _, id := range ids {
		t := kmsg.NewMetadataRequestTopic()
		t.TopicID = id
		req.Topics = append(req.Topics, t)
	}
	for _, n := range names {
		t := kmsg.NewMetadataRequestTopic()
		t.Topic = kmsg.StringPtr(n)
		req.Topics = append(req.Topics, t)
	}
	resp, err := req.RequestWith(ctx, c.cfg.Source)
	if err != nil {
		return nil, nil, fmt.Errorf("the source's topic ids: %w", err)
	}
	byID, byName := map[[16]byte]string{}, map[string][16]byte{}
	for _, t := range resp.Topics {
		if t.ErrorCode != 0 || t.Topic == nil {
			continue
		}
		byID[t.TopicID], byName[*t.Topic] = *t.Topic, t.TopicID
	}
	return byID, byName, nil
}

// destTopic is the destination's id of a topic name, or false.
func (c *Carrier) destTopic(ctx context.Context, name string) ([16]byte, bool, error) {
	t, ok := c.cfg.Catalog.ByName(name)
	if !ok {
		if err := c.cfg.Catalog.Refresh(ctx, []string{name}); err != nil {
			return [16]byte{}, false, err
		}
		t, ok = c.cfg.Catalog.ByName(name)
	}
	return t.ID, ok, nil
}

// idsToDest rewrites a v10+ request's topic ids for the destination, filling in the names.
// A topic the source does not know keeps its id, which the destination answers
// UNKNOWN_TOPIC_ID.
func (c *Carrier) idsToDest(ctx context.Context, req kmsg.Request) (*topicIDs, error) {
	var refs []*kmsg.OffsetCommitRequestTopic
	var frefs []*kmsg.OffsetFetchRequestGroupTopic
	var ids [][16]byte
	switch r := req.(type) {
	case *kmsg.OffsetCommitRequest:
		if r.Version < 10 {
			return nil, nil
		}
		for i := range r.Topics {
			refs = append(refs, &r.Topics[i])
			ids = append(ids, r.Topics[i].TopicID)
		}
	case *kmsg.OffsetFetchRequest:
		if r.Version < 10 {
			return nil, nil
		}
		for i := range r.Groups {
			for j := range r.Groups[i].Topics {
				frefs = append(frefs, &r.Groups[i].Topics[j])
				ids = append(ids, r.Groups[i].Topics[j].TopicID)
			}
		}
	default:
		return nil, nil
	}
	m := &topicIDs{toDest: map[[16]byte][16]byte{}, toSource: map[[16]byte][16]byte{}}
	if len(ids) == 0 {
		return m, nil
	}
	names, _, err := c.sourceTopics(ctx, ids, nil)
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		name, ok := names[id]
		if !ok {
			continue
		}
		did, ok, err := c.destTopic(ctx, name)
		if err != nil {
			return nil, err
		}
		if ok {
			m.toDest[id], m.toSource[did] = did, id
		}
	}
	for _, t := range refs {
		if name, ok := names[t.TopicID]; ok {
			t.Topic = name
		}
		if did, ok := m.toDest[t.TopicID]; ok {
			t.TopicID = did
		}
	}
	for _, t := range frefs {
		if did, ok := m.toDest[t.TopicID]; ok {
			t.TopicID = did
		}
	}
	return m, nil
}

// idsToSource gives an answer the source's topic ids back, and the names offsets are
// translated by (an OffsetFetch of every topic names topics by the destination's id only).
func (c *Carrier) idsToSource(ctx context.Context, m *topicIDs, resp kmsg.Response) error {
	if m == nil {
		return nil
	}
	switch r := resp.(type) {
	case *kmsg.OffsetCommitResponse:
		for i := range r.Topics {
			if sid, ok := m.toSource[r.Topics[i].TopicID]; ok {
				r.Topics[i].TopicID = sid
			}
		}
	case *kmsg.OffsetFetchResponse:
		var unknown []string
		for i := range r.Groups {
			for j := range r.Groups[i].Topics {
				t := &r.Groups[i].Topics[j]
				if dt, ok := c.cfg.Catalog.ByID(t.TopicID); ok {
					t.Topic = dt.Name
				}
				if _, ok := m.toSource[t.TopicID]; !ok && t.Topic != "" {
					unknown = append(unknown, t.Topic)
				}
			}
		}
		var byName map[string][16]byte
		if len(unknown) > 0 {
			var err error
			if _, byName, err = c.sourceTopics(ctx, nil, unknown); err != nil {
				return err
			}
		}
		for i := range r.Groups {
			for j := range r.Groups[i].Topics {
				t := &r.Groups[i].Topics[j]
				if sid, ok := m.toSource[t.TopicID]; ok {
					t.TopicID = sid
				} else if sid, ok := byName[t.Topic]; ok {
					t.TopicID = sid
				}
			}
		}
	}
	return nil
}
