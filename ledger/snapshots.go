package ledger

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/rawread"
	"offsetgate/rules"
)

// SnapshotTopic names the snapshot topic of a mirror topic: compacted, partition-aligned with
// the ledger, so the last record of partition p is the newest snapshot of mirror partition p's
// ledger. A snapshot is the writer's state after a prefix of the ledger: a takeover reads it
// and the ledger from where it ends, not the whole history.
func SnapshotTopic(topicID string) string { return rules.OwnTopicPrefix + "snapshots_" + topicID }

// snapshotKey is the key of every snapshot record: compaction keeps the newest one only.
var snapshotKey = []byte("snapshot")

// EnsureSnapshots creates the snapshot topic of a mirror topic if it does not exist, and grows
// it with the mirror topic.
func (l *Ledger) EnsureSnapshots(ctx context.Context, topicID string, partitions int32) error {
	adm := kadm.NewClient(l.cl)
	topic := SnapshotTopic(topicID)
	td, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return fmt.Errorf("snapshots: %w", err)
	}
	if t, ok := td[topic]; ok && t.Err == nil {
		if int32(len(t.Partitions)) >= partitions {
			return nil
		}
		resps, err := adm.UpdatePartitions(ctx, int(partitions), topic)
		if err != nil {
			return fmt.Errorf("snapshots: adding partitions to %s: %w", topic, err)
		}
		if r := resps[topic]; r.Err != nil && !errors.Is(r.Err, kerr.InvalidPartitions) {
			return fmt.Errorf("snapshots: adding partitions to %s (to %d): %w", topic, partitions, r.Err)
		}
		l.cl.ForceMetadataRefresh()
		return nil
	}
	brokers, err := adm.ListBrokers(ctx)
	if err != nil {
		return fmt.Errorf("snapshots: %w", err)
	}
	rf := int16(min(len(brokers), 3))
	_, err = adm.CreateTopic(ctx, partitions, rf, map[string]*string{
		"cleanup.policy":                 kmsg.StringPtr("compact"),
		"unclean.leader.election.enable": kmsg.StringPtr("false"),
		"compression.type":               kmsg.StringPtr("zstd"),
		"max.message.bytes":              kmsg.StringPtr("8388608"),
	}, topic)
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("snapshots: creating %s: %w", topic, err)
	}
	return nil
}

// WriteSnapshot stores a snapshot of a ledger partition (durably, acks=all).
func (l *Ledger) WriteSnapshot(ctx context.Context, topicID string, partition int32, value []byte) error {
	r := &kgo.Record{Topic: SnapshotTopic(topicID), Partition: partition, Key: snapshotKey, Value: value}
	if err := l.cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		return fmt.Errorf("snapshots: writing %s[%d]: %w", SnapshotTopic(topicID), partition, err)
	}
	return nil
}

// LastSnapshot reads the newest snapshot of a ledger partition: the last record of its
// snapshot partition. nil, nil: there is none (no topic, or nothing written yet).
func (l *Ledger) LastSnapshot(ctx context.Context, topicID string, partition int32) ([]byte, error) {
	topic := SnapshotTopic(topicID)
	lp, err := l.meta.Lookup(ctx, topic, partition)
	if err != nil {
		if errors.Is(err, kerr.UnknownTopicOrPartition) {
			return nil, nil
		}
		return nil, fmt.Errorf("snapshots: %w", err)
	}
	end, err := rawread.ListOffset(ctx, l.cl, topic, partition, rawread.Latest)
	if err != nil || end == 0 {
		return nil, err
	}
	// The lookup above says where the partition is read (a read that fails with it asks again).
	var recs []*kgo.Record
	_, err = l.meta.EachWith(ctx, l.cl, &lp, topic, partition, end-1, -1, func(r *kgo.Record) error {
		recs = append(recs, r)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("snapshots: reading %s[%d]: %w", topic, partition, err)
	}
	if len(recs) == 0 {
		// The partition ends past a record this read did not get: not "no snapshot", which
		// a caller would take as "replay the whole (trimmed) ledger".
		return nil, fmt.Errorf("snapshots: %s[%d] ends at %d but no record was read at %d", topic, partition, end, end-1)
	}
	return recs[len(recs)-1].Value, nil
}

// Trim deletes a partition's ledger entries below ledger offset below (DeleteRecords): what a
// snapshot replaces for a takeover and what no source view needs any more.
func (l *Ledger) Trim(ctx context.Context, topicID string, partition int32, below int64) error {
	topic := Topic(topicID)
	resp, err := kadm.NewClient(l.cl).DeleteRecords(ctx, kadm.Offsets{topic: {partition: {Topic: topic, Partition: partition, At: below}}})
	if err != nil {
		return fmt.Errorf("ledger: trimming %s[%d] below %d: %w", topic, partition, below, err)
	}
	if r, ok := resp.Lookup(topic, partition); !ok || r.Err != nil {
		return fmt.Errorf("ledger: trimming %s[%d] below %d: %v", topic, partition, below, r.Err)
	}
	return nil
}
