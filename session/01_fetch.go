package session

// Fetch (key 1).
//
// Ordinary topics: requests pass as bytes. Responses from v16 (KIP-951) may carry
// NodeEndpoints for partitions whose leader moved; they are rewritten to proxy addresses. The
// response is decoded without copying record bytes, and sent as it came when it has no
// endpoints (the common case). While no mirror topic exists a request is not even decoded.
//
// Mirror topics get the source view. The request's fetch offset goes from source to
// destination offsets (past any fillers, so a response never holds fillers only and a consumer
// never refetches the same offset), its current leader epoch from the presented space to D's,
// and the last-fetched epoch (followers only) is dropped. In the response every batch becomes
// the source batch it stands for (base offset, leader epoch, attributes, max timestamp,
// producer fields, CRC: see batch.Restore), fillers are dropped, a trailing partial batch is
// dropped, a batch the index does not know yet ends the partition's records (the index is
// refreshed before the consumer's next fetch), and the high watermark, last stable offset, log
// start and leader epochs are translated back. Incremental fetch sessions (KIP-227) only ever
// hold destination offsets, consistently, because every offset a client sends is translated.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/batch"
	"offsetgate/catalog"
	"offsetgate/view"
)

var fetchHandler = handler{request: fetchRequest, response: rewriteFetch, responseFrom: 16}

func rewriteFetch(s *Session, version int16, body []byte) ([]byte, bool, error) {
	resp := kmsg.FetchResponse{Version: version}
	if err := resp.UnsafeReadFrom(body); err != nil {
		return nil, false, err
	}
	if len(resp.Brokers) == 0 {
		return nil, false, nil
	}
	fetchEndpoints(s, &resp)
	return resp.AppendTo(nil), true, nil
}

func fetchEndpoints(s *Session, resp *kmsg.FetchResponse) {
	for i := range resp.Brokers {
		e := &resp.Brokers[i]
		s.endpoint(e.NodeID, &e.Host, &e.Port)
	}
}

// fetchView is what a mirror partition's response needs: its index and the epoch base the
// request was translated with.
type fetchView struct {
	pv   *view.Partition
	base int32
}

type fetchKey struct {
	id        catalog.TopicID
	partition int32
}

func fetchRequest(s *Session, r *request) error {
	if !s.mirrorsOn() {
		return nil
	}
	req := kmsg.FetchRequest{Version: r.h.version}
	if err := req.ReadFrom(r.body); err != nil {
		return nil // the broker judges a request offsetgate cannot read
	}
	byID := r.h.version >= 13
	var parts []mirrorPart
	var names []string
	for _, t := range req.Topics {
		if !byID {
			names = append(names, t.Topic)
		}
	}
	if !byID && !s.known(r, names, fetchRequest) {
		return nil
	}
	topicOf := func(t *kmsg.FetchRequestTopic) *catalog.Topic {
		if byID {
			return s.mirrorByID(t.TopicID)
		}
		return s.mark(t.Topic)
	}
	for i := range req.Topics {
		t := &req.Topics[i]
		info := topicOf(t)
		if info == nil {
			continue
		}
		for _, p := range t.Partitions {
			parts = append(parts, mirrorPart{*info, p.Partition})
		}
	}
	if len(parts) == 0 {
		return nil
	}
	if !s.viewed(r, parts, nil, fetchRequest) {
		return nil
	}
	views := map[fetchKey]fetchView{}
	names2id := map[string]catalog.TopicID{}
	for i := range req.Topics {
		t := &req.Topics[i]
		info := topicOf(t)
		if info == nil {
			continue
		}
		names2id[info.Name] = info.ID
		for j := range t.Partitions {
			p := &t.Partitions[j]
			pv := s.partView(*info, p.Partition)
			if pv == nil {
				// Never serve D's batches as the source's: the client retries the connection.
				return errViewUnavailable(info.Name, p.Partition)
			}
			base := pv.EpochBase()
			views[fetchKey{info.ID, p.Partition}] = fetchView{pv, base}
			p.FetchOffset = pv.ToDest(p.FetchOffset)
			p.CurrentLeaderEpoch = toDestEpoch(p.CurrentLeaderEpoch, base)
			p.LastFetchedEpoch = -1
			p.LogStartOffset = -1
		}
	}
	r.replace = rebuild(r.frame, r.h, req.AppendTo(nil), s.cfg.Policy().Native())
	r.onResp = func(s *Session, v int16, body []byte) ([]byte, bool, error) {
		resp := kmsg.FetchResponse{Version: v}
		if err := resp.UnsafeReadFrom(body); err != nil {
			return nil, false, err
		}
		fetchEndpoints(s, &resp)
		for i := range resp.Topics {
			t := &resp.Topics[i]
			id := t.TopicID
			if !byID {
				var ok bool
				if id, ok = names2id[t.Topic]; !ok {
					continue
				}
			}
			for j := range t.Partitions {
				p := &t.Partitions[j]
				if fv, ok := views[fetchKey{id, p.Partition}]; ok {
					restorePartition(fv, p)
				}
			}
		}
		return resp.AppendTo(nil), true, nil
	}
	return nil
}

// restorePartition turns one partition of D's fetch answer into the source's.
func restorePartition(fv fetchView, p *kmsg.FetchResponseTopicPartition) {
	pv := fv.pv
	p.HighWatermark = pv.ToSource(p.HighWatermark)
	p.LastStableOffset = pv.ToSource(p.LastStableOffset)
	p.LogStartOffset = pv.ToSource(p.LogStartOffset)
	if p.CurrentLeader.LeaderEpoch >= 0 {
		p.CurrentLeader.LeaderEpoch += fv.base
	}
	recs := p.RecordBatches
	var out []byte // nil while the kept batches are one run from the start
	keptEnd, off := 0, 0
	for off < len(recs) {
		h, err := batch.ReadHeader(recs[off:])
		if err != nil || off+h.Size() > len(recs) {
			break // a trailing partial batch (or one offsetgate cannot read) is not served
		}
		b := recs[off : off+h.Size()]
		e, ok := pv.At(h.BaseOffset)
		if !ok {
			// D holds a batch the index has not seen yet: serve what comes before it and
			// refresh the index before this partition's next fetch.
			pv.Stale()
			break
		}
		off += h.Size()
		if e.Filler {
			if out == nil {
				out = append(make([]byte, 0, len(recs)), recs[:keptEnd]...)
			}
			continue
		}
		batch.Restore(b, batch.Source{BaseOffset: e.Src, LeaderEpoch: e.Epoch, Attributes: e.Attrs, MaxTimestamp: e.MaxTS,
			ProducerID: e.PID, ProducerEpoch: e.PEpoch, BaseSequence: e.Seq, CRC: e.CRC, Length: e.Len})
		if out != nil {
			out = append(out, b...)
		} else {
			keptEnd = off
		}
	}
	if out != nil {
		p.RecordBatches = out
	} else {
		p.RecordBatches = recs[:keptEnd]
	}
}
