package proxy

import "testing"

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
		if c := cap(a.buf); c > 8*len(a.buf)+64<<10 && c > firstChunk {
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
