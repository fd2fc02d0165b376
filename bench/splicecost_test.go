package bench

import (
	"encoding/json"
	"io"
	"net"
	"strings"
	"testing"
)

// The relay of `ogbench splicecost` forwards every byte in both modes and reports its
// throughput and CPU; it says so when the source sends less than it was told.
func TestSpliceCostRelay(t *testing.T) {
	for _, c := range []struct {
		mode      string
		send, exp int64
		fails     bool
	}{{"splice", 8 << 20, 8 << 20, false}, {"copy", 8 << 20, 8 << 20, false}, {"copy", 4 << 20, 8 << 20, true}} {
		sink, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan int64, 1)
		go func() {
			conn, err := sink.Accept()
			if err != nil {
				got <- -1
				return
			}
			n, _ := io.Copy(io.Discard, conn)
			conn.Close()
			got <- n
		}()
		pr, pw := io.Pipe()
		done := make(chan error, 1)
		go func() { done <- spliceCostRelay(c.mode, sink.Addr().String(), 64<<10, c.exp, pw); pw.Close() }()
		dec := json.NewDecoder(pr)
		var hello struct{ Addr string }
		if err := dec.Decode(&hello); err != nil {
			t.Fatal(err)
		}
		src, err := net.Dial("tcp", hello.Addr)
		if err != nil {
			t.Fatal(err)
		}
		chunk := make([]byte, 1<<20)
		for sent := int64(0); sent < c.send; sent += int64(len(chunk)) {
			if _, err := src.Write(chunk); err != nil {
				t.Fatal(err)
			}
		}
		src.Close()
		var res spliceCostResult
		decErr := dec.Decode(&res)
		go io.Copy(io.Discard, pr)
		err = <-done
		sink.Close()
		if c.fails {
			if err == nil || !strings.Contains(err.Error(), "forwarded") {
				t.Fatalf("%s: a short source gave %v", c.mode, err)
			}
			continue
		}
		if err != nil || decErr != nil {
			t.Fatalf("%s: %v / %v", c.mode, err, decErr)
		}
		if n := <-got; n != c.send || res.Mode != c.mode || res.MBps <= 0 || res.CPUPerGB <= 0 {
			t.Fatalf("%s: sink got %d of %d bytes, result %+v", c.mode, n, c.send, res)
		}
	}
}
