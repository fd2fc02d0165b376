package session

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/catalog"
	"offsetgate/view"
)

// answerConn is a transport that passes large answers as they arrive.
type answerConn struct{ fakeConn }

func (*answerConn) PassesAnswers() bool { return true }

// With fuzzCatalog, topic ids with an even first byte are ordinary topics, odd ones mirror
// topics (they have a source view).
var (
	plainID  = catalog.TopicID{2}
	mirrorID = catalog.TopicID{1}
)

// fetchByID is a consumer's Fetch request (v13 on: topics by id) of partition 0 of each topic,
// in fetch session sid at epoch (-1: no session).
func fetchByID(version int16, corr, sid, epoch int32, ids ...catalog.TopicID) []byte {
	req := kmsg.NewPtrFetchRequest()
	req.SetVersion(version)
	req.ReplicaID, req.MaxWaitMillis, req.MaxBytes = -1, 500, 50<<20
	req.SessionID, req.SessionEpoch = sid, epoch
	for _, id := range ids {
		rt := kmsg.NewFetchRequestTopic()
		rt.TopicID = id
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.PartitionMaxBytes = 1 << 20
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
	}
	return reqFrame(req, corr)
}

// fetchAnswer is D's answer to a Fetch at version, in fetch session sid, with 200 KiB of
// records for each topic.
func fetchAnswer(version int16, corr, sid int32, ids ...catalog.TopicID) []byte {
	resp := kmsg.NewPtrFetchResponse()
	resp.SetVersion(version)
	resp.SessionID = sid
	for _, id := range ids {
		rt := kmsg.NewFetchResponseTopic()
		rt.TopicID = id
		rp := kmsg.NewFetchResponseTopicPartition()
		rp.HighWatermark, rp.LastStableOffset = 10, 10
		rp.RecordBatches = bytes.Repeat([]byte{7}, 200<<10)
		rt.Partitions = append(rt.Partitions, rp)
		resp.Topics = append(resp.Topics, rt)
	}
	return respFrame(corr, true, resp)
}

// answerSession is a session with mirror topics and their views, over a transport that passes
// answers (or one that does not).
func answerSession(passes bool) (*Session, *fakeConn) {
	_, _, entries := fetchFrames(1, 4<<10, 1<<10)
	cfg := Config{Catalog: fuzzCatalog{}, View: fixedView{view.NewPartition(entries)}}
	if passes {
		ac := &answerConn{}
		return New(cfg, ac), &ac.fakeConn
	}
	fc := &fakeConn{}
	return New(cfg, fc), fc
}

// sent hands the session a client frame and returns what it forwarded of it.
func sent(t *testing.T, s *Session, fc *fakeConn, frame []byte) []byte {
	t.Helper()
	fc.upstream.Reset()
	if n, err := s.HandleClient(frame); err != nil || n != len(frame) {
		t.Fatalf("HandleClient: %d of %d bytes, %v", n, len(frame), err)
	}
	return append([]byte(nil), fc.upstream.Bytes()...)
}

func versionOf(frame []byte) int16 { return int16(binary.BigEndian.Uint16(frame[6:])) }

// A consumer's Fetch of ordinary topics passes as it arrives: v15 as it is; v16 to v18 are sent
// to the destination as v15 (nothing else of the frame changes), so that their answer holds no
// broker endpoints to rewrite. Finished, the answer's slot is gone and what waited behind it is
// written.
func TestAnswerPassesPlainFetch(t *testing.T) {
	for _, v := range []int16{13, 15, 16, 17, 18} {
		s, fc := answerSession(true)
		req := fetchByID(v, 1, 0, -1, plainID)
		fwd := sent(t, s, fc, req)
		want := append([]byte(nil), req...)
		if v >= 16 {
			binary.BigEndian.PutUint16(want[6:], fetchAsIsVersion)
		}
		if !bytes.Equal(fwd, want) {
			t.Fatalf("v%d: forwarded v%d, %d bytes; want the request as v%d, byte for byte", v, versionOf(fwd), len(fwd), versionOf(want))
		}
		answer := fetchAnswer(min(v, fetchAsIsVersion), 1, 0, plainID)
		if !s.StartAnswer(answer[:64]) {
			t.Fatalf("v%d: a plain Fetch answer does not pass", v)
		}
		if s.StartAnswer(answer[:64]) {
			t.Fatalf("v%d: a second answer started while one passes", v)
		}
		// A request answered here, pipelined behind, waits for the passing answer.
		av := kmsg.NewPtrApiVersionsRequest()
		av.SetVersion(4)
		tooNew := reqFrame(av, 2)
		binary.BigEndian.PutUint16(tooNew[6:], 99)
		if _, err := s.HandleClient(tooNew); err != nil {
			t.Fatal(err)
		}
		if fc.client.Len() != 0 {
			t.Fatalf("v%d: a local answer was written while an earlier answer passed", v)
		}
		if _, err := s.HandleUpstream(answer); !errors.Is(err, errAnswerPassing) {
			t.Fatalf("v%d: HandleUpstream took a frame while an answer passed (%v)", v, err)
		}
		s.FinishAnswer()
		out := frames(t, fc.client.Bytes())
		if len(out) != 1 || corrOf(out[0]) != 2 || s.InFlight() != 0 || s.Held() != 0 {
			t.Fatalf("v%d: after the answer: %d frames written, %d in flight, %d held", v, len(out), s.InFlight(), s.Held())
		}
	}
}

// What does not pass: a Fetch naming a topic with a source view (and a v16 one keeps its
// version: its answer is rewritten), one with a partition refused here, an answer that is not
// the next the client is owed, another api whose answer is rewritten, and a v16 Fetch over a
// transport that does not pass answers (not sent as v15 either).
func TestAnswerNotPassed(t *testing.T) {
	s, fc := answerSession(true)
	fwd := sent(t, s, fc, fetchByID(16, 1, 0, -1, plainID, mirrorID))
	if len(fwd) == 0 || versionOf(fwd) != 16 {
		t.Fatalf("a Fetch of a mirror topic was forwarded as v%d, want v16 (its answer is rewritten, endpoints too)", versionOf(fwd))
	}
	if s.StartAnswer(fetchAnswer(16, 1, 0, plainID, mirrorID)[:64]) {
		t.Fatal("the answer to a Fetch of a mirror topic passed unrestored")
	}

	s, fc = answerSession(true)
	own := kmsg.NewPtrFetchRequest()
	own.SetVersion(12)
	own.SessionEpoch = -1
	for _, name := range []string{"ordinary", "__offsetgate_marks"} {
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = name
		rt.Partitions = append(rt.Partitions, kmsg.NewFetchRequestTopicPartition())
		own.Topics = append(own.Topics, rt)
	}
	sent(t, s, fc, reqFrame(own, 1))
	if s.StartAnswer(fetchAnswer(12, 1, 0, plainID)[:64]) {
		t.Fatal("the answer to a Fetch with a refused partition passed without the refusal")
	}

	s, fc = answerSession(true)
	sent(t, s, fc, append(fetchByID(15, 1, 0, -1, plainID), fetchByID(15, 2, 0, -1, plainID)...))
	if s.StartAnswer(fetchAnswer(15, 2, 0, plainID)[:64]) {
		t.Fatal("the second answer passed before the first")
	}
	if !s.StartAnswer(fetchAnswer(15, 1, 0, plainID)[:64]) {
		t.Fatal("the first answer did not pass")
	}

	s, fc = answerSession(true)
	md := kmsg.NewPtrMetadataRequest()
	md.SetVersion(12)
	sent(t, s, fc, reqFrame(md, 1))
	mresp := kmsg.NewPtrMetadataResponse()
	mresp.SetVersion(12)
	mresp.Brokers = []kmsg.MetadataResponseBroker{{NodeID: 1, Host: "10.1.2.3", Port: 9092}}
	if s.StartAnswer(respFrame(1, true, mresp)) {
		t.Fatal("a Metadata answer passed unrewritten")
	}

	s, fc = answerSession(false)
	if fwd := sent(t, s, fc, fetchByID(16, 1, 0, -1, plainID)); versionOf(fwd) != 16 {
		t.Fatalf("a transport that does not pass answers had its v16 Fetch sent as v%d", versionOf(fwd))
	}
	if s.StartAnswer(fetchAnswer(16, 1, 0, plainID)[:64]) {
		t.Fatal("a v16 answer passed unrewritten")
	}
}

// Fetch sessions (KIP-227): an incremental fetch is answered for partitions its session holds,
// named by earlier requests. Its answer passes only when this connection saw the session
// opened by a fetch naming no source-view topic, and no request of it named one since.
func TestAnswerFetchSessions(t *testing.T) {
	s, fc := answerSession(true)
	corr := int32(0)
	version := int16(15)
	round := func(epoch, sid int32, ids ...catalog.TopicID) bool {
		t.Helper()
		corr++
		sent(t, s, fc, fetchByID(version, corr, sid, epoch, ids...))
		held := ids
		if len(held) == 0 {
			held = []catalog.TopicID{plainID} // what the session holds
		}
		answer := fetchAnswer(version, corr, 77, held...)
		passed := s.StartAnswer(answer[:64])
		if passed {
			s.FinishAnswer()
		} else if _, err := s.HandleUpstream(answer); err != nil {
			t.Fatal(err)
		}
		return passed
	}
	if !round(0, 0, plainID) {
		t.Fatal("the full fetch opening session 77 did not pass")
	}
	if !round(1, 77, plainID) {
		t.Fatal("an incremental fetch of a session known to hold no mirror topic did not pass")
	}
	if round(1, 99) {
		t.Fatal("an incremental fetch of a session opened elsewhere passed")
	}
	if round(2, 77, mirrorID) {
		t.Fatal("an incremental fetch adding a mirror topic passed")
	}
	if round(3, 77) {
		t.Fatal("an incremental fetch of a session holding a mirror topic passed")
	}
	if !round(-1, 77, plainID) {
		t.Fatal("a full fetch without a session did not pass")
	}
	// A session opened by a fetch of a mirror topic is never known clean.
	if round(0, 0, mirrorID) || round(1, 77, plainID) {
		t.Fatal("a session opened with a mirror topic passed")
	}
	// Sessions of topics named by name (before v13) are not followed: a name may come back as a
	// mirror topic while the session holds it.
	version = 12
	if !round(0, 0, plainID) || round(1, 77, plainID) {
		t.Fatal("an incremental fetch by topic name passed")
	}
}

// The transport's safety net is not needed: while an answer passes, a finished asynchronous
// step writes nothing to the client either (the answer is at the head of the FIFO).
func TestAnswerHoldsLaterAnswers(t *testing.T) {
	s, fc := answerSession(true)
	sent(t, s, fc, fetchByID(15, 1, 0, -1, plainID))
	md := kmsg.NewPtrMetadataRequest()
	md.SetVersion(12)
	sent(t, s, fc, reqFrame(md, 2))
	if !s.StartAnswer(fetchAnswer(15, 1, 0, plainID)[:64]) {
		t.Fatal("the answer did not pass")
	}
	s.flush()
	if fc.client.Len() != 0 {
		t.Fatal("something was written to the client while an answer passed")
	}
	s.FinishAnswer()
	mresp := kmsg.NewPtrMetadataResponse()
	mresp.SetVersion(12)
	if _, err := s.HandleUpstream(respFrame(2, true, mresp)); err != nil {
		t.Fatal(err)
	}
	if out := frames(t, fc.client.Bytes()); len(out) != 1 || corrOf(out[0]) != 2 {
		t.Fatalf("%d frames after the passed answer, want the Metadata answer", len(out))
	}
}
