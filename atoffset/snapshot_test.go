package atoffset

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"offsetgate/batch"
	"offsetgate/ledger"
)

// A takeover from a snapshot and the ledger after it starts from the same state as one that
// replays the whole ledger, wherever the snapshot was taken: batches, holes filled, new
// segments, markers, epochs, alignment and ownership.
func TestSnapshotReplaysAsTheWholeLedger(t *testing.T) {
	var reqs [][][]byte
	base := int64(30000)
	for i := 0; i < 1500; i++ {
		var req [][]byte
		switch i % 7 {
		case 3:
			base += 5 // a small hole: fillers
		case 5:
			base += 50000 // a large one: a new segment
		}
		epoch := int32(1 + i/700) // markers carry epoch 1: they come while it is 1
		if i%11 == 0 && epoch == 1 {
			req = append(req, src(base, 3, epoch, batch.AttrTransactional), marker(base+3, i%2 == 0))
			base += 4
		} else {
			req = append(req, src(base, 4, epoch, 0))
			base += 4
		}
		reqs = append(reqs, req)
	}
	s := fresh(0)
	var all []ledger.Entry
	var states []State
	var counts []Counts
	var c Counts
	var ats []int
	until := time.Unix(1700000000, 0).UTC()
	for i, req := range reqs {
		sets, hs := split(t, req...)
		p := s.Plan(sets, hs, Options{MaxFill: 100, Align: 100000})
		if p.Refusal.Code != 0 {
			t.Fatalf("request %d: %s", i, p.Refusal.Msg)
		}
		s.Apply(p)
		for _, w := range p.Writes {
			s.confirm(w.Entry.Src)
		}
		all = append(all, ledger.Entry{Kind: ledger.KindOwner, Src: -1, Owner: "a", Until: until})
		all = append(all, p.Entries...)
		for _, e := range p.Entries {
			c.add(e)
		}
		states, counts, ats = append(states, s), append(counts, c), append(ats, len(all))
	}
	whole := Replay(all)
	for _, k := range []int{0, 1, 57, 700, 1300, 1498, 1499} {
		b, err := snapshotOf(states[k], counts[k], int64(ats[k]), "a", until).encode()
		if err != nil {
			t.Fatal(err)
		}
		snap, err := decodeSnapshot(b)
		if err != nil {
			t.Fatal(err)
		}
		if snap.At != int64(ats[k]) {
			t.Fatalf("snapshot after request %d at %d, want %d", k, snap.At, ats[k])
		}
		got := ReplayOnto(snap.replayed(), all[snap.At:])
		if d := sameState(got, whole); d != "" {
			t.Fatalf("snapshot after request %d, then %d entries: %s", k, len(all)-int(snap.At), d)
		}
	}
	if len(whole.Recent) < snapshotRecent || whole.AlignTo != 30000 || len(whole.Segments) < 50 {
		t.Fatalf("the history is not what the test needs: %d recent, aligned to %d, %d segments", len(whole.Recent), whole.AlignTo, len(whole.Segments))
	}
}

// sameState compares what a takeover plans with: everything but the counters, and the recent
// entries as far back as a snapshot keeps them.
func sameState(got, want Replayed) string {
	var d []string
	g, w := got.State, want.State
	if g.Next != w.Next || g.DNext != w.DNext || g.Epoch != w.Epoch || g.PID != w.PID || g.PEpoch != w.PEpoch || g.Seq != w.Seq ||
		g.Cursor != w.Cursor || g.AlignTo != w.AlignTo || g.Resync != w.Resync || len(g.Pending) != len(w.Pending) {
		d = append(d, fmt.Sprintf("state %+v, want %+v", short(g), short(w)))
	}
	if fmt.Sprint(g.Segments) != fmt.Sprint(w.Segments) {
		d = append(d, "segments differ")
	}
	if got.Counts != want.Counts {
		d = append(d, fmt.Sprintf("counts %+v, want %+v", got.Counts, want.Counts))
	}
	if got.Owner != want.Owner || !got.OwnerUntil.Equal(want.OwnerUntil) || got.Halted != want.Halted {
		d = append(d, fmt.Sprintf("owner %q until %v halted %q, want %q until %v halted %q", got.Owner, got.OwnerUntil, got.Halted, want.Owner, want.OwnerUntil, want.Halted))
	}
	n := min(len(g.Recent), len(w.Recent), snapshotRecent)
	if n == 0 && len(w.Recent) > 0 {
		d = append(d, "no recent entries")
	}
	for i := 1; i <= n; i++ {
		a, b := g.Recent[len(g.Recent)-i], w.Recent[len(w.Recent)-i]
		a.Raw, b.Raw = nil, nil
		if fmt.Sprintf("%+v", a) != fmt.Sprintf("%+v", b) {
			d = append(d, fmt.Sprintf("recent entry -%d: %+v, want %+v", i, a, b))
			break
		}
	}
	return strings.Join(d, "; ")
}

func short(s State) string {
	return fmt.Sprintf("next %d dnext %d epoch %d pid %d/%d seq %d cursor %d align %d", s.Next, s.DNext, s.Epoch, s.PID, s.PEpoch, s.Seq, s.Cursor, s.AlignTo)
}

func TestSnapshotDecode(t *testing.T) {
	for _, c := range []struct {
		in   string
		fail string
	}{
		{`{"v":1,"at":5,"state":{"Next":3}}`, ""},
		{`{"v":2,"at":5}`, "format version 2"},
		{`{"v":0,"at":5}`, "format version 0"},
		{`{"v":1,"at":-1}`, "ledger offset -1"},
		{`{"v":1,`, "unreadable"},
	} {
		_, err := decodeSnapshot([]byte(c.in))
		if c.fail == "" && err != nil || c.fail != "" && (err == nil || !strings.Contains(err.Error(), c.fail)) {
			t.Errorf("decode %s: %v, want %q", c.in, err, c.fail)
		}
	}
}
