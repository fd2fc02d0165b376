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
type handler struct {
	// request looks at a request before it is forwarded and may decide its outcome.
	request func(s *Session, r *request) error
	// noResponse reports that a request gets no response (acks=0 Produce).
	noResponse func(h reqHeader, body []byte) bool
	// response rewrites the response of versions >= responseFrom.
	response     rewriteFunc
	responseFrom int16
}

// handlerFor returns the handler of an api key, or nil when its frames pass as bytes.
func handlerFor(key int16) *handler {
	switch key {
	case 0:
		return &produceHandler
	case 1:
		return &fetchHandler
	case 2:
		return &listOffsetsHandler
	case 3:
		return &metadataHandler
	case 8:
		return &offsetCommitHandler
	case 9:
		return &offsetFetchHandler
	case 10:
		return &findCoordinatorHandler
	case 17:
		return &saslHandshakeHandler
	case 18:
		return &apiVersionsHandler
	case 19:
		return &createTopicsHandler
	case 20:
		return &deleteTopicsHandler
	case 21:
		return &deleteRecordsHandler
	case 23:
		return &offsetForLeaderEpochHandler
	case 24:
		return &addPartitionsToTxnHandler
	case 28:
		return &txnOffsetCommitHandler
	case 32:
		return &describeConfigsHandler
	case 33:
		return &alterConfigsHandler
	case 37:
		return &createPartitionsHandler
	case 43:
		return &electLeadersHandler
	case 44:
		return &incrementalAlterConfigsHandler
	case 36:
		return &saslAuthenticateHandler
	case 60:
		return &describeClusterHandler
	case 75:
		return &describeTopicPartitionsHandler
	case 78:
		return &shareFetchHandler
	case 79:
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
