package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// idle opens cfg.IdleConns connections to a fresh offsetgate's bootstrap listener, each after
// one ApiVersions round trip (so its session and its upstream broker connection exist), and
// reads offsetgate's resident memory before and after. When opening fails part way, the
// result says how many connections were open and why it stopped.
func (r *runner) idle(ctx context.Context) (*Idle, error) {
	cfg := r.cfg
	og, err := startOffsetgate(ctx, cfg.OffsetgateBin, cfg.Dest, cfg.LogDir, "offsetgate-idle")
	if err != nil {
		return nil, err
	}
	defer og.stop()
	res := &Idle{Requested: cfg.IdleConns}

	// One connection first, so that the code paths a connection takes are loaded and warm.
	c, err := apiVersionsConn(og.listen, 0)
	if err != nil {
		return res, fmt.Errorf("idle: first ApiVersions round trip: %w", err)
	}
	c.Close()
	time.Sleep(time.Second)
	pid := og.pid()
	if res.RSSBeforeKiB, err = procStatusKiB(pid, "VmRSS"); err != nil {
		return res, err
	}
	res.FDsBefore = procFDs(pid)
	if v, err := og.metric("go_memstats_heap_inuse_bytes"); err == nil {
		res.HeapBeforeKiB = v / 1024
	}

	// Every connection costs offsetgate two descriptors (client and upstream): stay within
	// its limit rather than find it by failing.
	want := cfg.IdleConns
	if lim, err := procFDLimit(pid); err == nil {
		res.FDLimit = lim
		if fit := (lim - res.FDsBefore - 20) / 2; want > fit {
			res.Note = fmt.Sprintf("capped at %d of %d: offsetgate's open file limit is %d and each connection takes two descriptors (client and upstream)",
				fit, want, lim)
			want = fit
		}
	}
	conns, openErr := openIdle(ctx, og.listen, want)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	res.Opened = len(conns)
	if openErr != nil {
		res.Error = openErr.Error()
	}
	start := time.Now()
	// Let upstream dials that are still under way finish and the heap settle.
	for time.Since(start) < 10*time.Second {
		v, err := og.metric("offsetgate_client_connections")
		if err == nil && int(v) >= len(conns) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)
	res.OpenSeconds = time.Since(start).Seconds()
	if res.RSSAfterKiB, err = procStatusKiB(pid, "VmRSS"); err != nil {
		return res, err
	}
	res.FDsAfter = procFDs(pid)
	if v, err := og.metric("go_memstats_heap_inuse_bytes"); err == nil {
		res.HeapAfterKiB = v / 1024
	}
	if v, err := og.metric("offsetgate_client_connections"); err == nil {
		res.SessionsOpen = v
	}
	for _, b := range r.brokers {
		if n := procFDs(b); n > 0 {
			res.BrokerFDsAfter += n
		}
	}
	if res.Opened > 0 {
		res.BytesPerConn = float64(res.RSSAfterKiB-res.RSSBeforeKiB) * 1024 / float64(res.Opened)
	}
	r.logf("idle: %d of %d connections open (%d sessions), RSS %d -> %d KiB, %.1f KiB per connection, fds %d -> %d",
		res.Opened, res.Requested, int(res.SessionsOpen), res.RSSBeforeKiB, res.RSSAfterKiB, res.BytesPerConn/1024, res.FDsBefore, res.FDsAfter)
	if res.Error != "" {
		r.logf("idle: opening stopped: %s", res.Error)
	}
	return res, nil
}

// openIdle opens up to n connections with a few dialers at a time (the listen backlog is
// finite) and returns those that completed their round trip.
func openIdle(ctx context.Context, addr string, n int) ([]net.Conn, error) {
	const workers = 32
	var (
		mu    sync.Mutex
		conns = make([]net.Conn, 0, n)
		next  int
		first error
		wg    sync.WaitGroup
	)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if next >= n || first != nil || ctx.Err() != nil {
					mu.Unlock()
					return
				}
				i := next
				next++
				mu.Unlock()
				c, err := apiVersionsConn(addr, int32(i))
				mu.Lock()
				if err != nil {
					if first == nil {
						first = fmt.Errorf("connection %d: %w", i+1, err)
					}
				} else {
					conns = append(conns, c)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return conns, first
}

// apiVersionsConn connects to addr and does one ApiVersions (v3) round trip.
func apiVersionsConn(addr string, corr int32) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	req := kmsg.NewPtrApiVersionsRequest()
	req.Version = 3
	req.ClientSoftwareName = "ogbench"
	req.ClientSoftwareVersion = "1"
	frame := kmsg.NewRequestFormatter(kmsg.FormatterClientID("ogbench")).AppendRequest(nil, req, corr)
	if _, err := c.Write(frame); err != nil {
		c.Close()
		return nil, err
	}
	var hdr [4]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		c.Close()
		return nil, fmt.Errorf("reading the ApiVersions response: %w", err)
	}
	size := binary.BigEndian.Uint32(hdr[:])
	if size < 4 || size > 1<<20 {
		c.Close()
		return nil, fmt.Errorf("ApiVersions response of %d bytes", size)
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(c, body); err != nil {
		c.Close()
		return nil, fmt.Errorf("reading the ApiVersions response: %w", err)
	}
	if got := int32(binary.BigEndian.Uint32(body)); got != corr {
		c.Close()
		return nil, fmt.Errorf("ApiVersions response for correlation id %d, sent %d", got, corr)
	}
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.Version = 3
	if err := resp.ReadFrom(body[4:]); err != nil {
		c.Close()
		return nil, fmt.Errorf("decoding the ApiVersions response: %w", err)
	}
	if resp.ErrorCode != 0 || len(resp.ApiKeys) == 0 {
		c.Close()
		return nil, fmt.Errorf("ApiVersions error %d, %d keys", resp.ErrorCode, len(resp.ApiKeys))
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}
