package session

// ListOffsets (key 2).
//
// Ordinary topics pass through. For a mirror topic the destination answers in its own offsets
// and epochs; offsetgate translates each answer to the source's with the partition's source
// view: "latest" is the mirrored end (that is how a mirroring client resumes), "earliest" the
// mirrored log start, a time lookup that lands on a filler gives the offset of the batch the
// filler stands in front of (fillers carry its timestamp). The epoch is the presented one for
// "latest" and the source epoch of the batch holding the offset otherwise. The client's current
// leader epoch goes to D in D's terms. The view may need the ledger (a partition not loaded by
// this process yet): that read runs off the session's goroutine.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/catalog"
	"offsetgate/view"
)

var listOffsetsHandler = handler{
	needs:  func(_ *Session, r *request) needs { return namedNeeds(listOffsetsTopics(r)) },
	decide: listOffsetsDecide,
}

func listOffsetsTopics(r *request) []namedTopic {
	req := r.req.(*kmsg.ListOffsetsRequest)
	topics := make([]namedTopic, len(req.Topics))
	for i, t := range req.Topics {
		topics[i].name = t.Topic
		for _, p := range t.Partitions {
			topics[i].parts = append(topics[i].parts, p.Partition)
		}
	}
	return topics
}

func listOffsetsDecide(s *Session, r *request) error {
	req := r.req.(*kmsg.ListOffsetsRequest)
	type asked struct {
		pv        *view.Partition
		base      int32
		timestamp int64
	}
	asks := map[partKey]asked{}
	err := s.eachView(r, listOffsetsTopics(r), func(ti, pi int, _ *catalog.Topic, pv *view.Partition) {
		t := &req.Topics[ti]
		p := &t.Partitions[pi]
		base := pv.EpochBase()
		asks[partKey{t.Topic, p.Partition}] = asked{pv, base, p.Timestamp}
		p.CurrentLeaderEpoch = toDestEpoch(p.CurrentLeaderEpoch, base)
	})
	if err != nil || len(asks) == 0 {
		return err
	}
	committed := req.IsolationLevel == 1
	r.replace = rebuild(r.frame, r.h, req.AppendTo(nil), s.cfg.Policy().Native())
	r.onResp = func(_ *Session, v int16, body []byte) ([]byte, bool, error) {
		resp := kmsg.ListOffsetsResponse{Version: v}
		if err := resp.ReadFrom(body); err != nil {
			return nil, false, err
		}
		for i := range resp.Topics {
			t := &resp.Topics[i]
			for j := range t.Partitions {
				p := &t.Partitions[j]
				a, ok := asks[partKey{t.Topic, p.Partition}]
				if !ok || p.ErrorCode != 0 {
					continue
				}
				listOffsetsToSource(a.pv, a.base, a.timestamp, committed, p)
			}
		}
		return resp.AppendTo(nil), true, nil
	}
	return nil
}

// listOffsetsToSource turns the destination's answer for a partition with a source view into
// the source's terms (timestamp is what was asked: -1 latest, -2 earliest, and so on).
func listOffsetsToSource(pv *view.Partition, base int32, timestamp int64, committed bool, p *kmsg.ListOffsetsResponseTopicPartition) {
	for k := range p.OldStyleOffsets {
		p.OldStyleOffsets[k] = pv.ToSource(p.OldStyleOffsets[k])
	}
	switch {
	case timestamp == -1: // latest: the mirrored end, at the presented epoch
		p.Offset = pv.ToSource(p.Offset)
		if end := pv.End(); end >= 0 && p.Offset > end {
			pv.Stale() // D holds more than the index knows
		}
		if committed {
			// read_committed: the source's last stable offset (D has no open transaction of
			// the mirror's, so its own answer is its end).
			if lso := pv.LastStable(); lso >= 0 {
				p.Offset = min(p.Offset, lso)
			}
		}
		if p.LeaderEpoch >= 0 {
			p.LeaderEpoch += base
		}
	case timestamp >= 0 || timestamp == -3: // a record found by its timestamp
		p.Offset = pv.ToSourceRecord(p.Offset)
		p.LeaderEpoch = pv.EpochAt(p.Offset)
	default: // earliest and the other log positions
		p.Offset = pv.ToSource(p.Offset)
		p.LeaderEpoch = pv.EpochAt(p.Offset)
	}
}
