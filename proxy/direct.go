package proxy

import "bytes"

// directOut is what one socket has not taken yet of frames the gnet transport wrote to it
// itself (see writeWatch), oldest first: the rest of a large frame where it lies, in the frame
// buffer of the assembly it came from (lent until written), and anything sent behind it
// (copied, to keep the order). Only the connection's event loop touches it.
type directOut struct {
	rest  [][]byte
	bytes int
	lent  []byte    // the frame buffer rest[0] lies in
	from  *assembly // who gets lent back
	id    int32     // the connection's id with the write watch (0: none yet)
	added bool      // the socket is in the watch's set
}

func (d *directOut) pending() bool { return len(d.rest) > 0 }

// queue puts b, copied, behind what waits.
func (d *directOut) queue(b []byte) {
	d.rest = append(d.rest, bytes.Clone(b))
	d.bytes += len(b)
}

// start writes b, which lies in from's frame buffer, to the socket fd. What the socket does not
// take stays where it is; kept says so, and from must then lend its buffer instead of
// releasing it (lentFrom) and the caller arm the watch.
func (d *directOut) start(fd int, b []byte, from *assembly) (kept bool, err error) {
	n, err := writeFD(fd, b)
	if err != nil || n == len(b) {
		return false, err
	}
	d.rest = append(d.rest, b[n:])
	d.bytes += len(b) - n
	d.lent, d.from = from.buf, from
	return true, nil
}

// lentFrom reports whether the rest lies in a's current frame.
func (d *directOut) lentFrom(a *assembly) bool { return d.lent != nil && a.holds(d.lent) }

// flush writes on; done reports that everything was written (and the frame buffer given back).
func (d *directOut) flush(fd int) (done bool, err error) {
	for len(d.rest) > 0 {
		b := d.rest[0]
		n, err := writeFD(fd, b)
		d.bytes -= n
		if err != nil {
			return false, err
		}
		if n < len(b) {
			d.rest[0] = b[n:]
			return false, nil
		}
		d.rest[0] = nil
		d.rest = d.rest[1:]
	}
	d.rest = nil
	if d.lent != nil {
		d.from.giveBack(d.lent)
		d.lent, d.from = nil, nil
	}
	return true, nil
}

// arm asks w for one report when fd has room; onRoom runs on the watch's goroutine.
func (d *directOut) arm(w *writeWatch, fd int, onRoom func()) error {
	if d.id == 0 {
		d.id = w.register(onRoom)
	}
	if err := w.arm(fd, d.id, d.added); err != nil {
		return err
	}
	d.added = true
	return nil
}

// close drops what waits and leaves the watch.
func (d *directOut) close(w *writeWatch) {
	if d.id != 0 {
		w.forget(d.id)
		d.id = 0
	}
	d.rest, d.bytes, d.lent, d.from = nil, 0, nil, nil
}
