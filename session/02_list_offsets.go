package session

// ListOffsets (key 2).
//
// Ordinary topics pass through. For a mirror topic the destination answers in its own offsets;
// offsetgate translates each answer back to source offsets with the partition's shift table
// (D = S - Delta per segment), so "latest" is the mirrored end and "earliest" the mirrored
// log start, in the source's terms. A mirroring client learns where to resume from it. The
// shift table may need the ledger (a partition not loaded by this process yet): that lookup
// runs off the session's goroutine.

import (
	"context"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/catalog"
)

var listOffsetsHandler = handler{request: listOffsetsRequest}

type shiftKey struct {
	topic     string
	partition int32
}

func listOffsetsRequest(s *Session, r *request) error {
	if s.cfg.Catalog == nil || s.cfg.Mirror == nil {
		return nil
	}
	req := kmsg.ListOffsetsRequest{Version: r.h.version}
	if err := req.ReadFrom(r.body); err != nil {
		return nil
	}
	var names []string
	for _, t := range req.Topics {
		names = append(names, t.Topic)
	}
	if !s.known(r, names, listOffsetsRequest) {
		return nil
	}
	type want struct {
		info      catalog.Topic
		partition int32
	}
	var wants []want
	for _, t := range req.Topics {
		info := s.mark(t.Topic)
		if info == nil {
			continue
		}
		for _, p := range t.Partitions {
			wants = append(wants, want{*info, p.Partition})
		}
	}
	if len(wants) == 0 {
		return nil
	}
	m := s.cfg.Mirror
	r.async = func(ctx context.Context) func(*Session, *request) {
		shifts := map[shiftKey][][2]int64{}
		var failed error
		for _, w := range wants {
			sh, err := m.Shift(ctx, w.info, w.partition)
			if err != nil {
				failed = err
				continue
			}
			shifts[shiftKey{strings.Clone(w.info.Name), w.partition}] = sh
		}
		return func(s *Session, r *request) {
			if failed != nil {
				s.log.Warn("shift table lookup failed; answering in destination offsets")
			}
			r.onResp = func(_ *Session, v int16, body []byte) ([]byte, bool, error) {
				resp := kmsg.ListOffsetsResponse{Version: v}
				if err := resp.ReadFrom(body); err != nil {
					return nil, false, err
				}
				for i := range resp.Topics {
					t := &resp.Topics[i]
					for j := range t.Partitions {
						p := &t.Partitions[j]
						sh, ok := shifts[shiftKey{t.Topic, p.Partition}]
						if !ok || p.ErrorCode != 0 {
							continue
						}
						p.Offset = toSource(sh, p.Offset)
						for k := range p.OldStyleOffsets {
							p.OldStyleOffsets[k] = toSource(sh, p.OldStyleOffsets[k])
						}
					}
				}
				return resp.AppendTo(nil), true, nil
			}
		}
	}
	return nil
}

// toSource maps a destination offset to the source's with a shift table.
func toSource(segs [][2]int64, d int64) int64 {
	if d < 0 || len(segs) == 0 {
		return d
	}
	delta := segs[0][1]
	for _, sg := range segs {
		if sg[0]-sg[1] <= d {
			delta = sg[1]
		}
	}
	return d + delta
}
