package session

// DescribeProducers (key 61) on a source connection once a topic is promoted (promoted.go): the
// source's broker knows none of the writes made on the destination since the promotion, so a
// promoted topic's partitions are asked of the destination's leaders (which check leadership
// and authorization) and answered as a destination listener answers them (sourceProducers:
// the source view's producer states and the destination's own producers but offsetgate's, in
// source terms); the rest goes to the source.

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func (s *Session) sourceDescribeProducers(r *request) (bool, error) {
	req := kmsg.NewPtrDescribeProducersRequest()
	req.SetVersion(r.h.version)
	if err := req.ReadFrom(append([]byte(nil), r.body...)); err != nil {
		return false, fmt.Errorf("%w: DescribeProducers v%d on a source connection: %v", ErrUndecodable, r.h.version, err)
	}
	topics := make([]reqTopic, len(req.Topics))
	for i, t := range req.Topics {
		topics[i].name = t.Topic
		topics[i].parts = append(topics[i].parts, t.Partitions...)
	}
	parts := s.promotedParts(topics, false, nil)
	if len(parts) == 0 {
		return false, nil
	}
	c, client := s.movesCarrier(), string(r.h.clientID)
	rest := restCount(topics, parts)
	r.async = func(ctx context.Context) func(*Session, *request) error {
		locate(ctx, c, parts)
		// The states are the index's: read to the ledger's end first (another instance may
		// have carried writes since this one last read), as a destination listener does.
		for i := range parts {
			p := &parts[i]
			if p.err != nil {
				continue
			}
			p.pv.Stale()
			if p.pv, p.err = c.SourceView(ctx, p.name, p.partition); p.err == nil && p.pv == nil {
				p.err = fmt.Errorf("%s has no source view on the destination", p.name)
			}
		}
		answers := sendByLeader(ctx, c, client, parts, func(idx []int) kmsg.Request {
			d := kmsg.NewPtrDescribeProducersRequest()
			d.Version = req.Version
			for _, i := range idx {
				p := parts[i]
				var dt *kmsg.DescribeProducersRequestTopic
				for j := range d.Topics {
					if d.Topics[j].Topic == p.name {
						dt = &d.Topics[j]
					}
				}
				if dt == nil {
					nt := kmsg.NewDescribeProducersRequestTopic()
					nt.Topic = p.name
					d.Topics = append(d.Topics, nt)
					dt = &d.Topics[len(d.Topics)-1]
				}
				dt.Partitions = append(dt.Partitions, p.partition)
			}
			return d
		})
		now := time.Now()
		out := make([]kmsg.DescribeProducersResponseTopicPartition, len(parts))
		for i, p := range parts {
			a := answers[p.addr]
			ans := kmsg.NewDescribeProducersResponseTopicPartition()
			ans.Partition = p.partition
			found := false
			if p.err == nil && a.err == nil {
				for _, t := range a.resp.(*kmsg.DescribeProducersResponse).Topics {
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
				ans.ActiveProducers = sourceProducers(p.pv, true, ans.ActiveProducers, now)
			}
			out[i] = ans
		}
		return func(s *Session, r *request) error {
			add := func(resp *kmsg.DescribeProducersResponse) {
				for i, p := range parts {
					name := req.Topics[p.ti].Topic
					var rt *kmsg.DescribeProducersResponseTopic
					for j := range resp.Topics {
						if resp.Topics[j].Topic == name {
							rt = &resp.Topics[j]
						}
					}
					if rt == nil {
						nt := kmsg.NewDescribeProducersResponseTopic()
						nt.Topic = name
						resp.Topics = append(resp.Topics, nt)
						rt = &resp.Topics[len(resp.Topics)-1]
					}
					rt.Partitions = append(rt.Partitions, out[i])
				}
			}
			if rest == 0 {
				resp := kmsg.NewPtrDescribeProducersResponse()
				resp.Version = req.Version
				add(resp)
				r.answer = responseFrame(r.h.corr, flexibleRequest(int16(kmsg.DescribeProducers), r.h.version), resp.AppendTo(nil))
				return nil
			}
			src := *req
			src.Topics = sourceTopics(req.Topics, func(t *kmsg.DescribeProducersRequestTopic) *[]int32 { return &t.Partitions }, parts)
			r.replace = rebuild(r.frame, r.h, src.AppendTo(nil), s.cfg.Policy().Native())
			r.onResp = func(s *Session, version int16, body []byte) ([]byte, bool, error) {
				resp := kmsg.DescribeProducersResponse{Version: version}
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
