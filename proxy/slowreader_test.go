package proxy_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"offsetgate/internal/testkafka"
)

// A client that pipelines large Fetches and reads slowly gets every answer byte for byte as the
// broker sends it, in order, however the answers were split between writes and buffers.
func TestSlowReaderAnswersExact(t *testing.T) {
	pair := testkafka.Shared(t)
	d := pair.Dest
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	topic := randomTopic(ctx, t, d, "slowexact", 1024)
	leader, _, err := d.Leader(ctx, topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The broker's own answer, for comparison: the same request gets the same bytes.
	const maxBytes, requests = 2 << 20, 24
	req := fetchOne(12, topic, 100, maxBytes)
	want := dialRaw(t, fmt.Sprintf("127.0.0.1:%d", d.Node(leader).Port))
	want.send(req)
	ref := want.answer(1, 1)
	if len(ref) < 1<<20 {
		t.Fatalf("the broker answered %d bytes; the test needs answers of at least 1 MiB", len(ref))
	}

	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			p := startProxy(t, d, tr, nil)
			dialer := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, c syscall.RawConn) error {
				return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 16<<10) })
			}}
			c, err := dialer.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", p.cfg.BrokerPort(leader)))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			raw := &rawConn{t: t, c: c}
			for i := 0; i < requests; i++ {
				raw.send(req)
			}
			time.Sleep(2 * time.Second) // the client reads nothing meanwhile
			for i := 1; i <= requests; i++ {
				f := raw.answer(i, int32(i))
				if !bytes.Equal(f[4:], ref[4:]) {
					at := 0
					for at < min(len(f), len(ref)) && f[at] == ref[at] {
						at++
					}
					t.Fatalf("answer %d (%d bytes) differs from the broker's (%d bytes) at byte %d", i, len(f), len(ref), at)
				}
			}
		})
	}
}
