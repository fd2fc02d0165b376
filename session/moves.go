package session

// A consumer group's live move, as source connections carry it out (catalog.Move; the driver
// that advances the states is package moves). The group's members keep their processes and
// their connections: the group's coordinator stays, for them, the source broker they found,
// and offsetgate carries the group's requests to the destination once it has moved.
//
//   - draining: a Heartbeat of the group is answered REBALANCE_IN_PROGRESS and the assignments
//     its leader sends in SyncGroup are emptied before they reach the source, so every member,
//     eager or cooperative, gives up its partitions (committing on revocation, to the source)
//     and fetches nothing; joins and commits go on to the source;
//   - final: the source's commits are being copied. Heartbeat and SyncGroup are answered
//     REBALANCE_IN_PROGRESS, JoinGroup and the commit requests COORDINATOR_LOAD_IN_PROGRESS:
//     errors every client retries in place, after a backoff;
//   - moved: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit and OffsetFetch of the
//     group go to the group's coordinator on the destination, over a connection this client
//     connection owns (Carrier), with commit offsets translated as the destination's listener
//     translates them. The destination does not know the members' ids, so their next
//     Heartbeat or JoinGroup is answered UNKNOWN_MEMBER_ID and they join afresh there, where
//     OffsetFetch answers the copied offsets in source terms: they go on at the same offsets.
//     TxnOffsetCommit is refused (GROUP_AUTHORIZATION_FAILED): a transaction on the source
//     cannot commit offsets to a group on the destination.
// A LeaveGroup before the move goes to the source (a member that leaves is gone from it).
//
// A moved group goes back the same way before promotion: returning drains it on the
// destination (Heartbeat answered REBALANCE_IN_PROGRESS, the leader's carried SyncGroup
// emptied, the rest carried), returning-final holds it while the destination's commits are
// copied to the source, and once returned its requests are the source's again, where the
// members' destination ids are unknown and they join afresh.

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"offsetgate/catalog"
	"offsetgate/moves"
	"offsetgate/view"
)

// Moves is the groups' live moves as a source connection sees them.
type Moves interface {
	// HasMoves reports, without a lock, whether any group has a move.
	HasMoves() bool
	Move(group string) (catalog.Move, bool)
	// Carrier makes what carries one client connection's requests of moved groups to the
	// destination. It does no I/O; the session closes it when the connection ends.
	Carrier() Carrier
	// HasSwitching reports, without a lock, whether any mirror topic is sealed for its
	// promotion or promoted (00_produce_source.go).
	HasSwitching() bool
	// Promotion says whether a topic (by name) is sealed or promoted.
	Promotion(name string) (t catalog.Topic, sealed, promoted bool)
	// Promotions counts the topics ever promoted: a fetch session a source connection keeps
	// with the source started before the last one may hold a promoted topic's partitions.
	Promotions() int64
}

// Carrier carries a moved group's requests to the group's coordinator on the destination, on
// a connection of its own: one client connection's requests keep their order, and one
// member's JoinGroup, which the coordinator holds until the group has joined, holds up no
// other member's requests.
type Carrier interface {
	// Carry sends req (at its version, the client's) and returns the answer at the same
	// version; commit offsets go in destination terms and come back in the source's. It
	// blocks.
	// clientID is the client's, for the destination's member ids and logs.
	Carry(ctx context.Context, clientID, group string, req kmsg.Request) (kmsg.Response, error)
	// CarryProduce writes partitions of promoted topics to the destination and answers each in
	// source offsets (moves.Carrier.CarryProduce). It blocks.
	CarryProduce(ctx context.Context, clientID string, version, acks int16, timeoutMs int32, parts []moves.ProducePart) []moves.ProduceResult
	// SourceNames asks the source for the names of topic ids. It blocks.
	SourceNames(ctx context.Context, ids [][16]byte) (map[[16]byte]string, error)
	// CachedSourceName is a source topic id's name when it is known already (no I/O).
	CachedSourceName(id [16]byte) (string, bool)
	// SourceView is the loaded source view of a partition of a mirror or promoted topic (nil
	// for any other topic). It blocks.
	SourceView(ctx context.Context, topic string, partition int32) (*view.Partition, error)
	// DestLeader is the address of the destination's leader of a partition of the topic whose
	// destination id is id. It blocks.
	DestLeader(ctx context.Context, topic string, id [16]byte, partition int32) (string, error)
	// ForgetLeader drops a leader found earlier (an answer said it leads no more).
	ForgetLeader(topic string, partition int32)
	// SendTo sends a request to a destination broker, with the client's id, on the carrier's
	// connection to that broker. It blocks.
	SendTo(ctx context.Context, clientID, addr string, req kmsg.Request) (kmsg.Response, error)
	// Close ends the carrier's connections; a Carry in progress fails.
	Close()
}

// moveState is a group's move state as requests on a source connection are treated: "" for a
// group that is the source's alone (no move, a failed one, or one returned).
func (s *Session) moveState(group string) catalog.MoveState {
	m, ok := s.cfg.Moves.Move(group)
	if !ok || !m.Moving() {
		return ""
	}
	return m.State
}

// The phases of a move, as requests see them.
func draining(st catalog.MoveState) bool {
	return st == catalog.MoveDraining || st == catalog.MoveReturning
}

// held: the commits are being copied; the group waits.
func held(st catalog.MoveState) bool {
	return st == catalog.MoveFinal || st == catalog.MoveReturnFinal
}

// onDest: the group's coordinator is the destination's; its requests are carried there.
func onDest(st catalog.MoveState) bool {
	return st == catalog.MoveMoved || st == catalog.MoveReturning
}

// moveGate applies the groups' moves to a request on a source connection. It reports whether
// it decided the request (answered it, or set what is forwarded and how the answer changes).
func (s *Session) moveGate(r *request) (bool, error) {
	switch kmsg.Key(r.h.key) {
	case kmsg.Heartbeat, kmsg.JoinGroup, kmsg.SyncGroup, kmsg.LeaveGroup, kmsg.OffsetCommit, kmsg.TxnOffsetCommit, kmsg.OffsetFetch:
	default:
		return false, nil
	}
	req := kmsg.RequestForKey(r.h.key)
	req.SetVersion(r.h.version)
	// Decoded from a copy: a carried request is encoded again off the session's goroutine,
	// after the frame's buffer is reused.
	if err := req.ReadFrom(append([]byte(nil), r.body...)); err != nil {
		return false, fmt.Errorf("%w: api key %d v%d on a source connection: %v", ErrUndecodable, r.h.key, r.h.version, err)
	}
	loading := kerr.CoordinatorLoadInProgress.Code
	rebalancing := kerr.RebalanceInProgress.Code
	switch req := req.(type) {
	case *kmsg.HeartbeatRequest:
		switch st := s.moveState(req.Group); {
		case draining(st) || held(st):
			r.answerWith(&kmsg.HeartbeatResponse{ErrorCode: rebalancing})
		case onDest(st):
			s.carry(r, req.Group, req, 0)
		default:
			return false, nil
		}
	case *kmsg.JoinGroupRequest:
		switch st := s.moveState(req.Group); {
		case held(st):
			r.answerWith(&kmsg.JoinGroupResponse{ErrorCode: loading, Generation: -1, MemberID: req.MemberID})
		case onDest(st):
			// The coordinator holds a JoinGroup until the group has joined, up to the
			// rebalance timeout (the session timeout before v1).
			wait := req.RebalanceTimeoutMillis
			if r.h.version < 1 {
				wait = req.SessionTimeoutMillis
			}
			s.carry(r, req.Group, req, time.Duration(wait)*time.Millisecond+30*time.Second)
		default:
			return false, nil
		}
	case *kmsg.SyncGroupRequest:
		st := s.moveState(req.Group)
		if held(st) {
			r.answerWith(&kmsg.SyncGroupResponse{ErrorCode: rebalancing})
			return true, nil
		}
		emptied := false
		if draining(st) {
			for i := range req.GroupAssignment {
				a := &req.GroupAssignment[i]
				a.MemberAssignment = emptyAssignment(a.MemberAssignment)
				emptied = true
			}
		}
		switch {
		case onDest(st):
			// A follower's SyncGroup waits for the leader's, within the rebalance.
			s.carry(r, req.Group, req, maxGroupWait)
		case emptied:
			r.replace = rebuild(r.frame, r.h, req.AppendTo(nil), s.cfg.Policy().Native())
		default:
			return false, nil
		}
	case *kmsg.LeaveGroupRequest:
		// A member that leaves while the destination's commits are copied back is the
		// destination's member still.
		if st := s.moveState(req.Group); onDest(st) || st == catalog.MoveReturnFinal {
			s.carry(r, req.Group, req, 0)
			return true, nil
		}
		return false, nil
	case *kmsg.OffsetCommitRequest:
		switch st := s.moveState(req.Group); {
		case held(st):
			r.req = req
			offsetCommitRefuse(s, r, loading, "")
		case onDest(st):
			s.carry(r, req.Group, req, 0)
		default:
			return false, nil
		}
	case *kmsg.TxnOffsetCommitRequest:
		st := s.moveState(req.Group)
		if st == "" || st == catalog.MoveDraining {
			return false, nil
		}
		code := loading
		if onDest(st) {
			code = kerr.GroupAuthorizationFailed.Code
			s.cfg.Log.Warn("a transactional commit to a group moved to the destination is refused: the transaction is the source's",
				zap.String("group", req.Group), zap.String("transactional_id", req.TransactionalID))
		}
		r.req = req
		txnOffsetCommitRefuse(s, r, code, "")
	case *kmsg.OffsetFetchRequest:
		return s.moveOffsetFetch(r, req)
	}
	return true, nil
}

// maxGroupWait bounds a carried request the coordinator may hold (a SyncGroup waiting for the
// leader's): Kafka's own bound on a rebalance timeout is the group's max session timeout,
// 30 minutes at most by default; a connection that ends cancels the wait sooner.
const maxGroupWait = 30 * time.Minute

// carry sends a moved group's request to the destination off the session's goroutine and
// answers the client with what came back. wait, when above zero, replaces WaitTimeout as the
// bound on the round trip (a request the coordinator holds).
func (s *Session) carry(r *request, group string, req kmsg.Request, wait time.Duration) {
	c, client := s.movesCarrier(), string(r.h.clientID)
	r.asyncWait = wait
	r.async = func(ctx context.Context) func(*Session, *request) error {
		resp, err := c.Carry(ctx, client, group, req)
		return func(s *Session, r *request) error {
			if err != nil {
				// Nothing was decided for the client: a reconnect makes it retry.
				return fmt.Errorf("group %s, moved to the destination: %s: %w", group, kmsg.NameForKey(req.Key()), err)
			}
			r.answerWith(resp)
			return nil
		}
	}
}

// movesCarrier is the session's carrier, made on first use and closed with the session.
func (s *Session) movesCarrier() Carrier {
	if s.carrier == nil {
		s.carrier = s.cfg.Moves.Carrier()
	}
	return s.carrier
}

// emptyAssignment is a consumer assignment of no partitions, in the version of the one it
// replaces (version 0 when that one cannot be read).
func emptyAssignment(orig []byte) []byte {
	var a kmsg.ConsumerMemberAssignment
	v := int16(0)
	if err := a.ReadFrom(orig); err == nil {
		v = a.Version
	}
	empty := kmsg.ConsumerMemberAssignment{Version: v}
	return empty.AppendTo(nil)
}

// moveOffsetFetch: a moved group's commits are the destination's (carried), a group in its
// final step waits (COORDINATOR_LOAD_IN_PROGRESS). A request of several groups (v8+) that
// mixes the source's groups with moving ones is answered for the moving ones only after the
// source has answered the rest.
func (s *Session) moveOffsetFetch(r *request, req *kmsg.OffsetFetchRequest) (bool, error) {
	loading := kerr.CoordinatorLoadInProgress.Code
	if r.h.version < 8 {
		switch st := s.moveState(req.Group); {
		case held(st):
			r.answerWith(&kmsg.OffsetFetchResponse{ErrorCode: loading})
		case onDest(st):
			s.carry(r, req.Group, req, 0)
		default:
			return false, nil
		}
		return true, nil
	}
	var kept, moved []kmsg.OffsetFetchRequestGroup
	var waiting []kmsg.OffsetFetchResponseGroup
	for _, g := range req.Groups {
		switch st := s.moveState(g.Group); {
		case held(st):
			waiting = append(waiting, kmsg.OffsetFetchResponseGroup{Group: g.Group, ErrorCode: loading})
		case onDest(st):
			moved = append(moved, g)
		default:
			kept = append(kept, g)
		}
	}
	if len(waiting) == 0 && len(moved) == 0 {
		return false, nil
	}
	if len(moved) == 1 && len(kept) == 0 && len(waiting) == 0 {
		s.carry(r, moved[0].Group, req, 0)
		return true, nil
	}
	// Each moved group is carried on its own (their coordinators may differ); the source's
	// groups are forwarded once the carried answers are in.
	var c Carrier
	if len(moved) > 0 {
		c = s.movesCarrier()
	}
	client := string(r.h.clientID)
	version := r.h.version
	r.async = func(ctx context.Context) func(*Session, *request) error {
		answers := waiting
		for _, g := range moved {
			one := kmsg.NewPtrOffsetFetchRequest()
			one.SetVersion(version)
			one.RequireStable = req.RequireStable
			one.Groups = []kmsg.OffsetFetchRequestGroup{g}
			resp, err := c.Carry(ctx, client, g.Group, one)
			if err != nil {
				answers = append(answers, kmsg.OffsetFetchResponseGroup{Group: g.Group, ErrorCode: loading})
				continue
			}
			answers = append(answers, resp.(*kmsg.OffsetFetchResponse).Groups...)
		}
		return func(s *Session, r *request) error {
			if len(kept) == 0 {
				r.answerWith(&kmsg.OffsetFetchResponse{Groups: answers})
				return nil
			}
			req.Groups = kept
			forwardSpliced(s, r, req.AppendTo(nil), func(resp *kmsg.OffsetFetchResponse) {
				resp.Groups = append(resp.Groups, answers...)
			})
			return nil
		}
	}
	return true, nil
}
