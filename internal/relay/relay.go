// Package relay is a loopback TCP relay for tests that puts faults between two parties: it can
// drop, delay, cut and corrupt traffic, frame by frame (Kafka's 4-byte size prefix), in either
// direction. Targets are loopback only.
package relay

import (
	"context"
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

	mu      sync.Mutex
	fault   Fault
	delay   time.Duration
	down    bool // new connections are closed at once
	stalled bool // nothing is forwarded
	closed  bool
	conns   map[net.Conn]struct{}
	n       int
	wg      sync.WaitGroup
}

// start starts a relay to target that sees Kafka frames, or, with raw, bytes as they are read
// (for TLS traffic, where frames are not visible: a fault gets each chunk, and Drop cuts the
// connection there).
func start(target string, raw bool) (*Relay, error) {
	return Listen("127.0.0.1:0", target, raw)
}

// Listen starts a relay listening on addr (a loopback host:port; port 0 picks a free one) to
// target. raw as for a Set: faults see read chunks, not frames.
func Listen(addr, target string, raw bool) (*Relay, error) {
	ln, err := net.Listen("tcp", addr)
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

// SetDown takes the link down (every open connection is cut, and a new one is closed as soon
// as it is accepted, as a peer that resets connections would) or brings it back up.
func (r *Relay) SetDown(down bool) {
	r.mu.Lock()
	r.down = down
	r.mu.Unlock()
	if down {
		r.Cut()
	}
}

// SetStall stalls the link (nothing is forwarded either way: connections stay open, bytes
// wait in the relay and in the sockets until their windows fill) or lets it flow again.
func (r *Relay) SetStall(stall bool) {
	r.mu.Lock()
	r.stalled = stall
	r.mu.Unlock()
}

// Conns is the number of client connections the relay holds open.
func (r *Relay) Conns() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.conns) / 2
}

// Close stops the relay and waits for its goroutines.
func (r *Relay) Close() {
	r.mu.Lock()
	r.closed, r.stalled = true, false
	r.mu.Unlock()
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
		r.mu.Lock()
		down := r.down || r.closed
		r.mu.Unlock()
		if down {
			c.Close()
			continue
		}
		r.wg.Add(1)
		go r.connect(c)
	}
}

// connect dials the target for an accepted connection (off the accept loop, so a target that
// does not answer holds only its own connection) and relays both ways.
func (r *Relay) connect(c net.Conn) {
	defer r.wg.Done()
	up, err := net.DialTimeout("tcp", r.target, 10*time.Second)
	if err != nil {
		c.Close()
		return
	}
	r.mu.Lock()
	if r.down || r.closed {
		r.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	r.conns[c], r.conns[up] = struct{}{}, struct{}{}
	r.n++
	id := r.n
	r.mu.Unlock()
	r.wg.Add(2)
	go r.pipe(id, c, up, ToServer)
	go r.pipe(id, up, c, ToClient)
}

// hold waits while the link is stalled; false when the relay closed meanwhile.
func (r *Relay) hold() bool {
	for {
		r.mu.Lock()
		stalled, closed := r.stalled, r.closed
		r.mu.Unlock()
		if closed {
			return false
		}
		if !stalled {
			return true
		}
		time.Sleep(10 * time.Millisecond)
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
				if !r.hold() {
					return
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
		if !r.hold() {
			return
		}
		if f != nil && f(id, dir, frame) == Drop {
			return
		}
		if _, err := to.Write(frame); err != nil {
			return
		}
	}
}

// Set gives every address a party dials a relay of its own (one per target), so faults can
// be put on any of its connections without the party knowing. Dial is a drop-in dial function.
type Set struct {
	raw   bool
	mu    sync.Mutex
	by    map[string]*Relay
	fault Fault
	delay time.Duration
}

// NewSet makes a set whose relays see frames (raw: chunks) and apply fault.
func NewSet(raw bool, fault Fault) *Set {
	return &Set{raw: raw, by: map[string]*Relay{}, fault: fault}
}

// Dial connects to addr through its relay.
func (s *Set) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	s.mu.Lock()
	r := s.by[addr]
	if r == nil {
		var err error
		if r, err = start(addr, s.raw); err != nil {
			s.mu.Unlock()
			return nil, err
		}
		r.SetFault(s.fault)
		r.SetDelay(s.delay)
		s.by[addr] = r
	}
	s.mu.Unlock()
	var d net.Dialer
	return d.DialContext(ctx, network, r.Addr())
}

// SetDelay delays every frame of every relay of the set, now and later.
func (s *Set) SetDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delay = d
	for _, r := range s.by {
		r.SetDelay(d)
	}
}

// Close stops every relay.
func (s *Set) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.by {
		r.Close()
	}
}
