package session

// A consumer group's live move, as source connections carry it out (catalog.Move; the driver
// that advances the states is package moves). The group's members keep their processes:
//
//   - draining: a Heartbeat of the group is answered REBALANCE_IN_PROGRESS and the assignments
//     its leader sends in SyncGroup are emptied before they reach the source, so every member,
//     eager or cooperative, gives up its partitions (committing on revocation, to the source)
//     and fetches nothing; joins and commits go on to the source;
//   - final and moved: the group's requests to the source's coordinator (JoinGroup, SyncGroup,
//     Heartbeat, OffsetCommit, TxnOffsetCommit, OffsetFetch) are answered NOT_COORDINATOR, so
//     members look the coordinator up again: while final, FindCoordinator answers
//     COORDINATOR_NOT_AVAILABLE (the source's commits are being copied); once moved it names
//     the destination's coordinator, at this listener's address for it. The members then join
//     the group on the destination, where OffsetFetch answers the copied offsets in source
//     terms, and go on fetching at the same offsets.
// A LeaveGroup always reaches the source (a member that leaves is gone from it).

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/catalog"
)

// Moves is the groups' live moves as a source connection sees them.
type Moves interface {
	// HasMoves reports, without a lock, whether any group has a move.
	HasMoves() bool
	Move(group string) (catalog.Move, bool)
	// DestCoordinator finds a group's coordinator on the destination; it blocks.
	DestCoordinator(ctx context.Context, group string) (node int32, host string, port int32, err error)
}

// moveState is a group's move state as requests on a source connection are treated: "" for a
// group that is the source's alone (no move, or a failed one).
func (s *Session) moveState(group string) catalog.MoveState {
	m, ok := s.cfg.Moves.Move(group)
	if !ok || !m.Moving() {
		return ""
	}
	return m.State
}

// gone reports whether a group's coordinator is no longer the source's.
func gone(st catalog.MoveState) bool { return st == catalog.MoveFinal || st == catalog.MoveMoved }

// moveGate applies the groups' moves to a request on a source connection. It reports whether
// it decided the request (answered it, or set what is forwarded and how the answer changes).
func (s *Session) moveGate(r *request) (bool, error) {
	switch kmsg.Key(r.h.key) {
	case kmsg.Heartbeat, kmsg.JoinGroup, kmsg.SyncGroup, kmsg.OffsetCommit, kmsg.TxnOffsetCommit, kmsg.OffsetFetch, kmsg.FindCoordinator:
	default:
		return false, nil
	}
	req := kmsg.RequestForKey(r.h.key)
	req.SetVersion(r.h.version)
	if err := req.ReadFrom(r.body); err != nil {
		return false, fmt.Errorf("%w: api key %d v%d on a source connection: %v", ErrUndecodable, r.h.key, r.h.version, err)
	}
	notCoordinator := kerr.NotCoordinator.Code
	switch req := req.(type) {
	case *kmsg.HeartbeatRequest:
		switch st := s.moveState(req.Group); {
		case st == catalog.MoveDraining:
			r.answerWith(&kmsg.HeartbeatResponse{ErrorCode: kerr.RebalanceInProgress.Code})
		case gone(st):
			r.answerWith(&kmsg.HeartbeatResponse{ErrorCode: notCoordinator})
		default:
			return false, nil
		}
	case *kmsg.JoinGroupRequest:
		if !gone(s.moveState(req.Group)) {
			return false, nil
		}
		r.answerWith(&kmsg.JoinGroupResponse{ErrorCode: notCoordinator, Generation: -1, MemberID: req.MemberID})
	case *kmsg.SyncGroupRequest:
		switch st := s.moveState(req.Group); {
		case st == catalog.MoveDraining && len(req.GroupAssignment) > 0:
			for i := range req.GroupAssignment {
				a := &req.GroupAssignment[i]
				a.MemberAssignment = emptyAssignment(a.MemberAssignment)
			}
			r.replace = rebuild(r.frame, r.h, req.AppendTo(nil), s.cfg.Policy().Native())
		case gone(st):
			r.answerWith(&kmsg.SyncGroupResponse{ErrorCode: notCoordinator})
		default:
			return false, nil
		}
	case *kmsg.OffsetCommitRequest:
		if !gone(s.moveState(req.Group)) {
			return false, nil
		}
		resp := &kmsg.OffsetCommitResponse{}
		for _, t := range req.Topics {
			rt := kmsg.OffsetCommitResponseTopic{Topic: t.Topic, TopicID: t.TopicID}
			for _, p := range t.Partitions {
				rt.Partitions = append(rt.Partitions, kmsg.OffsetCommitResponseTopicPartition{Partition: p.Partition, ErrorCode: notCoordinator})
			}
			resp.Topics = append(resp.Topics, rt)
		}
		r.answerWith(resp)
	case *kmsg.TxnOffsetCommitRequest:
		if !gone(s.moveState(req.Group)) {
			return false, nil
		}
		resp := &kmsg.TxnOffsetCommitResponse{}
		for _, t := range req.Topics {
			rt := kmsg.TxnOffsetCommitResponseTopic{Topic: t.Topic}
			for _, p := range t.Partitions {
				rt.Partitions = append(rt.Partitions, kmsg.TxnOffsetCommitResponseTopicPartition{Partition: p.Partition, ErrorCode: notCoordinator})
			}
			resp.Topics = append(resp.Topics, rt)
		}
		r.answerWith(resp)
	case *kmsg.OffsetFetchRequest:
		return s.moveOffsetFetch(r, req)
	case *kmsg.FindCoordinatorRequest:
		return s.moveFindCoordinator(r, req)
	}
	return true, nil
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

// moveOffsetFetch answers NOT_COORDINATOR for groups that left the source's coordinator; in
// a request of several groups (v8+) the others are still asked of the source.
func (s *Session) moveOffsetFetch(r *request, req *kmsg.OffsetFetchRequest) (bool, error) {
	notCoordinator := kerr.NotCoordinator.Code
	if r.h.version < 8 {
		if !gone(s.moveState(req.Group)) {
			return false, nil
		}
		r.answerWith(&kmsg.OffsetFetchResponse{ErrorCode: notCoordinator})
		return true, nil
	}
	var kept []kmsg.OffsetFetchRequestGroup
	var refused []kmsg.OffsetFetchResponseGroup
	for _, g := range req.Groups {
		if gone(s.moveState(g.Group)) {
			refused = append(refused, kmsg.OffsetFetchResponseGroup{Group: g.Group, ErrorCode: notCoordinator})
		} else {
			kept = append(kept, g)
		}
	}
	if len(refused) == 0 {
		return false, nil
	}
	if len(kept) == 0 {
		r.answerWith(&kmsg.OffsetFetchResponse{Groups: refused})
		return true, nil
	}
	req.Groups = kept
	forwardSpliced(s, r, req.AppendTo(nil), func(resp *kmsg.OffsetFetchResponse) {
		resp.Groups = append(resp.Groups, refused...)
	})
	return true, nil
}

// moveFindCoordinator answers the lookups of groups that left the source's coordinator:
// COORDINATOR_NOT_AVAILABLE while final, the destination's coordinator once moved (looked up
// off the session's goroutine). The other keys of a batched lookup (v4+) are the source's.
func (s *Session) moveFindCoordinator(r *request, req *kmsg.FindCoordinatorRequest) (bool, error) {
	if req.CoordinatorType != 0 {
		return false, nil
	}
	keys := req.CoordinatorKeys
	if r.h.version < 4 {
		keys = []string{req.CoordinatorKey}
	}
	var kept, ours []string
	for _, k := range keys {
		if gone(s.moveState(k)) {
			ours = append(ours, k)
		} else {
			kept = append(kept, k)
		}
	}
	if len(ours) == 0 {
		return false, nil
	}
	version := r.h.version
	r.async = func(ctx context.Context) func(*Session, *request) error {
		answers := make([]kmsg.FindCoordinatorResponseCoordinator, len(ours))
		for i, k := range ours {
			a := &answers[i]
			a.Key, a.NodeID, a.Port = k, -1, -1
			if s.moveState(k) != catalog.MoveMoved {
				a.ErrorCode = kerr.CoordinatorNotAvailable.Code
				msg := "offsetgate: group " + k + " is moving to the destination"
				a.ErrorMessage = &msg
				continue
			}
			node, host, port, err := s.cfg.Moves.DestCoordinator(ctx, k)
			if err != nil {
				a.ErrorCode = kerr.CoordinatorNotAvailable.Code
				msg := fmt.Sprintf("offsetgate: the destination's coordinator of group %s: %v", k, err)
				a.ErrorMessage = &msg
				continue
			}
			a.NodeID, a.Host, a.Port = node, host, port
			a.Host, a.Port = s.cfg.DestAddresses.Broker(node, host, port)
		}
		return func(s *Session, r *request) error {
			if len(kept) == 0 {
				resp := &kmsg.FindCoordinatorResponse{}
				if version < 4 {
					a := answers[0]
					resp.ErrorCode, resp.ErrorMessage, resp.NodeID, resp.Host, resp.Port = a.ErrorCode, a.ErrorMessage, a.NodeID, a.Host, a.Port
				} else {
					resp.Coordinators = answers
				}
				r.answerWith(resp)
				return nil
			}
			req.CoordinatorKeys = kept
			r.replace = rebuild(r.frame, r.h, req.AppendTo(nil), s.cfg.Policy().Native())
			r.onResp = func(s *Session, v int16, body []byte) ([]byte, bool, error) {
				resp := kmsg.FindCoordinatorResponse{Version: v}
				if err := resp.ReadFrom(body); err != nil {
					return nil, false, err
				}
				s.raiseAnswer(&resp) // the source's coordinators, as every source answer
				resp.Coordinators = append(resp.Coordinators, answers...)
				return resp.AppendTo(nil), true, nil
			}
			return nil
		}
	}
	return true, nil
}
