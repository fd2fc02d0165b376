package session

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/catalog"
	"offsetgate/ledger"
	"offsetgate/view"
)

// A source connection's Produce once topics are sealed for promotion or promoted: a sealed
// topic's partitions are refused (retriable) and reach no cluster, a promoted topic's are
// carried to the destination, the rest go to the source, and the client gets one answer.
func TestSourceProduceSwitch(t *testing.T) {
	newSession := func() (*Session, *syncConn, *recordingCarrier) {
		c := &recordingCarrier{names: map[[16]byte]string{{1}: "plain", {2}: "promo"}}
		fc := &syncConn{posted: make(chan func(), 16)}
		s := New(Config{NodeShift: 1000, NoSASL: true, Addresses: &presented{real: map[int32]string{}},
			Moves: &movesOf{carrier: c, sealed: map[string]bool{"sealed": true}, promoted: map[string]bool{"promo": true}}}, fc)
		return s, fc, c
	}
	produce := func(version, acks int16, topics ...string) *kmsg.ProduceRequest {
		r := kmsg.NewPtrProduceRequest()
		r.SetVersion(version)
		r.Acks, r.TimeoutMillis = acks, 5000
		for i, n := range topics {
			t := kmsg.NewProduceRequestTopic()
			if version >= 13 {
				t.TopicID = [16]byte{byte(i + 1)}
			} else {
				t.Topic = n
			}
			p := kmsg.NewProduceRequestTopicPartition()
			p.Partition, p.Records = int32(i), []byte(n+"-records")
			t.Partitions = append(t.Partitions, p)
			r.Topics = append(r.Topics, t)
		}
		return r
	}

	t.Run("mixed", func(t *testing.T) {
		s, fc, c := newSession()
		req := produce(9, -1, "plain", "sealed", "promo")
		req.TimeoutMillis = 100 // a sealed topic is held for half of it first
		if _, err := s.HandleClient(reqFrame(req, 1)); err != nil {
			t.Fatal(err)
		}
		// The source's part goes on once the carried part is written.
		var up [][]byte
		for i := 0; i < 200 && len(up) == 0; i++ {
			select {
			case fn := <-fc.posted:
				fn()
			case <-time.After(10 * time.Millisecond):
			}
			up = fc.forwarded(t)
		}
		if len(up) != 1 {
			t.Fatalf("%d requests forwarded to the source, want 1", len(up))
		}
		var fwd kmsg.ProduceRequest
		readForwarded(t, up[0], &fwd)
		if len(fwd.Topics) != 1 || fwd.Topics[0].Topic != "plain" {
			t.Fatalf("the source was sent %+v, want topic plain alone", fwd.Topics)
		}
		if len(c.writes) != 1 || c.writes[0].Topic != "promo" || c.writes[0].Partition != 2 || !bytes.Equal(c.writes[0].Records, []byte("promo-records")) {
			t.Fatalf("carried %+v, want promo[2] with its records", c.writes)
		}
		answer := kmsg.NewPtrProduceResponse()
		answer.Version = 9
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic = "plain"
		rp := kmsg.NewProduceResponseTopicPartition()
		rp.BaseOffset = 5
		rt.Partitions = append(rt.Partitions, rp)
		answer.Topics = append(answer.Topics, rt)
		if _, err := s.HandleUpstream(respFrame(1, true, answer)); err != nil {
			t.Fatal(err)
		}
		var got kmsg.ProduceResponse
		readAnswer(t, fc.answers(t, 1)[0], &got, 9)
		want := map[string]struct {
			code       int16
			base, logs int64
		}{"plain": {0, 5, -1}, "sealed": {kerr.NotEnoughReplicas.Code, -1, -1}, "promo": {0, 1000, 7}}
		if len(got.Topics) != 3 {
			t.Fatalf("answer names %d topics, want 3: %+v", len(got.Topics), got.Topics)
		}
		for _, tp := range got.Topics {
			w, p := want[tp.Topic], tp.Partitions[0]
			if p.ErrorCode != w.code || p.BaseOffset != w.base || p.LogStartOffset != w.logs {
				t.Errorf("%s answered code %d base %d log start %d, want %+v", tp.Topic, p.ErrorCode, p.BaseOffset, p.LogStartOffset, w)
			}
		}
	})

	// A Produce naming a sealed topic is held while the promotion ends, then decided again:
	// promoted meanwhile, it is carried at once (no refusal, no retry backoff); still sealed
	// at the end of the hold, refused; unsealed (the promotion given up), sent to the source.
	heldThen := func(t *testing.T, timeout int32, change func(m *lockedMoves)) (*kmsg.ProduceResponse, *syncConn, *recordingCarrier, time.Duration) {
		t.Helper()
		c := &recordingCarrier{names: map[[16]byte]string{}}
		fc := &syncConn{posted: make(chan func(), 16)}
		m := &lockedMoves{m: &movesOf{carrier: c, sealed: map[string]bool{"sealed": true}, promoted: map[string]bool{}}}
		s := New(Config{NodeShift: 1000, NoSASL: true, Addresses: &presented{real: map[int32]string{}}, Moves: m}, fc)
		req := produce(9, -1, "sealed")
		req.TimeoutMillis = timeout
		start := time.Now()
		if _, err := s.HandleClient(reqFrame(req, 1)); err != nil {
			t.Fatal(err)
		}
		if change != nil {
			time.AfterFunc(50*time.Millisecond, func() { change(m) })
		}
		var took time.Duration
		for i := 0; i < 300 && fc.client.Len() == 0 && len(fc.forwarded(t)) == 0; i++ {
			select {
			case fn := <-fc.posted:
				fn()
				took = time.Since(start)
			case <-time.After(10 * time.Millisecond):
			}
		}
		if fc.client.Len() == 0 {
			return nil, fc, c, took
		}
		var got kmsg.ProduceResponse
		readAnswer(t, fc.answers(t, 1)[0], &got, 9)
		return &got, fc, c, took
	}
	t.Run("sealed-held-then-carried", func(t *testing.T) {
		got, fc, c, _ := heldThen(t, 30000, func(m *lockedMoves) { m.promote("sealed") })
		if got == nil {
			t.Fatal("no answer")
		}
		if p := got.Topics[0].Partitions[0]; p.ErrorCode != 0 || p.BaseOffset != 1000 {
			t.Fatalf("answered code %d base %d, want the carried write at 1000", p.ErrorCode, p.BaseOffset)
		}
		if len(c.writes) != 1 || c.writes[0].Topic != "sealed" {
			t.Fatalf("carried %+v, want the held partition", c.writes)
		}
		if len(fc.forwarded(t)) != 0 {
			t.Fatal("a held write reached the source")
		}
	})
	t.Run("sealed-held-then-refused", func(t *testing.T) {
		got, fc, c, took := heldThen(t, 400, nil)
		if got == nil {
			t.Fatal("no answer")
		}
		if p := got.Topics[0].Partitions[0]; p.ErrorCode != kerr.NotEnoughReplicas.Code {
			t.Fatalf("answered code %d, want NOT_ENOUGH_REPLICAS once the hold is over", p.ErrorCode)
		}
		if took < 200*time.Millisecond {
			t.Fatalf("refused after %v, before the hold (half the request's timeout) was over", took)
		}
		if len(c.writes) != 0 || len(fc.forwarded(t)) != 0 {
			t.Fatal("a refused write went somewhere")
		}
	})
	t.Run("sealed-held-then-unsealed", func(t *testing.T) {
		got, fc, c, _ := heldThen(t, 30000, func(m *lockedMoves) { m.unseal("sealed") })
		if got != nil {
			t.Fatalf("answered %+v here, want the request sent to the source", got)
		}
		up := fc.forwarded(t)
		if len(up) != 1 || len(c.writes) != 0 {
			t.Fatalf("%d requests to the source and %d carried, want the request at the source", len(up), len(c.writes))
		}
		var fwd kmsg.ProduceRequest
		readForwarded(t, up[0], &fwd)
		if len(fwd.Topics) != 1 || fwd.Topics[0].Topic != "sealed" {
			t.Fatalf("the source was sent %+v", fwd.Topics)
		}
	})

	t.Run("promoted-acks-0", func(t *testing.T) {
		s, fc, c := newSession()
		if _, err := s.HandleClient(reqFrame(produce(9, 0, "promo"), 1)); err != nil {
			t.Fatal(err)
		}
		fn := <-fc.posted
		fn()
		if up := fc.forwarded(t); len(up) != 0 {
			t.Fatalf("%d requests reached the source", len(up))
		}
		if len(c.writes) != 1 {
			t.Fatalf("carried %d partitions, want 1", len(c.writes))
		}
		if fc.client.Len() != 0 {
			t.Fatal("an acks=0 Produce was answered")
		}
	})

	t.Run("by-id", func(t *testing.T) {
		// Produce v13 names topics by the source's ids: {1} is plain, {2} promoted. The
		// connection reuses its read buffer at once: what is carried later keeps its own copy
		// (the client id included).
		s, fc, c := newSession()
		in := reqFrame(produce(13, -1, "plain", "promo"), 1)
		if _, err := s.HandleClient(in); err != nil {
			t.Fatal(err)
		}
		for i := range in {
			in[i] = 'X'
		}
		var up [][]byte
		for i := 0; i < 200 && len(up) == 0; i++ {
			select {
			case fn := <-fc.posted:
				fn()
			case <-time.After(10 * time.Millisecond):
			}
			up = fc.forwarded(t)
		}
		if len(up) != 1 {
			t.Fatalf("%d requests forwarded to the source, want 1", len(up))
		}
		var fwd kmsg.ProduceRequest
		readForwarded(t, up[0], &fwd)
		if len(fwd.Topics) != 1 || fwd.Topics[0].TopicID != [16]byte{1} {
			t.Fatalf("the source was sent %+v, want topic id 1 alone", fwd.Topics)
		}
		if len(c.writes) != 1 || c.writes[0].Topic != "promo" || c.clients[0] != "test-client" {
			t.Fatalf("carried %+v for %q, want promo by its name for test-client", c.writes, c.clients)
		}
		answer := kmsg.NewPtrProduceResponse()
		answer.Version = 13
		rt := kmsg.NewProduceResponseTopic()
		rt.TopicID = [16]byte{1}
		rt.Partitions = append(rt.Partitions, kmsg.NewProduceResponseTopicPartition())
		answer.Topics = append(answer.Topics, rt)
		if _, err := s.HandleUpstream(respFrame(1, true, answer)); err != nil {
			t.Fatal(err)
		}
		var got kmsg.ProduceResponse
		readAnswer(t, fc.answers(t, 1)[0], &got, 13)
		if len(got.Topics) != 2 || got.Topics[1].TopicID != [16]byte{2} || got.Topics[1].Partitions[0].BaseOffset != 1000 {
			t.Fatalf("answer %+v, want topic id 1 then 2 (at 1000)", got.Topics)
		}
	})

	t.Run("untouched", func(t *testing.T) {
		s, fc, c := newSession()
		in := reqFrame(produce(9, -1, "plain"), 1)
		if _, err := s.HandleClient(in); err != nil {
			t.Fatal(err)
		}
		up := fc.forwarded(t)
		if len(up) != 1 || !bytes.Equal(up[0], in) {
			t.Fatal("a Produce naming no sealed or promoted topic was not forwarded as it came")
		}
		if len(c.writes) != 0 {
			t.Fatal("carried a write of an ordinary topic")
		}
	})

	t.Run("unknown-id", func(t *testing.T) {
		s, fc, _ := newSession()
		r := produce(13, -1, "x")
		r.Topics[0].TopicID = [16]byte{9}
		if _, err := s.HandleClient(reqFrame(r, 1)); err != nil {
			t.Fatal(err)
		}
		fn := <-fc.posted
		fn()
		if fc.closed == nil {
			t.Fatal("a Produce naming a topic id the source does not know was not refused")
		}
		if len(fc.forwarded(t)) != 0 {
			t.Fatal("it reached the source")
		}
	})
}

// A source connection's Fetch once a topic is promoted: the promoted partition is fetched from
// the destination at its destination offset with no epoch checks and answered as the source's
// batch at its source offset; the other partition goes to the source without a fetch session;
// the client's answer has both and no session. An incremental fetch after a promotion is sent
// back for a full one (FETCH_SESSION_ID_NOT_FOUND).
func TestSourceFetchPromoted(t *testing.T) {
	a := srcBatch(100, 3, 5)
	pv := view.NewPartition([]ledger.Entry{entry(a, 0)})
	newSession := func() (*Session, *syncConn, *recordingCarrier) {
		c := &recordingCarrier{views: map[partKey]*view.Partition{{"promo", 0}: pv}, dest: func(req kmsg.Request) kmsg.Response {
			switch req := req.(type) {
			case *kmsg.FetchRequest:
				resp := kmsg.NewPtrFetchResponse()
				rt := kmsg.NewFetchResponseTopic()
				rt.Topic = req.Topics[0].Topic
				rp := kmsg.NewFetchResponseTopicPartition()
				rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = 3, 3, 0
				rp.RecordBatches = onD(a, 0, 2)
				rt.Partitions = append(rt.Partitions, rp)
				resp.Topics = append(resp.Topics, rt)
				return resp
			case *kmsg.ListOffsetsRequest:
				resp := kmsg.NewPtrListOffsetsResponse()
				rt := kmsg.NewListOffsetsResponseTopic()
				rt.Topic = req.Topics[0].Topic
				rp := kmsg.NewListOffsetsResponseTopicPartition()
				rp.Offset, rp.LeaderEpoch = 3, 1 // D's end, D's epoch
				rt.Partitions = append(rt.Partitions, rp)
				resp.Topics = append(resp.Topics, rt)
				return resp
			}
			return req.ResponseKind()
		}}
		fc := &syncConn{posted: make(chan func(), 16)}
		s := New(Config{NodeShift: 1000, NoSASL: true, Addresses: &presented{real: map[int32]string{}},
			Moves: &movesOf{carrier: c, promoted: map[string]bool{"promo": true}}}, fc)
		return s, fc, c
	}
	fetch := func(epoch int32) *kmsg.FetchRequest {
		r := kmsg.NewPtrFetchRequest()
		r.SetVersion(12)
		r.ReplicaID, r.MaxWaitMillis, r.SessionID, r.SessionEpoch = -1, 500, 0, epoch
		for i, n := range []string{"plain", "promo"} {
			ft := kmsg.NewFetchRequestTopic()
			ft.Topic = n
			fp := kmsg.NewFetchRequestTopicPartition()
			fp.Partition, fp.FetchOffset, fp.CurrentLeaderEpoch = 0, int64(100*i), 5
			ft.Partitions = append(ft.Partitions, fp)
			r.Topics = append(r.Topics, ft)
		}
		return r
	}
	wait := func(fc *syncConn) [][]byte {
		var up [][]byte
		for i := 0; i < 200 && len(up) == 0; i++ {
			select {
			case fn := <-fc.posted:
				fn()
			case <-time.After(10 * time.Millisecond):
			}
			up = fc.forwarded(t)
		}
		return up
	}

	t.Run("fetch", func(t *testing.T) {
		s, fc, c := newSession()
		if _, err := s.HandleClient(reqFrame(fetch(0), 1)); err != nil {
			t.Fatal(err)
		}
		up := wait(fc)
		if len(up) != 1 {
			t.Fatalf("%d requests reached the source, want 1", len(up))
		}
		var fwd kmsg.FetchRequest
		readForwarded(t, up[0], &fwd)
		if len(fwd.Topics) != 1 || fwd.Topics[0].Topic != "plain" || fwd.SessionEpoch != -1 || fwd.SessionID != 0 {
			t.Fatalf("the source was sent %+v (session %d/%d), want plain alone without a session", fwd.Topics, fwd.SessionID, fwd.SessionEpoch)
		}
		if len(c.sent) != 1 {
			t.Fatalf("%d requests sent to the destination", len(c.sent))
		}
		dreq := c.sent[0].(*kmsg.FetchRequest)
		dp := dreq.Topics[0].Partitions[0]
		if dreq.Topics[0].Topic != "promo" || dp.FetchOffset != 0 || dp.CurrentLeaderEpoch != -1 || dreq.MaxWaitMillis != 0 {
			t.Fatalf("the destination was asked %+v (wait %d), want promo at D offset 0, no epoch, no wait", dreq.Topics, dreq.MaxWaitMillis)
		}
		answer := kmsg.NewPtrFetchResponse()
		answer.Version, answer.SessionID = 12, 77
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic = "plain"
		rt.Partitions = append(rt.Partitions, kmsg.NewFetchResponseTopicPartition())
		answer.Topics = append(answer.Topics, rt)
		if _, err := s.HandleUpstream(respFrame(1, true, answer)); err != nil {
			t.Fatal(err)
		}
		var got kmsg.FetchResponse
		readAnswer(t, fc.answers(t, 1)[0], &got, 12)
		if got.SessionID != 0 || len(got.Topics) != 2 || got.Topics[1].Topic != "promo" {
			t.Fatalf("answer %+v, want plain and promo, no session", got)
		}
		p := got.Topics[1].Partitions[0]
		if string(p.RecordBatches) != string(a) || p.HighWatermark != 103 || p.LogStartOffset != 100 {
			t.Fatalf("promo answered hw %d log start %d records %x; want the source's batch, 103, 100", p.HighWatermark, p.LogStartOffset, p.RecordBatches)
		}
	})

	t.Run("incremental", func(t *testing.T) {
		s, fc, _ := newSession()
		// The connection's last full fetch was before the promotion.
		s.fetchGen = 0
		if _, err := s.HandleClient(reqFrame(fetch(3), 1)); err != nil {
			t.Fatal(err)
		}
		var got kmsg.FetchResponse
		readAnswer(t, fc.answers(t, 1)[0], &got, 12)
		if got.ErrorCode != kerr.FetchSessionIDNotFound.Code || len(fc.forwarded(t)) != 0 {
			t.Fatalf("an incremental fetch after a promotion answered %d; want FETCH_SESSION_ID_NOT_FOUND, nothing forwarded", got.ErrorCode)
		}
	})

	t.Run("list-offsets", func(t *testing.T) {
		s, fc, c := newSession()
		r := kmsg.NewPtrListOffsetsRequest()
		r.SetVersion(7)
		r.ReplicaID = -1
		lt := kmsg.NewListOffsetsRequestTopic()
		lt.Topic = "promo"
		lp := kmsg.NewListOffsetsRequestTopicPartition()
		lp.Timestamp, lp.CurrentLeaderEpoch = -1, 5
		lt.Partitions = append(lt.Partitions, lp)
		r.Topics = append(r.Topics, lt)
		if _, err := s.HandleClient(reqFrame(r, 1)); err != nil {
			t.Fatal(err)
		}
		var got kmsg.ListOffsetsResponse
		readAnswer(t, fc.answers(t, 1)[0], &got, 7)
		p := got.Topics[0].Partitions[0]
		if p.Offset != 103 || p.LeaderEpoch != 6 {
			t.Fatalf("latest answered %d at epoch %d, want the source's 103 at the presented epoch 6 (5+1)", p.Offset, p.LeaderEpoch)
		}
		if c.sent[0].(*kmsg.ListOffsetsRequest).Topics[0].Partitions[0].CurrentLeaderEpoch != -1 || len(fc.forwarded(t)) != 0 {
			t.Fatal("the destination was asked with the source's epoch, or the source was asked")
		}
	})
}

// A SASL source listener passes its clients' logins to the source, which authorizes each: a
// promoted topic's requests are refused rather than carried with offsetgate's login, unless
// the listener is told to carry them.
func TestSourceSASLNotCarried(t *testing.T) {
	for _, carry := range []bool{false, true} {
		c := &recordingCarrier{dest: func(req kmsg.Request) kmsg.Response { return req.ResponseKind() }}
		fc := &syncConn{posted: make(chan func(), 16)}
		s := New(Config{NodeShift: 1000, CarryLogins: carry, Addresses: &presented{real: map[int32]string{}},
			Moves: &movesOf{carrier: c, promoted: map[string]bool{"promo": true}}}, fc)
		p := kmsg.NewPtrProduceRequest()
		p.SetVersion(9)
		p.Acks = -1
		pt := kmsg.NewProduceRequestTopic()
		pt.Topic = "promo"
		pp := kmsg.NewProduceRequestTopicPartition()
		pp.Records = []byte("records")
		pt.Partitions = append(pt.Partitions, pp)
		p.Topics = append(p.Topics, pt)
		f := kmsg.NewPtrFetchRequest()
		f.SetVersion(12)
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic = "promo"
		ft.Partitions = append(ft.Partitions, kmsg.NewFetchRequestTopicPartition())
		f.Topics = append(f.Topics, ft)
		// One at a time: a request waiting for the destination holds back the client's next.
		if _, err := s.HandleClient(reqFrame(p, 1)); err != nil {
			t.Fatal(err)
		}
		fc.answers(t, 1)
		if _, err := s.HandleClient(reqFrame(f, 2)); err != nil {
			t.Fatal(err)
		}
		out := fc.answers(t, 2)
		var pr kmsg.ProduceResponse
		readAnswer(t, out[0], &pr, 9)
		var fr kmsg.FetchResponse
		readAnswer(t, out[1], &fr, 12)
		pc, fcode := pr.Topics[0].Partitions[0].ErrorCode, fr.Topics[0].Partitions[0].ErrorCode
		if !carry {
			if pc != kerr.TopicAuthorizationFailed.Code || fcode != kerr.TopicAuthorizationFailed.Code || len(c.writes) != 0 || len(c.sent) != 0 {
				t.Fatalf("not carrying: produce %d, fetch %d, %d writes and %d requests carried", pc, fcode, len(c.writes), len(c.sent))
			}
		} else if len(c.writes) != 1 || pc != 0 {
			t.Fatalf("carrying logins: produce %d, %d writes carried", pc, len(c.writes))
		}
		if len(fc.forwarded(t)) != 0 {
			t.Fatal("a promoted topic's request reached the source")
		}
	}
}

// lockedMoves is movesOf whose marks change while a session reads them from another goroutine.
type lockedMoves struct {
	mu sync.Mutex
	m  *movesOf
}

func (l *lockedMoves) HasSwitching() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.m.HasSwitching()
}
func (l *lockedMoves) Promotions() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.m.Promotions()
}
func (l *lockedMoves) Promotion(name string) (catalog.Topic, bool, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.m.Promotion(name)
}
func (l *lockedMoves) HasMoves() bool                     { return l.m.HasMoves() }
func (l *lockedMoves) Move(g string) (catalog.Move, bool) { return l.m.Move(g) }
func (l *lockedMoves) Carrier() Carrier                   { return l.m.Carrier() }

func (l *lockedMoves) promote(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.m.sealed, name)
	l.m.promoted[name] = true
}

func (l *lockedMoves) unseal(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.m.sealed, name)
}

// A source connection's fetch of a promoted partition from inside a filled hole whose fillers
// D does not hold yet: D refuses the offset past them, and the client is answered with nothing
// at its own offset (fillerSkip), not OFFSET_OUT_OF_RANGE.
func TestSourceFetchPastUnlandedFillers(t *testing.T) {
	a, b := srcBatch(100, 3, 5), srcBatch(110, 2, 5)
	pv := view.NewPartition([]ledger.Entry{entry(a, 0), {Kind: ledger.KindFiller, Src: 103, Last: 109, D: 3, Count: 7}, entry(b, 10)})
	c := &recordingCarrier{views: map[partKey]*view.Partition{{"promo", 0}: pv}, dest: func(req kmsg.Request) kmsg.Response {
		resp := kmsg.NewPtrFetchResponse()
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic = req.(*kmsg.FetchRequest).Topics[0].Topic
		rp := kmsg.NewFetchResponseTopicPartition()
		rp.ErrorCode, rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = kerr.OffsetOutOfRange.Code, -1, -1, -1
		rt.Partitions = append(rt.Partitions, rp)
		resp.Topics = append(resp.Topics, rt)
		return resp
	}}
	for _, at := range []int64{105, 101} {
		fc := &syncConn{posted: make(chan func(), 16)}
		s := New(Config{NodeShift: 1000, NoSASL: true, Addresses: &presented{real: map[int32]string{}},
			Moves: &movesOf{carrier: c, promoted: map[string]bool{"promo": true}}}, fc)
		r := kmsg.NewPtrFetchRequest()
		r.SetVersion(12)
		r.ReplicaID, r.MaxWaitMillis, r.SessionEpoch = -1, 500, -1
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic = "promo"
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.FetchOffset = at
		ft.Partitions = append(ft.Partitions, fp)
		r.Topics = append(r.Topics, ft)
		if _, err := s.HandleClient(reqFrame(r, 1)); err != nil {
			t.Fatal(err)
		}
		var got kmsg.FetchResponse
		readAnswer(t, fc.answers(t, 1)[0], &got, 12)
		p := got.Topics[0].Partitions[0]
		if at == 105 && (p.ErrorCode != 0 || p.HighWatermark != 105 || len(p.RecordBatches) != 0) {
			t.Fatalf("fetch at 105 (in the hole) answered error %d, high watermark %d; want nothing at 105", p.ErrorCode, p.HighWatermark)
		}
		if at == 101 && p.ErrorCode != kerr.OffsetOutOfRange.Code {
			t.Fatalf("fetch at 101 answered error %d, want D's OFFSET_OUT_OF_RANGE", p.ErrorCode)
		}
	}
}
