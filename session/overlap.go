package session

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/catalog"
)

// Produce-at-offset writes of one connection overlap.
//
// A request that waits for blocking work stops the connection's further requests until it is
// done (order). A produce-at-offset write is the one exception: it touches nothing but its
// mirror partitions, so a mirroring client that sends writes for several partitions on one
// connection gets them written at once, as it would over several connections. The write's
// answer keeps its place by a slot reserved when the write starts (startAsync). While writes
// run, only a Produce is taken that names none of their partitions (it may become a write of
// its own, be refused or be forwarded: none of that reads or changes the partitions being
// written), or that is a produce-at-offset request with a from offset for partitions being
// written (pipelined: it is handed to the writer once the write before it holds its place, and
// the writer plans it after that one while its data are still on their way; its from offset
// shows whether a request between them was refused). Any other request waits until the writes
// are done, exactly as behind any other blocking request. So nothing a client reads (Fetch,
// ListOffsets, Metadata) is answered before the writes sent ahead of it.

// What one connection's overlapping writes may hold: the writes after the first each keep a
// copy of their request until written, so an approved client pipelining large requests must not
// make offsetgate hold them all (256 requests in flight of up to 100 MiB each). Past either
// bound the next request waits, as every request did before writes overlapped.
const (
	maxOverlapWrites = 32
	maxOverlapBytes  = 64 << 20
	// maxPartitionDepth is how many writes of one partition a connection has under way at
	// once: the next waits. Two already keep a partition's ledger append off the time its
	// data are on their way.
	maxPartitionDepth = 4
)

// writeKey names a mirror partition being written.
type writeKey struct {
	topic     string
	partition int32
}

// writeKeys are the partitions of a request's produce-at-offset writes.
func writeKeys(ws []atOffsetPart) []writeKey {
	ks := make([]writeKey, 0, len(ws))
	for _, w := range ws {
		ks = append(ks, writeKey{topic: w.info.Name, partition: w.partition})
	}
	return ks
}

// hold records the partitions (and the request's size) of a write that started.
func (s *Session) hold(ks []writeKey, size int) {
	if s.writing == nil {
		s.writing = make(map[writeKey]int)
	}
	for _, k := range ks {
		s.writing[k]++
	}
	s.writes++
	s.writeBytes += size
}

// release forgets the partitions of a write that finished.
func (s *Session) release(ks []writeKey, size int) {
	for _, k := range ks {
		if s.writing[k]--; s.writing[k] <= 0 {
			delete(s.writing, k)
			delete(s.turns, k) // its last write is done: the next one waits for nothing
		}
	}
	s.writes--
	s.writeBytes -= size
}

// mayOverlap reports whether the client's next frame may be taken while writes run: a Produce
// (with a response) that names none of the partitions being written, or a produce-at-offset
// request with a from offset naming them fewer than maxPartitionDepth times each, within the
// bounds above. A frame it cannot read, a topic id it cannot name, anything else: it waits.
func (s *Session) mayOverlap(frame []byte) bool {
	if s.writes >= maxOverlapWrites || s.writeBytes+len(frame) > maxOverlapBytes {
		return false
	}
	h, err := parseReqHeader(frame[4:])
	if err != nil || kmsg.Key(h.key) != kmsg.Produce || !Supported(h.key, h.version) {
		return false
	}
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(h.version)
	if err := req.ReadFrom(frame[4+h.bodyOff:]); err != nil || req.Acks == 0 {
		return false
	}
	// A from offset lets the writer see a refused request between two pipelined ones.
	pipelined := h.magic.Valid && h.magic.From >= 0
	for _, t := range req.Topics {
		name := t.Topic
		if h.version >= 13 {
			if s.cfg.Catalog == nil {
				return false
			}
			info, ok := s.cfg.Catalog.ByID(catalog.TopicID(t.TopicID))
			if !ok {
				return false
			}
			name = info.Name
		}
		for _, p := range t.Partitions {
			n := s.writing[writeKey{topic: name, partition: p.Partition}]
			if n > 0 && (!pipelined || n >= maxPartitionDepth) {
				return false
			}
		}
	}
	return true
}
