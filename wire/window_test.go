package wire

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// fakeBroker answers Produce v9 requests in order, each only once `hold` requests are waiting
// (or none came for 50 ms), and records the most it ever saw waiting.
type fakeBroker struct {
	ln      net.Listener
	hold    int
	mu      sync.Mutex
	maxWait int
	served  int
}

func (b *fakeBroker) serve(t *testing.T) {
	c, err := b.ln.Accept()
	if err != nil {
		return
	}
	defer c.Close()
	frames := make(chan int32, 64)
	go func() {
		defer close(frames)
		for {
			var sz [4]byte
			if _, err := io.ReadFull(c, sz[:]); err != nil {
				return
			}
			p := make([]byte, binary.BigEndian.Uint32(sz[:]))
			if _, err := io.ReadFull(c, p); err != nil {
				return
			}
			frames <- int32(binary.BigEndian.Uint32(p[4:8]))
		}
	}()
	var waiting []int32
	for {
		select {
		case corr, ok := <-frames:
			if !ok {
				return
			}
			waiting = append(waiting, corr)
			b.mu.Lock()
			b.maxWait = max(b.maxWait, len(waiting))
			b.mu.Unlock()
			if len(waiting) < b.hold {
				continue
			}
		case <-time.After(50 * time.Millisecond):
		}
		if len(waiting) == 0 {
			continue
		}
		corr := waiting[0]
		waiting = waiting[1:]
		resp := kmsg.NewPtrProduceResponse()
		resp.SetVersion(9)
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic = "t"
		rp := kmsg.NewProduceResponseTopicPartition()
		b.mu.Lock()
		rp.BaseOffset = int64(b.served)
		b.served++
		b.mu.Unlock()
		rt.Partitions = append(rt.Partitions, rp)
		resp.Topics = append(resp.Topics, rt)
		body := append([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0}, resp.AppendTo(nil)...) // size, corr, empty tags
		binary.BigEndian.PutUint32(body, uint32(len(body)-4))
		binary.BigEndian.PutUint32(body[4:], uint32(corr))
		if _, err := c.Write(body); err != nil {
			return
		}
	}
}

func produceV9() kmsg.Request {
	r := kmsg.NewPtrProduceRequest()
	r.SetVersion(9)
	r.Acks = -1
	return r
}

func TestWindowKeepsDepthInFlight(t *testing.T) {
	for _, tc := range []struct {
		name      string
		n, depth  int
		stopAt    int // got refuses this index; -1 never
		wantTaken int
	}{
		{"all", 20, 5, -1, 20},
		{"stop early", 20, 5, 3, 3},
		{"depth above n", 3, 5, -1, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			b := &fakeBroker{ln: ln, hold: tc.depth}
			go b.serve(t)
			nc, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			c := Wrap(nc, "test")
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var offs []int64
			got, err := c.Window(ctx, tc.n, tc.depth, func(int) kmsg.Request { return produceV9() },
				func(int) kmsg.Response { return kmsg.NewPtrProduceResponse() },
				func(i int, r kmsg.Response) bool {
					if i == tc.stopAt {
						return false
					}
					offs = append(offs, r.(*kmsg.ProduceResponse).Topics[0].Partitions[0].BaseOffset)
					return true
				})
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.wantTaken || len(offs) != tc.wantTaken {
				t.Fatalf("accepted %d (%d offsets), want %d", got, len(offs), tc.wantTaken)
			}
			for i, o := range offs {
				if o != int64(i) {
					t.Fatalf("response %d carried %d: out of order", i, o)
				}
			}
			b.mu.Lock()
			maxWait, served := b.maxWait, b.served
			b.mu.Unlock()
			if want := min(tc.depth, tc.n); maxWait != want {
				t.Fatalf("the broker saw at most %d requests waiting, want %d", maxWait, want)
			}
			// The connection is still in step: the answers of requests in flight at the stop were
			// read, so the next round trip gets its own answer.
			resp := kmsg.NewPtrProduceResponse()
			if err := c.RoundTrip(ctx, produceV9(), resp, false); err != nil {
				t.Fatalf("round trip after the window: %v", err)
			}
			if off := resp.Topics[0].Partitions[0].BaseOffset; off != int64(served) {
				t.Fatalf("round trip after the window got offset %d, want %d", off, served)
			}
		})
	}
}
