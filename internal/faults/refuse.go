package faults

import (
	"encoding/binary"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/internal/relay"
)

// A destination that refuses writes, as the relay between offsetgate and the destination makes
// it: Kafka 4 caps min.insync.replicas at the replication factor, so raising it above the live
// replicas refuses nothing, and stopping a broker long enough is another fault already.
//
//   - refuse: every Produce to the topic has a byte of its first batch's CRC flipped on the
//     way, so the broker answers CORRUPT_MESSAGE and appends nothing;
//   - after append: every Produce answer for the topic says NOT_ENOUGH_REPLICAS_AFTER_APPEND,
//     so the writer is told the write failed although the broker appended it.
type writeRefusal struct {
	topic    string
	id       [16]byte
	appended bool // the "after append" flavour

	mu   sync.Mutex
	reqs map[[2]int32]int16 // (connection, correlation id) of a touched Produce: its version
	hits atomic.Int64
}

func (w *writeRefusal) fault(conn int, dir relay.Direction, frame []byte) relay.Action {
	if dir == relay.ToServer {
		w.request(conn, frame)
	} else {
		w.response(conn, frame)
	}
	return relay.Pass
}

// requestBody finds a request's body: after the size, key, version, correlation id, client id
// and (flexible versions) the header's tagged fields.
func requestBody(frame []byte, flexible bool) (int, bool) {
	if len(frame) < 14 {
		return 0, false
	}
	at := 14
	if n := int16(binary.BigEndian.Uint16(frame[12:])); n > 0 {
		at += int(n)
	}
	if flexible {
		return skipTags(frame, at)
	}
	return at, at <= len(frame)
}

func skipTags(b []byte, at int) (int, bool) {
	if at > len(b) {
		return 0, false
	}
	n, k := binary.Uvarint(b[at:])
	if k <= 0 {
		return 0, false
	}
	at += k
	for i := uint64(0); i < n; i++ {
		_, k := binary.Uvarint(b[at:])
		if k <= 0 {
			return 0, false
		}
		at += k
		size, k := binary.Uvarint(b[at:])
		if k <= 0 {
			return 0, false
		}
		at += k + int(size)
	}
	return at, at <= len(b)
}

func (w *writeRefusal) mine(name string, id [16]byte) bool {
	return name == w.topic || (id != [16]byte{} && id == w.id)
}

func (w *writeRefusal) request(conn int, frame []byte) {
	if len(frame) < 12 || binary.BigEndian.Uint16(frame[4:]) != uint16(kmsg.Produce) {
		return
	}
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(int16(binary.BigEndian.Uint16(frame[6:])))
	at, ok := requestBody(frame, req.IsFlexible())
	if !ok || req.ReadFrom(frame[at:]) != nil {
		return
	}
	touched := false
	for i := range req.Topics {
		t := &req.Topics[i]
		if !w.mine(t.Topic, t.TopicID) {
			continue
		}
		touched = true
		if w.appended {
			continue
		}
		for j := range t.Partitions {
			if rs := t.Partitions[j].Records; len(rs) > 21 {
				rs[17] ^= 0xff // the batch CRC
			}
		}
	}
	if !touched {
		return
	}
	if !w.appended {
		body := req.AppendTo(nil)
		if len(body) != len(frame)-at {
			return
		}
		copy(frame[at:], body)
		w.hits.Add(1)
		return
	}
	w.mu.Lock()
	w.reqs[[2]int32{int32(conn), int32(binary.BigEndian.Uint32(frame[8:]))}] = req.Version
	w.mu.Unlock()
}

func (w *writeRefusal) response(conn int, frame []byte) {
	if !w.appended || len(frame) < 8 {
		return
	}
	k := [2]int32{int32(conn), int32(binary.BigEndian.Uint32(frame[4:]))}
	w.mu.Lock()
	v, ok := w.reqs[k]
	delete(w.reqs, k)
	w.mu.Unlock()
	if !ok {
		return
	}
	resp := kmsg.NewPtrProduceResponse()
	resp.SetVersion(v)
	at := 8
	if resp.IsFlexible() {
		if at, ok = skipTags(frame, at); !ok {
			return
		}
	}
	if resp.ReadFrom(frame[at:]) != nil {
		return
	}
	for i := range resp.Topics {
		t := &resp.Topics[i]
		if !w.mine(t.Topic, t.TopicID) {
			continue
		}
		for j := range t.Partitions {
			if t.Partitions[j].ErrorCode == 0 {
				t.Partitions[j].ErrorCode = kerr.NotEnoughReplicasAfterAppend.Code
			}
		}
	}
	body := resp.AppendTo(nil)
	if len(body) != len(frame)-at {
		return
	}
	copy(frame[at:], body)
	w.hits.Add(1)
}
