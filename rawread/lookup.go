package rawread

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Partition is what the cluster says of one partition of a topic.
type Partition struct {
	TopicID    [16]byte
	Partitions int32  // the topic's partition count
	Leader     int32  // -1: none right now
	Addr       string // the leader's host:port, as the cluster advertises it
}

// Lookup asks the cluster, not the client's metadata cache, about a topic and one of its
// partitions (a cache can show a deleted topic's old id, or an old leader, for seconds). A
// topic the cluster does not know is a kerr.UnknownTopicOrPartition; a partition without a
// leader right now is answered with Leader -1 and no error.
func Lookup(ctx context.Context, cl *kgo.Client, topic string, partition int32) (Partition, error) {
	resp, err := askTopic(ctx, cl, topic)
	if err != nil {
		return Partition{}, err
	}
	return pick(resp, topic, partition)
}

// askTopic is one Metadata request for one topic.
func askTopic(ctx context.Context, cl *kgo.Client, topic string) (*kmsg.MetadataResponse, error) {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("metadata of %s: %w", topic, err)
	}
	return resp, nil
}

// pick reads one partition out of a Metadata answer for its topic (shared by every caller of
// a Meta round: it only reads the answer).
func pick(resp *kmsg.MetadataResponse, topic string, partition int32) (Partition, error) {
	if len(resp.Topics) != 1 {
		return Partition{}, fmt.Errorf("metadata of %s: %d topics answered", topic, len(resp.Topics))
	}
	t := &resp.Topics[0]
	if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
		return Partition{}, fmt.Errorf("metadata of %s: %w", topic, err)
	}
	out := Partition{TopicID: t.TopicID, Partitions: int32(len(t.Partitions)), Leader: -1}
	found := false
	for i := range t.Partitions {
		p := &t.Partitions[i]
		if p.Partition == partition {
			found = true
			if p.ErrorCode == 0 || errors.Is(kerr.ErrorForCode(p.ErrorCode), kerr.ReplicaNotAvailable) {
				out.Leader = p.Leader
			}
		}
	}
	if !found {
		return Partition{}, fmt.Errorf("%s[%d]: %w (the topic has %d partitions)", topic, partition, kerr.UnknownTopicOrPartition, out.Partitions)
	}
	for _, b := range resp.Brokers {
		if b.NodeID == out.Leader {
			out.Addr = net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port)))
		}
	}
	return out, nil
}

// LookupLeader is Lookup that waits (up to about five seconds) for a partition to have a
// leader, as it does for a moment after a leader change or a topic's creation.
func LookupLeader(ctx context.Context, cl *kgo.Client, topic string, partition int32) (Partition, error) {
	return lookupLeader(ctx, func(ctx context.Context) (Partition, error) { return Lookup(ctx, cl, topic, partition) }, topic, partition)
}

func lookupLeader(ctx context.Context, lookup func(context.Context) (Partition, error), topic string, partition int32) (Partition, error) {
	var last error
	for attempt := 0; attempt < 25; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return Partition{}, ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
		p, err := lookup(ctx)
		switch {
		case err != nil:
			last = err
			var ke *kerr.Error
			if errors.As(err, &ke) && !ke.Retriable {
				return Partition{}, err
			}
		case p.Leader < 0 || p.Addr == "":
			last = fmt.Errorf("no leader for %s[%d]", topic, partition)
		default:
			return p, nil
		}
	}
	return Partition{}, last
}
