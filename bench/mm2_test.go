package bench

import (
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The lag rounds take every tool once per round, and over as many rounds as tools each tool
// takes each place once: no tool is always measured first or last.
func TestLagOrder(t *testing.T) {
	if got, want := lagOrder(1, 3), []int{1, 2, 0}; !slices.Equal(got, want) {
		t.Fatalf("round 1 of 3 tools: %v, want %v", got, want)
	}
	if got := lagOrder(0, 1); !slices.Equal(got, []int{0}) {
		t.Fatalf("one tool: %v", got)
	}
	for _, n := range []int{2, 3} {
		places := make([][]int, n) // places[tool][place]: how often
		for i := range places {
			places[i] = make([]int, n)
		}
		for round := range 2 * n {
			o := lagOrder(round, n)
			seen := map[int]bool{}
			for place, tool := range o {
				seen[tool] = true
				places[tool][place]++
			}
			if len(o) != n || len(seen) != n {
				t.Fatalf("round %d of %d tools: %v", round, n, o)
			}
		}
		for tool, p := range places {
			for place, k := range p {
				if k != 2 {
					t.Fatalf("%d tools, %d rounds: tool %d was in place %d %d times, want 2", n, 2*n, tool, place, k)
				}
			}
		}
	}
}

// A round starts once D has, in every partition, at least the source's end offset; a missing
// partition or one that failed to list is not caught up.
func TestCaughtUp(t *testing.T) {
	const topic = "t"
	offs := func(ends ...int64) kadm.ListedOffsets {
		o := kadm.ListedOffsets{topic: {}}
		for p, e := range ends {
			o[topic][int32(p)] = kadm.ListedOffset{Topic: topic, Partition: int32(p), Offset: e}
		}
		return o
	}
	src := offs(10, 20)
	if ends, ok := caughtUp(src, offs(10, 20), topic, 2); !ok || ends[0] != 10 || ends[1] != 20 {
		t.Fatalf("equal: %v %v", ends, ok)
	}
	if ends, ok := caughtUp(src, offs(11, 20), topic, 2); !ok || ends[0] != 11 {
		t.Fatalf("D ahead (a record written twice): %v %v", ends, ok)
	}
	if _, ok := caughtUp(src, offs(10, 19), topic, 2); ok {
		t.Fatal("partition 1 behind: caught up")
	}
	if _, ok := caughtUp(src, offs(10), topic, 2); ok {
		t.Fatal("partition 1 missing on D: caught up")
	}
	failed := offs(10, 20)
	failed[topic][1] = kadm.ListedOffset{Topic: topic, Partition: 1, Offset: 20, Err: kerr.UnknownTopicOrPartition}
	if _, ok := caughtUp(src, failed, topic, 2); ok {
		t.Fatal("partition 1 failed on D: caught up")
	}
	if _, ok := caughtUp(src, offs(10, 20), "other", 2); ok {
		t.Fatal("another topic: caught up")
	}
}

// The warm-up records go to the partition they name, among all partitions; the paced ones go
// round robin.
func TestWarmUpPartitioner(t *testing.T) {
	p := warmUpPartitioner{}.ForTopic("t")
	warm := &kgo.Record{Partition: 2, Value: []byte(warmUpValue)}
	if !p.RequiresConsistency(warm) || p.Partition(warm, 4) != 2 {
		t.Fatalf("warm-up record for partition 2: consistent %v, partition %d", p.RequiresConsistency(warm), p.Partition(warm, 4))
	}
	paced := &kgo.Record{Value: make([]byte, 8)}
	var got []int
	for range 5 {
		if p.RequiresConsistency(paced) {
			t.Fatal("paced record requires consistency")
		}
		got = append(got, p.Partition(paced, 3))
	}
	if !slices.Equal(got, []int{0, 1, 2, 0, 1}) {
		t.Fatalf("paced records: %v", got)
	}
}
