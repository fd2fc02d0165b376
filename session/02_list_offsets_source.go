package session

// ListOffsets (key 2) on a source connection once a topic is promoted (promoted.go): a
// promoted topic's partitions are asked of the destination's leaders and answered in source
// terms (listOffsetsToSource); the rest goes to the source.

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func (s *Session) sourceListOffsets(r *request) (bool, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.SetVersion(r.h.version)
	if err := req.ReadFrom(append([]byte(nil), r.body...)); err != nil {
		return false, fmt.Errorf("%w: ListOffsets v%d on a source connection: %v", ErrUndecodable, r.h.version, err)
	}
	topics := make([]reqTopic, len(req.Topics))
	for i, t := range req.Topics {
		topics[i].name = t.Topic
		for _, p := range t.Partitions {
			topics[i].parts = append(topics[i].parts, p.Partition)
		}
	}
	parts := s.promotedParts(topics, false, nil)
	if len(parts) == 0 || req.ReplicaID >= 0 {
		return false, nil // a follower's request is refused by sourcePass
	}
	c, client := s.movesCarrier(), string(r.h.clientID)
	rest := restCount(topics, parts)
	committed := req.IsolationLevel == 1
	r.async = func(ctx context.Context) func(*Session, *request) error {
		locate(ctx, c, parts)
		answers := sendByLeader(ctx, c, client, parts, func(idx []int) kmsg.Request {
			d := kmsg.NewPtrListOffsetsRequest()
			d.Version = req.Version
			d.ReplicaID, d.IsolationLevel, d.TimeoutMillis = -1, req.IsolationLevel, req.TimeoutMillis
			for _, i := range idx {
				p := parts[i]
				asked := req.Topics[p.ti].Partitions[p.pi]
				asked.CurrentLeaderEpoch = -1 // the source's epoch: D checks none
				var dt *kmsg.ListOffsetsRequestTopic
				for j := range d.Topics {
					if d.Topics[j].Topic == p.name {
						dt = &d.Topics[j]
					}
				}
				if dt == nil {
					nt := kmsg.NewListOffsetsRequestTopic()
					nt.Topic = p.name
					d.Topics = append(d.Topics, nt)
					dt = &d.Topics[len(d.Topics)-1]
				}
				dt.Partitions = append(dt.Partitions, asked)
			}
			return d
		})
		out := make([]kmsg.ListOffsetsResponseTopicPartition, len(parts))
		for i, p := range parts {
			a := answers[p.addr]
			ans := kmsg.NewListOffsetsResponseTopicPartition()
			ans.Partition = p.partition
			found := false
			if p.err == nil && a.err == nil {
				for _, t := range a.resp.(*kmsg.ListOffsetsResponse).Topics {
					for _, got := range t.Partitions {
						if t.Topic == p.name && got.Partition == p.partition {
							ans, found = got, true
						}
					}
				}
			}
			switch {
			case !found:
				ans.ErrorCode = partErr(c, p, a)
			case ans.ErrorCode != 0:
				if leadership(ans.ErrorCode) {
					c.ForgetLeader(p.name, p.partition)
				}
			default:
				asked := req.Topics[p.ti].Partitions[p.pi]
				listOffsetsToSource(p.pv, p.pv.EpochBase(), asked.Timestamp, committed, &ans)
			}
			out[i] = ans
		}
		return func(s *Session, r *request) error {
			add := func(resp *kmsg.ListOffsetsResponse) {
				for i, p := range parts {
					name := req.Topics[p.ti].Topic
					var rt *kmsg.ListOffsetsResponseTopic
					for j := range resp.Topics {
						if resp.Topics[j].Topic == name {
							rt = &resp.Topics[j]
						}
					}
					if rt == nil {
						nt := kmsg.NewListOffsetsResponseTopic()
						nt.Topic = name
						resp.Topics = append(resp.Topics, nt)
						rt = &resp.Topics[len(resp.Topics)-1]
					}
					rt.Partitions = append(rt.Partitions, out[i])
				}
			}
			if rest == 0 {
				resp := kmsg.NewPtrListOffsetsResponse()
				resp.Version = req.Version
				add(resp)
				r.answer = responseFrame(r.h.corr, flexibleRequest(int16(kmsg.ListOffsets), r.h.version), resp.AppendTo(nil))
				return nil
			}
			src := *req
			src.Topics = sourceTopics(req.Topics, func(t *kmsg.ListOffsetsRequestTopic) *[]kmsg.ListOffsetsRequestTopicPartition { return &t.Partitions }, parts)
			r.replace = rebuild(r.frame, r.h, src.AppendTo(nil), s.cfg.Policy().Native())
			r.onResp = func(s *Session, version int16, body []byte) ([]byte, bool, error) {
				resp := kmsg.ListOffsetsResponse{Version: version}
				if err := resp.ReadFrom(body); err != nil {
					return nil, false, err
				}
				add(&resp)
				return resp.AppendTo(nil), true, nil
			}
			return nil
		}
	}
	return true, nil
}
