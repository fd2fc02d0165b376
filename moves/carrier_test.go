package moves

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Partitions answered here join their topic's entry in the destination's answer: franz-go
// refuses a commit answer with more topics than its request.
func TestHeldCommitsJoinTheirTopic(t *testing.T) {
	resp := &kmsg.OffsetCommitResponse{Topics: []kmsg.OffsetCommitResponseTopic{
		{Topic: "a", Partitions: []kmsg.OffsetCommitResponseTopicPartition{{Partition: 0}}},
	}}
	h := heldCommits{parts: []heldPart{
		{topic: "a", partition: 2, code: kerr.RequestTimedOut.Code},
		{topic: "b", partition: 1, code: kerr.RequestTimedOut.Code},
		{topic: "a", partition: 3, code: kerr.RequestTimedOut.Code},
	}}
	h.into(resp)
	if len(resp.Topics) != 2 {
		t.Fatalf("%d topics in the answer, want 2", len(resp.Topics))
	}
	a, b := resp.Topics[0], resp.Topics[1]
	if a.Topic != "a" || len(a.Partitions) != 3 || a.Partitions[1].Partition != 2 || a.Partitions[2].ErrorCode != kerr.RequestTimedOut.Code {
		t.Fatalf("topic a answered %+v", a)
	}
	if b.Topic != "b" || len(b.Partitions) != 1 || b.Partitions[0].Partition != 1 {
		t.Fatalf("topic b answered %+v", b)
	}
}

// An answer that says its broker is not the group's coordinator is sent again to the one
// found anew; any other error is the client's.
func TestCoordinatorError(t *testing.T) {
	for _, tc := range []struct {
		resp kmsg.Response
		want int16
	}{
		{&kmsg.HeartbeatResponse{ErrorCode: kerr.NotCoordinator.Code}, kerr.NotCoordinator.Code},
		{&kmsg.HeartbeatResponse{ErrorCode: kerr.UnknownMemberID.Code}, 0},
		{&kmsg.JoinGroupResponse{ErrorCode: kerr.CoordinatorNotAvailable.Code}, kerr.CoordinatorNotAvailable.Code},
		{&kmsg.OffsetFetchResponse{Groups: []kmsg.OffsetFetchResponseGroup{{ErrorCode: kerr.NotCoordinator.Code}}}, kerr.NotCoordinator.Code},
		{&kmsg.OffsetCommitResponse{Topics: []kmsg.OffsetCommitResponseTopic{{Partitions: []kmsg.OffsetCommitResponseTopicPartition{{ErrorCode: kerr.NotCoordinator.Code}}}}}, kerr.NotCoordinator.Code},
		{&kmsg.OffsetCommitResponse{Topics: []kmsg.OffsetCommitResponseTopic{{Partitions: []kmsg.OffsetCommitResponseTopicPartition{{ErrorCode: kerr.RequestTimedOut.Code}}}}}, 0},
		{&kmsg.SyncGroupResponse{ErrorCode: kerr.RebalanceInProgress.Code}, 0},
	} {
		if got := coordinatorError(tc.resp); got != tc.want {
			t.Errorf("%T %+v: %d, want %d", tc.resp, tc.resp, got, tc.want)
		}
	}
}
