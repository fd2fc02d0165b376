package session

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/catalog"
	"offsetgate/ledger"
	"offsetgate/rules"
	"offsetgate/view"
)

// mirrorCatalog marks every topic as a mirror topic (or none).
type mirrorCatalog struct{ mirror bool }

func (c mirrorCatalog) topic(n string, id catalog.TopicID) catalog.Topic {
	t := catalog.Topic{Name: n, ID: id}
	if c.mirror {
		t.Mark = &rules.Mark{}
	}
	return t
}
func (c mirrorCatalog) ByName(n string) (catalog.Topic, bool) {
	return c.topic(n, catalog.TopicID{1}), true
}
func (c mirrorCatalog) ByID(id catalog.TopicID) (catalog.Topic, bool) {
	return c.topic("orders", id), true
}
func (mirrorCatalog) Observe(string, catalog.TopicID) {}
func (mirrorCatalog) Removed(catalog.TopicID) bool    { return false }
func (c mirrorCatalog) Mirrors() []catalog.Topic {
	return []catalog.Topic{c.topic("orders", catalog.TopicID{1})}
}
func (c mirrorCatalog) HasMirrors() bool                      { return c.mirror }
func (mirrorCatalog) Refresh(context.Context, []string) error { return nil }
func (mirrorCatalog) Store(context.Context, catalog.TopicID, rules.Mark) error {
	return nil
}
func (mirrorCatalog) Request(context.Context, kmsg.Request) (kmsg.Response, error) { return nil, nil }

// fixedView serves one prepared index for every partition.
type fixedView struct{ pv *view.Partition }

func (v fixedView) Get(catalog.TopicID, int32) *view.Partition { return v.pv }
func (v fixedView) Load(context.Context, catalog.Topic, int32) (*view.Partition, error) {
	return v.pv, nil
}
func (fixedView) LoadTopic(context.Context, catalog.Topic) error    { return nil }
func (fixedView) LoadLater(catalog.Topic, int32)                    {}
func (fixedView) LoadTopics(context.Context, []catalog.Topic) error { return nil }
func (fixedView) TopicLoaded(catalog.TopicID) bool                  { return true }

// fetchFrames builds a Fetch v13 request and its response: parts partitions, each with
// batches of batchBytes up to partBytes, as D holds a mirror written through offsetgate.
func fetchFrames(parts, partBytes, batchBytes int) (req, resp []byte, entries []ledger.Entry) {
	r := kmsg.NewPtrFetchRequest()
	r.SetVersion(13)
	rt := kmsg.NewFetchRequestTopic()
	rt.TopicID = catalog.TopicID{1}
	fr := kmsg.NewFetchResponse()
	fr.SetVersion(13)
	ft := kmsg.NewFetchResponseTopic()
	ft.TopicID = catalog.TopicID{1}
	var recs []byte
	var d int64
	for len(recs) < partBytes {
		src := srcBatch(d, batchBytes/16, 3) // records of about 16 bytes
		entries = append(entries, entry(src, d))
		h := onD(src, d, 1)
		recs = append(recs, h...)
		d += int64(binary.BigEndian.Uint32(src[23:])) + 1
	}
	for p := 0; p < parts; p++ {
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset = int32(p), 0
		rt.Partitions = append(rt.Partitions, rp)
		pp := kmsg.NewFetchResponseTopicPartition()
		pp.Partition, pp.HighWatermark, pp.LastStableOffset, pp.RecordBatches = int32(p), d, d, recs
		ft.Partitions = append(ft.Partitions, pp)
	}
	r.Topics = append(r.Topics, rt)
	fr.Topics = append(fr.Topics, ft)
	req = kmsg.NewRequestFormatter(kmsg.FormatterClientID("bench")).AppendRequest(nil, r, 1)
	resp = responseFrame(1, true, fr.AppendTo(nil))
	return req, resp, entries
}

// BenchmarkFetchRoundTrip is one Fetch of 4 partitions of 1 MiB through a session: an
// ordinary topic (bytes only), and a mirror topic (every batch restored to the source's).
func BenchmarkFetchRoundTrip(b *testing.B) {
	for _, mirror := range []bool{false, true} {
		name := "ordinary"
		if mirror {
			name = "mirror"
		}
		b.Run(name, func(b *testing.B) {
			req, resp, entries := fetchFrames(4, 1<<20, 16<<10)
			cfg := Config{Catalog: mirrorCatalog{mirror}, View: fixedView{view.NewPartition(entries)}}
			s := New(cfg, nopConn{})
			buf := make([]byte, len(resp))
			b.SetBytes(int64(len(resp)))
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if n, err := s.HandleClient(req); err != nil || n != len(req) {
					b.Fatal(err)
				}
				copy(buf, resp) // restoring rewrites in place: every round starts from D's bytes
				if n, err := s.HandleUpstream(buf); err != nil || n != len(buf) {
					b.Fatal(err)
				}
			}
		})
	}
}

func (mirrorCatalog) StoreIntent(context.Context, string, string) (string, error) { return "", nil }
func (mirrorCatalog) WithdrawIntent(context.Context, string) error                { return nil }
