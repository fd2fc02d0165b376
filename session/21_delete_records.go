package session

// DeleteRecords (key 21).
//
// Moving a mirror topic's log start would break its exactness, so only an approved mirroring
// client of the topic may (to follow the source's retention); everyone else gets
// POLICY_VIOLATION for those partitions, and nothing is deleted. offsetgate's own topics are
// never trimmed by clients. The offsets an approved client sends are source offsets: they are
// translated to the destination's with the partition's shift table (looked up off the session's
// goroutine), and the low watermarks D answers are translated back.

import (
	"context"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/catalog"
	"offsetgate/rules"
)

var deleteRecordsHandler = handler{request: deleteRecordsRequest}

func deleteRecordsRequest(s *Session, r *request) error {
	if s.cfg.Catalog == nil {
		return nil
	}
	req := kmsg.DeleteRecordsRequest{Version: r.h.version}
	if err := req.ReadFrom(r.body); err != nil {
		return nil
	}
	var names []string
	for _, t := range req.Topics {
		names = append(names, t.Topic)
	}
	if !s.known(r, names, deleteRecordsRequest) {
		return nil
	}
	var refused []refusal
	var translate []catalog.Topic
	keep := req.Topics[:0]
	for _, t := range req.Topics {
		code, msg := int16(0), ""
		switch {
		case rules.IsOwnTopic(t.Topic):
			code, msg = rules.ErrTopicAuthorization, "offsetgate: "+t.Topic+" is offsetgate's own topic"
		case s.mark(t.Topic) != nil:
			if _, ok := s.cfg.Policy().Approved(s.ident, t.Topic); !ok {
				code, msg = rules.ErrPolicyViolation, "offsetgate: "+t.Topic+" is a mirror topic; only its mirroring client may move its log start"
			} else if s.cfg.Mirror != nil {
				translate = append(translate, *s.mark(t.Topic))
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
	if len(translate) > 0 && !r.resolved {
		deleteRecordsTranslate(s, r, req, translate)
		return nil
	}
	if len(refused) == 0 {
		return nil
	}
	req.Topics = keep
	if len(keep) == 0 {
		var resp kmsg.DeleteRecordsResponse
		spliceDeleteRecords(&resp, refused)
		r.answerWith(&resp)
		return nil
	}
	forwardSpliced(s, r, req.AppendTo(nil), func(resp *kmsg.DeleteRecordsResponse) { spliceDeleteRecords(resp, refused) })
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

// deleteRecordsTranslate looks up the shift tables of the mirror partitions named, then
// forwards the request with destination offsets and answers with source offsets.
func deleteRecordsTranslate(s *Session, r *request, req kmsg.DeleteRecordsRequest, ts []catalog.Topic) {
	m := s.cfg.Mirror
	type part struct {
		t catalog.Topic
		p int32
	}
	var parts []part
	for _, t := range ts {
		for _, rt := range req.Topics {
			if rt.Topic == t.Name {
				for _, p := range rt.Partitions {
					parts = append(parts, part{t, p.Partition})
				}
			}
		}
	}
	r.async = func(ctx context.Context) func(*Session, *request) {
		shifts := map[shiftKey][][2]int64{}
		var failed error
		for _, p := range parts {
			sh, err := m.Shift(ctx, p.t, p.p)
			if err != nil {
				failed = err
				continue
			}
			shifts[shiftKey{strings.Clone(p.t.Name), p.p}] = sh
		}
		return func(s *Session, r *request) {
			r.resolved = true
			if failed != nil {
				// Never trim on a guess: refuse what could not be translated.
				resp := kmsg.DeleteRecordsResponse{Version: r.h.version}
				var rs []refusal
				for _, p := range parts {
					rs = append(rs, refusal{topic: p.t.Name, partition: p.p, code: 7, msg: "offsetgate: shift table lookup failed: " + failed.Error()})
				}
				spliceDeleteRecords(&resp, rs)
				r.answer = responseFrame(r.h.corr, flexibleRequest(21, r.h.version), resp.AppendTo(nil))
				return
			}
			// The other rules first (own topics, unapproved partitions): what they keep is
			// what gets translated.
			_ = deleteRecordsRequest(s, r)
			if r.answer != nil {
				return
			}
			kept := r.frame
			if r.replace != nil {
				kept = r.replace
			}
			kh, err := parseReqHeader(kept[4:])
			if err != nil {
				return
			}
			fresh := kmsg.DeleteRecordsRequest{Version: r.h.version}
			if err := fresh.ReadFrom(kept[4+kh.bodyOff:]); err != nil {
				return
			}
			for i := range fresh.Topics {
				t := &fresh.Topics[i]
				for j := range t.Partitions {
					p := &t.Partitions[j]
					if sh, ok := shifts[shiftKey{t.Topic, p.Partition}]; ok && p.Offset >= 0 {
						p.Offset = toDestination(sh, p.Offset)
					}
				}
			}
			r.replace = rebuild(r.frame, r.h, fresh.AppendTo(nil), s.cfg.Policy().Native())
			prev := r.onResp
			r.onResp = func(s *Session, v int16, body []byte) ([]byte, bool, error) {
				resp := kmsg.DeleteRecordsResponse{Version: v}
				if err := resp.ReadFrom(body); err != nil {
					return nil, false, err
				}
				for i := range resp.Topics {
					t := &resp.Topics[i]
					for j := range t.Partitions {
						p := &t.Partitions[j]
						if sh, ok := shifts[shiftKey{t.Topic, p.Partition}]; ok && p.ErrorCode == 0 {
							p.LowWatermark = toSource(sh, p.LowWatermark)
						}
					}
				}
				out := resp.AppendTo(nil)
				if prev != nil {
					return prev(s, v, out)
				}
				return out, true, nil
			}
		}
	}
}

// toDestination maps a source offset to the destination's with a shift table.
func toDestination(segs [][2]int64, src int64) int64 {
	var delta int64
	for _, sg := range segs {
		if sg[0] <= src {
			delta = sg[1]
		}
	}
	if len(segs) > 0 && src < segs[0][0] {
		delta = segs[0][1]
	}
	return src - delta
}

// toSource maps a destination offset to the source's with a shift table.
func toSource(segs [][2]int64, d int64) int64 {
	if d < 0 || len(segs) == 0 {
		return d
	}
	delta := segs[0][1]
	for _, sg := range segs {
		if sg[0]-sg[1] <= d {
			delta = sg[1]
		}
	}
	return d + delta
}
