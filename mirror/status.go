package mirror

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"offsetgate/atoffset"
	"offsetgate/catalog"
	"offsetgate/ledger"
	"offsetgate/rawread"
	"offsetgate/rules"
)

// PartitionStatus is one mirror partition as its ledger records it.
type PartitionStatus struct {
	Topic     string             `json:"topic"`
	Partition int32              `json:"partition"`
	End       int64              `json:"mirrored_end"` // next source offset; -1: nothing mirrored
	Segments  []ledger.Entry     `json:"-"`
	Shifts    []map[string]int64 `json:"segments"`
	Epoch     int32              `json:"source_epoch"`
	Batches   int64              `json:"batches"`
	Fillers   int64              `json:"filler_records"`
	// Aligned is the filler records written at the mirror's start so D's offsets are the
	// source's (deleted from D once written).
	Aligned int64 `json:"aligned_filler_records,omitempty"`
	// Direct says whether clients can leave offsetgate and read D directly with the offsets
	// and records they knew from the source; DirectNo says why not.
	Direct   bool   `json:"direct"`
	DirectNo string `json:"direct_no,omitempty"`
	Owner    string `json:"owner,omitempty"`
	Halted   string `json:"halted,omitempty"`
	// Sealed: `offsetgate promote` has sealed the topic and waits for the mirror to reach
	// the source's end (source listeners refuse its writes meanwhile).
	Sealed bool `json:"sealed,omitempty"`
	// SourceEnd and Lag are set when a source client was given and the source answered;
	// otherwise LagUnknown says why (never a lag of 0 for ends that are not known).
	SourceEnd  *int64 `json:"source_end,omitempty"`
	Lag        *int64 `json:"lag,omitempty"`
	LagUnknown string `json:"lag_unknown,omitempty"`
	// With a source client: the log starts (source offsets) of the mirror through offsetgate
	// and of the source, and HeadLost, the offsets the source still holds below the mirror's
	// log start. The mirror moves its log start only up to the source's, so anything the
	// source holds below it was lost on the destination (deleted there directly, say).
	LogStart       *int64 `json:"log_start,omitempty"`
	SourceLogStart *int64 `json:"source_log_start,omitempty"`
	HeadLost       *int64 `json:"head_lost,omitempty"`
	HeadUnknown    string `json:"head_unknown,omitempty"`
}

// State is what the table shows for the partition: halted, lost at the head, not started or
// ok.
func (p PartitionStatus) State() string {
	var s []string
	if p.Halted != "" {
		s = append(s, "HALTED: "+p.Halted)
	}
	if p.HeadLost != nil && *p.HeadLost > 0 {
		s = append(s, fmt.Sprintf("LOST AT HEAD: the source still holds [%d, %d), the mirror starts at %d",
			*p.SourceLogStart, *p.SourceLogStart+*p.HeadLost, *p.LogStart))
	}
	if p.Sealed {
		s = append(s, "SEALED for its promotion: source listeners refuse its writes")
	}
	switch {
	case len(s) > 0:
		return strings.Join(s, "; ")
	case p.End < 0:
		return "not started: nothing mirrored yet"
	}
	return "ok"
}

// Status reads the mirror marks and ledgers through offsetgate (clients may read offsetgate's
// own topics; only writes are refused) and, when a source client is given, the source's ends.
func Status(ctx context.Context, px *kgo.Client, src *kgo.Client) ([]PartitionStatus, error) {
	marks, err := readTopic(ctx, px, catalog.MarksTopic, 0)
	if errors.Is(err, kerr.TopicAuthorizationFailed) {
		return nil, fmt.Errorf("offsetgate lets only approved mirroring clients read the mirror marks (%s): give the identity of one (--tls-cert and --tls-key, or --sasl-*)", catalog.MarksTopic)
	}
	if err != nil {
		return nil, fmt.Errorf("reading mirror marks: %w", err)
	}
	latest := map[string]rules.Mark{}
	for _, r := range marks {
		if !catalog.IsMarkKey(r.Key) {
			continue // a group's live move or a creation intent, not a topic's mark
		}
		var m rules.Mark
		if r.Value == nil {
			delete(latest, string(r.Key))
			continue
		}
		if json.Unmarshal(r.Value, &m) == nil {
			latest[string(r.Key)] = m
		}
	}
	var out []PartitionStatus
	padm := kadm.NewClient(px)
	for id, m := range latest {
		if m.Removed || m.Topic == "" {
			continue
		}
		md, err := padm.Metadata(ctx, m.Topic)
		if err != nil {
			return nil, err
		}
		t, ok := md.Topics[m.Topic]
		if !ok || t.Err != nil {
			continue
		}
		var srcEnds, srcStarts kadm.ListedOffsets
		var srcErr error
		// The mirror's log starts before the source's (see verify.Run: read this way round,
		// retention moving on in between cannot look like a loss).
		pxStarts, pxErr := padm.ListStartOffsets(ctx, m.Topic)
		if src != nil {
			sadm := kadm.NewClient(src)
			if srcEnds, srcErr = sadm.ListEndOffsets(ctx, m.Topic); srcErr == nil {
				srcStarts, srcErr = sadm.ListStartOffsets(ctx, m.Topic)
			}
		}
		for p := range t.Partitions {
			ps := PartitionStatus{Topic: m.Topic, Partition: p, End: -1, Epoch: -1, Sealed: m.Sealed}
			// The same replay a writer taking the partition over starts from: the newest
			// snapshot and the ledger after it.
			rp, unreadable, err := replayLedger(ctx, px, id, p)
			for try := 1; (err != nil || unreadable != "") && try < 3 && ctx.Err() == nil; try++ {
				// A read that failed, or found the ledger unreadable (a leader election on the
				// destination can look like either for a moment), is read again before the
				// partition is reported halted or the whole status fails.
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
				rp, unreadable, err = replayLedger(ctx, px, id, p)
			}
			if err != nil {
				return nil, fmt.Errorf("reading the ledger of %s[%d]: %w", m.Topic, p, err)
			}
			ps.Halted = unreadable
			ps.End, ps.Epoch, ps.Batches, ps.Fillers, ps.Aligned = rp.Next, rp.Epoch, rp.Batches, rp.Fillers, rp.Aligned
			ps.Direct, ps.DirectNo = direct(rp, pxStarts, pxErr, m.Topic, p)
			for _, sg := range rp.Segments {
				ps.Shifts = append(ps.Shifts, map[string]int64{"from_source_offset": sg.Src, "delta": sg.Delta})
			}
			if time.Now().Before(rp.OwnerUntil) {
				ps.Owner = rp.Owner
			}
			if ps.Halted == "" {
				ps.Halted = rp.Halted
			}
			if src != nil {
				ps.SourceEnd, ps.Lag, ps.LagUnknown = lag(srcEnds, srcStarts, srcErr, m.Topic, p, ps.End)
				if ps.End >= 0 {
					ps.LogStart, ps.SourceLogStart, ps.HeadLost, ps.HeadUnknown = headLost(pxStarts, pxErr, srcStarts, srcEnds, srcErr, m.Topic, p)
				}
			}
			out = append(out, ps)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out, nil
}

// replayLedger replays a mirror partition's ledger from its newest snapshot (the whole ledger
// without one), as a writer's takeover does. unreadable says where the ledger stops being
// readable, if it does: the replay then covers what comes before.
func replayLedger(ctx context.Context, px *kgo.Client, id string, p int32) (atoffset.Replayed, string, error) {
	r := atoffset.Replay(nil)
	if _, err := rawread.Lookup(ctx, px, ledger.Topic(id), p); errors.Is(err, kerr.UnknownTopicOrPartition) {
		return r, "", nil // a partition never written has no ledger topic yet
	}
	from := int64(0)
	// A snapshot that could not be read is an error, not "none": the ledger is trimmed below
	// the snapshots, and replaying it alone would report a halt that is a leader election.
	b, err := ledger.New(px).LastSnapshot(ctx, id, p)
	if err != nil {
		return r, "", err
	}
	missing := "no snapshot was found"
	if b != nil {
		missing = "no readable snapshot covers it"
		if sr, at, err := atoffset.DecodeSnapshot(b); err == nil {
			r, from = sr, at
		}
	}
	recs, end, err := rawread.Records(ctx, px, ledger.Topic(id), p, from)
	if err == nil && from > 0 && end < from {
		// A snapshot beyond the ledger's end is not of this ledger, unless the read ended early
		// at a new leader's high watermark: the ledger's end tells them apart.
		if err := atoffset.BeyondEnd(ctx, px, id, p, from, end); err != nil {
			return r, "", err
		}
		r, from, missing = atoffset.Replay(nil), 0, "the newest snapshot is not of this ledger"
		recs, _, err = rawread.Records(ctx, px, ledger.Topic(id), p, 0)
	}
	if err != nil {
		return r, "", err
	}
	if from == 0 {
		// Without a snapshot the ledger must be whole: one trimmed below a snapshot this
		// offsetgate cannot read replays only part of the history.
		if start, err := rawread.ListOffset(ctx, px, ledger.Topic(id), p, rawread.Earliest); err != nil {
			return r, "", err
		} else if start > 0 {
			return r, fmt.Sprintf("the ledger was trimmed below ledger offset %d and %s", start, missing), nil
		}
	}
	es := make([]ledger.Entry, 0, len(recs))
	unreadable := ""
	for _, rec := range recs {
		e, err := ledger.Decode(rec.Value)
		if err != nil {
			unreadable = fmt.Sprintf("the ledger cannot be read at ledger offset %d: %v", rec.Offset, err)
			break
		}
		es = append(es, e)
	}
	return atoffset.ReplayOnto(r, es), unreadable, nil
}

// direct is whether clients can read the mirror partition on D directly (Replayed.Direct),
// with D's log start at or past the alignment fillers (they are deleted once written).
func direct(rp atoffset.Replayed, starts kadm.ListedOffsets, err error, topic string, p int32) (bool, string) {
	if rp.Next < 0 {
		return false, "nothing mirrored yet"
	}
	ok, why := rp.Direct()
	if !ok || rp.AlignTo == 0 {
		return ok, why
	}
	s, found := starts.Lookup(topic, p)
	switch {
	case err != nil:
		return false, "log start not read: " + err.Error()
	case !found || s.Err != nil:
		return false, fmt.Sprintf("log start of %s[%d] not read: %v", topic, p, lookupErr(found, s.Err))
	case s.Offset < rp.AlignTo:
		return false, fmt.Sprintf("alignment fillers below %d not yet deleted from the destination (log start %d; offsetgate deletes them with the partition's next write)", rp.AlignTo, s.Offset)
	}
	return true, ""
}

// lag is the source's end and the offsets it holds beyond the mirrored end (all of them from
// its log start when nothing is mirrored yet), or why they are not known.
func lag(ends, starts kadm.ListedOffsets, err error, topic string, p int32, mirroredEnd int64) (*int64, *int64, string) {
	if err != nil {
		return nil, nil, "source not read: " + err.Error()
	}
	e, ok := ends.Lookup(topic, p)
	if !ok || e.Err != nil {
		return nil, nil, fmt.Sprintf("source end of %s[%d] not read: %v", topic, p, lookupErr(ok, e.Err))
	}
	from := mirroredEnd
	if from < 0 {
		s, ok := starts.Lookup(topic, p)
		if !ok || s.Err != nil {
			return nil, nil, fmt.Sprintf("source log start of %s[%d] not read: %v", topic, p, lookupErr(ok, s.Err))
		}
		from = s.Offset
	}
	end, l := e.Offset, max(e.Offset-from, 0)
	return &end, &l, ""
}

// headLost is the mirror's and the source's log starts and the offsets the source holds below
// the mirror's, or why they are not known.
func headLost(pxStarts kadm.ListedOffsets, pxErr error, starts, ends kadm.ListedOffsets, err error, topic string, p int32) (*int64, *int64, *int64, string) {
	if pxErr != nil {
		return nil, nil, nil, "mirror log start not read: " + pxErr.Error()
	}
	if err != nil {
		return nil, nil, nil, "source not read: " + err.Error()
	}
	m, ok := pxStarts.Lookup(topic, p)
	if !ok || m.Err != nil {
		return nil, nil, nil, fmt.Sprintf("mirror log start of %s[%d] not read: %v", topic, p, lookupErr(ok, m.Err))
	}
	s, ok := starts.Lookup(topic, p)
	if !ok || s.Err != nil {
		return nil, nil, nil, fmt.Sprintf("source log start of %s[%d] not read: %v", topic, p, lookupErr(ok, s.Err))
	}
	e, ok := ends.Lookup(topic, p)
	if !ok || e.Err != nil {
		return nil, nil, nil, fmt.Sprintf("source end of %s[%d] not read: %v", topic, p, lookupErr(ok, e.Err))
	}
	ms, ss := m.Offset, s.Offset
	lost := max(min(ms, e.Offset)-ss, 0)
	return &ms, &ss, &lost, ""
}

// readTopic reads one partition of a topic from its start to its end at the time of the call.
func readTopic(ctx context.Context, cl *kgo.Client, topic string, p int32) ([]*kgo.Record, error) {
	recs, _, err := rawread.Records(ctx, cl, topic, p, 0)
	return recs, err
}
