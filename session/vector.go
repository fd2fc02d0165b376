package session

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"
)

// A rewritten answer whose large byte fields (a Fetch answer's record batches) are unchanged in
// size is written as a list of slices: the fields referenced where they lie (the broker's frame,
// restored in place) and only the rest encoded by kmsg. Copying the records into a new answer was
// two thirds of restoring it.
//
// kmsg encodes a whole message or nothing, so each large field is swapped for a token before
// encoding and found again in the encoded bytes: a token is 16 bytes from the session's secret
// nonce (crypto/rand, never sent anywhere) with its index mixed in, so no byte a client or broker
// controls (a topic name, a small record batch left inline) can pass for one.

const (
	// refMin is the smallest field taken by reference: below it a copy costs less than a slice of
	// its own in the write.
	refMin = 8 << 10
	// maxRefs bounds the fields of one answer taken by reference; the rest are copied. A field
	// costs two slices, and the kernel takes at most 1,024 in one writev (gnet closes the
	// connection on EINVAL).
	maxRefs  = 256
	tokenLen = 16
)

// vecAnswer builds one vectored answer. The session keeps it between answers.
type vecAnswer struct {
	nonce  [tokenLen]byte
	seeded bool
	refs   [][]byte // the fields taken out, in encoding order
	tokens []byte   // their tokens, tokenLen bytes each
	segs   [][]byte // the answer's slices, after build
}

// reset readies the builder for a new answer.
func (v *vecAnswer) reset() {
	if !v.seeded {
		if _, err := rand.Read(v.nonce[:]); err != nil {
			panic(fmt.Sprintf("session: no randomness for answer tokens: %v", err)) // crypto/rand never fails on Linux
		}
		v.seeded = true
	}
	clear(v.refs)
	v.refs, v.tokens = v.refs[:0], v.tokens[:0]
	clear(v.segs)
	v.segs = v.segs[:0]
}

// take returns what to encode in place of field b: a token standing for it, or b itself when it
// is small or the answer holds enough references already.
func (v *vecAnswer) take(b []byte) []byte {
	if len(b) < refMin || len(v.refs) >= maxRefs {
		return b
	}
	i := len(v.refs)
	v.refs = append(v.refs, b)
	if cap(v.tokens) < maxRefs*tokenLen {
		v.tokens = make([]byte, 0, maxRefs*tokenLen) // never grown again: earlier tokens stay put
	}
	v.tokens = append(v.tokens, v.nonce[:]...)
	tok := v.tokens[i*tokenLen : (i+1)*tokenLen]
	binary.BigEndian.PutUint32(tok[tokenLen-4:], binary.BigEndian.Uint32(tok[tokenLen-4:])^uint32(i+1))
	return tok
}

// build turns enc, a whole answer frame encoded with tokens (frame size prefix still to be
// set), into v.segs, and returns the frame's total length. flexible says how kmsg encoded the
// fields' lengths (compact: uvarint of length+1; otherwise int32). enc must not be changed or
// grown until the segments are written.
func (v *vecAnswer) build(enc []byte, flexible bool) (int, error) {
	if len(v.refs) == 0 {
		binary.BigEndian.PutUint32(enc, uint32(len(enc)-4))
		v.segs = append(v.segs, enc)
		return len(enc), nil
	}
	total, pos, start := 0, 0, 0
	for i, ref := range v.refs {
		tok := v.tokens[i*tokenLen : (i+1)*tokenLen]
		at := bytes.Index(enc[pos:], tok)
		if at < 0 {
			return 0, fmt.Errorf("vectored answer: field %d of %d not found after encoding", i+1, len(v.refs))
		}
		at += pos
		// The token's length prefix, then the real one written over it (never longer: at most
		// 5 bytes against a 16-byte token and its prefix).
		var pre int
		if flexible {
			pre = 1
			if at < pre || enc[at-1] != tokenLen+1 {
				return 0, fmt.Errorf("vectored answer: field %d has no compact length in front", i+1)
			}
		} else {
			pre = 4
			if at < pre || binary.BigEndian.Uint32(enc[at-4:]) != tokenLen {
				return 0, fmt.Errorf("vectored answer: field %d has no int32 length in front", i+1)
			}
		}
		end := at - pre
		if flexible {
			end += len(binary.AppendUvarint(enc[end:end], uint64(len(ref))+1))
		} else {
			binary.BigEndian.PutUint32(enc[end:], uint32(len(ref)))
			end += 4
		}
		v.segs = append(v.segs, enc[start:end], ref)
		total += end - start + len(ref)
		pos = at + tokenLen
		start = pos
	}
	v.segs = append(v.segs, enc[start:])
	total += len(enc) - start
	binary.BigEndian.PutUint32(v.segs[0], uint32(total-4))
	return total, nil
}

// flatten copies segs into one new frame (an answer that must wait for an earlier one outlives
// the buffers its slices point into).
func flatten(segs [][]byte, total int) []byte {
	out := make([]byte, 0, total)
	for _, s := range segs {
		out = append(out, s...)
	}
	return out
}
