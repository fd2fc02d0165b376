package proxy_test

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/internal/testkafka"
)

// A client that pipelines large Produce requests while its broker takes none is slowed as on a
// direct connection: offsetgate stops reading it while more than a little of what it wrote is
// waiting for the broker (on either transport), so it never holds more than a few requests'
// worth; every request is answered, in order.
func TestUpstreamBacklogHoldsClient(t *testing.T) {
	pair := testkafka.Shared(t)
	d := pair.Dest
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const requests, value, bound = 64, 900 << 10, 8 << 20
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			p := startProxy(t, d, tr, nil)
			topic, raw := topicAtLeader(ctx, t, d, p, "backlog")

			// First a Fetch the broker holds for its full wait (nothing to read, a large
			// minimum): Kafka reads a connection's next request only once it has answered the
			// one before, so for three seconds the broker takes none of the writes behind it.
			fetch := fetchOne(11, topic, 3000, 1<<20)
			fetch.MinBytes = 1 << 30
			// AppendRequest writes the size at the start of what it is given: one frame each.
			stream := kmsg.NewRequestFormatter(kmsg.FormatterClientID("backlog-test")).AppendRequest(nil, fetch, 0)
			for i := 1; i <= requests; i++ {
				v := make([]byte, value)
				_, _ = rand.Read(v)
				req := produceOne(7, topic, batchOf(v), 30000)
				stream = append(stream, kmsg.NewRequestFormatter(kmsg.FormatterClientID("backlog-test")).AppendRequest(nil, req, int32(i))...)
			}
			// The whole stream at once, from a goroutine: the write blocks while offsetgate
			// does not read.
			wrote := make(chan error, 1)
			go func() {
				_, err := raw.c.Write(stream)
				wrote <- err
			}()
			if f, err := raw.readFrame(); err != nil || binary.BigEndian.Uint32(f) != 0 {
				t.Fatalf("the Fetch's answer: %v", err)
			}
			for i := 1; i <= requests; i++ {
				f := raw.answer(i, int32(i))
				resp := kmsg.NewPtrProduceResponse()
				resp.SetVersion(7)
				if err := resp.ReadFrom(f[4:]); err != nil {
					t.Fatal(err)
				}
				if p := resp.Topics[0].Partitions[0]; p.ErrorCode != 0 || p.BaseOffset != int64(i-1) {
					t.Fatalf("answer %d: error %d, base offset %d", i, p.ErrorCode, p.BaseOffset)
				}
			}
			if err := <-wrote; err != nil {
				t.Fatal(err)
			}
			high := p.metric(t, "offsetgate_held_bytes_high_water", nil)
			holds := p.metric(t, "offsetgate_upstream_backlog_holds_total", nil)
			t.Logf("%d MiB sent: offsetgate held at most %.1f MiB, the client was held %v times", len(stream)>>20, high/(1<<20), holds)
			if holds < 1 {
				t.Errorf("the client was never held, though the broker took nothing for three seconds")
			}
			// On gnet a request's rest waits in its own buffer, not copied into gnet's.
			if rests := p.metric(t, "offsetgate_upstream_direct_rests_total", nil); tr == "gnet" && rests < 1 {
				t.Errorf("no request's rest was kept for the write watch on gnet, though the broker took nothing for three seconds")
			}
			if high > bound {
				t.Errorf("offsetgate held %.1f MiB for one producer; at most %d MiB expected", high/(1<<20), bound>>20)
			}
		})
	}
}

// A client's size prefix is only a claim: a frame that claims 64 MiB and sends a kilobyte costs
// offsetgate about 1 MiB, on every transport (TLS included), not 64.
func TestClaimedFrameSizeNotTrusted(t *testing.T) {
	pair := testkafka.Shared(t)
	for _, k := range listenerKinds(t) {
		t.Run(k.name, func(t *testing.T) {
			p := k.start(t, pair.Dest, nil)
			const conns = 4
			for i := 0; i < conns; i++ {
				raw := k.dial(t, p.addr, 0)
				claim := make([]byte, 4+1000)
				binary.BigEndian.PutUint32(claim, 64<<20)
				binary.BigEndian.PutUint16(claim[4:], 18) // ApiVersions, as a client would start
				if _, err := raw.c.Write(claim); err != nil {
					t.Fatal(err)
				}
			}
			// Wait until offsetgate holds the four partial frames, then a little more.
			deadline := time.Now().Add(10 * time.Second)
			for p.metric(t, "offsetgate_held_bytes", nil) < conns*1000 {
				if time.Now().After(deadline) {
					t.Fatalf("offsetgate holds %v bytes; the partial frames never arrived", p.metric(t, "offsetgate_held_bytes", nil))
				}
				time.Sleep(20 * time.Millisecond)
			}
			time.Sleep(200 * time.Millisecond)
			held := p.metric(t, "offsetgate_held_bytes", nil)
			t.Logf("%d connections claiming 64 MiB frames: %.1f MiB held", conns, held/(1<<20))
			if held > conns*(1<<20+64<<10) {
				t.Fatalf("%d connections that claimed 64 MiB and sent 1000 bytes each cost %.1f MiB", conns, held/(1<<20))
			}
		})
	}
}
