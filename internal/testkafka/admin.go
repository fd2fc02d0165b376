package testkafka

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Client returns a franz-go client seeded with every node of the cluster.
func (c *Cluster) Client(opts ...kgo.Opt) (*kgo.Client, error) {
	// Tests create topics and at once use them: ask for metadata again soon, not after
	// franz-go's default five seconds.
	return kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.Addrs()...), kgo.MetadataMinAge(100 * time.Millisecond)}, opts...)...)
}

// Admin returns an admin client; close it with Close.
func (c *Cluster) Admin() (*kadm.Client, error) {
	cl, err := c.Client()
	if err != nil {
		return nil, err
	}
	return kadm.NewClient(cl), nil
}

// CreateTopic creates a topic. With rf 2 the replicas of partition p are placed so that the
// leaders alternate between the two first nodes; configs may be nil.
func (c *Cluster) CreateTopic(ctx context.Context, topic string, partitions int32, rf int16, configs map[string]*string) error {
	adm, err := c.Admin()
	if err != nil {
		return err
	}
	defer adm.Close()
	resp, err := adm.CreateTopic(ctx, partitions, rf, configs, topic)
	if err != nil {
		return fmt.Errorf("testkafka: creating %s on %s: %w", topic, c.Name, err)
	}
	if resp.Err != nil {
		return fmt.Errorf("testkafka: creating %s on %s: %w (%s)", topic, c.Name, resp.Err, resp.ErrMessage)
	}
	if err := c.waitLeaders(ctx, adm, topic, partitions); err != nil {
		return err
	}
	// Every broker, not just the one that answered, must know the topic before a test uses
	// it: each follows the controller's log on its own, a moment apart.
	for _, addr := range c.Addrs() {
		if err := c.waitOn(ctx, addr, topic, partitions); err != nil {
			return err
		}
	}
	return nil
}

// waitOn waits until the broker at addr answers metadata for topic with a leader for each
// of its partitions.
func (c *Cluster) waitOn(ctx context.Context, addr, topic string, partitions int32) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		return err
	}
	defer cl.Close()
	for {
		req := kmsg.NewPtrMetadataRequest()
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, rt)
		// Asked of the seed itself: the client would send a later request to any broker
		// it learnt of.
		var resp *kmsg.MetadataResponse
		kr, err := cl.SeedBrokers()[0].Request(ctx, req)
		if err == nil {
			resp = kr.(*kmsg.MetadataResponse)
		}
		if err == nil && len(resp.Topics) == 1 && resp.Topics[0].ErrorCode == 0 && int32(len(resp.Topics[0].Partitions)) == partitions {
			ok := true
			for _, p := range resp.Topics[0].Partitions {
				if p.ErrorCode != 0 || p.Leader < 0 {
					ok = false
				}
			}
			if ok {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testkafka: %s on %s's broker %s: %w", topic, c.Name, addr, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *Cluster) waitLeaders(ctx context.Context, adm *kadm.Client, topic string, partitions int32) error {
	for {
		md, err := adm.Metadata(ctx, topic)
		if err == nil {
			if td, ok := md.Topics[topic]; ok && td.Err == nil && int32(len(td.Partitions)) == partitions {
				ok := true
				for _, p := range td.Partitions {
					if p.Err != nil || p.Leader < 0 {
						ok = false
					}
				}
				if ok {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testkafka: leaders of %s on %s: %w", topic, c.Name, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Leader returns the current leader and leader epoch of a partition.
func (c *Cluster) Leader(ctx context.Context, topic string, partition int32) (leader, epoch int32, err error) {
	adm, err := c.Admin()
	if err != nil {
		return 0, 0, err
	}
	defer adm.Close()
	p, err := partitionMeta(ctx, adm, topic, partition)
	if err != nil {
		return 0, 0, err
	}
	return p.Leader, p.LeaderEpoch, nil
}

// partitionMeta is a partition's metadata. A broker learns of a new topic a moment after
// another one does (each follows the controller's log on its own), so a topic just created may
// be missing from one broker's answer: it is asked again for up to ten seconds.
func partitionMeta(ctx context.Context, adm *kadm.Client, topic string, partition int32) (kadm.PartitionDetail, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		md, err := adm.Metadata(ctx, topic)
		if err != nil {
			return kadm.PartitionDetail{}, err
		}
		if p, ok := md.Topics[topic].Partitions[partition]; ok && p.Err == nil && p.Leader >= 0 {
			return p, nil
		}
		if time.Now().After(deadline) {
			return kadm.PartitionDetail{}, fmt.Errorf("testkafka: %s[%d] not in metadata", topic, partition)
		}
		select {
		case <-ctx.Done():
			return kadm.PartitionDetail{}, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// MoveLeader makes node `to` the leader of a partition: it puts `to` first in the replica list
// with a reassignment, waits until it is in sync, and runs a preferred leader election. The
// partition's leader epoch rises. No node is stopped.
func (c *Cluster) MoveLeader(ctx context.Context, topic string, partition int32, to int32) error {
	adm, err := c.Admin()
	if err != nil {
		return err
	}
	defer adm.Close()
	p, err := partitionMeta(ctx, adm, topic, partition)
	if err != nil {
		return err
	}
	if p.Leader == to {
		return nil
	}
	replicas := []int32{to}
	for _, r := range p.Replicas {
		if r != to {
			replicas = append(replicas, r)
		}
	}
	var as kadm.AlterPartitionAssignmentsReq
	as.Assign(topic, partition, replicas)
	ares, err := adm.AlterPartitionAssignments(ctx, as)
	if err != nil {
		return fmt.Errorf("testkafka: reassigning %s[%d]: %w", topic, partition, err)
	}
	if err := ares.Error(); err != nil {
		return fmt.Errorf("testkafka: reassigning %s[%d]: %w", topic, partition, err)
	}
	for {
		lres, err := adm.ListPartitionReassignments(ctx, kadm.TopicsSet{topic: {partition: {}}})
		if err == nil && len(lres) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testkafka: waiting for reassignment of %s[%d]: %w", topic, partition, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	for {
		eres, err := adm.ElectLeaders(ctx, kadm.ElectPreferredReplica, kadm.TopicsSet{topic: {partition: {}}})
		if err != nil {
			return fmt.Errorf("testkafka: electing leader of %s[%d]: %w", topic, partition, err)
		}
		r := eres[topic][partition]
		if r.Err == nil || r.Err == kerr.ElectionNotNeeded {
			if l, _, err := c.Leader(ctx, topic, partition); err == nil && l == to {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testkafka: electing %d for %s[%d]: last %v: %w", to, topic, partition, r.Err, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
