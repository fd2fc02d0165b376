package session

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/magic"
)

// reqHeader is the part of a request header offsetgate reads. kmsg has no request-header type,
// so it is parsed here: api key, version, correlation id, the nullable (non-compact) client id,
// and, for flexible versions, the header's tagged fields.
type reqHeader struct {
	key      int16
	version  int16
	corr     int32
	clientID []byte // aliases the frame
	hasID    bool
	// bodyOff is where the request body starts, counted from the start of the frame's payload
	// (after the 4-byte size).
	bodyOff int
	// tagsOff is where the header's tagged-field section starts (flexible versions).
	tagsOff int
	magic   magicTag
}

var errShortHeader = errors.New("request header truncated")

// parseReqHeader reads a request header from a frame payload (the bytes after the size).
func parseReqHeader(p []byte) (reqHeader, error) {
	var h reqHeader
	if len(p) < 8 {
		return h, errShortHeader
	}
	h.key = int16(binary.BigEndian.Uint16(p[0:]))
	h.version = int16(binary.BigEndian.Uint16(p[2:]))
	h.corr = int32(binary.BigEndian.Uint32(p[4:]))
	off := 8
	// ControlledShutdown v0 is the one request without a client id; it is never advertised.
	if kmsg.Key(h.key) == kmsg.ControlledShutdown && h.version == 0 {
		h.bodyOff = off
		return h, nil
	}
	if len(p) < off+2 {
		return h, errShortHeader
	}
	n := int(int16(binary.BigEndian.Uint16(p[off:])))
	off += 2
	if n >= 0 {
		if len(p) < off+n {
			return h, errShortHeader
		}
		h.clientID, h.hasID = p[off:off+n], true
		off += n
	}
	if flexibleRequest(h.key, h.version) {
		h.tagsOff = off
		end, err := magic.WalkTags(p, off, func(tag uint32, val []byte) {
			if tag == magic.Tag {
				h.magic = magicTag{Header: magic.Parse(val)}
			}
		})
		if err != nil {
			return h, fmt.Errorf("request header tagged fields: %w", err)
		}
		off = end
	}
	h.bodyOff = off
	return h, nil
}

// skipTags skips a tagged-field section starting at off and returns where it ends.
func skipTags(p []byte, off int) (int, error) { return magic.WalkTags(p, off, nil) }

// respHeaderLen is the length of a response header (after the size): the correlation id, and
// for flexible responses a tagged-field section. ApiVersions responses always use header v0 so
// that a client that does not know the broker's versions can read them.
func respHeaderLen(p []byte, key, version int16) (int, error) {
	if len(p) < 4 {
		return 0, errShortHeader
	}
	if kmsg.Key(key) == kmsg.ApiVersions || !flexibleRequest(key, version) {
		return 4, nil
	}
	return skipTags(p, 4)
}

// maxKey bounds the api keys offsetgate tracks.
const maxKey = 100

// flexTable[key][version] says whether a version uses flexible (compact, tagged) encoding.
// It is computed once from kmsg and never changes.
var flexTable = func() (t [maxKey][]bool) {
	for k := int16(0); k < maxKey; k++ {
		r := kmsg.RequestForKey(k)
		if r == nil {
			continue
		}
		t[k] = make([]bool, r.MaxVersion()+1)
		for v := int16(0); v <= r.MaxVersion(); v++ {
			r.SetVersion(v)
			t[k][v] = r.IsFlexible()
		}
	}
	return t
}()

func flexibleRequest(key, version int16) bool {
	if key < 0 || int(key) >= maxKey || version < 0 || int(version) >= len(flexTable[key]) {
		return false
	}
	return flexTable[key][version]
}
