package session

// DescribeProducers (key 61).
//
// Admin tools (kafka-transactions.sh describe-producers, kadm) read a partition's producer
// states to find hanging transactions. D's answer for a mirror partition would show
// offsetgate's own producers, with D's sequences and transaction offsets; the client gets the
// source's instead, from the source view (view.Producers): the source producers' ids, epochs,
// last sequences and timestamps, coordinator epochs and open transactions' first offsets in
// source offsets. The request still goes to D, which checks leadership and authorization; only
// answers without an error are replaced. A promoted partition's answer adds D's own producers
// (clients writing since the promotion) with their transactions' offsets in the presented
// space, and leaves out offsetgate's.

import (
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/catalog"
	"offsetgate/view"
)

var describeProducersHandler = handler{
	needs: func(_ *Session, r *request) needs {
		// The states are the index's: read it to the ledger's end first, so a transaction the
		// mirror just ended is not shown open. These requests are rare (an operator's tool).
		n := namedNeeds(describeProducersTopics(r))
		n.refresh = true
		return n
	},
	decide: describeProducersDecide,
}

func describeProducersTopics(r *request) []namedTopic {
	req := r.req.(*kmsg.DescribeProducersRequest)
	topics := make([]namedTopic, len(req.Topics))
	for i, t := range req.Topics {
		topics[i].name = t.Topic
		topics[i].parts = append(topics[i].parts, t.Partitions...)
	}
	return topics
}

func describeProducersDecide(s *Session, r *request) error {
	type asked struct {
		pv       *view.Partition
		promoted bool
	}
	req := r.req.(*kmsg.DescribeProducersRequest)
	asks := map[partKey]asked{}
	err := s.eachView(r, describeProducersTopics(r), func(ti, pi int, info *catalog.Topic, pv *view.Partition) {
		t := &req.Topics[ti]
		asks[partKey{t.Topic, t.Partitions[pi]}] = asked{pv, info.Mark == nil}
	})
	if err != nil {
		return err
	}
	if len(asks) == 0 {
		return nil
	}
	r.onResp = func(_ *Session, v int16, body []byte) ([]byte, bool, error) {
		resp := kmsg.DescribeProducersResponse{Version: v}
		if err := resp.ReadFrom(body); err != nil {
			return nil, false, err
		}
		now := time.Now()
		changed := false
		for i := range resp.Topics {
			t := &resp.Topics[i]
			for j := range t.Partitions {
				p := &t.Partitions[j]
				a, ok := asks[partKey{t.Topic, p.Partition}]
				if !ok || p.ErrorCode != 0 {
					continue
				}
				p.ActiveProducers = sourceProducers(a.pv, a.promoted, p.ActiveProducers, now)
				changed = true
			}
		}
		if !changed {
			return nil, false, nil
		}
		return resp.AppendTo(nil), true, nil
	}
	return nil
}

// sourceProducers is a mirror partition's producer states in source terms: the source view's,
// and for a promoted partition D's own producers but offsetgate's, their open transactions'
// first offsets translated to the presented offsets.
func sourceProducers(pv *view.Partition, promoted bool, onD []kmsg.DescribeProducersResponseTopicPartitionActiveProducer, now time.Time) []kmsg.DescribeProducersResponseTopicPartitionActiveProducer {
	src := pv.Producers(now)
	out := make([]kmsg.DescribeProducersResponseTopicPartitionActiveProducer, 0, len(src))
	for _, sp := range src {
		a := kmsg.NewDescribeProducersResponseTopicPartitionActiveProducer()
		a.ProducerID, a.ProducerEpoch, a.LastSequence, a.LastTimestamp = sp.ID, int32(sp.Epoch), sp.LastSequence, sp.LastTimestamp
		a.CoordinatorEpoch, a.CurrentTxnStartOffset = sp.CoordinatorEpoch, sp.TxnStart
		out = append(out, a)
	}
	if !promoted {
		return out
	}
	for _, dp := range onD {
		if pv.Writer(dp.ProducerID) {
			continue
		}
		if dp.CurrentTxnStartOffset >= 0 {
			dp.CurrentTxnStartOffset = pv.ToSource(dp.CurrentTxnStartOffset)
		}
		out = append(out, dp)
	}
	return out
}
