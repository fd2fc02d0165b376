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
	// ProxyKey is the config offsetgate adds to DescribeConfigs answers for its marks topic
	// ("true"): a client tells offsetgate from a plain broker by it, since no broker answers a
	// config named offsetgate.*.
	ProxyKey = "offsetgate.proxy"
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
	// Sealed is set by the first step of a promotion (`offsetgate promote`): source
	// connections refuse writes to the topic (retriable) so that the source's end stops moving
	// and the mirror can reach it; the mirror itself still writes.
	Sealed bool `json:"sealed,omitempty"`
}

// MarkSealed is the mark key's value that seals a mirror topic for its promotion (Mark.Sealed);
// "true" unseals it, and DELETE promotes it.
const MarkSealed = "sealed"

// MarkVersion is the format version written in new marks.
const MarkVersion = 1

// IsOwnTopic reports whether a topic is offsetgate's own.
func IsOwnTopic(name string) bool { return strings.HasPrefix(name, OwnTopicPrefix) }

// IsOwnTransactionalID reports whether a transactional id is offsetgate's own (the prefix of
// its topics): each ledger partition's appender is the producer of such an id, whose epoch the
// ledger's fencing is built on and only a takeover may bump. No client may use one.
func IsOwnTransactionalID(id *string) bool {
	return id != nil && strings.HasPrefix(*id, OwnTopicPrefix)
}

// OwnTransactionalIDMessage is the refusal of a client's request naming one of offsetgate's
// transactional ids.
func OwnTransactionalIDMessage(id string) string {
	return "offsetgate: transactional id " + id + " is offsetgate's own (" + OwnTopicPrefix + "*); clients may not use it"
}

// The source settings a mirror topic may carry at creation.
var sourceKeys = map[string]bool{
	"retention.ms": true, "retention.bytes": true, "cleanup.policy": true,
	"max.message.bytes": true, "message.timestamp.type": true,
	// Compaction: how long the source's cleaner may wait, and keeps tombstones.
	"max.compaction.lag.ms": true, "delete.retention.ms": true,
	// Not a Kafka setting: the source topic's id, so that a mirroring client can tell a
	// source topic deleted and recreated under the same name from the one it mirrored.
	"topic.id": true,
}

// maxLong is Kafka's Long.MAX_VALUE, used for "no timestamp window".
const maxLong = "9223372036854775807"

// Defaults of the guarded settings of a mirror topic created without the source's (a
// mirroring client that sends no offsetgate.source.* settings). docs/PROTOCOL.md lists them.
const (
	// DefaultMaxMessageBytes is Kafka's own default max.message.bytes.
	DefaultMaxMessageBytes = "1048588"
	// DefaultSegmentBytes is Kafka's own default segment.bytes.
	DefaultSegmentBytes = "1073741824"
	// DefaultDeleteRetentionMs is Kafka's own default delete.retention.ms.
	DefaultDeleteRetentionMs = 86400000
	// CompactionMargin is how much later than the source's cleaner must have acted the
	// destination's may act on the same records (min.compaction.lag.ms, delete.retention.ms).
	CompactionMargin = 3600000
)

// Guarded lists the topic settings a mirror topic's exactness depends on. Each is set on the
// topic itself at creation (from the source's settings or the defaults above), so the
// destination's broker-level defaults never reach it, and every later change of one is judged
// by ConfigChange.
var Guarded = []string{
	"compression.type", "message.timestamp.type", "message.timestamp.before.max.ms", "message.timestamp.after.max.ms",
	"retention.ms", "retention.bytes", "cleanup.policy", "max.message.bytes", "segment.bytes",
	"unclean.leader.election.enable", "min.compaction.lag.ms", "delete.retention.ms",
}

// lagPlus is a source's duration setting (ms) plus the compaction margin, or "never" (Kafka's
// Long.MAX_VALUE) when the source sets no bound.
func lagPlus(source map[string]string, key string, dflt int64) string {
	v := dflt
	if sv, ok := source[key]; ok {
		n, err := strconv.ParseInt(sv, 10, 64)
		if err != nil {
			return maxLong
		}
		v = n
	}
	if v < 0 || v > 1<<62 {
		return maxLong
	}
	return strconv.FormatInt(v+CompactionMargin, 10)
}

// pinned is the value a guarded setting gets at creation when the client did not give one.
func pinned(key string, source map[string]string) string {
	switch key {
	case "compression.type":
		return "producer"
	case "message.timestamp.type":
		return "CreateTime"
	case "message.timestamp.before.max.ms", "message.timestamp.after.max.ms":
		return maxLong
	case "retention.ms", "retention.bytes":
		if v, ok := source[key]; ok {
			return v
		}
		return "-1" // the mirroring client moves the log start as the source's moves
	case "cleanup.policy":
		if v, ok := source[key]; ok {
			return v
		}
		return "delete"
	case "max.message.bytes":
		if v, ok := source[key]; ok {
			return v
		}
		return DefaultMaxMessageBytes
	case "segment.bytes":
		return DefaultSegmentBytes
	case "unclean.leader.election.enable":
		return "false"
	case "min.compaction.lag.ms":
		// The destination compacts a record only once the source's cleaner must have: after
		// the source's max.compaction.lag.ms and a margin (never, when the source sets none).
		return lagPlus(source, "max.compaction.lag.ms", -1)
	case "delete.retention.ms":
		// Tombstones stay on the destination at least as long as on the source.
		return lagPlus(source, "delete.retention.ms", DefaultDeleteRetentionMs)
	}
	return ""
}

// MissingGuarded is the guarded settings a mirror topic lacks on the topic itself (set: the
// keys the destination holds as topic settings), with the values creation pins for them from
// its mark's source settings. A mirror topic created by an earlier version may lack some: the
// broker's defaults would reach it there.
func MissingGuarded(set map[string]bool, m *Mark) map[string]string {
	out := map[string]string{}
	for _, k := range Guarded {
		if !set[k] {
			out[k] = pinned(k, m.Source)
		}
	}
	return out
}

// DestinationConfigs turns the configs a client sent with a mirror topic's CreateTopics into
// what the destination broker gets (offsetgate keys removed, every guarded setting set on the
// topic) and the source settings to store with the mark. It refuses, naming the setting,
// configs that would break exactness.
func DestinationConfigs(in map[string]*string) (out map[string]*string, source map[string]string, err error) {
	out = map[string]*string{}
	source = map[string]string{}
	for k, v := range in {
		switch {
		case k == MarkKey:
		case strings.HasPrefix(k, SourcePrefix):
			sk := strings.TrimPrefix(k, SourcePrefix)
			if !sourceKeys[sk] {
				return nil, nil, fmt.Errorf("unknown source setting %q (known: retention.ms, retention.bytes, cleanup.policy, max.message.bytes, message.timestamp.type, max.compaction.lag.ms, delete.retention.ms, topic.id)", k)
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
	if tt, ok := source["message.timestamp.type"]; ok && tt != "CreateTime" && tt != "LogAppendTime" {
		return nil, nil, fmt.Errorf("offsetgate.source.message.timestamp.type %q is not CreateTime or LogAppendTime", tt)
	}
	m := &Mark{Topic: "the new mirror topic", Source: source}
	for _, k := range Guarded {
		v, given := out[k]
		if !given {
			p := pinned(k, source)
			out[k] = &p
			continue
		}
		if err := ConfigChange(k, v, m); err != nil {
			return nil, nil, err
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

// ConfigChange judges a config change (set, or nil: deleted, back to the broker's default)
// of a guarded setting on a mirror topic. It returns an error naming the setting when the change
// would break exactness. Settings that are not guarded pass.
func ConfigChange(key string, value *string, m *Mark) error {
	guarded := false
	for _, g := range Guarded {
		guarded = guarded || g == key
	}
	if !guarded {
		return nil
	}
	if value == nil {
		return fmt.Errorf("%s cannot be removed from mirror topic %s: the broker's default would apply, and exactness depends on it", key, m.Topic)
	}
	v := *value
	floor := func(k string) string {
		if sv, ok := m.Source[k]; ok {
			return sv
		}
		return pinned(k, nil)
	}
	switch key {
	case "compression.type":
		if v != "producer" {
			return fmt.Errorf("compression.type must stay producer on mirror topic %s (D would rewrite the source's batches), not %s", m.Topic, v)
		}
	case "message.timestamp.type":
		if v != "CreateTime" {
			return fmt.Errorf("message.timestamp.type must stay CreateTime on mirror topic %s (D would rewrite the source's timestamps), not %s", m.Topic, v)
		}
	case "message.timestamp.before.max.ms", "message.timestamp.after.max.ms":
		if v != maxLong {
			return fmt.Errorf("%s must stay unlimited on mirror topic %s (source timestamps can be old or ahead), not %s", key, m.Topic, v)
		}
	case "retention.ms", "retention.bytes":
		if sv := floor(key); shorter(v, sv) {
			return fmt.Errorf("%s %s on mirror topic %s is shorter than the source's %s: the mirror would lose records the source still has", key, v, m.Topic, sv)
		}
	case "cleanup.policy":
		if sv := floor(key); v != sv {
			return fmt.Errorf("cleanup.policy on mirror topic %s must stay the source's %s, not %s", m.Topic, sv, v)
		}
	case "max.message.bytes":
		if sv := floor(key); smaller(v, sv) {
			return fmt.Errorf("max.message.bytes %s on mirror topic %s is smaller than the source's %s: source batches would not fit", v, m.Topic, sv)
		}
	case "segment.bytes":
		if sv := floor("max.message.bytes"); smaller(v, sv) {
			return fmt.Errorf("segment.bytes %s on mirror topic %s is smaller than the largest batch it must take (%s)", v, m.Topic, sv)
		}
	case "min.compaction.lag.ms", "delete.retention.ms":
		if sv := pinned(key, m.Source); smaller(v, sv) {
			return fmt.Errorf("%s %s on mirror topic %s is below %s: the destination's cleaner could remove records before the source's did", key, v, m.Topic, sv)
		}
	case "unclean.leader.election.enable":
		if v != "false" {
			return fmt.Errorf("unclean.leader.election.enable must stay false on mirror topic %s: an unclean election loses records and reuses their offsets", m.Topic)
		}
	}
	return nil
}
