package session

// ring is a FIFO of slots addressed by sequence number; the seq ring is the same for plain
// sequence numbers. Both grow by doubling and never shrink: a connection's in-flight count is
// capped, so they stay small.
type ring struct {
	buf  []slot
	seqs []uint64
	head int
	n    int
	base uint64 // sequence number of the head
}

func (r *ring) len() int { return r.n }

func (r *ring) headSeq() uint64 { return r.base }

func (r *ring) grow() {
	size := len(r.buf) * 2
	if size == 0 {
		size = 8
	}
	nb := make([]slot, size)
	for i := 0; i < r.n; i++ {
		nb[i] = r.buf[(r.head+i)%len(r.buf)]
	}
	r.buf, r.head = nb, 0
}

// push appends a slot and returns its sequence number.
func (r *ring) push(s slot) uint64 {
	if r.n == len(r.buf) {
		r.grow()
	}
	r.buf[(r.head+r.n)%len(r.buf)] = s
	r.n++
	return r.base + uint64(r.n-1)
}

// at returns the slot with sequence number seq; it must be in the ring. The pointer is valid
// until the next push.
func (r *ring) at(seq uint64) *slot {
	return &r.buf[(r.head+int(seq-r.base))%len(r.buf)]
}

func (r *ring) pop() {
	r.buf[r.head] = slot{}
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	r.base++
}

func (r *ring) pushSeq(seq uint64) {
	if r.n == len(r.seqs) {
		size := len(r.seqs) * 2
		if size == 0 {
			size = 8
		}
		nb := make([]uint64, size)
		for i := 0; i < r.n; i++ {
			nb[i] = r.seqs[(r.head+i)%len(r.seqs)]
		}
		r.seqs, r.head = nb, 0
	}
	r.seqs[(r.head+r.n)%len(r.seqs)] = seq
	r.n++
}

// peekSeq returns the oldest sequence number without removing it.
func (r *ring) peekSeq() (uint64, bool) {
	if r.n == 0 {
		return 0, false
	}
	return r.seqs[r.head], true
}

func (r *ring) popSeq() (uint64, bool) {
	if r.n == 0 {
		return 0, false
	}
	s := r.seqs[r.head]
	r.head = (r.head + 1) % len(r.seqs)
	r.n--
	return s, true
}
