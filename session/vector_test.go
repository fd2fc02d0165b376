package session

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/catalog"
	"offsetgate/ledger"
	"offsetgate/view"
)

// mirroredLog is what D holds of 64 source batches of 64 records mirrored through offsetgate
// (each batch's end in it) and their ledger entries.
func mirroredLog() (all []byte, ends []int, entries []ledger.Entry) {
	for d := int64(0); d < 64*64; d += 64 {
		src := srcBatch(d, 64, 3)
		entries = append(entries, entry(src, d))
		all = append(all, onD(src, d, 1)...)
		ends = append(ends, len(all))
	}
	return all, ends, entries
}

// A restored Fetch answer written as slices is byte for byte the answer kmsg encodes whole, in
// every encoding of the record batches' length (int32 before v12, compact from v12), for
// partitions large and small, empty and absent, and more of them (300 large) than are taken by reference.
func TestVectoredFetchAnswer(t *testing.T) {
	// D holds 64 batches of about 1 KiB; partition p's answer holds the first sizes[p%len]
	// of them: 0 (empty), 1 and 8 (inline, under refMin), 20 and 64 (by reference).
	all, ends, entries := mirroredLog()
	sizes := []int{0, 1, 8, 64, -1, 20}
	for _, version := range []int16{4, 11, 12, 13, 16} {
		for _, parts := range []int{7, 900} {
			if parts == 900 && version != 11 && version != 16 {
				continue // past maxRefs once per length encoding is enough
			}
			fc := &fakeConn{}
			s := New(Config{Catalog: mirrorCatalog{true}, View: fixedView{view.NewPartition(entries)}}, fc)
			req := kmsg.NewPtrFetchRequest()
			req.SetVersion(version)
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic, rt.TopicID = "orders", catalog.TopicID{1}
			resp := kmsg.NewPtrFetchResponse()
			resp.SetVersion(version)
			ft := kmsg.NewFetchResponseTopic()
			ft.Topic, ft.TopicID = "orders", catalog.TopicID{1}
			for p := 0; p < parts; p++ {
				rp := kmsg.NewFetchRequestTopicPartition()
				rp.Partition = int32(p)
				rt.Partitions = append(rt.Partitions, rp)
				pp := kmsg.NewFetchResponseTopicPartition()
				pp.Partition, pp.HighWatermark, pp.LastStableOffset = int32(p), 64*64, 64*64
				switch n := sizes[p%len(sizes)]; {
				case n < 0:
					pp.RecordBatches = nil
				case n == 0:
					pp.RecordBatches = []byte{}
				default:
					pp.RecordBatches = all[:ends[n-1]]
				}
				ft.Partitions = append(ft.Partitions, pp)
			}
			req.Topics = append(req.Topics, rt)
			resp.Topics = append(resp.Topics, ft)
			frame := responseFrame(7, resp.IsFlexible(), resp.AppendTo(nil))

			// What the whole encoding gives: every partition restored, then AppendTo.
			want := resp
			wantView := view.NewPartition(entries)
			dFrame := append([]byte(nil), frame...)
			for i := range want.Topics[0].Partitions {
				p := &want.Topics[0].Partitions[i]
				p.RecordBatches = bytes.Clone(p.RecordBatches) // nil stays nil, empty empty
				restorePartition(wantView, p, false, false)
			}
			wantFrame := responseFrame(7, want.IsFlexible(), want.AppendTo(nil))

			reqFrame := kmsg.NewRequestFormatter(kmsg.FormatterClientID("t")).AppendRequest(nil, req, 7)
			if n, err := s.HandleClient(reqFrame); err != nil || n != len(reqFrame) {
				t.Fatalf("v%d: request: %d, %v", version, n, err)
			}
			if n, err := s.HandleUpstream(dFrame); err != nil || n != len(dFrame) {
				t.Fatalf("v%d: answer: %d, %v", version, n, err)
			}
			large := 0
			for p := 0; p < parts; p++ {
				if n := sizes[p%len(sizes)]; n > 0 && ends[n-1] >= refMin {
					large++
				}
			}
			if len(s.vec.refs) != min(large, maxRefs) {
				t.Fatalf("v%d, %d partitions: %d fields by reference, want %d", version, parts, len(s.vec.refs), min(large, maxRefs))
			}
			if got := fc.client.Bytes(); !bytes.Equal(got, wantFrame) {
				at := 0
				for at < min(len(got), len(wantFrame)) && got[at] == wantFrame[at] {
					at++
				}
				t.Fatalf("v%d, %d partitions: the vectored answer (%d bytes) is not the whole encoding (%d bytes): first difference at byte %d: %x vs %x", version, parts, len(got), len(wantFrame), at, got[max(at-20, 0):at+20], wantFrame[max(at-20, 0):at+20])
			}
		}
	}
}

// The builder takes only large fields, at most maxRefs of them, and finds each again after
// encoding; an encoding that lost a token is an error, never a wrong answer.
func TestVecAnswerBuild(t *testing.T) {
	var v vecAnswer
	v.reset()
	small, large := bytes.Repeat([]byte{1}, refMin-1), bytes.Repeat([]byte{2}, refMin)
	if got := v.take(small); &got[0] != &small[0] {
		t.Fatal("a field below refMin was taken by reference")
	}
	tok := v.take(large)
	if len(tok) != tokenLen || len(v.refs) != 1 {
		t.Fatalf("a large field gave a %d-byte stand-in, %d references", len(tok), len(v.refs))
	}
	for len(v.refs) < maxRefs {
		v.take(large)
	}
	if got := v.take(large); len(got) != len(large) {
		t.Fatal("a field beyond maxRefs was taken by reference")
	}

	// An answer without the tokens (a field changed after take) is refused.
	enc := binary.BigEndian.AppendUint32(make([]byte, 4), tokenLen)
	enc = append(enc, bytes.Repeat([]byte{9}, tokenLen)...)
	if _, err := v.build(enc, false); err == nil {
		t.Fatal("an answer missing its tokens was built")
	}

	// Two sessions' tokens differ: neither a client nor a broker can predict one.
	var w vecAnswer
	w.reset()
	if w.nonce == v.nonce {
		t.Fatal("two builders drew the same nonce")
	}
}

// An answer that must wait behind an earlier one leaves as one copied frame, equal to its
// slices.
func TestFlatten(t *testing.T) {
	segs := [][]byte{[]byte("ab"), nil, []byte("cde"), []byte("f")}
	if got := flatten(segs, 6); string(got) != "abcdef" || cap(got) != 6 {
		t.Fatalf("flatten gave %q (cap %d)", got, cap(got))
	}
}

// knownCatalog is mirrorCatalog{true} without the topic id {9}.
type knownCatalog struct{ mirrorCatalog }

func (c knownCatalog) ByID(id catalog.TopicID) (catalog.Topic, bool) {
	if id == (catalog.TopicID{9}) {
		return catalog.Topic{}, false
	}
	return c.mirrorCatalog.ByID(id)
}

// A Fetch naming an id the destination does not show gets its restored partitions as slices and
// the unknown id's partitions answered UNKNOWN_TOPIC_ID by offsetgate, in one answer.
func TestVectoredFetchWithRefusals(t *testing.T) {
	all, _, entries := mirroredLog()
	fc := &syncConn{posted: make(chan func(), 8)}
	s := New(Config{Catalog: knownCatalog{mirrorCatalog{true}}, View: fixedView{view.NewPartition(entries)}}, fc)
	req := kmsg.NewPtrFetchRequest()
	req.SetVersion(13)
	for _, id := range []catalog.TopicID{{1}, {9}} {
		rt := kmsg.NewFetchRequestTopic()
		rt.TopicID = id
		rp := kmsg.NewFetchRequestTopicPartition()
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
	}
	reqFrame := kmsg.NewRequestFormatter(kmsg.FormatterClientID("t")).AppendRequest(nil, req, 3)
	if n, err := s.HandleClient(reqFrame); err != nil || n != len(reqFrame) {
		t.Fatalf("request: %d, %v", n, err)
	}
	// The unknown id is looked up first (an asynchronous step): wait for the forwarded request.
	var up []byte
	for deadline := time.Now().Add(5 * time.Second); len(up) == 0; {
		select {
		case fn := <-fc.posted:
			fn()
		case <-time.After(10 * time.Millisecond):
		}
		fc.mu.Lock()
		up = append([]byte(nil), fc.upstream.Bytes()...)
		fc.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatal("the Fetch was never forwarded")
		}
	}
	fwd := kmsg.NewPtrFetchRequest()
	fwd.SetVersion(13)
	h, err := parseReqHeader(up[4:])
	if err != nil {
		t.Fatal(err)
	}
	if err := fwd.ReadFrom(up[4+h.bodyOff:]); err != nil || len(fwd.Topics) != 1 || fwd.Topics[0].TopicID != (catalog.TopicID{1}) {
		t.Fatalf("forwarded %d topics (%v), want only the known id", len(fwd.Topics), err)
	}

	resp := kmsg.NewPtrFetchResponse()
	resp.SetVersion(13)
	ft := kmsg.NewFetchResponseTopic()
	ft.TopicID = catalog.TopicID{1}
	pp := kmsg.NewFetchResponseTopicPartition()
	pp.HighWatermark, pp.LastStableOffset, pp.RecordBatches = 64*64, 64*64, all
	ft.Partitions = append(ft.Partitions, pp)
	resp.Topics = append(resp.Topics, ft)
	if n, err := s.HandleUpstream(responseFrame(3, true, resp.AppendTo(nil))); err != nil || n == 0 {
		t.Fatalf("answer: %d, %v", n, err)
	}
	if len(s.vec.refs) != 1 {
		t.Fatalf("%d fields by reference, want the restored partition's", len(s.vec.refs))
	}
	out := fc.answers(t, 1)
	got := kmsg.NewPtrFetchResponse()
	got.SetVersion(13)
	if len(out) != 1 || got.ReadFrom(out[0][9:]) != nil || len(got.Topics) != 2 {
		t.Fatalf("%d answers, %d topics; want one answer with both topics", len(out), len(got.Topics))
	}
	want := append([]byte(nil), all...)
	p := kmsg.FetchResponseTopicPartition{HighWatermark: 64 * 64, LastStableOffset: 64 * 64, RecordBatches: want}
	restorePartition(view.NewPartition(entries), &p, false, false)
	if r := got.Topics[0].Partitions[0]; !bytes.Equal(r.RecordBatches, p.RecordBatches) || r.HighWatermark != p.HighWatermark {
		t.Fatalf("restored partition: %d bytes, high watermark %d; want %d bytes, %d", len(r.RecordBatches), r.HighWatermark, len(p.RecordBatches), p.HighWatermark)
	}
	if r := got.Topics[1]; r.TopicID != (catalog.TopicID{9}) || len(r.Partitions) != 1 || r.Partitions[0].ErrorCode != 100 {
		t.Fatalf("unknown id answered %+v, want UNKNOWN_TOPIC_ID (100)", r)
	}
}
