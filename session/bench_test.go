package session

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/catalog"
	"offsetgate/rules"
)

type nopConn struct{}

func (nopConn) WriteClient([]byte)    {}
func (nopConn) WriteClientv([][]byte) {}
func (nopConn) WriteUpstream([]byte)  {}
func (nopConn) ClientPending() int    { return 0 }
func (nopConn) Resume()               {}
func (nopConn) WaitClientDrain()      {}
func (nopConn) Post(fn func())        { fn() }
func (nopConn) Close(error)           {}

// fakeCatalog knows every topic and marks none.
type fakeCatalog struct{}

func (fakeCatalog) ByName(n string) (catalog.Topic, bool) {
	return catalog.Topic{Name: n, ID: [16]byte{1}}, true
}
func (fakeCatalog) ByID(id catalog.TopicID) (catalog.Topic, bool) {
	return catalog.Topic{Name: "t", ID: id}, true
}
func (fakeCatalog) Observe(string, catalog.TopicID)         {}
func (fakeCatalog) Removed(catalog.TopicID) bool            { return false }
func (fakeCatalog) Mirrors() []catalog.Topic                { return nil }
func (fakeCatalog) HasMirrors() bool                        { return false }
func (fakeCatalog) Refresh(context.Context, []string) error { return nil }
func (fakeCatalog) Store(context.Context, catalog.TopicID, rules.Mark) error {
	return nil
}
func (fakeCatalog) Request(context.Context, kmsg.Request) (kmsg.Response, error) { return nil, nil }

func produceFrames(parts, recBytes int) (req, resp []byte) {
	r := kmsg.NewPtrProduceRequest()
	r.SetVersion(12)
	r.Acks = -1
	t := kmsg.NewProduceRequestTopic()
	t.Topic = "orders"
	pr := kmsg.NewProduceResponse()
	pr.SetVersion(12)
	rt := kmsg.NewProduceResponseTopic()
	rt.Topic = "orders"
	for p := 0; p < parts; p++ {
		tp := kmsg.NewProduceRequestTopicPartition()
		tp.Partition, tp.Records = int32(p), make([]byte, recBytes)
		t.Partitions = append(t.Partitions, tp)
		rp := kmsg.NewProduceResponseTopicPartition()
		rp.Partition = int32(p)
		rt.Partitions = append(rt.Partitions, rp)
	}
	r.Topics = append(r.Topics, t)
	pr.Topics = append(pr.Topics, rt)
	req = kmsg.NewRequestFormatter(kmsg.FormatterClientID("bench")).AppendRequest(nil, r, 1)
	resp = responseFrame(1, true, pr.AppendTo(nil))
	return req, resp
}

// BenchmarkProduceRoundTrip is one Produce request and its response through a session, with
// the mirror rules on (every Produce is read for its topics) and off (bytes only).
func BenchmarkProduceRoundTrip(b *testing.B) {
	for _, rulesOn := range []bool{false, true} {
		name := "bytes-only"
		cfg := Config{}
		if rulesOn {
			name = "mirror-rules"
			cfg.Catalog = fakeCatalog{}
		}
		b.Run(name, func(b *testing.B) {
			req, resp := produceFrames(16, 64<<10)
			s := New(cfg, nopConn{})
			b.SetBytes(int64(len(req)))
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if n, err := s.HandleClient(req); err != nil || n != len(req) {
					b.Fatal(err)
				}
				if n, err := s.HandleUpstream(resp); err != nil || n != len(resp) {
					b.Fatal(err)
				}
			}
		})
	}
}

func (fakeCatalog) StoreIntent(context.Context, string, string) (string, error) { return "", nil }
func (fakeCatalog) WithdrawIntent(context.Context, string) error                { return nil }
