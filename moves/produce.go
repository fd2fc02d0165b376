package moves

// Producers of a promoted topic on source connections. A producer that writes a topic through
// offsetgate's source listener keeps its connections and its producer id when the topic is
// promoted: its Produce requests for the topic are carried to the destination's leader of each
// partition, and answered in source offsets, as a destination listener answers them.
//
// The producer's id was issued by the source, and the destination's own producers (the
// mirror's writer, clients of destination listeners) have ids from the destination's
// allocator, which starts at 0 like the source's: the same number could name two producers
// there, and one's sequences would be taken for the other's (a false duplicate is a lost
// write). So a carried batch's producer id gets bit 62 set (SourcePIDBit): Kafka's allocator
// hands out ids from 0 upwards and never comes near it (a cluster that draws random ids, as
// kfake does, meets a clash once in 2^62); its epoch and sequences are kept, so the
// destination checks the producer's order and retries from then on as the source did.
//
// The one retry the destination cannot judge is of a batch the source wrote before the
// promotion whose answer the producer never got: the mirror copied it, under the mirror's
// producer. It is found in the source view (the source producer's id, epoch and sequence of
// the newest mirrored batches) and answered with its offset, as Kafka answers a duplicate.
//
// Transactional batches are refused (INVALID_TXN_STATE): the producer's transaction
// coordinator is the source's, which would write its markers to the source's partitions,
// not to the destination's. Such producers move to a destination listener before the
// promotion.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/batch"
	"offsetgate/view"
	"offsetgate/wire"
)

// SourcePIDBit is set in a source producer's id when its batch is carried to the destination
// (docs/DESIGN.md, "Producers and consumers at promotion").
const SourcePIDBit int64 = 1 << 62

// duplicateWindow is how many of a partition's newest mirrored batches are looked at for a
// retried write: Kafka itself keeps five batches per producer. Beyond it the producer's state
// in the source view still tells a sequence already written (refused, not written twice).
const duplicateWindow = 4096

// ProducePart is one partition of a Produce request for a promoted topic.
type ProducePart struct {
	Topic     string
	Partition int32
	Records   []byte
}

// ProduceResult is the answer for one carried partition, in source offsets.
type ProduceResult struct {
	Code           int16
	Msg            string
	BaseOffset     int64
	LogAppendTime  int64
	LogStartOffset int64
}

func refused(code int16, format string, a ...any) ProduceResult {
	return ProduceResult{Code: code, Msg: "offsetgate: " + fmt.Sprintf(format, a...), BaseOffset: -1, LogAppendTime: -1, LogStartOffset: -1}
}

// leaderKey names a destination partition.
type leaderKey struct {
	topic     string
	partition int32
}

// CarryProduce writes the partitions of promoted topics to the destination at the client's
// acks and timeout and returns one result per part, in order. It blocks.
func (c *Carrier) CarryProduce(ctx context.Context, clientID string, version, acks int16, timeoutMs int32, parts []ProducePart) []ProduceResult {
	out := make([]ProduceResult, len(parts))
	type sent struct {
		i     int
		base  func(int64) int64 // destination offset to source offset
		start func(int64) int64
	}
	byLeader := map[string][]sent{}
	reqs := map[string]*kmsg.ProduceRequest{}
	for i, p := range parts {
		t, _, promoted := c.cfg.Catalog.Promotion(p.Topic)
		if !promoted {
			out[i] = refused(kerr.NotLeaderForPartition.Code, "%s is not promoted on this instance yet; retry", p.Topic)
			continue
		}
		pv, err := c.sourceView(ctx, p.Topic, p.Partition)
		if err != nil || pv == nil {
			out[i] = refused(kerr.NotLeaderForPartition.Code, "the source view of %s[%d] cannot be read (%v); nothing was written, retry", p.Topic, p.Partition, err)
			continue
		}
		records, res, ok := carriedBatch(pv.SourceProducer, p)
		if !ok {
			out[i] = res
			continue
		}
		addr, err := c.destLeader(ctx, p.Topic, t.ID, p.Partition)
		if err != nil {
			out[i] = refused(kerr.NotLeaderForPartition.Code, "%v; nothing was written, retry", err)
			continue
		}
		req := reqs[addr]
		if req == nil {
			req = kmsg.NewPtrProduceRequest()
			req.Version = min(max(version, 3), 12) // topics by name
			req.Acks, req.TimeoutMillis = acks, timeoutMs
			if acks == 0 {
				req.Acks = 1 // the answer tells whether to forget the leader; the client gets none
			}
			reqs[addr] = req
		}
		var rt *kmsg.ProduceRequestTopic
		for j := range req.Topics {
			if req.Topics[j].Topic == p.Topic {
				rt = &req.Topics[j]
			}
		}
		if rt == nil {
			nt := kmsg.NewProduceRequestTopic()
			nt.Topic = p.Topic
			req.Topics = append(req.Topics, nt)
			rt = &req.Topics[len(req.Topics)-1]
		}
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition, rp.Records = p.Partition, records
		rt.Partitions = append(rt.Partitions, rp)
		byLeader[addr] = append(byLeader[addr], sent{i: i, base: pv.ToSource, start: pv.ToSource})
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for addr, req := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := c.produceTo(ctx, clientID, addr, req)
			mu.Lock()
			defer mu.Unlock()
			for _, s := range byLeader[addr] {
				p := parts[s.i]
				if err != nil {
					// Perhaps written: the producer's retry is judged by the destination's
					// sequence check (idempotent producers) as any lost answer is.
					out[s.i] = refused(kerr.RequestTimedOut.Code, "carrying the write to the destination: %v", err)
					continue
				}
				rp, found := producePartition(resp, p.Topic, p.Partition)
				switch {
				case !found:
					out[s.i] = refused(kerr.UnknownServerError.Code, "the destination's answer leaves %s[%d] out", p.Topic, p.Partition)
				case rp.ErrorCode != 0:
					c.forgetLeader(p.Topic, p.Partition)
					msg := ""
					if rp.ErrorMessage != nil {
						msg = *rp.ErrorMessage
					}
					out[s.i] = ProduceResult{Code: rp.ErrorCode, Msg: msg, BaseOffset: -1, LogAppendTime: -1, LogStartOffset: -1}
				default:
					r := ProduceResult{BaseOffset: s.base(rp.BaseOffset), LogAppendTime: rp.LogAppendTime, LogStartOffset: -1}
					if rp.LogStartOffset >= 0 {
						r.LogStartOffset = s.start(rp.LogStartOffset)
					}
					out[s.i] = r
				}
			}
		}()
	}
	wg.Wait()
	return out
}

// carriedBatch checks one partition's records and gives the bytes to send to the destination,
// or the partition's answer (ok false): a refusal, or a retry of a batch already mirrored.
func carriedBatch(lookup func(pid int64, epoch int16, seq int32, n int) view.ProducerMatch, p ProducePart) ([]byte, ProduceResult, bool) {
	batches, hs, err := batch.Split(p.Records)
	if err != nil || len(batches) != 1 {
		return nil, refused(kerr.InvalidRecord.Code, "a partition's records must be one record batch of magic 2 (%d batches, %v)", len(batches), err), false
	}
	h := hs[0]
	if h.Attributes&batch.AttrTransactional != 0 {
		return nil, refused(kerr.InvalidTxnState.Code, "%s is promoted: its writes go to the destination, whose transactions the source's coordinator cannot end; transactional producers of a promoted topic connect to a destination listener", p.Topic), false
	}
	if h.ProducerID < 0 {
		return p.Records, ProduceResult{}, true
	}
	m := lookup(h.ProducerID, h.ProducerEpoch, h.BaseSequence, duplicateWindow)
	switch {
	case m.Found:
		// Written on the source before the promotion and mirrored: Kafka's answer to a
		// duplicate is the original's offset.
		return nil, ProduceResult{BaseOffset: m.Src, LogAppendTime: -1, LogStartOffset: -1}, false
	case m.Seen && h.BaseSequence <= m.LastSeq && h.BaseSequence >= 0:
		return nil, refused(kerr.OutOfOrderSequenceNumber.Code, "sequence %d of producer %d was written on the source, in another batch", h.BaseSequence, h.ProducerID), false
	}
	out := append([]byte(nil), p.Records...)
	binary.BigEndian.PutUint64(out[43:], uint64(h.ProducerID|SourcePIDBit))
	binary.BigEndian.PutUint32(out[17:], batch.CRC(out))
	return out, ProduceResult{}, true
}

// produceTo sends one request to a destination broker on the carrier's connection to it.
func (c *Carrier) produceTo(ctx context.Context, clientID, addr string, req *kmsg.ProduceRequest) (*kmsg.ProduceResponse, error) {
	resp, err := c.SendTo(ctx, clientID, addr, req)
	if err != nil {
		return nil, err
	}
	return resp.(*kmsg.ProduceResponse), nil
}

// SendTo sends one request to a destination broker on the carrier's connection to it (a
// request of a promoted topic's partitions, in the destination's terms).
func (c *Carrier) SendTo(ctx context.Context, clientID, addr string, req kmsg.Request) (kmsg.Response, error) {
	conn, err := c.brokerConn(ctx, addr)
	if err != nil {
		return nil, err
	}
	conn.SetClientID(clientID)
	c.cfg.Metrics.carryPromoted(kmsg.NameForKey(req.Key()))
	resp := req.ResponseKind()
	if err := conn.RoundTrip(ctx, req, resp, false); err != nil {
		c.dropBroker(addr, conn)
		return nil, fmt.Errorf("to the destination's broker %s: %w", addr, err)
	}
	return resp, nil
}

// SourceView is the loaded source view of a partition of a mirror or promoted topic.
func (c *Carrier) SourceView(ctx context.Context, topic string, partition int32) (*view.Partition, error) {
	return c.sourceView(ctx, topic, partition)
}

// DestLeader is the address of the destination's leader of a partition (destLeader).
func (c *Carrier) DestLeader(ctx context.Context, topic string, id [16]byte, partition int32) (string, error) {
	return c.destLeader(ctx, topic, id, partition)
}

// ForgetLeader drops a partition's leader found earlier.
func (c *Carrier) ForgetLeader(topic string, partition int32) { c.forgetLeader(topic, partition) }

// CachedSourceName is a source topic id's name, when an earlier SourceNames found it.
func (c *Carrier) CachedSourceName(id [16]byte) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.names[id]
	return n, ok
}

func producePartition(resp *kmsg.ProduceResponse, topic string, partition int32) (kmsg.ProduceResponseTopicPartition, bool) {
	for _, t := range resp.Topics {
		if t.Topic != topic {
			continue
		}
		for _, p := range t.Partitions {
			if p.Partition == partition {
				return p, true
			}
		}
	}
	return kmsg.ProduceResponseTopicPartition{}, false
}

// destLeader is the address of the destination's leader of a partition, after checking that
// the destination's topic of that name is the promoted one.
func (c *Carrier) destLeader(ctx context.Context, topic string, id [16]byte, partition int32) (string, error) {
	k := leaderKey{topic, partition}
	c.mu.Lock()
	addr, ok := c.leaders[k]
	c.mu.Unlock()
	if ok {
		return addr, nil
	}
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, c.cfg.Dest)
	if err != nil {
		return "", fmt.Errorf("the destination's leader of %s[%d]: %w", topic, partition, err)
	}
	brokers := map[int32]string{}
	for _, b := range resp.Brokers {
		brokers[b.NodeID] = net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port)))
	}
	for _, t := range resp.Topics {
		if t.Topic == nil || *t.Topic != topic {
			continue
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return "", fmt.Errorf("the destination's %s: %w", topic, err)
		}
		if t.TopicID != id {
			return "", fmt.Errorf("the destination's topic %s is not the promoted one (another id)", topic)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, p := range t.Partitions {
			if a, ok := brokers[p.Leader]; ok && p.ErrorCode == 0 {
				c.leaders[leaderKey{topic, p.Partition}] = a
			}
		}
		if a, ok := c.leaders[k]; ok {
			return a, nil
		}
		return "", fmt.Errorf("the destination shows no leader of %s[%d]", topic, partition)
	}
	return "", fmt.Errorf("the destination does not show %s", topic)
}

func (c *Carrier) forgetLeader(topic string, partition int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.leaders, leaderKey{topic, partition})
}

// brokerConn is the carrier's connection to a destination broker for carried writes.
func (c *Carrier) brokerConn(ctx context.Context, addr string) (*wire.Conn, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, errClosed
	}
	if conn, ok := c.brokers[addr]; ok {
		c.mu.Unlock()
		return conn, nil
	}
	c.mu.Unlock()
	conn, err := c.cfg.Dial(ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("connecting to the destination's broker %s: %w", addr, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		conn.Close()
		return nil, errClosed
	}
	if old, ok := c.brokers[addr]; ok {
		conn.Close()
		return old, nil
	}
	c.brokers[addr] = conn
	return conn, nil
}

func (c *Carrier) dropBroker(addr string, conn *wire.Conn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.brokers[addr] == conn {
		conn.Close()
		delete(c.brokers, addr)
	}
}

// SourceNames asks the source for the names of topic ids (a Produce v13 names its topics by
// the source's ids). An id's name never changes, so the answers are kept for the connection.
func (c *Carrier) SourceNames(ctx context.Context, ids [][16]byte) (map[[16]byte]string, error) {
	out := map[[16]byte]string{}
	var ask [][16]byte
	c.mu.Lock()
	for _, id := range ids {
		if n, ok := c.names[id]; ok {
			out[id] = n
		} else {
			ask = append(ask, id)
		}
	}
	c.mu.Unlock()
	if len(ask) == 0 {
		return out, nil
	}
	byID, _, err := c.sourceTopics(ctx, ask, nil)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ask {
		n, ok := byID[id]
		if !ok {
			return nil, errors.New("the source does not know a topic id of the request")
		}
		c.names[id], out[id] = n, n
	}
	return out, nil
}
