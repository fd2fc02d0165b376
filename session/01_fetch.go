package session

// Fetch (key 1).
//
// Ordinary topics: requests pass as bytes. Responses from v16 (KIP-951) may carry
// NodeEndpoints for partitions whose leader moved; they are rewritten to proxy addresses. The
// response is decoded without copying record bytes, and sent as it came when it has no
// endpoints (the common case). While no mirror topic exists a request is not even decoded.
// Where the transport passes large answers as they arrive, a request of v16 to v18 that names
// no source-view topic is sent as v15 instead, so that its answer holds nothing to rewrite and
// is never held whole (answer_stream.go).
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
	"encoding/binary"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/batch"
	"offsetgate/catalog"
	"offsetgate/rules"
	"offsetgate/view"
)

var fetchHandler = handler{needs: fetchNeeds, decide: fetchDecide, response: rewriteFetch}

func rewriteFetch(s *Session, version int16, body []byte) ([]byte, bool, error) {
	return rewriteFetchAt(s, version, body, false)
}

// rewriteFetchAt is rewriteFetch for a request at an isolation level (committed:
// read_committed).
func rewriteFetchAt(s *Session, version int16, body []byte, committed bool) ([]byte, bool, error) {
	resp, changed, err := restoreFetch(s, version, body, committed)
	if err != nil || !changed {
		return nil, false, err
	}
	return s.encodeFetch(resp, len(body)), true, nil
}

// restoreFetch reads D's Fetch answer and turns its mirror partitions into the source's (in
// place: the record batches stay in body) and its brokers into offsetgate's addresses; changed
// says whether anything needed to.
func restoreFetch(s *Session, version int16, body []byte, committed bool) (*kmsg.FetchResponse, bool, error) {
	mirrors := s.mirrorsOn()
	if version < 16 && !mirrors {
		return nil, false, nil
	}
	resp := &kmsg.FetchResponse{Version: version}
	if err := resp.UnsafeReadFrom(body); err != nil {
		return nil, false, err
	}
	changed := len(resp.Brokers) > 0
	for i := range resp.Brokers {
		e := &resp.Brokers[i]
		s.endpoint(e.NodeID, &e.Host, &e.Port)
	}
	if mirrors {
		// Every mirror partition of the answer, named in this request or not: an incremental
		// fetch session (KIP-227) answers for partitions the request left out.
		for i := range resp.Topics {
			t := &resp.Topics[i]
			var info *catalog.Topic
			if version >= 13 {
				info = s.sourceTopicByID(t.TopicID)
			} else {
				info = s.sourceTopic(t.Topic)
			}
			if info == nil {
				continue
			}
			for j := range t.Partitions {
				p := &t.Partitions[j]
				changed = true
				pv := s.partView(*info, p.Partition)
				if pv == nil {
					// Never D's batches as the source's; the view is loaded by the time the
					// partition is fetched again.
					p.RecordBatches = nil
					p.ErrorCode = rules.ErrNotLeader // the client refreshes and retries
					continue
				}
				if p.ErrorCode == kerr.OffsetOutOfRange.Code {
					if src, ok := s.skippedFetch[partID{info.ID, p.Partition}]; ok {
						fillerSkip(p, src)
						continue
					}
				}
				if p.ErrorCode == 0 {
					pv.TrimBelow(p.LogStartOffset) // D's retention removed what lies below
				}
				switch fresh, cold := restore(pv, p, info.Mark == nil, committed); {
				case !fresh:
					s.noteStale(mirrorPart{t: *info, partition: p.Partition})
				case cold >= 0:
					// The index page of the next batch is out of memory: it is read back
					// before this partition's next fetch is forwarded.
					s.noteStale(mirrorPart{t: *info, partition: p.Partition, at: cold, hasAt: true})
				}
			}
		}
	}
	return resp, changed, nil
}

// partID names a mirror partition by its topic's id.
type partID struct {
	id        catalog.TopicID
	partition int32
}

// noteSkip remembers (or forgets) that a partition's fetch was sent to D past the fillers of
// a filled hole. An incremental fetch session keeps fetching D at that offset while the
// client leaves the partition out, so it is remembered until the partition is named again.
func (s *Session) noteSkip(k partID, src int64, skipped bool) {
	switch {
	case skipped:
		if s.skippedFetch == nil {
			s.skippedFetch = map[partID]int64{}
		}
		s.skippedFetch[k] = src
	case s.skippedFetch != nil:
		delete(s.skippedFetch, k)
	}
}

// fillerSkip answers a partition whose fetch D refused as out of range after it was moved past
// the fillers of a filled hole (view.ToDestSkipping). The client is at the mirrored end: the
// ledger holds the fillers and what follows them before D does, and a consumer caught up with
// the mirror fetches there the moment D has the batch before the hole. The source would
// answer it with nothing new, not with OFFSET_OUT_OF_RANGE (on which clients reset their
// position, kgo by default a minute back): so does offsetgate, the client's own offset as the
// high watermark, until D holds the fillers.
func fillerSkip(p *kmsg.FetchResponseTopicPartition, src int64) {
	p.ErrorCode, p.RecordBatches, p.AbortedTransactions = 0, nil, nil
	p.HighWatermark, p.LastStableOffset, p.LogStartOffset = src, src, -1
}

// encodeFetch encodes a restored answer of about size bytes as a vectored answer (vector.go):
// record batches of a few KiB and more stay where they lie, in D's frame or the view's copy.
func (s *Session) encodeFetch(resp *kmsg.FetchResponse, size int) []byte {
	s.vec.reset()
	for i := range resp.Topics {
		t := &resp.Topics[i]
		for j := range t.Partitions {
			p := &t.Partitions[j]
			if p.RecordBatches != nil {
				n := len(p.RecordBatches)
				p.RecordBatches = s.vec.take(p.RecordBatches)
				size -= n - len(p.RecordBatches)
			}
		}
	}
	out := resp.AppendTo(s.reserve(max(size, 0) + 64))
	if cap(s.outBuf) > maxKeptOutBuf {
		s.outBuf = nil // a rare huge answer is not kept for the connection's lifetime
	} else if cap(out) == cap(s.outBuf) {
		s.outBuf = out[:0]
	}
	s.vecUsed, s.vecFlexible = true, resp.IsFlexible()
	return out
}

// fetchTopics names the request's topics and partitions (by name before v13, by id from v13).
func fetchTopics(r *request) []namedTopic {
	req := r.req.(*kmsg.FetchRequest)
	topics := make([]namedTopic, len(req.Topics))
	for i, t := range req.Topics {
		if r.h.version >= 13 {
			topics[i].id = t.TopicID
		} else {
			topics[i].name = t.Topic
		}
		for _, p := range t.Partitions {
			topics[i].parts = append(topics[i].parts, p.Partition)
		}
	}
	return topics
}

// fetchNeeds: every topic a fetch names must be known (its mark read up to date) before the
// request is forwarded, mirror topics or not yet: a mirror topic created through another
// instance a moment ago must not be served with the destination's offsets. The views of the
// mirror partitions named are loaded, with the index page where each fetch starts in memory,
// and so are those whose index fell behind or ran into a page out of memory in an earlier
// answer, named or not (an incremental session keeps fetching them at the same offset).
func fetchNeeds(s *Session, r *request) needs {
	n := namedNeeds(fetchTopics(r))
	stale := append([]mirrorPart(nil), s.staleFetch...)
	n.views = func(s *Session) ([]mirrorPart, []catalog.Topic) {
		if !s.mirrorsOn() {
			return stale, nil
		}
		req := r.req.(*kmsg.FetchRequest)
		var parts []mirrorPart
		for _, t := range req.Topics {
			name, id := t.Topic, t.TopicID
			if r.h.version >= 13 {
				name = ""
			} else {
				id = catalog.TopicID{}
			}
			info := s.topicOf(name, id)
			if info == nil {
				continue
			}
			for _, p := range t.Partitions {
				parts = append(parts, mirrorPart{t: *info, partition: p.Partition, at: p.FetchOffset, hasAt: true, atSrc: true})
			}
		}
		return append(parts, stale...), nil
	}
	return n
}

func fetchDecide(s *Session, r *request) error {
	req := r.req.(*kmsg.FetchRequest)
	byID := r.h.version >= 13
	// Ids the destination does not show offsetgate are answered UNKNOWN_TOPIC_ID (clients then
	// refresh their metadata) instead of being forwarded unjudged; offsetgate's own topics
	// (the marks name who approved what, from where) are read only by approved mirroring
	// clients (offsetgate status).
	var unknown []refusal
	keep := req.Topics[:0]
	for _, t := range req.Topics {
		code := int16(0)
		switch {
		case byID && !s.idKnown(t.TopicID):
			code = rules.ErrUnknownTopicID
		case rules.IsOwnTopic(s.topicName(t.Topic, t.TopicID)) && !s.cfg.Policy().Mirroring(s.ident):
			code = rules.ErrTopicAuthorization
		}
		if code == 0 {
			keep = append(keep, t)
			continue
		}
		for _, p := range t.Partitions {
			unknown = append(unknown, refusal{topic: strings.Clone(t.Topic), topicID: t.TopicID, partition: p.Partition, code: code})
		}
	}
	req.Topics = keep
	committed := req.IsolationLevel == 1
	switch {
	case len(unknown) > 0:
		r.onResp = func(s *Session, version int16, body []byte) ([]byte, bool, error) {
			return spliceFetchErrors(s, version, body, unknown, committed)
		}
	case !s.mirrorsOn():
		s.planFetchAnswer(r, req, false, false)
		return nil
	case committed:
		r.onResp = func(s *Session, version int16, body []byte) ([]byte, bool, error) {
			return rewriteFetchAt(s, version, body, true)
		}
	}
	s.staleFetch = s.staleFetch[:0] // loaded by now, or the fetch below is refused
	viewed := false
	err := s.eachView(r, fetchTopics(r), func(ti, pi int, info *catalog.Topic, pv *view.Partition) {
		p := &req.Topics[ti].Partitions[pi]
		src := p.FetchOffset
		var skipped bool
		p.FetchOffset, skipped = pv.ToDestSkipping(src)
		s.noteSkip(partID{info.ID, p.Partition}, src, skipped)
		p.CurrentLeaderEpoch = toDestEpoch(p.CurrentLeaderEpoch, pv.EpochBase())
		p.LastFetchedEpoch = -1
		p.LogStartOffset = -1
		viewed = true
	})
	if err != nil {
		return err
	}
	s.planFetchAnswer(r, req, len(unknown) > 0, viewed)
	if !viewed && len(unknown) == 0 {
		return nil
	}
	r.replace = rebuild(r.frame, r.h, req.AppendTo(nil), s.cfg.Policy().Native())
	return nil
}

// spliceFetchErrors rewrites a Fetch answer as usual and adds partitions offsetgate answers
// itself with an error.
func spliceFetchErrors(s *Session, version int16, body []byte, errs []refusal, committed bool) ([]byte, bool, error) {
	resp, _, err := restoreFetch(s, version, body, committed)
	if err != nil {
		return nil, false, err
	}
	if resp == nil { // nothing to restore: not read yet
		resp = &kmsg.FetchResponse{Version: version}
		if err := resp.UnsafeReadFrom(body); err != nil {
			return nil, false, err
		}
	}
	for _, e := range errs {
		var t *kmsg.FetchResponseTopic
		for i := range resp.Topics {
			if resp.Topics[i].TopicID == e.topicID && resp.Topics[i].Topic == e.topic {
				t = &resp.Topics[i]
			}
		}
		if t == nil {
			nt := kmsg.NewFetchResponseTopic()
			nt.Topic, nt.TopicID = e.topic, e.topicID
			resp.Topics = append(resp.Topics, nt)
			t = &resp.Topics[len(resp.Topics)-1]
		}
		p := kmsg.NewFetchResponseTopicPartition()
		p.Partition, p.ErrorCode = e.partition, e.code
		p.HighWatermark, p.LastStableOffset, p.LogStartOffset = -1, -1, -1
		t.Partitions = append(t.Partitions, p)
	}
	return s.encodeFetch(resp, len(body)+32*len(errs)), true, nil
}

// restorePartition turns one partition of D's fetch answer into the source's.
// It reports false when D held a batch the index does not know yet. For a promoted topic the
// batches written after the mirror (by ordinary producers) are served in the source's terms too:
// offsets shifted as the last mirrored batch was, epochs above every source epoch served (the
// presented space), so consumers go on across the promotion without a jump.
//
// Transactions are the source's: D holds them as plain batches (and fillers for the markers),
// so the last stable offset and the aborted transactions come from the index. A read_committed
// answer (committed) stops before the last stable offset and names the aborted transactions of
// what it serves, as the source's broker does.
func restorePartition(pv *view.Partition, p *kmsg.FetchResponseTopicPartition, promoted, committed bool) bool {
	fresh, _ := restore(pv, p, promoted, committed)
	return fresh
}

// restore is restorePartition, and says where the records served stop for want of an index
// page out of memory (the destination offset of the first batch not served; -1: they do not).
// The page is read back before the next fetch of the partition, which starts there.
func restore(pv *view.Partition, p *kmsg.FetchResponseTopicPartition, promoted, committed bool) (fresh bool, cold int64) {
	cold, fresh = -1, true
	dHWM := p.HighWatermark
	p.HighWatermark = pv.ToSource(p.HighWatermark)
	p.LogStartOffset = pv.ToSource(p.LogStartOffset)
	// D's own last stable offset is its high watermark for what was mirrored (no transaction
	// is open on D), and counts after a promotion (producers write D's own transactions).
	lso := pv.ToSource(p.LastStableOffset)
	if l := pv.LastStable(); l >= 0 {
		lso = min(lso, l)
	}
	p.LastStableOffset = lso
	// D's aborted transactions are its own (after a promotion), in D offsets.
	dAborted := p.AbortedTransactions
	p.AbortedTransactions = nil
	for _, a := range dAborted {
		a.FirstOffset = pv.ToSource(a.FirstOffset)
		p.AbortedTransactions = append(p.AbortedTransactions, a)
	}
	if p.CurrentLeader.LeaderEpoch >= 0 {
		p.CurrentLeader.LeaderEpoch += pv.EpochBase()
	}
	recs := p.RecordBatches
	var out []byte // nil while the kept batches are one run from the start
	keptEnd, off := 0, 0
	servedFrom, servedTo := int64(-1), int64(-1) // source offsets of what is served
	served := func(first, last int64) {
		if servedFrom < 0 {
			servedFrom = first
		}
		servedTo = last + 1
	}
	for off < len(recs) {
		h, err := batch.ReadHeader(recs[off:])
		if err != nil || off+h.Size() > len(recs) {
			break // a trailing partial batch (or one offsetgate cannot read) is not served
		}
		b := recs[off : off+h.Size()]
		e, ok := pv.At(h.BaseOffset)
		if !ok && promoted && h.BaseOffset >= pv.DestEnd() {
			src := pv.ToSource(h.BaseOffset)
			if committed && src >= lso {
				break
			}
			off += h.Size()
			binary.BigEndian.PutUint64(b[0:], uint64(src))
			if h.LeaderEpoch >= 0 {
				binary.BigEndian.PutUint32(b[12:], uint32(h.LeaderEpoch+pv.EpochBase()))
			}
			served(src, src+int64(h.LastOffsetDelta))
			if out != nil {
				out = append(out, b...)
			} else {
				keptEnd = off
			}
			continue
		}
		if !ok && pv.Cold(h.BaseOffset) {
			cold = h.BaseOffset
			break
		}
		if !ok {
			// D holds a batch the index has not seen yet: serve what comes before it and
			// refresh the index before this partition's next fetch.
			pv.Stale()
			fresh = false
			break
		}
		if committed && e.Src >= lso {
			// read_committed: nothing at or past the last stable offset. The batches show
			// offsets the index has not seen (written through another instance) when they
			// reach them; this answer stops before, so D's high watermark says it (else an
			// open transaction whose marker only the ledger has would hold its consumers).
			if !promoted && dHWM > pv.DestEnd() {
				pv.Stale()
				fresh = false
			}
			break
		}
		if h.Attributes&batch.AttrControl != 0 {
			// offsetgate writes only data batches to a mirror partition (a source marker is
			// held by fillers): a control batch on D was written behind offsetgate. Restoring
			// over it would turn a marker into a record that never existed: serve nothing of
			// this partition and say the storage is bad.
			p.RecordBatches, p.ErrorCode = nil, rules.ErrHalted
			return true, -1
		}
		off += h.Size()
		if len(e.Raw) > 0 {
			// The source's batch, byte for byte, where D holds fillers (a marker) or a dense
			// copy (a batch compaction left with fewer records than offsets), or where the
			// source's cleaner changed the batch since it was mirrored.
			if out == nil {
				out = append(make([]byte, 0, len(recs)), recs[:keptEnd]...)
			}
			out = append(out, e.Raw...)
			served(e.Src, e.Last)
			continue
		}
		if e.Filler || e.Gone {
			// Fillers hold offsets only; a gone batch the source's cleaner removed whole.
			if out == nil {
				out = append(make([]byte, 0, len(recs)), recs[:keptEnd]...)
			}
			continue
		}
		batch.Restore(b, batch.Source{BaseOffset: e.Src, LeaderEpoch: e.Epoch, Attributes: e.Attrs, MaxTimestamp: e.MaxTS,
			ProducerID: e.SrcPID, ProducerEpoch: e.SrcPEpoch, BaseSequence: e.SrcSeq, CRC: e.CRC, Length: e.Len})
		served(e.Src, e.Last)
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
	if committed && servedFrom >= 0 {
		for _, a := range pv.AbortedIn(servedFrom, servedTo) {
			at := kmsg.NewFetchResponseTopicPartitionAbortedTransaction()
			at.ProducerID, at.FirstOffset = a.ProducerID, a.First
			p.AbortedTransactions = append(p.AbortedTransactions, at)
		}
	}
	return fresh, cold
}

// noteStale remembers a mirror partition whose index must be refreshed, or whose index page at
// an offset read back, before the next fetch.
func (s *Session) noteStale(p mirrorPart) {
	for i, q := range s.staleFetch {
		if q.t.ID == p.t.ID && q.partition == p.partition {
			if p.hasAt {
				s.staleFetch[i].at, s.staleFetch[i].atSrc, s.staleFetch[i].hasAt = p.at, p.atSrc, true
			}
			return
		}
	}
	s.staleFetch = append(s.staleFetch, p)
}
