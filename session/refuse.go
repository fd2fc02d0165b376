package session

// Whole-request refusals: what a judged request is answered when its wait for the destination
// failed or ran out of time (judge.go), or a moving group's commit while it waits (moves.go),
// so the client gets an error it can act on (retry) rather than a closed connection. Nothing of
// such a request is forwarded.

import (
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func deleteTopicsRefuse(_ *Session, r *request, code int16, msg string) {
	req := r.req.(*kmsg.DeleteTopicsRequest)
	resp := kmsg.NewPtrDeleteTopicsResponse()
	add := func(name *string, id [16]byte) {
		t := kmsg.NewDeleteTopicsResponseTopic()
		m := msg
		t.Topic, t.TopicID, t.ErrorCode, t.ErrorMessage = name, id, code, &m
		resp.Topics = append(resp.Topics, t)
	}
	for i := range req.TopicNames {
		add(&req.TopicNames[i], [16]byte{})
	}
	for _, t := range req.Topics {
		add(t.Topic, t.TopicID)
	}
	r.answerWith(resp)
}

func deleteRecordsRefuse(_ *Session, r *request, code int16, _ string) {
	var refused []refusal
	for _, t := range r.req.(*kmsg.DeleteRecordsRequest).Topics {
		for _, p := range t.Partitions {
			refused = append(refused, refusal{topic: strings.Clone(t.Topic), partition: p.Partition, code: code})
		}
	}
	var resp kmsg.DeleteRecordsResponse
	spliceDeleteRecords(&resp, refused)
	r.answerWith(&resp)
}

func createPartitionsRefuse(_ *Session, r *request, code int16, msg string) {
	resp := kmsg.NewPtrCreatePartitionsResponse()
	for _, t := range r.req.(*kmsg.CreatePartitionsRequest).Topics {
		rt := kmsg.NewCreatePartitionsResponseTopic()
		m := msg
		rt.Topic, rt.ErrorCode, rt.ErrorMessage = t.Topic, code, &m
		resp.Topics = append(resp.Topics, rt)
	}
	r.answerWith(resp)
}

func addPartitionsToTxnRefuse(_ *Session, r *request, code int16, _ string) {
	req := r.req.(*kmsg.AddPartitionsToTxnRequest)
	resp := kmsg.NewPtrAddPartitionsToTxnResponse()
	for _, t := range req.Topics {
		rt := kmsg.NewAddPartitionsToTxnResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p, code
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	if len(req.Transactions) > 0 {
		resp.ErrorCode = code
	}
	r.answerWith(resp)
}

func incrementalAlterConfigsRefuse(_ *Session, r *request, code int16, msg string) {
	var rs []configRefusal
	for _, res := range r.req.(*kmsg.IncrementalAlterConfigsRequest).Resources {
		rs = append(rs, configRefusal{res.ResourceType, res.ResourceName, code, msg})
	}
	var resp kmsg.IncrementalAlterConfigsResponse
	spliceIncremental(&resp, rs)
	r.answerWith(&resp)
}

func alterConfigsRefuse(_ *Session, r *request, code int16, msg string) {
	var rs []configRefusal
	for _, res := range r.req.(*kmsg.AlterConfigsRequest).Resources {
		rs = append(rs, configRefusal{res.ResourceType, res.ResourceName, code, msg})
	}
	var resp kmsg.AlterConfigsResponse
	spliceAlter(&resp, rs)
	r.answerWith(&resp)
}

func offsetCommitRefuse(_ *Session, r *request, code int16, _ string) {
	resp := kmsg.NewPtrOffsetCommitResponse()
	for _, t := range r.req.(*kmsg.OffsetCommitRequest).Topics {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetCommitResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, code
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	r.answerWith(resp)
}

func txnOffsetCommitRefuse(_ *Session, r *request, code int16, _ string) {
	resp := kmsg.NewPtrTxnOffsetCommitResponse()
	for _, t := range r.req.(*kmsg.TxnOffsetCommitRequest).Topics {
		rt := kmsg.NewTxnOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, code
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	r.answerWith(resp)
}
