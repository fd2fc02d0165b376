package session

// OffsetForLeaderEpoch (key 23).
//
// Consumers (KIP-320) ask where a leader epoch ends to detect log truncation after a leader
// change. For a mirror partition the question is about source epochs, which D has never seen:
// the request is forwarded (D checks leadership and the current epoch, translated to its own)
// and each answer without error is replaced by the source's, from the ledger's per-batch
// epochs: the largest source epoch at or below the one asked and the source offset where the
// next one starts, or the mirrored end for the latest epoch and the presented ones above it.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/catalog"
	"offsetgate/view"
)

var offsetForLeaderEpochHandler = handler{
	needs: func(_ *Session, r *request) needs {
		// The answer for the latest epoch is the mirrored end: an index behind D would make a
		// consumer at the true end think the log was truncated (KIP-320) and rewind. These
		// requests are rare (a consumer validating after a leader change), so the views are
		// read to the ledger's end first.
		n := namedNeeds(offsetForLeaderEpochTopics(r))
		n.refresh = true
		return n
	},
	decide: offsetForLeaderEpochDecide,
}

func offsetForLeaderEpochTopics(r *request) []namedTopic {
	req := r.req.(*kmsg.OffsetForLeaderEpochRequest)
	topics := make([]namedTopic, len(req.Topics))
	for i, t := range req.Topics {
		topics[i].name = t.Topic
		for _, p := range t.Partitions {
			topics[i].parts = append(topics[i].parts, p.Partition)
		}
	}
	return topics
}

func offsetForLeaderEpochDecide(s *Session, r *request) error {
	req := r.req.(*kmsg.OffsetForLeaderEpochRequest)
	type asked struct {
		pv       *view.Partition
		epoch    int32
		base     int32
		promoted bool
	}
	asks := map[partKey]asked{}
	err := s.eachView(r, offsetForLeaderEpochTopics(r), func(ti, pi int, info *catalog.Topic, pv *view.Partition) {
		t := &req.Topics[ti]
		p := &t.Partitions[pi]
		base := pv.EpochBase()
		asks[partKey{t.Topic, p.Partition}] = asked{pv, p.LeaderEpoch, base, info.Mark == nil}
		p.CurrentLeaderEpoch = toDestEpoch(p.CurrentLeaderEpoch, base)
		p.LeaderEpoch = epochToDest(p.LeaderEpoch, base, info.Mark == nil)
	})
	if err != nil || len(asks) == 0 {
		return err
	}
	r.replace = rebuild(r.frame, r.h, req.AppendTo(nil), s.cfg.Policy().Native())
	r.onResp = func(_ *Session, v int16, body []byte) ([]byte, bool, error) {
		resp := kmsg.OffsetForLeaderEpochResponse{Version: v}
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
				epochEndToSource(a.pv, a.epoch, a.base, a.promoted, p)
			}
		}
		return resp.AppendTo(nil), true, nil
	}
	return nil
}

// epochToDest is the epoch asked about as the destination knows it: a promoted partition's
// epochs from the base on are D's epochs in the presented space, and D knows where they end
// (records written after the promotion included); any other is answered from the index.
func epochToDest(epoch, base int32, promoted bool) int32 {
	if promoted && epoch >= base {
		return epoch - base
	}
	return epoch
}

// epochEndToSource replaces the destination's answer for a partition with a source view by the
// source's: where the epoch asked (in the presented space) ends.
func epochEndToSource(pv *view.Partition, epoch, base int32, promoted bool, p *kmsg.OffsetForLeaderEpochResponseTopicPartition) {
	if promoted && epoch >= base && p.LeaderEpoch >= 0 && p.EndOffset >= 0 {
		p.LeaderEpoch, p.EndOffset = p.LeaderEpoch+base, pv.ToSource(p.EndOffset)
		return
	}
	p.LeaderEpoch, p.EndOffset = pv.EpochEnd(epoch)
}
