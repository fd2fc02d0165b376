package atoffset

import (
	"encoding/json"
	"fmt"
	"time"

	"offsetgate/ledger"
)

// A snapshot is a partition's planning state after a prefix of its ledger (ledger offsets
// below At), stored in the mirror topic's snapshot topic (ledger.SnapshotTopic). A takeover
// starts from the newest one and replays the ledger from At: its cost follows the entries
// written since the snapshot, not the partition's whole history.
//
// It is written by the partition's writer only when nothing is pending (every entry below At
// is on D), so the state is exactly Replay of the prefix: pending writes are always in the
// tail, where the takeover finds them against D's high watermark as before. Recent is cut to
// the newest snapshotRecent entries, without kept batches (Raw): planning compares a resent
// batch with an entry's fields only, and older batches are found through Config.Find.
type snapshot struct {
	V      int       `json:"v"`
	At     int64     `json:"at"`
	State  State     `json:"state"`
	Counts Counts    `json:"counts"`
	Owner  string    `json:"owner,omitempty"`
	Until  time.Time `json:"until,omitempty"`
}

const (
	snapshotVersion = 1
	snapshotRecent  = 1024
	// DefaultSnapshotEvery is how many ledger entries a partition's writer appends between
	// two snapshots.
	DefaultSnapshotEvery = 10000
)

// snapshotOf is the snapshot of a writer's state, whose ledger ends at ledger offset at.
func snapshotOf(st State, counts Counts, at int64, owner string, until time.Time) snapshot {
	recent := st.Recent[max(0, len(st.Recent)-snapshotRecent):]
	st.Recent = make([]ledger.Entry, len(recent))
	for i, e := range recent {
		e.Raw = nil
		st.Recent[i] = e
	}
	// As Replay leaves them: nothing pending (a snapshot is only taken then), no resync, the
	// cursor at the mirrored end.
	st.Pending, st.Resync, st.Cursor = nil, false, st.Next
	return snapshot{V: snapshotVersion, At: at, State: st, Counts: counts, Owner: owner, Until: until}
}

func (s snapshot) encode() ([]byte, error) { return json.Marshal(s) }

// decodeSnapshot reads a stored snapshot; one of a newer format is refused (the takeover then
// reads the whole ledger, as without one).
func decodeSnapshot(b []byte) (snapshot, error) {
	var s snapshot
	if err := json.Unmarshal(b, &s); err != nil {
		return snapshot{}, fmt.Errorf("unreadable snapshot: %w", err)
	}
	if s.V > snapshotVersion || s.V < 1 {
		return snapshot{}, fmt.Errorf("snapshot of format version %d (this offsetgate reads up to %d)", s.V, snapshotVersion)
	}
	if s.At < 0 {
		return snapshot{}, fmt.Errorf("snapshot at ledger offset %d", s.At)
	}
	return s, nil
}

// replayed is the snapshot as the replay of its ledger prefix.
func (s snapshot) replayed() Replayed {
	return Replayed{State: s.State, Counts: s.Counts, Owner: s.Owner, OwnerUntil: s.Until}
}

// DecodeSnapshot reads a stored snapshot (ledger.LastSnapshot's value) as the replay of the
// ledger before ledger offset at: ReplayOnto it the entries from at on.
func DecodeSnapshot(b []byte) (r Replayed, at int64, err error) {
	s, err := decodeSnapshot(b)
	if err != nil {
		return Replayed{}, 0, err
	}
	return s.replayed(), s.At, nil
}
