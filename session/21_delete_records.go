package session

// DeleteRecords (key 21).
//
// Moving a mirror topic's log start would break its exactness, so only an approved mirroring
// client of the topic may (to follow the source's retention); everyone else gets
// POLICY_VIOLATION for those partitions, and nothing is deleted. offsetgate's own topics are
// never trimmed by clients. The offsets an approved client sends are source offsets: they are
// translated to the destination's with the partition's source view (exact inside filled holes,
// the first offset after an unfilled one, as for commits), and the low watermarks D answers are
// translated back. A partition whose view cannot be read is refused (nothing is trimmed on a
// guess).

import (
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/catalog"
	"offsetgate/rules"
	"offsetgate/view"
)

var deleteRecordsHandler = handler{
	needs: func(_ *Session, r *request) needs {
		req := r.req.(*kmsg.DeleteRecordsRequest)
		var n needs
		for _, t := range req.Topics {
			n.names = append(n.names, t.Topic)
		}
		// The views of the mirror partitions an approved client moves the log start of.
		n.views = func(s *Session) ([]mirrorPart, []catalog.Topic) {
			var parts []mirrorPart
			for _, t := range req.Topics {
				if m := s.mark(t.Topic); m != nil {
					for _, p := range t.Partitions {
						parts = append(parts, mirrorPart{t: *m, partition: p.Partition})
					}
				}
			}
			return parts, nil
		}
		return n
	},
	decide: deleteRecordsDecide,
	refuse: deleteRecordsRefuse,
}

func deleteRecordsDecide(s *Session, r *request) error {
	req := *r.req.(*kmsg.DeleteRecordsRequest)
	var refused []refusal
	var translate []mirrorPart
	keep := req.Topics[:0]
	for _, t := range req.Topics {
		code, msg := int16(0), ""
		switch {
		case rules.IsOwnTopic(t.Topic):
			code, msg = rules.ErrTopicAuthorization, "offsetgate: "+t.Topic+" is offsetgate's own topic"
		case s.mark(t.Topic) != nil:
			if _, ok := s.cfg.Policy().Approved(s.ident, t.Topic); !ok {
				code, msg = rules.ErrPolicyViolation, "offsetgate: "+t.Topic+" is a mirror topic; only its mirroring client may move its log start"
			} else if s.cfg.View != nil {
				for _, p := range t.Partitions {
					translate = append(translate, mirrorPart{t: *s.mark(t.Topic), partition: p.Partition})
				}
			}
		}
		if code == 0 {
			keep = append(keep, t)
			continue
		}
		for _, p := range t.Partitions {
			refused = append(refused, refusal{topic: strings.Clone(t.Topic), partition: p.Partition, code: code, msg: msg})
		}
	}
	views := map[partKey]*view.Partition{}
	for _, mp := range translate {
		if pv := s.partView(mp.t, mp.partition); pv != nil {
			views[partKey{mp.t.Name, mp.partition}] = pv
		} else {
			refused = append(refused, refusal{topic: mp.t.Name, partition: mp.partition, code: rules.ErrTimedOut,
				msg: "offsetgate: the mirror partition's ledger could not be read; nothing was deleted"})
		}
	}
	if len(refused) == 0 && len(views) == 0 {
		return nil
	}
	kept := keep[:0]
	for _, t := range keep {
		ps := t.Partitions[:0]
		for _, p := range t.Partitions {
			pv, mirrored := views[partKey{t.Topic, p.Partition}]
			if !mirrored && s.mark(t.Topic) != nil && s.cfg.View != nil {
				continue // refused above: its view is missing
			}
			if mirrored && p.Offset >= 0 {
				p.Offset = pv.CommitToDest(p.Offset)
			}
			ps = append(ps, p)
		}
		if len(ps) > 0 {
			t.Partitions = ps
			kept = append(kept, t)
		}
	}
	req.Topics = kept
	if len(kept) == 0 {
		var resp kmsg.DeleteRecordsResponse
		spliceDeleteRecords(&resp, refused)
		r.answerWith(&resp)
		return nil
	}
	forwardSpliced(s, r, req.AppendTo(nil), func(resp *kmsg.DeleteRecordsResponse) {
		for i := range resp.Topics {
			t := &resp.Topics[i]
			for j := range t.Partitions {
				p := &t.Partitions[j]
				if pv, ok := views[partKey{t.Topic, p.Partition}]; ok && p.ErrorCode == 0 {
					pv.TrimBelow(p.LowWatermark) // what lies below is gone for every reader
					p.LowWatermark = pv.ToSource(p.LowWatermark)
				}
			}
		}
		spliceDeleteRecords(resp, refused)
	})
	return nil
}

func spliceDeleteRecords(resp *kmsg.DeleteRecordsResponse, rs []refusal) {
	for _, rf := range rs {
		var t *kmsg.DeleteRecordsResponseTopic
		for i := range resp.Topics {
			if resp.Topics[i].Topic == rf.topic {
				t = &resp.Topics[i]
			}
		}
		if t == nil {
			nt := kmsg.NewDeleteRecordsResponseTopic()
			nt.Topic = rf.topic
			resp.Topics = append(resp.Topics, nt)
			t = &resp.Topics[len(resp.Topics)-1]
		}
		p := kmsg.NewDeleteRecordsResponseTopicPartition()
		p.Partition, p.ErrorCode, p.LowWatermark = rf.partition, rf.code, -1
		t.Partitions = append(t.Partitions, p)
	}
}
