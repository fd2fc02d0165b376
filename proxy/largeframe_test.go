package proxy_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/internal/testkafka"
)

// Frames larger than the event loops' read buffer are assembled apart from it (proxy's
// assembly): requests that arrive in pieces with pauses between them, pipelined behind one
// another and behind small ones, and the large Fetch answers that come back, arrive whole and
// byte for byte.
func TestLargeFramesInPieces(t *testing.T) {
	pair := testkafka.Shared(t)
	d := pair.Dest
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			p := startProxy(t, d, tr, nil)
			topic, raw := topicAtLeader(ctx, t, d, p, "large")

			values := make([][]byte, 3)
			var stream []byte
			var corrs []int32
			add := func(req kmsg.Request) {
				raw.corr++
				corrs = append(corrs, raw.corr)
				// AppendRequest writes the size at the start of what it is given: one frame each.
				stream = append(stream, kmsg.NewRequestFormatter(kmsg.FormatterClientID("raw-test")).AppendRequest(nil, req, raw.corr)...)
			}
			for i := range values {
				values[i] = make([]byte, 300<<10+i*100<<10) // 300, 400, 500 KiB
				_, _ = rand.Read(values[i])
				add(produceOne(7, topic, batchOf(values[i]), 10000))
				av := kmsg.NewPtrApiVersionsRequest() // a small frame between large ones
				av.SetVersion(3)
				av.ClientSoftwareName, av.ClientSoftwareVersion = "offsetgate-test", "1"
				add(av)
			}
			// Pieces that cut through size prefixes, headers and records, with pauses so that
			// each arrives in a read of its own.
			for _, cut := range []int{3, 7, 1000, 70 << 10, 200 << 10, 333 << 10, 700 << 10, 1 << 20} {
				if cut > len(stream) {
					break
				}
				if _, err := raw.c.Write(stream[:cut]); err != nil {
					t.Fatal(err)
				}
				stream = stream[cut:]
				time.Sleep(30 * time.Millisecond)
			}
			if _, err := raw.c.Write(stream); err != nil {
				t.Fatal(err)
			}
			for i, corr := range corrs {
				f := raw.answer(i, corr)
				if i%2 == 1 {
					continue
				}
				resp := kmsg.NewPtrProduceResponse()
				resp.SetVersion(7)
				if err := resp.ReadFrom(f[4:]); err != nil {
					t.Fatal(err)
				}
				if ec := resp.Topics[0].Partitions[0].ErrorCode; ec != 0 {
					t.Fatalf("produce %d: error code %d", i/2, ec)
				}
			}

			// One Fetch answer holds all three batches, well over the read buffer.
			freq := fetchOne(11, topic, 500, 8<<20)
			fresp := kmsg.NewPtrFetchResponse()
			raw.roundTrip(freq, fresp)
			fpart := fresp.Topics[0].Partitions[0]
			if fpart.ErrorCode != 0 {
				t.Fatalf("fetch: error code %d", fpart.ErrorCode)
			}
			var got [][]byte
			for rb := fpart.RecordBatches; len(rb) > 0; {
				var b kmsg.RecordBatch
				if err := b.ReadFrom(rb); err != nil {
					t.Fatal(err)
				}
				rb = rb[12+int(b.Length):]
				var r kmsg.Record
				if err := r.ReadFrom(b.Records); err != nil {
					t.Fatal(err)
				}
				got = append(got, r.Value)
			}
			if len(got) != len(values) {
				t.Fatalf("fetched %d records, want %d", len(got), len(values))
			}
			for i := range values {
				if !bytes.Equal(got[i], values[i]) {
					t.Fatalf("record %d differs after the round trip", i)
				}
			}
		})
	}
}

// batchOf is one uncompressed record batch holding one record with value v.
func batchOf(v []byte) []byte {
	rec := kmsg.Record{Value: v}
	rec.Length = int32(len(rec.AppendTo(nil)) - 1)
	for int32(len(rec.AppendTo(nil))-varintLen(rec.Length)) != rec.Length {
		rec.Length = int32(len(rec.AppendTo(nil)) - varintLen(rec.Length))
	}
	now := time.Now().UnixMilli()
	b := kmsg.RecordBatch{Magic: 2, FirstTimestamp: now, MaxTimestamp: now,
		ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: 1, Records: rec.AppendTo(nil)}
	raw := b.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[8:], uint32(len(raw)-12))
	binary.BigEndian.PutUint32(raw[17:], crc32c(raw[21:]))
	return raw
}

func varintLen(v int32) int {
	return len(binary.AppendVarint(nil, int64(v)))
}
