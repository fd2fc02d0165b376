package session

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/catalog"
	"offsetgate/moves"
	"offsetgate/view"
)

// movesOf is a Moves with fixed states and a carrier that records what it carries.
type movesOf struct {
	states  map[string]catalog.MoveState
	carrier *recordingCarrier
	// Topics sealed for their promotion, and promoted ones; gen adds to the promotions
	// counted.
	sealed, promoted map[string]bool
	gen              int64
}

func (m *movesOf) HasSwitching() bool { return len(m.sealed)+len(m.promoted) > 0 }
func (m *movesOf) Promotions() int64  { return int64(len(m.promoted)) + m.gen }
func (m *movesOf) Promotion(name string) (catalog.Topic, bool, bool) {
	return catalog.Topic{Name: name}, m.sealed[name], m.promoted[name]
}

func (m *movesOf) HasMoves() bool { return len(m.states) > 0 }
func (m *movesOf) Move(g string) (catalog.Move, bool) {
	st, ok := m.states[g]
	return catalog.Move{Group: g, State: st}, ok
}
func (m *movesOf) Carrier() Carrier { return m.carrier }

type carried struct {
	client, group string
	req           kmsg.Request
}

type recordingCarrier struct {
	mu     sync.Mutex
	got    []carried
	answer func(kmsg.Request) kmsg.Response
	closed bool
	// writes are the carried partitions of promoted topics; each is answered at base
	// offset 1000 + its index.
	writes  []moves.ProducePart
	clients []string // the client id of each CarryProduce
	names   map[[16]byte]string
	cached  map[[16]byte]string
	// Promoted topics' partitions: their views, the requests sent to the destination and its
	// answers.
	views map[partKey]*view.Partition
	sent  []kmsg.Request
	dest  func(kmsg.Request) kmsg.Response
}

func (c *recordingCarrier) CarryProduce(_ context.Context, client string, _, _ int16, _ int32, parts []moves.ProducePart) []moves.ProduceResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clients = append(c.clients, client)
	var out []moves.ProduceResult
	for _, p := range parts {
		out = append(out, moves.ProduceResult{BaseOffset: int64(1000 + len(c.writes)), LogAppendTime: -1, LogStartOffset: 7})
		c.writes = append(c.writes, p)
	}
	return out
}

func (c *recordingCarrier) SourceNames(_ context.Context, ids [][16]byte) (map[[16]byte]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[[16]byte]string{}
	for _, id := range ids {
		n, ok := c.names[id]
		if !ok {
			return nil, fmt.Errorf("unknown topic id %x", id)
		}
		out[id] = n
		if c.cached == nil {
			c.cached = map[[16]byte]string{}
		}
		c.cached[id] = n
	}
	return out, nil
}

func (c *recordingCarrier) CachedSourceName(id [16]byte) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.cached[id]
	return n, ok
}

// The destination side of promoted topics' reads: a view per partition, every leader at one
// address, answers from dest.
func (c *recordingCarrier) SourceView(_ context.Context, topic string, partition int32) (*view.Partition, error) {
	pv, ok := c.views[partKey{topic, partition}]
	if !ok {
		return nil, nil
	}
	return pv, nil
}
func (c *recordingCarrier) DestLeader(context.Context, string, [16]byte, int32) (string, error) {
	return "dest:9092", nil
}
func (c *recordingCarrier) ForgetLeader(string, int32) {}
func (c *recordingCarrier) SendTo(_ context.Context, _, _ string, req kmsg.Request) (kmsg.Response, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sent = append(c.sent, req)
	resp := c.dest(req)
	resp.SetVersion(req.GetVersion())
	return resp, nil
}

func (c *recordingCarrier) Carry(_ context.Context, client, group string, req kmsg.Request) (kmsg.Response, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, carried{client, group, req})
	resp := c.answer(req)
	resp.SetVersion(req.GetVersion())
	return resp, nil
}

func (c *recordingCarrier) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
}

// syncConn is a fakeConn whose Post queues the asynchronous steps' finishing for the test's
// goroutine, as an event loop runs them on the connection's.
type syncConn struct {
	posted   chan func()
	mu       sync.Mutex
	client   bytes.Buffer
	upstream bytes.Buffer
	closed   error
}

func (f *syncConn) WriteClient(b []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.client.Write(b)
}
func (f *syncConn) WriteClientv(bs [][]byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, b := range bs {
		f.client.Write(b)
	}
}
func (f *syncConn) WriteUpstream(b []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.upstream.Write(b)
}
func (f *syncConn) ClientPending() int { return 0 }
func (f *syncConn) Resume()            {}
func (f *syncConn) WaitClientDrain()   {}
func (f *syncConn) Post(fn func())     { f.posted <- fn }
func (f *syncConn) Close(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = err
}

// answers waits for n frames to the client.
func (f *syncConn) answers(t *testing.T, n int) [][]byte {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		select {
		case fn := <-f.posted:
			fn()
		default:
		}
		f.mu.Lock()
		b := append([]byte(nil), f.client.Bytes()...)
		closed := f.closed
		f.mu.Unlock()
		if closed != nil {
			t.Fatalf("connection closed: %v", closed)
		}
		if fs := frames(t, b); len(fs) >= n || time.Now().After(deadline) {
			if len(fs) != n {
				t.Fatalf("%d answers, want %d", len(fs), n)
			}
			return fs
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (f *syncConn) forwarded(t *testing.T) [][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return frames(t, f.upstream.Bytes())
}

// readAnswer decodes a response frame of a non-flexible or flexible version.
func readAnswer(t *testing.T, frame []byte, resp kmsg.Response, version int16) {
	t.Helper()
	resp.SetVersion(version)
	body := frame[8:]
	if resp.IsFlexible() {
		body = body[1:] // the empty tag section of the response header
	}
	if err := resp.ReadFrom(body); err != nil {
		t.Fatal(err)
	}
}

func readForwarded(t *testing.T, frame []byte, req kmsg.Request) {
	t.Helper()
	h, err := parseReqHeader(frame[4:])
	if err != nil {
		t.Fatal(err)
	}
	req.SetVersion(h.version)
	if err := req.ReadFrom(frame[4+h.bodyOff:]); err != nil {
		t.Fatal(err)
	}
}

// The steps of a group's live move as one source connection carries them out.
func TestMoveGate(t *testing.T) {
	newSession := func(st catalog.MoveState) (*Session, *syncConn, *recordingCarrier) {
		c := &recordingCarrier{answer: func(req kmsg.Request) kmsg.Response {
			if _, ok := req.(*kmsg.HeartbeatRequest); ok {
				return &kmsg.HeartbeatResponse{ErrorCode: kerr.UnknownMemberID.Code}
			}
			return req.ResponseKind()
		}}
		fc := &syncConn{posted: make(chan func(), 16)}
		s := New(Config{NodeShift: 1000, Addresses: &presented{real: map[int32]string{}},
			Moves: &movesOf{states: map[string]catalog.MoveState{"g": st}, carrier: c}}, fc)
		return s, fc, c
	}
	heartbeat := func(group string) kmsg.Request {
		r := kmsg.NewPtrHeartbeatRequest()
		r.SetVersion(4)
		r.Group, r.MemberID, r.Generation = group, "m-1", 3
		return r
	}

	t.Run("draining", func(t *testing.T) {
		s, fc, c := newSession(catalog.MoveDraining)
		sync := kmsg.NewPtrSyncGroupRequest()
		sync.SetVersion(5)
		sync.Group, sync.MemberID = "g", "leader"
		full := kmsg.ConsumerMemberAssignment{Version: 1, Topics: []kmsg.ConsumerMemberAssignmentTopic{{Topic: "t", Partitions: []int32{0, 1}}}}
		sync.GroupAssignment = []kmsg.SyncGroupRequestGroupAssignment{{MemberID: "leader", MemberAssignment: full.AppendTo(nil)}}
		in := append(reqFrame(heartbeat("g"), 1), reqFrame(sync, 2)...)
		if _, err := s.HandleClient(in); err != nil {
			t.Fatal(err)
		}
		var hb kmsg.HeartbeatResponse
		readAnswer(t, fc.answers(t, 1)[0], &hb, 4)
		if hb.ErrorCode != kerr.RebalanceInProgress.Code {
			t.Fatalf("heartbeat answered %d, want REBALANCE_IN_PROGRESS", hb.ErrorCode)
		}
		up := fc.forwarded(t)
		if len(up) != 1 {
			t.Fatalf("%d requests forwarded, want the SyncGroup alone", len(up))
		}
		var got kmsg.SyncGroupRequest
		readForwarded(t, up[0], &got)
		var a kmsg.ConsumerMemberAssignment
		if err := a.ReadFrom(got.GroupAssignment[0].MemberAssignment); err != nil {
			t.Fatal(err)
		}
		if len(a.Topics) != 0 || a.Version != 1 {
			t.Fatalf("the leader's assignment went on as %+v, want empty (version 1)", a)
		}
		if len(c.got) != 0 {
			t.Fatalf("%d requests carried before the move", len(c.got))
		}
	})

	t.Run("final", func(t *testing.T) {
		s, fc, _ := newSession(catalog.MoveFinal)
		join := kmsg.NewPtrJoinGroupRequest()
		join.SetVersion(6)
		join.Group, join.MemberID, join.ProtocolType = "g", "m-1", "consumer"
		commit := kmsg.NewPtrOffsetCommitRequest()
		commit.SetVersion(8)
		commit.Group = "g"
		commit.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "t", Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: 10}}}}
		in := append(reqFrame(join, 1), reqFrame(commit, 2)...)
		if _, err := s.HandleClient(in); err != nil {
			t.Fatal(err)
		}
		out := fc.answers(t, 2)
		var jr kmsg.JoinGroupResponse
		readAnswer(t, out[0], &jr, 6)
		var cr kmsg.OffsetCommitResponse
		readAnswer(t, out[1], &cr, 8)
		if jr.ErrorCode != kerr.CoordinatorLoadInProgress.Code || cr.Topics[0].Partitions[0].ErrorCode != kerr.CoordinatorLoadInProgress.Code {
			t.Fatalf("join answered %d, commit %d; want COORDINATOR_LOAD_IN_PROGRESS for both", jr.ErrorCode, cr.Topics[0].Partitions[0].ErrorCode)
		}
		if up := fc.forwarded(t); len(up) != 0 {
			t.Fatalf("%d requests reached the source while the offsets are copied", len(up))
		}
	})

	t.Run("moved", func(t *testing.T) {
		s, fc, c := newSession(catalog.MoveMoved)
		if _, err := s.HandleClient(reqFrame(heartbeat("g"), 1)); err != nil {
			t.Fatal(err)
		}
		var hb kmsg.HeartbeatResponse
		readAnswer(t, fc.answers(t, 1)[0], &hb, 4)
		if hb.ErrorCode != kerr.UnknownMemberID.Code {
			t.Fatalf("heartbeat answered %d, want the destination's UNKNOWN_MEMBER_ID", hb.ErrorCode)
		}
		c.mu.Lock()
		if len(c.got) != 1 || c.got[0].client != "test-client" || c.got[0].group != "g" || c.got[0].req.(*kmsg.HeartbeatRequest).MemberID != "m-1" {
			t.Fatalf("carried %+v", c.got)
		}
		c.mu.Unlock()

		// Another group's requests still go to the source; a transactional commit of the
		// moved group is refused.
		txn := kmsg.NewPtrTxnOffsetCommitRequest()
		txn.SetVersion(3)
		txn.Group, txn.TransactionalID = "g", "tx"
		txn.Topics = []kmsg.TxnOffsetCommitRequestTopic{{Topic: "t", Partitions: []kmsg.TxnOffsetCommitRequestTopicPartition{{Partition: 0, Offset: 5}}}}
		in := append(reqFrame(heartbeat("other"), 2), reqFrame(txn, 3)...)
		if _, err := s.HandleClient(in); err != nil {
			t.Fatal(err)
		}
		up := fc.forwarded(t)
		if len(up) != 1 {
			t.Fatalf("forwarded %d requests, want the other group's heartbeat", len(up))
		}
		var other kmsg.HeartbeatRequest
		readForwarded(t, up[0], &other)
		if other.Group != "other" {
			t.Fatalf("forwarded a heartbeat of %q, want the other group's", other.Group)
		}
		// The heartbeat of "other" is answered by the source before the refusal goes out.
		if _, err := s.HandleUpstream(respFrame(2, true, &kmsg.HeartbeatResponse{Version: 4})); err != nil {
			t.Fatal(err)
		}
		out := fc.answers(t, 3)
		var tr kmsg.TxnOffsetCommitResponse
		readAnswer(t, out[2], &tr, 3)
		if tr.Topics[0].Partitions[0].ErrorCode != kerr.GroupAuthorizationFailed.Code {
			t.Fatalf("transactional commit answered %d, want GROUP_AUTHORIZATION_FAILED", tr.Topics[0].Partitions[0].ErrorCode)
		}
		s.Close()
		c.mu.Lock()
		defer c.mu.Unlock()
		if !c.closed {
			t.Fatal("the carrier outlived its connection")
		}
	})

	t.Run("returning", func(t *testing.T) {
		s, fc, c := newSession(catalog.MoveReturning)
		sync := kmsg.NewPtrSyncGroupRequest()
		sync.SetVersion(5)
		sync.Group, sync.MemberID = "g", "leader"
		full := kmsg.ConsumerMemberAssignment{Version: 3, Topics: []kmsg.ConsumerMemberAssignmentTopic{{Topic: "t", Partitions: []int32{0}}}}
		sync.GroupAssignment = []kmsg.SyncGroupRequestGroupAssignment{{MemberID: "leader", MemberAssignment: full.AppendTo(nil)}}
		if _, err := s.HandleClient(reqFrame(heartbeat("g"), 1)); err != nil {
			t.Fatal(err)
		}
		var hb kmsg.HeartbeatResponse
		readAnswer(t, fc.answers(t, 1)[0], &hb, 4)
		if hb.ErrorCode != kerr.RebalanceInProgress.Code {
			t.Fatalf("heartbeat answered %d, want REBALANCE_IN_PROGRESS", hb.ErrorCode)
		}
		if _, err := s.HandleClient(reqFrame(sync, 2)); err != nil {
			t.Fatal(err)
		}
		fc.answers(t, 2)
		c.mu.Lock()
		defer c.mu.Unlock()
		if len(c.got) != 1 {
			t.Fatalf("%d requests carried, want the SyncGroup", len(c.got))
		}
		var a kmsg.ConsumerMemberAssignment
		if err := a.ReadFrom(c.got[0].req.(*kmsg.SyncGroupRequest).GroupAssignment[0].MemberAssignment); err != nil {
			t.Fatal(err)
		}
		if len(a.Topics) != 0 || a.Version != 3 {
			t.Fatalf("the leader's assignment was carried as %+v, want empty (version 3)", a)
		}
		if up := fc.forwarded(t); len(up) != 0 {
			t.Fatalf("%d requests reached the source while the group drains on the destination", len(up))
		}
	})

	t.Run("returning-final", func(t *testing.T) {
		s, fc, c := newSession(catalog.MoveReturnFinal)
		join := kmsg.NewPtrJoinGroupRequest()
		join.SetVersion(6)
		join.Group, join.MemberID, join.ProtocolType = "g", "m-1", "consumer"
		leave := kmsg.NewPtrLeaveGroupRequest()
		leave.SetVersion(4)
		leave.Group = "g"
		leave.Members = []kmsg.LeaveGroupRequestMember{{MemberID: "m-1"}}
		if _, err := s.HandleClient(append(reqFrame(join, 1), reqFrame(leave, 2)...)); err != nil {
			t.Fatal(err)
		}
		out := fc.answers(t, 2)
		var jr kmsg.JoinGroupResponse
		readAnswer(t, out[0], &jr, 6)
		if jr.ErrorCode != kerr.CoordinatorLoadInProgress.Code {
			t.Fatalf("join answered %d, want COORDINATOR_LOAD_IN_PROGRESS", jr.ErrorCode)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if len(c.got) != 1 || c.got[0].req.Key() != int16(kmsg.LeaveGroup) {
			t.Fatalf("carried %d requests, want the LeaveGroup of the destination's member", len(c.got))
		}
	})

	// A client that lies about its request's encoding is refused before anything is decided
	// for the group: the connection closes and nothing reaches either cluster.
	t.Run("undecodable", func(t *testing.T) {
		s, fc, c := newSession(catalog.MoveMoved)
		frame := reqFrame(heartbeat("g"), 1)
		frame = frame[:len(frame)-3] // the member id's string runs past the body
		binary.BigEndian.PutUint32(frame, uint32(len(frame)-4))
		if _, err := s.HandleClient(frame); !errors.Is(err, ErrUndecodable) {
			t.Fatalf("a truncated heartbeat: %v, want ErrUndecodable", err)
		}
		if up := fc.forwarded(t); len(up) != 0 {
			t.Fatalf("%d requests forwarded", len(up))
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if len(c.got) != 0 {
			t.Fatalf("%d requests carried", len(c.got))
		}
	})
}
