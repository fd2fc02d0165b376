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

	"offsetgate/view"
)

var listOffsetsHandler = handler{request: listOffsetsRequest}

func listOffsetsRequest(s *Session, r *request) error {
	if s.cfg.Catalog == nil {
		return nil
	}
	req := kmsg.ListOffsetsRequest{Version: r.h.version}
	if err := req.ReadFrom(r.body); err != nil {
		return r.undecodable(err)
	}
	topics := make([]namedTopic, len(req.Topics))
	for i, t := range req.Topics {
		topics[i].name = t.Topic
		for _, p := range t.Partitions {
			topics[i].parts = append(topics[i].parts, p.Partition)
		}
	}
	if ok, err := s.viewsReady(r, listOffsetsRequest, topics, nil); !ok {
		return err
	}
	type asked struct {
		pv        *view.Partition
		base      int32
		timestamp int64
	}
	asks := map[partKey]asked{}
	for i := range req.Topics {
		t := &req.Topics[i]
		info := s.sourceTopic(t.Topic)
		if info == nil {
			continue
		}
		for j := range t.Partitions {
			p := &t.Partitions[j]
			pv := s.partView(*info, p.Partition)
			if pv == nil {
				return errViewUnavailable(t.Topic, p.Partition)
			}
			base := pv.EpochBase()
			asks[partKey{t.Topic, p.Partition}] = asked{pv, base, p.Timestamp}
			p.CurrentLeaderEpoch = toDestEpoch(p.CurrentLeaderEpoch, base)
		}
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
				for k := range p.OldStyleOffsets {
					p.OldStyleOffsets[k] = a.pv.ToSource(p.OldStyleOffsets[k])
				}
				switch {
				case a.timestamp == -1: // latest: the mirrored end, at the presented epoch
					p.Offset = a.pv.ToSource(p.Offset)
					if end := a.pv.End(); end >= 0 && p.Offset > end {
						a.pv.Stale() // D holds more than the index knows
					}
					if committed {
						// read_committed: the source's last stable offset (D has no open
						// transaction of the mirror's, so its own answer is its end).
						if lso := a.pv.LastStable(); lso >= 0 {
							p.Offset = min(p.Offset, lso)
						}
					}
					if p.LeaderEpoch >= 0 {
						p.LeaderEpoch += a.base
					}
				case a.timestamp >= 0 || a.timestamp == -3: // a record found by its timestamp
					p.Offset = a.pv.ToSourceRecord(p.Offset)
					p.LeaderEpoch = a.pv.EpochAt(p.Offset)
				default: // earliest and the other log positions
					p.Offset = a.pv.ToSource(p.Offset)
					p.LeaderEpoch = a.pv.EpochAt(p.Offset)
				}
			}
		}
		return resp.AppendTo(nil), true, nil
	}
	return nil
}
