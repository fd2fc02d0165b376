package proxy_test

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/internal/testcerts"
	"offsetgate/internal/testkafka"
	"offsetgate/proxy"
	ogtls "offsetgate/tls"
)

// listenerKind is how clients reach offsetgate in a test: plaintext on one of the two
// transports, or TLS (the goroutine transport under crypto/tls).
type listenerKind struct {
	name      string
	transport string
	certs     *testcerts.Set // TLS when set
}

func listenerKinds(t *testing.T) []listenerKind {
	certs, err := testcerts.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return []listenerKind{{name: "gnet", transport: "gnet"}, {name: "goroutine", transport: "goroutine"}, {name: "tls", certs: certs}}
}

func (k listenerKind) start(t *testing.T, d *testkafka.Cluster, mutate func(*proxy.Config)) *running {
	t.Helper()
	return startProxy(t, d, k.transport, func(c *proxy.Config) {
		if k.certs != nil {
			c.Transport = ""
			c.TLS.Listener = &ogtls.ServerConfig{CertFile: k.certs.Server.CertFile, KeyFile: k.certs.Server.KeyFile}
		}
		if mutate != nil {
			mutate(c)
		}
	})
}

// dial opens a raw client connection; readBuf, when positive, shrinks its receive buffer (set
// before connecting, so that the TCP window is small from the start).
func (k listenerKind) dial(t *testing.T, addr string, readBuf int) *rawConn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second}
	if readBuf > 0 {
		d.Control = func(_, _ string, c syscall.RawConn) error {
			return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, readBuf) })
		}
	}
	return k.dialWith(t, d, addr)
}

// dialFrom opens a raw client connection from another loopback source address.
func (k listenerKind) dialFrom(t *testing.T, from, addr string) *rawConn {
	t.Helper()
	return k.dialWith(t, net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}, addr)
}

func (k listenerKind) dialWith(t *testing.T, d net.Dialer, addr string) *rawConn {
	t.Helper()
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if k.certs != nil {
		cfg := k.certs.ClientTLS(nil)
		cfg.ServerName, _, _ = net.SplitHostPort(addr)
		tc := tls.Client(c, cfg)
		tc.SetDeadline(time.Now().Add(10 * time.Second))
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		tc.SetDeadline(time.Time{})
		c = tc
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, c: c}
}

func (k listenerKind) client(t *testing.T, addrs []string, opts ...kgo.Opt) *kgo.Client {
	if k.certs != nil {
		opts = append(opts, kgo.DialTLSConfig(k.certs.ClientTLS(nil)))
	}
	return franzClient(t, addrs, opts...)
}

// One client pipelines 256 large Fetches and does not read the answers. offsetgate holds no
// more than its budget for it (it stops reading that client's upstream connection), serves
// another client meanwhile, and once the first client reads, every answer arrives, in order.
func TestHeldBytesBudget(t *testing.T) {
	pair := testkafka.Shared(t)
	d := pair.Dest
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// About 2 MiB of records: every Fetch below answers all of them.
	topic := randomTopic(ctx, t, d, "held", 512)
	leader := leaderOf(ctx, t, d, topic)
	const budget, requests, slack = 32 << 20, 256, 4 << 20
	for _, k := range listenerKinds(t) {
		t.Run(k.name, func(t *testing.T) {
			p := k.start(t, d, func(c *proxy.Config) { c.Limits.MaxHeldBytes = budget })
			brokerAddr := net.JoinHostPort("127.0.0.1", itoa(p.cfg.BrokerPort(leader)))
			raw := k.dial(t, brokerAddr, 16<<10)
			req := fetchOne(12, topic, 100, 8<<20)
			for i := 0; i < requests; i++ {
				raw.send(req)
			}
			// Unbounded, offsetgate would now take in about 512 MiB of answers.
			within := func(when string) {
				t.Helper()
				if high := p.metric(t, "offsetgate_held_bytes_high_water", nil); high > budget+slack {
					t.Fatalf("%s: offsetgate held %.1f MiB for its clients; budget %d MiB", when, high/(1<<20), budget>>20)
				}
			}
			deadline := time.Now().Add(20 * time.Second)
			for p.metric(t, "offsetgate_budget_paused_connections", nil) < 1 {
				within("before the pause")
				if time.Now().After(deadline) {
					t.Fatalf("the connection never paused; %.1f MiB held", p.metric(t, "offsetgate_held_bytes", nil)/(1<<20))
				}
				time.Sleep(20 * time.Millisecond)
			}
			time.Sleep(time.Second)
			within("paused")

			// Another client is served meanwhile.
			other := testkafka.Names(t, "held-other")
			if err := d.CreateTopic(ctx, other, 1, 1, nil); err != nil {
				t.Fatal(err)
			}
			octx, ocancel := context.WithTimeout(ctx, 30*time.Second)
			ocl := k.client(t, []string{p.addr}, kgo.DefaultProduceTopic(other))
			produce(octx, t, ocl, other, 10, "other")
			if got := consumeAll(octx, t, []string{p.addr}, other, 10, k.clientTLS()...); len(got) != 10 {
				t.Fatalf("the other client read %d records, want 10", len(got))
			}
			ocancel()
			within("after serving another client")
			if p.metric(t, "offsetgate_budget_paused_connections", nil) < 1 {
				t.Fatalf("the slow client was resumed without reading")
			}

			// The slow client reads everything, in order.
			var size int
			for i := 1; i <= requests; i++ {
				f := raw.answer(i, int32(i))
				resp := kmsg.NewPtrFetchResponse()
				resp.SetVersion(12)
				if err := resp.ReadFrom(skipTagsTest(t, f[4:])); err != nil {
					t.Fatalf("answer %d: %v", i, err)
				}
				part := resp.Topics[0].Partitions[0]
				if part.ErrorCode != 0 || len(part.RecordBatches) < 1<<20 || (size != 0 && len(part.RecordBatches) != size) {
					t.Fatalf("answer %d: error %d, %d bytes of batches (the first had %d)", i, part.ErrorCode, len(part.RecordBatches), size)
				}
				size = len(part.RecordBatches)
			}
			within("after reading")
			t.Logf("held at most %.1f MiB (budget %d MiB), %v pauses", p.metric(t, "offsetgate_held_bytes_high_water", nil)/(1<<20), budget>>20,
				p.metric(t, "offsetgate_budget_pauses_total", nil))
			deadline = time.Now().Add(10 * time.Second)
			for p.metric(t, "offsetgate_budget_paused_connections", nil) != 0 || p.metric(t, "offsetgate_held_bytes", nil) > 1<<20 {
				if time.Now().After(deadline) {
					t.Fatalf("after reading: %v connections paused, %v bytes held", p.metric(t, "offsetgate_budget_paused_connections", nil),
						p.metric(t, "offsetgate_held_bytes", nil))
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

func (k listenerKind) clientTLS() []kgo.Opt {
	if k.certs == nil {
		return nil
	}
	return []kgo.Opt{kgo.DialTLSConfig(k.certs.ClientTLS(nil))}
}

// A connection that sends nothing for limits.connections_max_idle is closed; one whose request
// is still in flight is not.
func TestIdleConnectionsClosed(t *testing.T) {
	pair := testkafka.Shared(t)
	d := pair.Dest
	const idle = 500 * time.Millisecond
	for _, k := range listenerKinds(t) {
		t.Run(k.name, func(t *testing.T) {
			p := k.start(t, d, func(c *proxy.Config) { c.Limits.ConnectionsMaxIdle = idle })
			silent := k.dial(t, p.addr, 0)
			// A Fetch that waits 3 s on the broker for data that never comes.
			topic := testkafka.Names(t, "idle")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := d.CreateTopic(ctx, topic, 1, 1, nil); err != nil {
				t.Fatal(err)
			}
			leader := leaderOf(ctx, t, d, topic)
			busy := k.dial(t, net.JoinHostPort("127.0.0.1", itoa(p.cfg.BrokerPort(leader))), 0)
			req := fetchOne(12, topic, 3000, 1<<20)
			req.MinBytes = 1
			// First until the leader answers for the new topic without waiting.
			for deadline := time.Now().Add(20 * time.Second); ; {
				req.MaxWaitMillis = 0
				resp := kmsg.NewPtrFetchResponse()
				busy.roundTrip(req, resp)
				if resp.Topics[0].Partitions[0].ErrorCode == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("fetch from a new topic: error %d", resp.Topics[0].Partitions[0].ErrorCode)
				}
				time.Sleep(100 * time.Millisecond)
			}
			req.MaxWaitMillis = 3000
			start := time.Now()
			corr := busy.send(req)

			_ = silent.c.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, err := io.ReadAll(silent.c)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("a silent connection stayed open %v with connections_max_idle %v", time.Since(start), idle)
			}
			f, err := busy.readFrame()
			if err != nil {
				t.Fatalf("the connection with a Fetch in flight was closed after %v: %v", time.Since(start), err)
			}
			if got := int32(binary.BigEndian.Uint32(f)); got != corr || time.Since(start) < 2*time.Second {
				t.Fatalf("answer with correlation id %d after %v", got, time.Since(start))
			}
			if n := p.waitMetric(t, "offsetgate_client_connections_closed_total", map[string]string{"reason": "idle"}, 1); n < 1 {
				t.Fatalf("no connection counted as closed for idleness")
			}
			// Idle again now: closed in turn.
			_ = busy.c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.ReadAll(busy.c); errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("the connection stayed open after its answer with nothing in flight")
			}
		})
	}
}

// Over limits.max_connections_per_ip or limits.max_connections, a new connection is closed at
// once and counted; the first counts per source address, the second all; once a connection
// closes, its place is free again.
func TestConnectionLimits(t *testing.T) {
	pair := testkafka.Shared(t)
	d := pair.Dest
	for _, k := range listenerKinds(t) {
		t.Run(k.name, func(t *testing.T) {
			for _, lim := range []struct {
				name   string
				mutate func(*proxy.Config)
			}{
				{"max_connections_per_ip", func(c *proxy.Config) { c.Limits.MaxConnectionsPerIP = 3 }},
				{"max_connections", func(c *proxy.Config) { c.Limits.MaxConnections = 3 }},
			} {
				t.Run(lim.name, func(t *testing.T) {
					p := k.start(t, d, lim.mutate)
					// The start-up probes of the listeners close at once; wait until they are gone.
					deadline := time.Now().Add(10 * time.Second)
					for p.metric(t, "offsetgate_client_connections", nil) != 0 && time.Now().Before(deadline) {
						time.Sleep(20 * time.Millisecond)
					}
					var open []*rawConn
					for i := 0; i < 3; i++ {
						r := k.dial(t, p.addr, 0)
						apiVersions(t, r)
						open = append(open, r)
					}
					refuse := func(from string) {
						t.Helper()
						d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
						c, err := d.Dial("tcp", p.addr)
						if err != nil {
							t.Fatal(err)
						}
						defer c.Close()
						_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
						if _, err := io.ReadAll(c); errors.Is(err, os.ErrDeadlineExceeded) {
							t.Fatalf("a fourth connection (from %s) was kept open", from)
						}
					}
					refuse("127.0.0.1")
					want, others := 1.0, 0.0
					if lim.name == "max_connections" {
						refuse("127.0.0.2")
						want = 2
					} else {
						apiVersions(t, k.dialFrom(t, "127.0.0.2", p.addr)) // another source address
						others = 1
					}
					if n := p.waitMetric(t, "offsetgate_client_connections_refused_total", map[string]string{"limit": lim.name}, want); n != want {
						t.Fatalf("%v connections counted as refused over %s, want %v", n, lim.name, want)
					}
					for _, r := range open {
						apiVersions(t, r) // still served
					}
					open[0].c.Close()
					deadline = time.Now().Add(10 * time.Second)
					for p.metric(t, "offsetgate_client_connections", nil) > 2+others && time.Now().Before(deadline) {
						time.Sleep(20 * time.Millisecond)
					}
					apiVersions(t, k.dial(t, p.addr, 0))
				})
			}
		})
	}
}

// A client connection costs no upstream connection until its first request that goes
// upstream: an answer offsetgate makes itself (a too-new ApiVersions) dials nothing.
func TestUpstreamDialedAtFirstRequest(t *testing.T) {
	pair := testkafka.Shared(t)
	d := pair.Dest
	for _, k := range listenerKinds(t) {
		t.Run(k.name, func(t *testing.T) {
			p := k.start(t, d, nil)
			var conns []*rawConn
			for i := 0; i < 5; i++ {
				conns = append(conns, k.dial(t, p.addr, 0))
			}
			if n := p.waitMetric(t, "offsetgate_client_connections", nil, 5); n < 5 {
				t.Fatalf("%v connections open, want 5", n)
			}
			// A too-new ApiVersions is answered by offsetgate (KIP-511).
			av := kmsg.NewPtrApiVersionsRequest()
			av.SetVersion(3)
			av.ClientSoftwareName, av.ClientSoftwareVersion = "offsetgate-test", "1"
			frame := kmsg.NewRequestFormatter(kmsg.FormatterClientID("raw-test")).AppendRequest(nil, av, 1)
			binary.BigEndian.PutUint16(frame[6:], 99)
			if _, err := conns[0].c.Write(frame); err != nil {
				t.Fatal(err)
			}
			if _, err := conns[0].readFrame(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(200 * time.Millisecond)
			if n := p.metric(t, "offsetgate_upstream_connections_total", nil); n != 0 {
				t.Fatalf("%v upstream connections for clients that sent nothing that goes upstream", n)
			}
			conns[0].corr = 1
			apiVersions(t, conns[0])
			apiVersions(t, conns[1])
			if n := p.metric(t, "offsetgate_upstream_connections_total", nil); n != 2 {
				t.Fatalf("%v upstream connections after two clients' first forwarded requests, want 2", n)
			}
		})
	}
}

// leaderOf is the leader of partition 0 of a new topic; the broker asked may learn of the
// topic a moment after the one that created it.
func leaderOf(ctx context.Context, t *testing.T, d *testkafka.Cluster, topic string) int32 {
	t.Helper()
	for {
		leader, _, err := d.Leader(ctx, topic, 0)
		if err == nil {
			return leader
		}
		select {
		case <-ctx.Done():
			t.Fatal(err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// apiVersions makes one ApiVersions round trip on r.
func apiVersions(t *testing.T, r *rawConn) {
	t.Helper()
	req := kmsg.NewPtrApiVersionsRequest()
	req.SetVersion(3)
	req.ClientSoftwareName, req.ClientSoftwareVersion = "offsetgate-test", "1"
	resp := kmsg.NewPtrApiVersionsResponse()
	r.roundTrip(req, resp)
	if resp.ErrorCode != 0 {
		t.Fatalf("ApiVersions: error %d", resp.ErrorCode)
	}
}
