package rules

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Config keys offsetgate owns. The destination broker never sees them.
const (
	// MarkKey, set to "true" at creation, makes a topic a mirror topic.
	MarkKey = "offsetgate.produce.at.offset"
	// SourcePrefix carries the source topic's settings, stored with the mark.
	SourcePrefix = "offsetgate.source."
	// KeyPrefix is the prefix of every offsetgate config key.
	KeyPrefix = "offsetgate."
	// OwnTopicPrefix names offsetgate's own topics on the destination.
	OwnTopicPrefix = "__offsetgate_"
)

// Error codes of refusals (docs/PROTOCOL.md lists them with their meaning).
const (
	ErrTopicAuthorization int16 = 29 // TOPIC_AUTHORIZATION_FAILED: not an approved mirroring client, or offsetgate's own topic
	ErrInvalidConfig      int16 = 40 // INVALID_CONFIG: a config change that would break exactness, or adding the mark later
	ErrPolicyViolation    int16 = 44 // POLICY_VIOLATION: an operation that would break a mirror's exactness
	ErrInvalidRecord      int16 = 87 // INVALID_RECORD: a batch this version cannot mirror exactly
)

// Mark is a mirror topic's durable record, keyed by topic id.
type Mark struct {
	Version  int               `json:"version"`
	TopicID  string            `json:"topic_id"` // hex of the 16-byte id
	Topic    string            `json:"topic"`
	Source   map[string]string `json:"source,omitempty"` // offsetgate.source.* without the prefix
	MarkedAt time.Time         `json:"marked_at"`
	MarkedBy string            `json:"marked_by,omitempty"`
	// Removed is set by promotion: the topic stops being a mirror topic for good.
	Removed bool `json:"removed,omitempty"`
}

// MarkVersion is the format version written in new marks.
const MarkVersion = 1

// IsOwnTopic reports whether a topic is offsetgate's own.
func IsOwnTopic(name string) bool { return strings.HasPrefix(name, OwnTopicPrefix) }

// The source settings a mirror topic may carry at creation.
var sourceKeys = map[string]bool{
	"retention.ms": true, "retention.bytes": true, "cleanup.policy": true,
	"max.message.bytes": true, "message.timestamp.type": true,
	// Not a Kafka setting: the source topic's id, so that a mirroring client can tell a
	// source topic deleted and recreated under the same name from the one it mirrored.
	"topic.id": true,
}

// maxLong is Kafka's Long.MAX_VALUE, used for "no timestamp window".
const maxLong = "9223372036854775807"

// DestinationConfigs turns the configs a client sent with a mirror topic's CreateTopics into
// what the destination broker gets (offsetgate keys removed, exactness settings set) and the
// source settings to store with the mark. It refuses, naming the setting, configs that would
// break exactness.
func DestinationConfigs(in map[string]*string) (out map[string]*string, source map[string]string, err error) {
	out = map[string]*string{}
	source = map[string]string{}
	for k, v := range in {
		switch {
		case k == MarkKey:
		case strings.HasPrefix(k, SourcePrefix):
			sk := strings.TrimPrefix(k, SourcePrefix)
			if !sourceKeys[sk] {
				return nil, nil, fmt.Errorf("unknown source setting %q (known: retention.ms, retention.bytes, cleanup.policy, max.message.bytes, message.timestamp.type, topic.id)", k)
			}
			if v == nil {
				return nil, nil, fmt.Errorf("%s needs a value", k)
			}
			source[sk] = *v
		case strings.HasPrefix(k, KeyPrefix):
			return nil, nil, fmt.Errorf("unknown offsetgate config %q", k)
		default:
			out[k] = v
		}
	}
	set := func(k, v string) { out[k] = &v }
	// D must keep the producer's codec and timestamps, and accept old and future timestamps.
	for k, want := range map[string]string{"compression.type": "producer", "message.timestamp.type": "CreateTime"} {
		if v, ok := out[k]; ok && v != nil && *v != want {
			return nil, nil, fmt.Errorf("%s must be %s on a mirror topic (D would rewrite the source's batches), not %s", k, want, *v)
		}
		set(k, want)
	}
	for _, k := range []string{"message.timestamp.before.max.ms", "message.timestamp.after.max.ms"} {
		if v, ok := out[k]; ok && v != nil && *v != maxLong {
			return nil, nil, fmt.Errorf("%s must not be limited on a mirror topic (source timestamps can be old or ahead), not %s", k, *v)
		}
		set(k, maxLong)
	}
	if tt, ok := source["message.timestamp.type"]; ok && tt != "CreateTime" && tt != "LogAppendTime" {
		return nil, nil, fmt.Errorf("offsetgate.source.message.timestamp.type %q is not CreateTime or LogAppendTime", tt)
	}
	// Retention no shorter than the source's; cleanup policy as on the source.
	for _, k := range []string{"retention.ms", "retention.bytes"} {
		sv, ok := source[k]
		if !ok {
			continue
		}
		if v, given := out[k]; given && v != nil && shorter(*v, sv) {
			return nil, nil, fmt.Errorf("%s %s is shorter than the source's %s: the mirror would lose records the source still has", k, *v, sv)
		}
		if _, given := out[k]; !given {
			set(k, sv)
		}
	}
	if sv, ok := source["cleanup.policy"]; ok {
		if v, given := out["cleanup.policy"]; given && v != nil && *v != sv {
			return nil, nil, fmt.Errorf("cleanup.policy %s differs from the source's %s", *v, sv)
		}
		set("cleanup.policy", sv)
	}
	if sv, ok := source["max.message.bytes"]; ok {
		if v, given := out["max.message.bytes"]; given && v != nil && smaller(*v, sv) {
			return nil, nil, fmt.Errorf("max.message.bytes %s is smaller than the source's %s: source batches would not fit", *v, sv)
		}
		if _, given := out["max.message.bytes"]; !given {
			set("max.message.bytes", sv)
		}
	}
	return out, source, nil
}

// shorter compares retention values where -1 means forever.
func shorter(v, than string) bool {
	a, err1 := strconv.ParseInt(v, 10, 64)
	b, err2 := strconv.ParseInt(than, 10, 64)
	if err1 != nil || err2 != nil {
		return true
	}
	if b < 0 {
		return a >= 0
	}
	return a >= 0 && a < b
}

func smaller(v, than string) bool {
	a, err1 := strconv.ParseInt(v, 10, 64)
	b, err2 := strconv.ParseInt(than, 10, 64)
	return err1 != nil || err2 != nil || a < b
}

// ConfigChange judges a config change (set or delete) on a mirror topic. It returns an error
// naming the setting when the change would break exactness.
func ConfigChange(key string, value *string, m *Mark) error {
	switch key {
	case "compression.type":
		if value == nil || *value != "producer" {
			return fmt.Errorf("compression.type must stay producer on mirror topic %s", m.Topic)
		}
	case "message.timestamp.type":
		if value == nil || *value != "CreateTime" {
			return fmt.Errorf("message.timestamp.type must stay CreateTime on mirror topic %s", m.Topic)
		}
	case "message.timestamp.before.max.ms", "message.timestamp.after.max.ms":
		if value == nil || *value != maxLong {
			return fmt.Errorf("%s must stay unlimited on mirror topic %s", key, m.Topic)
		}
	case "retention.ms", "retention.bytes":
		sv, ok := m.Source[key]
		if !ok {
			sv = "-1"
		}
		if value == nil || shorter(*value, sv) {
			return fmt.Errorf("%s on mirror topic %s must not be shorter than the source's %s", key, m.Topic, sv)
		}
	case "cleanup.policy":
		if sv, ok := m.Source[key]; ok && (value == nil || *value != sv) {
			return fmt.Errorf("cleanup.policy on mirror topic %s must stay the source's %s", m.Topic, sv)
		}
	case "max.message.bytes":
		if sv, ok := m.Source[key]; ok && (value == nil || smaller(*value, sv)) {
			return fmt.Errorf("max.message.bytes on mirror topic %s must not be smaller than the source's %s", m.Topic, sv)
		}
	}
	return nil
}
