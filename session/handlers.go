package session

import (
	"encoding/binary"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// rewriteFunc rewrites a response body. It returns changed=false (and no body) when the
// original bytes may go to the client as they are.
type rewriteFunc func(s *Session, version int16, body []byte) (nb []byte, changed bool, err error)

// handler is what offsetgate does for one api key beyond forwarding bytes. Each api key with a
// handler has a file of its own, named after the key (00_produce.go, 03_metadata.go, ...).
// Requests are decided in three steps that the session runs (judge.go): decode, needs,
// decide.
type handler struct {
	// active reports whether requests of this key are decided now; nil: whenever the mirror
	// rules are on (a catalog is configured).
	active func(s *Session) bool
	// unsafe decodes without copying byte slices (Produce: record sets stay in the frame).
	unsafe bool
	// needs declares what the decision reads from the destination; nil: nothing.
	needs func(s *Session, r *request) needs
	// decide applies the rules to the decoded request (r.req) and sets the outcome.
	decide func(s *Session, r *request) error
	// refuse, when set, answers the whole request itself with an error code and message
	// (used when the wait for the destination fails or times out).
	refuse func(s *Session, r *request, code int16, msg string)
	// noResponse reports that a request gets no response (acks=0 Produce).
	noResponse func(h reqHeader, body []byte) bool
	// response rewrites the response of versions >= responseFrom.
	response     rewriteFunc
	responseFrom int16
}

// always is an active func for handlers that decide with the mirror rules on or off.
func always(*Session) bool { return true }

func (hd *handler) isActive(s *Session) bool {
	if hd.decide == nil {
		return false
	}
	if hd.active != nil {
		return hd.active(s)
	}
	return s.cfg.Catalog != nil
}

// handlerFor returns the handler of an api key, or nil when its frames pass as bytes.
func handlerFor(key int16) *handler {
	switch kmsg.Key(key) {
	case kmsg.Produce:
		return &produceHandler
	case kmsg.Fetch:
		return &fetchHandler
	case kmsg.ListOffsets:
		return &listOffsetsHandler
	case kmsg.Metadata:
		return &metadataHandler
	case kmsg.OffsetCommit:
		return &offsetCommitHandler
	case kmsg.OffsetFetch:
		return &offsetFetchHandler
	case kmsg.FindCoordinator:
		return &findCoordinatorHandler
	case kmsg.SASLHandshake:
		return &saslHandshakeHandler
	case kmsg.ApiVersions:
		return &apiVersionsHandler
	case kmsg.CreateTopics:
		return &createTopicsHandler
	case kmsg.DeleteTopics:
		return &deleteTopicsHandler
	case kmsg.DeleteRecords:
		return &deleteRecordsHandler
	case kmsg.OffsetForLeaderEpoch:
		return &offsetForLeaderEpochHandler
	case kmsg.AddPartitionsToTxn:
		return &addPartitionsToTxnHandler
	case kmsg.TxnOffsetCommit:
		return &txnOffsetCommitHandler
	case kmsg.DescribeConfigs:
		return &describeConfigsHandler
	case kmsg.AlterConfigs:
		return &alterConfigsHandler
	case kmsg.CreatePartitions:
		return &createPartitionsHandler
	case kmsg.ElectLeaders:
		return &electLeadersHandler
	case kmsg.IncrementalAlterConfigs:
		return &incrementalAlterConfigsHandler
	case kmsg.SASLAuthenticate:
		return &saslAuthenticateHandler
	case kmsg.DescribeCluster:
		return &describeClusterHandler
	case kmsg.InitProducerID:
		return &initProducerIDHandler
	case kmsg.AddOffsetsToTxn:
		return &addOffsetsToTxnHandler
	case kmsg.EndTxn:
		return &endTxnHandler
	case kmsg.DescribeTransactions:
		return &describeTransactionsHandler
	case kmsg.ListTransactions:
		return &listTransactionsHandler
	case kmsg.DescribeProducers:
		return &describeProducersHandler
	case kmsg.DescribeTopicPartitions:
		return &describeTopicPartitionsHandler
	case kmsg.ShareFetch:
		return &shareFetchHandler
	case kmsg.ShareAcknowledge:
		return &shareAcknowledgeHandler
	}
	return nil
}

// responseFrame builds a whole response frame: size, correlation id, an empty tagged-field
// section when the header is flexible, and the body.
func responseFrame(corr int32, flexible bool, body []byte) []byte {
	hl := 4
	if flexible {
		hl = 5
	}
	out := make([]byte, 4+hl, 4+hl+len(body))
	binary.BigEndian.PutUint32(out, uint32(hl+len(body)))
	binary.BigEndian.PutUint32(out[4:], uint32(corr))
	return append(out, body...)
}

// endpoint rewrites one broker address in place through the session's address map.
func (s *Session) endpoint(node int32, host *string, port *int32) {
	if s.cfg.Addresses == nil {
		return
	}
	*host, *port = s.cfg.Addresses.Broker(node, *host, *port)
}

// forwardSpliced forwards the kept part of a request (its new body) and splices offsetgate's
// own answers into the broker's response.
func forwardSpliced[T any, P interface {
	*T
	kmsg.Response
}](s *Session, r *request, body []byte, splice func(P)) {
	r.replace = rebuild(r.frame, r.h, body, s.cfg.Policy().Native())
	r.onResp = func(_ *Session, v int16, b []byte) ([]byte, bool, error) {
		resp := P(new(T))
		resp.SetVersion(v)
		if err := resp.ReadFrom(b); err != nil {
			return nil, false, err
		}
		splice(resp)
		return resp.AppendTo(nil), true, nil
	}
}

// answerWith answers a request with a response offsetgate built (at the request's version).
func (r *request) answerWith(resp kmsg.Response) {
	resp.SetVersion(r.h.version)
	r.answer = responseFrame(r.h.corr, flexibleRequest(r.h.key, r.h.version), resp.AppendTo(nil))
}
