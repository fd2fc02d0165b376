package session

// Answers passed as they arrive. A transport reading a large answer from the destination may
// write it to the client piece by piece while it arrives, instead of holding it whole until
// HandleUpstream gets it (a consumer of 16 partitions is answered in frames of megabytes, and
// a buffer that size per connection was most of offsetgate's memory above a streaming proxy's).
// That is possible only for an answer that goes to the client exactly as the destination sent
// it, and only when it is the next thing the client is owed: StartAnswer says when.
//
// An answer needs nothing of offsetgate when its slot has no rewrite at all, or when it is a
// Fetch answer that cannot hold anything offsetgate changes (slot.asIs):
//   - no partition of a topic with a source view: the request named none, and it does not
//     continue a fetch session (KIP-227) that may hold one, since an incremental fetch is
//     answered for partitions earlier requests of its session named. A session is known to
//     hold none when this connection saw it opened by a fetch that named none and no request
//     of it has named one since (fetchClean), with topics named by id (v13 on); a session
//     opened elsewhere is not known, and its answers are read whole;
//   - no partition refused by offsetgate (those are spliced into the answer);
//   - no broker endpoints: a Fetch answer of v16 and later may end with the addresses of
//     partitions' new leaders (KIP-951), which must become offsetgate's. So a consumer's plain
//     Fetch of v16 to v18 is sent to the destination as v15 when the transport passes answers
//     (AnswerConn): the request's body is the same in those versions (v17 and v18 add only tagged
//     fields a replica sets, ReplicaDirectoryId and HighWatermark; a broker reading v15 skips
//     them), and a v15 answer is byte for byte a valid answer of v16 to v18 (v16 added only the
//     NodeEndpoints tagged field; v17 and v18 changed nothing in the answer). The consumer loses
//     the new leader's address in a NOT_LEADER_OR_FOLLOWER answer and refreshes its metadata to
//     find it instead, as clients did before Kafka 3.7; a leader moves seldom, and a consumer
//     of megabytes per fetch is otherwise held whole in memory for every answer.
//
// While an answer passes, nothing else may reach the client: the answer is at the head of the
// FIFO, so nothing behind it is flushed before FinishAnswer, and HandleUpstream refuses to run.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// AnswerConn is implemented by a transport that passes large answers to the client as they
// arrive (StartAnswer, FinishAnswer). The session then sends consumers' plain Fetch requests
// of v16 to v18 as v15, whose answers it has nothing to change in.
type AnswerConn interface {
	PassesAnswers() bool
}

// errAnswerPassing is returned by HandleUpstream while an answer is passing: the transport must
// finish it first (a transport's bug; the connection is closed).
var errAnswerPassing = errors.New("an answer was handed over whole while another was still passing to the client")

// fetchAsIsVersion is the Fetch version a plain request of v16 to v18 is sent to the
// destination as: the last whose answer carries no broker endpoints.
const fetchAsIsVersion = 15

// maxCleanSessions bounds the fetch sessions a connection remembers: a consumer keeps one per
// broker connection, and opens a new one after an error.
const maxCleanSessions = 8

// StartAnswer reports whether the destination's answer that begins with prefix (its size and
// correlation id, and whatever else of it arrived; at least 8 bytes) may be written to the
// client as it arrives. When it says yes, the transport writes the whole frame to the client,
// nothing else, and then calls FinishAnswer; the session is handed nothing of it.
func (s *Session) StartAnswer(prefix []byte) bool {
	if s.answering || s.closed || s.closing != nil || len(prefix) < 8 || s.slots.len() == 0 {
		return false
	}
	seq, ok := s.upstream.peekSeq()
	if !ok || seq != s.slots.headSeq() {
		return false // an earlier answer is still owed to the client: order first
	}
	sl := s.slots.at(seq)
	size := int(binary.BigEndian.Uint32(prefix))
	if int32(binary.BigEndian.Uint32(prefix[4:])) != sl.corr || size < 4 || !s.unchanged(sl) {
		return false // a wrong correlation id is reported by the whole-frame path
	}
	if sl.learnSession {
		if !s.learnFetchSession(sl, prefix) {
			return false // its session id has not arrived: read whole, and learned there
		}
		sl.learnSession = false
	}
	s.answering, s.answerSize = true, 4+size
	return true
}

// FinishAnswer is called by the transport once the last byte of the answer StartAnswer let
// pass was written to the client. The answers behind it that are ready go out now.
func (s *Session) FinishAnswer() {
	if !s.answering {
		return
	}
	s.answering = false
	seq, ok := s.upstream.popSeq()
	if !ok || s.slots.len() == 0 || seq != s.slots.headSeq() {
		return // the session was closed meanwhile
	}
	sl := s.slots.at(seq)
	s.cfg.Observer.Response(sl.key, s.answerSize, time.Since(sl.start))
	s.slots.pop()
	s.count(-1)
	s.flush()
	if s.paused && s.slots.len() < s.cfg.MaxInFlight {
		s.paused = false
		s.conn.Resume()
	}
}

// unchanged reports whether a slot's answer goes to the client as the destination sends it.
// A Fetch planned as is while no mirror topic existed is not, once one does: its fetch session
// was not followed meanwhile, so its answer is read as before.
func (s *Session) unchanged(sl *slot) bool {
	return sl.rewrite == nil || (sl.asIs && !(sl.mirrorsOff && s.mirrorsOn()))
}

// passesAnswers reports whether the transport passes large answers as they arrive.
func (s *Session) passesAnswers() bool {
	a, ok := s.conn.(AnswerConn)
	return ok && a.PassesAnswers()
}

// planFetchAnswer follows the connection's fetch sessions through a Fetch request that goes to
// the destination, and says whether its answer holds nothing to change but, from v16, broker
// endpoints (r.plainFetch; asIsFetch decides the rest). refused: partitions are refused and
// spliced into the answer; viewed: the request names a partition of a topic with a source view.
func (s *Session) planFetchAnswer(r *request, req *kmsg.FetchRequest, refused, viewed bool) {
	full := r.h.version < 7 || req.SessionEpoch <= 0
	if r.h.version >= 7 {
		switch {
		case req.SessionEpoch <= 0:
			// A full fetch: -1 ends the session named and uses none, 0 ends it and opens a
			// new one (its id comes in the answer), holding just what this request names.
			s.forgetFetchSession(req.SessionID)
			r.learnSession = req.SessionEpoch == 0 && !viewed
		case viewed:
			s.forgetFetchSession(req.SessionID)
		}
	}
	// Sessions of requests by topic name (before v13) are not followed: a name may come back as
	// another topic, a mirror topic, while the session holds it.
	followed := r.h.version >= 13 && s.cleanFetchSession(req.SessionID)
	r.plainFetch = !refused && !viewed && (full || !s.mirrorsOn() || followed)
}

// asIsFetch marks a Fetch slot whose answer goes to the client unchanged, and sends a request of
// v16 to v18 as v15 (see the file's comment) when the transport passes answers: in place, in
// the frame about to be forwarded.
func (s *Session) asIsFetch(sl *slot, r *request) {
	if kmsg.Key(sl.key) != kmsg.Fetch || s.cfg.NodeShift > 0 || r.replace != nil {
		return
	}
	sl.learnSession = r.learnSession
	if !r.plainFetch && !(s.cfg.Catalog == nil && r.onResp == nil) {
		return // without a catalog there is no mirror topic, and Fetch is never judged
	}
	switch v := r.h.version; {
	case v < 16:
	case v <= 18 && s.passesAnswers() && len(r.frame) >= 8:
		binary.BigEndian.PutUint16(r.frame[6:], fetchAsIsVersion)
	default:
		return
	}
	sl.asIs, sl.mirrorsOff = true, !s.mirrorsOn()
}

// learnFetchSession reads the fetch session id from the start of the answer to a fetch that
// opened a session naming no source-view topic, and remembers the session as clean. It reports
// false when frame is too short to hold the id.
func (s *Session) learnFetchSession(sl *slot, frame []byte) bool {
	if len(frame) < 4 {
		return false
	}
	hl, err := respHeaderLen(frame[4:], sl.key, sl.version)
	if err != nil {
		return false
	}
	body := frame[4+hl:]
	if len(body) < 10 {
		return false
	}
	// ThrottleMillis, ErrorCode, SessionID.
	if binary.BigEndian.Uint16(body[4:]) != 0 {
		return true
	}
	if id := int32(binary.BigEndian.Uint32(body[6:])); id != 0 {
		s.forgetFetchSession(id)
		if len(s.fetchClean) == maxCleanSessions {
			s.fetchClean = append(s.fetchClean[:0], s.fetchClean[1:]...)
		}
		s.fetchClean = append(s.fetchClean, id)
	}
	return true
}

func (s *Session) cleanFetchSession(id int32) bool {
	for _, c := range s.fetchClean {
		if c == id {
			return true
		}
	}
	return false
}

func (s *Session) forgetFetchSession(id int32) {
	for i, c := range s.fetchClean {
		if c == id {
			s.fetchClean = append(s.fetchClean[:i], s.fetchClean[i+1:]...)
			return
		}
	}
}

// answerPassing is HandleUpstream's guard.
func (s *Session) answerPassing() error {
	if s.answering {
		return fmt.Errorf("%w: %w", ErrFrame, errAnswerPassing)
	}
	return nil
}
