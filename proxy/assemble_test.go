package proxy

import (
	"testing"
	"time"
)

// A client's frame buffer grows with the bytes that arrived, never to the size it claims at
// once; a broker's frame gets its size at once.
func TestAssemblyGrowth(t *testing.T) {
	const want = 100 << 20
	a := assembly{want: want, buf: make([]byte, 0, firstChunk)}
	var caps []int
	for {
		a.buf = a.buf[:min(cap(a.buf), want)] // what arrived fills the buffer
		if len(a.buf) == want {
			break
		}
		a.grow(1)
		if c := cap(a.buf); c > 9*len(a.buf)+64<<10 && c > firstChunk {
			t.Fatalf("with %d bytes arrived the buffer grew to %d", len(a.buf), c)
		}
		caps = append(caps, cap(a.buf))
	}
	if len(caps) > 3 {
		t.Fatalf("%d copies on the way to %d bytes: %v", len(caps), want, caps)
	}
	a.release()

	// A piece larger than eight times what arrived still fits in one step.
	a = assembly{want: 10 << 20, buf: make([]byte, 0, firstChunk)}
	a.grow(9 << 20)
	if cap(a.buf) < 9<<20 {
		t.Fatalf("grew to %d for a 9 MiB piece", cap(a.buf))
	}
	a.release()

	b := assembly{want: want, trusted: true, buf: make([]byte, 0, 1)}
	b.grow(1)
	if cap(b.buf) < want {
		t.Fatalf("a broker's frame grew to %d, want %d", cap(b.buf), want)
	}
	b.release()
}

// Frames above keptFrame are read into a buffer the connection keeps for the next ones (never
// the pool's: it would be handed to another connection while kept), and dropped once unused.
func TestAssemblySpare(t *testing.T) {
	var a assembly
	a.want, a.trusted = 3<<20, true
	a.buf = a.get(a.want)
	spare := a.spare
	if cap(spare) < 3<<20 || cap(a.buf) != cap(spare) {
		t.Fatalf("a 3 MiB frame got a buffer of %d, spare %d", cap(a.buf), cap(spare))
	}
	a.release()
	if a.buf != nil || cap(a.spare) != cap(spare) {
		t.Fatalf("after release: spare %d, buf %v", cap(a.spare), a.buf != nil)
	}
	// The next frame of about that size reuses it; a larger one replaces it.
	a.want = 3<<20 + 100
	if a.buf = a.get(a.want); &a.buf[:1][0] != &spare[:1][0] {
		t.Fatal("a frame of about the same size did not reuse the spare")
	}
	a.release()
	a.want = 5 << 20
	if a.buf = a.get(a.want); cap(a.buf) < 5<<20 || &a.buf[:1][0] == &spare[:1][0] || cap(a.spare) != cap(a.buf) {
		t.Fatalf("a larger frame got %d bytes (the spare %d)", cap(a.buf), cap(a.spare))
	}
	a.release()
	a.spareUsed = time.Now()
	a.dropSpare(time.Now().Add(-time.Second))
	if a.spare == nil {
		t.Fatal("a spare used just now was dropped")
	}
	a.dropSpare(time.Now().Add(time.Second))
	if a.spare != nil {
		t.Fatal("an unused spare was kept")
	}
}

// A client's frame that the connection's spare holds whole is read into it at once (no copy
// when it outgrows a first chunk); a larger claim, or one with no spare, starts at firstChunk.
func TestAssemblyFirstSize(t *testing.T) {
	var a assembly
	if got := a.firstSize(3<<20, false); got != firstChunk {
		t.Fatalf("no spare: a 3 MiB claim got %d first", got)
	}
	if got := a.firstSize(3<<20, true); got != 3<<20 {
		t.Fatalf("the destination's 3 MiB frame got %d first", got)
	}
	if got := a.firstSize(200<<10, false); got != 200<<10 {
		t.Fatalf("a 200 KiB claim got %d first", got)
	}
	a.want = 3 << 20
	a.buf = a.get(a.want) // the connection now keeps a spare of about 3 MiB
	a.release()
	if got := a.firstSize(3<<20, false); got != 3<<20 {
		t.Fatalf("a 3 MiB claim the spare holds got %d first", got)
	}
	if b := a.get(a.firstSize(3<<20, false)); &b[:1][0] != &a.spare[:1][0] {
		t.Fatal("a claim the spare holds was not given the spare")
	}
	a.release()
	if got := a.firstSize(100<<20, false); got != firstChunk {
		t.Fatalf("a 100 MiB claim beyond the spare got %d first", got)
	}
	// A frame that shrinks as it is read (a compacted streamed request) starts in the spare,
	// whatever it claims, keeps a spare of about its room however small it is, and replaces a
	// spare far larger than its room (one left by a frame held whole).
	a.tight = true
	if got := a.firstSize(100<<20, false); got != cap(a.spare) {
		t.Fatalf("a shrinking frame got %d first, the spare holds %d", got, cap(a.spare))
	}
	old, small := cap(a.spare), keptFrame+200<<10
	if a.get(small); cap(a.spare) != old {
		t.Fatalf("a shrinking frame of %d replaced a spare of %d with one of %d", small, old, cap(a.spare))
	}
	a.tight = false
	a.get(40 << 20) // a frame held whole leaves a spare of 45 MiB
	a.tight = true
	if got := a.firstSize(100<<20, false); got != tightRoom+tightRoom/8 {
		t.Fatalf("a shrinking frame got %d first from a spare of %d (its room: %d)", got, cap(a.spare), tightRoom)
	}
	old = cap(a.spare)
	if a.get(small); cap(a.spare) >= old {
		t.Fatalf("a shrinking frame of %d kept a spare of %d", small, cap(a.spare))
	}
	a.tight = false
}

// A shrinking frame grows by doubling from a first chunk up to tightRoom, not to its claim,
// past it only by what it needs, and the next one starts in the room the first grew to.
func TestAssemblyTightGrowth(t *testing.T) {
	a := assembly{tight: true, want: 50 << 20}
	a.buf = a.get(a.firstSize(a.want, false))
	if cap(a.buf) != firstChunk {
		t.Fatalf("no spare: first room %d, want %d", cap(a.buf), firstChunk)
	}
	for range 2 {
		n := cap(a.buf)
		a.buf = a.buf[:n]
		a.grow(1)
		if cap(a.buf) < 2*n || cap(a.buf) > 2*n+2*n/8 {
			t.Fatalf("a full buffer of %d grew to %d, want about %d", n, cap(a.buf), 2*n)
		}
	}
	a.buf = a.buf[:cap(a.buf)]
	a.grow(1)
	if cap(a.buf) < tightRoom || cap(a.buf) > tightRoom+tightRoom/8 {
		t.Fatalf("a full buffer grew to %d, want its room %d", cap(a.buf), tightRoom)
	}
	n := cap(a.buf)
	a.buf = a.buf[:n]
	a.grow(100 << 10)
	if cap(a.buf) < n+100<<10 || cap(a.buf) > 2*n {
		t.Fatalf("a full room of %d grew to %d for 100 KiB more", n, cap(a.buf))
	}
	room := cap(a.buf)
	a.release()
	a.tight = true
	if b := a.get(a.firstSize(8<<20, false)); cap(b) != room {
		t.Fatalf("the next shrinking frame got %d, the room the first grew to is %d", cap(b), room)
	}
	a.close()
}
