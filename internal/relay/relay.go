// Package relay is a loopback TCP relay for tests that puts faults between two parties: it can
// drop, delay, cut and corrupt traffic, frame by frame (Kafka's 4-byte size prefix), in either
// direction. Targets are loopback only.
package relay

import (
	"encoding/binary"
	"io"
	"net"
	"sync"
	"time"
)

// Direction of a frame.
type Direction int

const (
	// ToServer is client to target.
	ToServer Direction = iota
	// ToClient is target to client.
	ToClient
)

// Action is what a fault does with a frame.
type Action int

const (
	// Pass forwards the (possibly modified) frame.
	Pass Action = iota
	// Drop swallows the frame and cuts the connection, as a lost response would look.
	Drop
)

// Fault inspects every frame (or chunk, for a raw relay) of connection conn (numbered from 1
// in accept order); it may modify it in place and returns what to do.
type Fault func(conn int, dir Direction, frame []byte) Action

// Relay accepts on a loopback port and relays to a target.
type Relay struct {
	ln     net.Listener
	target string
	raw    bool // bytes, not frames (TLS): faults see each read chunk

	mu    sync.Mutex
	fault Fault
	delay time.Duration
	conns map[net.Conn]struct{}
	n     int
	wg    sync.WaitGroup
}

// New starts a relay to target that sees Kafka frames.
func New(target string) (*Relay, error) { return start(target, false) }

// NewRaw starts a relay that sees bytes as they are read (for TLS traffic, where frames are
// not visible): a fault gets each chunk, and Drop cuts the connection there.
func NewRaw(target string) (*Relay, error) { return start(target, true) }

func start(target string, raw bool) (*Relay, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &Relay{ln: ln, target: target, raw: raw, conns: map[net.Conn]struct{}{}}
	r.wg.Add(1)
	go r.accept()
	return r, nil
}

// Addr is where clients connect.
func (r *Relay) Addr() string { return r.ln.Addr().String() }

// SetFault installs a fault (nil: none).
func (r *Relay) SetFault(f Fault) {
	r.mu.Lock()
	r.fault = f
	r.mu.Unlock()
}

// SetDelay delays every frame.
func (r *Relay) SetDelay(d time.Duration) {
	r.mu.Lock()
	r.delay = d
	r.mu.Unlock()
}

// Cut closes every open connection.
func (r *Relay) Cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for c := range r.conns {
		c.Close()
	}
}

// Close stops the relay and waits for its goroutines.
func (r *Relay) Close() {
	r.ln.Close()
	r.Cut()
	r.wg.Wait()
}

func (r *Relay) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", r.target)
		if err != nil {
			c.Close()
			continue
		}
		r.mu.Lock()
		r.conns[c], r.conns[up] = struct{}{}, struct{}{}
		r.n++
		id := r.n
		r.mu.Unlock()
		r.wg.Add(2)
		go r.pipe(id, c, up, ToServer)
		go r.pipe(id, up, c, ToClient)
	}
}

func (r *Relay) pipe(id int, from, to net.Conn, dir Direction) {
	defer r.wg.Done()
	defer func() {
		from.Close()
		to.Close()
		r.mu.Lock()
		delete(r.conns, from)
		delete(r.conns, to)
		r.mu.Unlock()
	}()
	if r.raw {
		buf := make([]byte, 32<<10)
		for {
			n, err := from.Read(buf)
			if n > 0 {
				r.mu.Lock()
				f, d := r.fault, r.delay
				r.mu.Unlock()
				if d > 0 {
					time.Sleep(d)
				}
				if f != nil && f(id, dir, buf[:n]) == Drop {
					return
				}
				if _, werr := to.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
	var sz [4]byte
	for {
		if _, err := io.ReadFull(from, sz[:]); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(sz[:])
		if n > 200<<20 {
			return
		}
		frame := make([]byte, 4+n)
		copy(frame, sz[:])
		if _, err := io.ReadFull(from, frame[4:]); err != nil {
			return
		}
		r.mu.Lock()
		f, d := r.fault, r.delay
		r.mu.Unlock()
		if d > 0 {
			time.Sleep(d)
		}
		if f != nil && f(id, dir, frame) == Drop {
			return
		}
		if _, err := to.Write(frame); err != nil {
			return
		}
	}
}
