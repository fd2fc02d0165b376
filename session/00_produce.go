package session

// Produce (key 0).
//
// Requests pass as bytes. The only thing read is acks: acks=0 has no response, so no slot
// waits for one. The body starts with the transactional id (v3+; a compact nullable string
// from v9, flexible) and then acks.
//
// Responses from v10 (KIP-951) may carry NodeEndpoints, the addresses of the new leaders of
// partitions that answered NOT_LEADER_OR_FOLLOWER: they are rewritten to proxy addresses.

import (
	"encoding/binary"
	"errors"

	"github.com/twmb/franz-go/pkg/kmsg"
)

var produceHandler = handler{
	noResponse: func(h reqHeader, body []byte) bool {
		acks, err := produceAcks(h.version, body)
		return err == nil && acks == 0
	},
	response:     rewriteProduce,
	responseFrom: 10,
}

var errShortProduce = errors.New("produce request too short to hold acks")

// produceAcks reads acks from a Produce request body.
func produceAcks(version int16, body []byte) (int16, error) {
	off := 0
	switch {
	case version >= 9:
		n, w := binary.Uvarint(body)
		if w <= 0 {
			return 0, errShortProduce
		}
		off = w
		if n > 0 { // n-1 bytes follow; 0 is null
			if n-1 > uint64(len(body)) {
				return 0, errShortProduce
			}
			off += int(n - 1)
		}
	case version >= 3:
		if len(body) < 2 {
			return 0, errShortProduce
		}
		n := int(int16(binary.BigEndian.Uint16(body)))
		off = 2
		if n > 0 {
			off += n
		}
	}
	if off < 0 || len(body) < off+2 {
		return 0, errShortProduce
	}
	return int16(binary.BigEndian.Uint16(body[off:])), nil
}

func rewriteProduce(s *Session, version int16, body []byte) ([]byte, bool, error) {
	resp := kmsg.ProduceResponse{Version: version}
	if err := resp.UnsafeReadFrom(body); err != nil {
		return nil, false, err
	}
	if len(resp.Brokers) == 0 {
		return nil, false, nil
	}
	for i := range resp.Brokers {
		e := &resp.Brokers[i]
		s.endpoint(e.NodeID, &e.Host, &e.Port)
	}
	return resp.AppendTo(nil), true, nil
}
