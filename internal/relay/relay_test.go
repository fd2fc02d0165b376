package relay

import (
	"io"
	"net"
	"testing"
	"time"
)

// echo serves connections that send back what they read.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

// roundTrip writes one chunk and reads it back within d; false when nothing came back.
func roundTrip(t *testing.T, c net.Conn, d time.Duration) (bool, error) {
	t.Helper()
	if _, err := c.Write([]byte("ping")); err != nil {
		return false, err
	}
	_ = c.SetReadDeadline(time.Now().Add(d))
	b := make([]byte, 4)
	_, err := io.ReadFull(c, b)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false, nil
	}
	return err == nil && string(b) == "ping", err
}

// A stalled link forwards nothing until it flows again, and loses nothing; a link that is down
// cuts open connections and closes new ones at once, and carries traffic again once it is up.
func TestStallAndDown(t *testing.T) {
	r, err := Listen("127.0.0.1:0", echo(t), true)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c, err := net.Dial("tcp", r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if ok, err := roundTrip(t, c, 5*time.Second); !ok {
		t.Fatalf("no echo through the relay: %v", err)
	}
	r.SetStall(true)
	if ok, _ := roundTrip(t, c, 300*time.Millisecond); ok {
		t.Fatal("a stalled link forwarded")
	}
	r.SetStall(false)
	b := make([]byte, 4)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, b); err != nil || string(b) != "ping" {
		t.Fatalf("what waited during the stall: %q %v", b, err)
	}
	if r.Conns() != 1 {
		t.Fatalf("%d connections, want 1", r.Conns())
	}

	r.SetDown(true)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(b); err == nil {
		t.Fatal("an open connection survived the link going down")
	}
	c2, err := net.Dial("tcp", r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if ok, _ := roundTrip(t, c2, time.Second); ok {
		t.Fatal("a new connection carried traffic while the link was down")
	}
	r.SetDown(false)
	c3, err := net.Dial("tcp", r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if ok, err := roundTrip(t, c3, 5*time.Second); !ok {
		t.Fatalf("no echo once the link is up again: %v", err)
	}
}
