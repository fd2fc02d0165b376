package session

// Commit traffic of mirror partitions (OffsetCommit, TxnOffsetCommit, OffsetFetch): clients
// speak source offsets, D stores destination offsets. A committed offset goes to D through
// CommitToDest (exact inside batches and filled holes; the first offset after an unfilled
// hole), its leader epoch as -1 (no destination epoch stands for a source epoch, and D does not
// judge committed epochs); OffsetFetch gives back ToSource of what D holds and the source epoch
// of the record before it, which is what a consumer commits and later validates with
// OffsetForLeaderEpoch. Commits load the views of the partitions they name; OffsetFetch loads
// whole topics', since it may name no topic at all.

import (
	"offsetgate/view"
)

// committedToDest translates one committed offset and epoch for D.
func committedToDest(pv *view.Partition, offset int64) (int64, int32) {
	return pv.CommitToDest(offset), -1
}

// committedToSource translates one offset D holds for the client.
func committedToSource(pv *view.Partition, offset int64) (int64, int32) {
	if offset < 0 {
		return offset, -1
	}
	src := pv.ToSource(offset)
	epoch := int32(-1)
	if src > 0 {
		epoch = pv.EpochAt(src - 1)
	}
	return src, epoch
}
