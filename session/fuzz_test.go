package session

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/catalog"
	"offsetgate/magic"
	"offsetgate/rules"
)

// fuzzCatalog knows every topic (so no request waits for a lookup); topics named "m*" are
// mirror topics, and so is every id whose first byte is odd.
type fuzzCatalog struct{}

func (fuzzCatalog) topic(name string, id catalog.TopicID) catalog.Topic {
	t := catalog.Topic{Name: name, ID: id}
	if strings.HasPrefix(name, "m") || id[0]&1 == 1 {
		t.Mark = &rules.Mark{Topic: name}
	}
	return t
}
func (c fuzzCatalog) ByName(n string) (catalog.Topic, bool) {
	return c.topic(n, catalog.TopicID{byte(len(n))}), true
}
func (c fuzzCatalog) ByID(id catalog.TopicID) (catalog.Topic, bool) {
	return c.topic("t", id), true
}
func (fuzzCatalog) Observe(string, catalog.TopicID)         {}
func (fuzzCatalog) Removed(catalog.TopicID) bool            { return false }
func (fuzzCatalog) Mirrors() []catalog.Topic                { return nil }
func (fuzzCatalog) HasMirrors() bool                        { return true }
func (fuzzCatalog) Refresh(context.Context, []string) error { return nil }
func (fuzzCatalog) Store(context.Context, catalog.TopicID, rules.Mark) error {
	return errors.New("not in a fuzz test")
}
func (fuzzCatalog) Request(context.Context, kmsg.Request) (kmsg.Response, error) {
	return nil, errors.New("not in a fuzz test")
}

// seedRequests are well-formed frames of the judged apis, for the corpora.
func seedRequests() [][]byte {
	var out [][]byte
	add := func(r kmsg.Request, v int16) {
		r.SetVersion(v)
		out = append(out, reqFrame(r, 1))
	}
	p := kmsg.NewPtrProduceRequest()
	pt := kmsg.NewProduceRequestTopic()
	pt.Topic = "mirror"
	pp := kmsg.NewProduceRequestTopicPartition()
	pp.Records = []byte{0, 0, 0, 0}
	pt.Partitions = append(pt.Partitions, pp)
	p.Topics = append(p.Topics, pt)
	p.Acks = -1
	add(p, 11)
	add(kmsg.NewPtrProduceRequest(), 3)
	d := kmsg.NewPtrDeleteTopicsRequest()
	d.TopicNames = []string{"__offsetgate_marks"}
	add(d, 5)
	add(kmsg.NewPtrAddPartitionsToTxnRequest(), 3)
	add(kmsg.NewPtrElectLeadersRequest(), 2)
	add(kmsg.NewPtrIncrementalAlterConfigsRequest(), 1)
	add(kmsg.NewPtrAlterConfigsRequest(), 2)
	add(kmsg.NewPtrCreatePartitionsRequest(), 3)
	add(kmsg.NewPtrDeleteRecordsRequest(), 2)
	add(kmsg.NewPtrFetchRequest(), 12)
	add(kmsg.NewPtrShareFetchRequest(), 1)
	add(kmsg.NewPtrMetadataRequest(), 12)
	// Transactional ids: offsetgate's own are refused wherever a request names one.
	ip := kmsg.NewPtrInitProducerIDRequest()
	txn := "__offsetgate_ledger_x-0"
	ip.TransactionalID = &txn
	add(ip, 5)
	ao := kmsg.NewPtrAddOffsetsToTxnRequest()
	ao.TransactionalID = txn
	add(ao, 4)
	et := kmsg.NewPtrEndTxnRequest()
	et.TransactionalID = txn
	add(et, 5)
	dt := kmsg.NewPtrDescribeTransactionsRequest()
	dt.TransactionalIDs = []string{txn, "app"}
	add(dt, 0)
	add(kmsg.NewPtrListTransactionsRequest(), 1)
	tc := kmsg.NewPtrTxnOffsetCommitRequest()
	tc.TransactionalID = "app"
	add(tc, 4)
	dp := kmsg.NewPtrDescribeProducersRequest()
	dpt := kmsg.NewDescribeProducersRequestTopic()
	dpt.Topic, dpt.Partitions = "mirror", []int32{0}
	dp.Topics = append(dp.Topics, dpt)
	add(dp, 0)
	return out
}

// The request header parser never panics, never points past its input, and removing the
// magic tag keeps the body and every other tag.
func FuzzRequestHeader(f *testing.F) {
	for _, s := range seedRequests() {
		f.Add(s[4:])
	}
	f.Add(magic.AppendHeader(nil, 0, 11, 5, "mirror", -1))
	f.Fuzz(func(t *testing.T, p []byte) {
		h, err := parseReqHeader(p)
		if err != nil {
			return
		}
		if h.bodyOff > len(p) || h.tagsOff > len(p) {
			t.Fatalf("offsets %d/%d past %d bytes", h.bodyOff, h.tagsOff, len(p))
		}
		if !h.magic.Present {
			return
		}
		frame := binary.BigEndian.AppendUint32(nil, uint32(len(p)))
		frame = append(frame, p...)
		out := stripMagic(frame, h)
		h2, err := parseReqHeader(out[4:])
		if err != nil || h2.magic.Present {
			t.Fatalf("after stripping: %v, magic %v", err, h2.magic.Present)
		}
		if string(out[4+h2.bodyOff:]) != string(p[h.bodyOff:]) {
			t.Fatal("stripping the tag changed the body")
		}
	})
}

// Whatever a client sends, a session never panics, and never forwards a request of an api it
// judges that kmsg cannot decode: Kafka may read what kmsg refuses, so that must be refused.
func FuzzHandleClient(f *testing.F) {
	for _, s := range seedRequests() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		fc := &fakeConn{}
		s := New(Config{Catalog: fuzzCatalog{}, MaxFrame: 1 << 20}, fc)
		defer s.Close()
		_, _ = s.HandleClient(in)
		up := fc.upstream.Bytes()
		for len(up) >= 4 {
			n := 4 + int(binary.BigEndian.Uint32(up))
			if n > len(up) {
				t.Fatalf("a partial frame was forwarded")
			}
			frame := up[:n]
			up = up[n:]
			h, err := parseReqHeader(frame[4:])
			if err != nil {
				t.Fatalf("forwarded a frame whose header does not parse: %v", err)
			}
			if apiRules[kmsg.Key(h.key)].class == passed || kmsg.Key(h.key) == kmsg.SASLHandshake || kmsg.Key(h.key) == kmsg.SASLAuthenticate {
				continue
			}
			req := kmsg.RequestForKey(h.key)
			req.SetVersion(h.version)
			if err := req.ReadFrom(frame[4+h.bodyOff:]); err != nil {
				t.Fatalf("forwarded %s v%d that kmsg cannot decode: %v", kmsg.NameForKey(h.key), h.version, err)
			}
		}
	})
}

// Response rewrites never panic on whatever the broker (or something pretending to be it)
// sends, at any version.
func FuzzResponseRewrite(f *testing.F) {
	for _, k := range []int16{0, 1, 3, 10, 18, 32, 60, 75, 78, 79} {
		r := kmsg.ResponseForKey(k)
		f.Add(k, r.MaxVersion(), r.AppendTo(nil))
	}
	f.Fuzz(func(t *testing.T, key, version int16, body []byte) {
		hd := handlerFor(key)
		if hd == nil || hd.response == nil || !Supported(key, version) {
			return
		}
		s := New(Config{Catalog: fuzzCatalog{}, Addresses: mapAddrs{}}, &fakeConn{})
		defer s.Close()
		_, _, _ = hd.response(s, version, body)
	})
}

// Upstream bytes never panic a session, whatever requests it has in flight.
func FuzzHandleUpstream(f *testing.F) {
	md := kmsg.NewPtrMetadataResponse()
	md.SetVersion(12)
	f.Add(respFrame(1, true, md))
	f.Add([]byte{0, 0, 0, 4, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, up []byte) {
		fc := &fakeConn{}
		s := New(Config{Catalog: fuzzCatalog{}, Addresses: mapAddrs{}}, fc)
		defer s.Close()
		for i, req := range []kmsg.Request{kmsg.NewPtrMetadataRequest(), kmsg.NewPtrFindCoordinatorRequest(), kmsg.NewPtrApiVersionsRequest()} {
			req.SetVersion(req.MaxVersion())
			if Supported(req.Key(), req.MaxVersion()) {
				_, _ = s.HandleClient(reqFrame(req, int32(i+1)))
			}
		}
		_, _ = s.HandleUpstream(up)
	})
}

// Whatever a client of a source listener sends once topics are sealed or promoted, a session
// never panics, and never passes a promoted topic's partition to the source.
func FuzzSourceClient(f *testing.F) {
	add := func(r kmsg.Request, v int16) {
		r.SetVersion(v)
		f.Add(reqFrame(r, 1))
	}
	for _, name := range []string{"promo", "sealed", "plain"} {
		p := kmsg.NewPtrProduceRequest()
		pt := kmsg.NewProduceRequestTopic()
		pt.Topic = name
		pp := kmsg.NewProduceRequestTopicPartition()
		pp.Records = []byte{0, 0, 0, 0}
		pt.Partitions = append(pt.Partitions, pp)
		p.Topics, p.Acks = append(p.Topics, pt), -1
		add(p, 9)
		fr := kmsg.NewPtrFetchRequest()
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic = name
		ft.Partitions = append(ft.Partitions, kmsg.NewFetchRequestTopicPartition())
		fr.Topics = append(fr.Topics, ft)
		add(fr, 12)
		lo := kmsg.NewPtrListOffsetsRequest()
		lt := kmsg.NewListOffsetsRequestTopic()
		lt.Topic = name
		lt.Partitions = append(lt.Partitions, kmsg.NewListOffsetsRequestTopicPartition())
		lo.Topics = append(lo.Topics, lt)
		add(lo, 7)
		oe := kmsg.NewPtrOffsetForLeaderEpochRequest()
		ot := kmsg.NewOffsetForLeaderEpochRequestTopic()
		ot.Topic = name
		ot.Partitions = append(ot.Partitions, kmsg.NewOffsetForLeaderEpochRequestTopicPartition())
		oe.Topics = append(oe.Topics, ot)
		add(oe, 4)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		c := &recordingCarrier{dest: func(req kmsg.Request) kmsg.Response { return req.ResponseKind() }}
		fc := &syncConn{posted: make(chan func(), 16)}
		s := New(Config{NodeShift: 1000, NoSASL: true, MaxFrame: 1 << 20, Addresses: &presented{real: map[int32]string{}},
			Moves: &movesOf{carrier: c, sealed: map[string]bool{"sealed": true}, promoted: map[string]bool{"promo": true}}}, fc)
		defer s.Close()
		if _, err := s.HandleClient(in); err != nil {
			return
		}
		// Finish what went asynchronous (each step may start another).
		for i := 0; i < 3 && s.blocked; i++ {
			select {
			case fn := <-fc.posted:
				fn()
			case <-time.After(time.Second):
			}
		}
		for _, frame := range fc.forwarded(t) {
			h, err := parseReqHeader(frame[4:])
			if err != nil {
				t.Fatalf("forwarded a frame whose header does not parse: %v", err)
			}
			req := kmsg.RequestForKey(h.key)
			if req == nil {
				continue
			}
			req.SetVersion(h.version)
			if err := req.ReadFrom(frame[4+h.bodyOff:]); err != nil {
				continue // not a request the switch reads
			}
			// The topics of which a partition is sent (a topic listed without partitions asks
			// nothing of it).
			var names []string
			switch r := req.(type) {
			case *kmsg.ProduceRequest:
				for _, t := range r.Topics {
					if len(t.Partitions) > 0 {
						names = append(names, t.Topic)
					}
				}
			case *kmsg.FetchRequest:
				for _, t := range r.Topics {
					if len(t.Partitions) > 0 {
						names = append(names, t.Topic)
					}
				}
			case *kmsg.ListOffsetsRequest:
				for _, t := range r.Topics {
					if len(t.Partitions) > 0 {
						names = append(names, t.Topic)
					}
				}
			case *kmsg.OffsetForLeaderEpochRequest:
				for _, t := range r.Topics {
					if len(t.Partitions) > 0 {
						names = append(names, t.Topic)
					}
				}
			}
			for _, n := range names {
				if n == "promo" || (n == "sealed" && h.key == int16(kmsg.Produce)) {
					t.Fatalf("%s of %s reached the source", kmsg.NameForKey(h.key), n)
				}
			}
		}
	})
}

func (fuzzCatalog) StoreIntent(context.Context, string, string) (string, error) { return "", nil }
func (fuzzCatalog) WithdrawIntent(context.Context, string) error                { return nil }
