package proxy_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/internal/testkafka"
	"offsetgate/proxy"
)

// Garbage, a TLS hello on the plaintext port, an oversized frame, an unknown api key and a
// client that disconnects mid-frame each close only their own connection; offsetgate keeps
// serving and holds nothing for them afterwards.
func TestBadInputClosesConnection(t *testing.T) {
	pair := testkafka.Shared(t)
	d := pair.Dest
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			p := startProxy(t, d, tr, func(c *proxy.Config) { c.Limits.MaxFrameBytes = 1 << 20 })
			tlsHello := []byte{0x16, 0x03, 0x01, 0x00, 0xf1, 0x01, 0x00, 0x00, 0xed, 0x03, 0x03}
			unknownKey := []byte{0, 0, 0, 12, 0x03, 0xe7, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0, 0}
			cases := map[string]struct {
				send     []byte
				midClose bool
			}{
				"garbage":     {send: []byte("hello offsetgate, this is not kafka\r\n")},
				"tls hello":   {send: tlsHello},
				"oversized":   {send: []byte{0, 0x20, 0, 0, 0, 0, 0, 0}},
				"negative":    {send: []byte{0x80, 0, 0, 0, 1, 2, 3, 4}},
				"unknown key": {send: unknownKey},
				"disconnect":  {send: []byte{0, 0, 0x10, 0, 0, 18, 0, 3}, midClose: true},
				// a frame over the event loops' read buffer, assembled apart (proxy's assembly)
				"large disconnect": {send: append([]byte{0, 0x09, 0x60, 0}, make([]byte, 200<<10)...), midClose: true},
				"short header":     {send: []byte{0, 0, 0, 3, 0, 18, 0}},
			}
			for name, tc := range cases {
				c, err := net.DialTimeout("tcp", p.addr, 5*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := c.Write(tc.send); err != nil {
					t.Fatal(err)
				}
				if tc.midClose {
					c.Close()
					continue
				}
				_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
				_, err = io.ReadAll(c)
				c.Close()
				if errors.Is(err, os.ErrDeadlineExceeded) {
					t.Errorf("%s: offsetgate kept the connection open", name)
				}
			}
			// offsetgate still serves.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cl := franzClient(t, []string{p.addr})
			if _, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl); err != nil {
				t.Fatalf("offsetgate stopped serving after bad input: %v", err)
			}
			cl.Close()
			// Every bad connection is gone (only a client that closed mid-frame may count as a
			// normal close), and at least the protocol errors were counted as such.
			deadline := time.Now().Add(10 * time.Second)
			for p.metric(t, "offsetgate_client_connections", nil) != 0 && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			if open := p.metric(t, "offsetgate_client_connections", nil); open != 0 {
				t.Fatalf("%v connections still open", open)
			}
			if n := p.waitMetric(t, "offsetgate_client_connections_closed_total", map[string]string{"reason": "protocol_error"}, 6); n < 6 {
				t.Fatalf("%v connections closed for protocol errors, want at least 6", n)
			}
		})
	}
}

// A client that sends many Fetch requests and does not read the responses does not make
// offsetgate buffer without bound: forwarding stops above the high-water mark, and every
// response still arrives, in order, once the client reads.
func TestSlowConsumerBounded(t *testing.T) {
	pair := testkafka.Shared(t)
	d := pair.Dest
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	topic := testkafka.Names(t, "slow")
	if err := d.CreateTopic(ctx, topic, 1, 1, nil); err != nil {
		t.Fatal(err)
	}
	// About 4 MiB of data, so that every fetch below returns a full 256 KiB.
	cl := franzClient(t, d.Addrs(), kgo.ProducerBatchMaxBytes(1<<20))
	val := make([]byte, 4000)
	var rs []*kgo.Record
	for i := 0; i < 1000; i++ {
		rs = append(rs, &kgo.Record{Topic: topic, Value: val})
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	leader, _, err := d.Leader(ctx, topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			const highWater, inFlight, perFetch, requests = 256 << 10, 4, 256 << 10, 200
			p := startProxy(t, d, tr, func(c *proxy.Config) {
				c.Limits.ClientHighWaterBytes = highWater
				c.Limits.MaxInFlight = inFlight
			})
			conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", itoa(p.cfg.BrokerPort(leader))), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// A small receive buffer, so the kernel does not absorb what the client does not read.
			_ = conn.(*net.TCPConn).SetReadBuffer(16 << 10)
			raw := &rawConn{t: t, c: conn}
			req := fetchOne(12, topic, 100, perFetch)
			for i := 0; i < requests; i++ {
				raw.send(req)
			}
			// Unbounded, offsetgate would now hold about 50 MiB of responses.
			time.Sleep(3 * time.Second)
			high := p.metric(t, "offsetgate_buffered_bytes_high_water", nil)
			bound := float64(highWater + (inFlight+1)*(perFetch+64<<10))
			if high > bound {
				t.Fatalf("offsetgate buffered %v bytes for one slow client; bound %v", high, bound)
			}
			if p.metric(t, "offsetgate_backpressure_pauses_total", nil) == 0 {
				t.Fatalf("forwarding never paused (high water seen %v): the test did not reach the mark", high)
			}
			for i := 1; i <= requests; i++ {
				f, err := raw.readFrame()
				if err != nil {
					t.Fatalf("response %d: %v", i, err)
				}
				if c := int32(binary.BigEndian.Uint32(f)); c != int32(i) {
					t.Fatalf("response %d has correlation id %d", i, c)
				}
			}
		})
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
