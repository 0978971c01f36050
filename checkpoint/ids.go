package checkpoint

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// IDGenerator makes checkpoint IDs. IDs are UUIDv7-shaped strings (36
// characters, lowercase hex): a millisecond timestamp followed by random
// bits. Lexicographic order is creation order: each ID is greater than every
// ID the generator returned before and greater than the after argument, even
// when the clock stands still or steps back. Past the largest ID the format
// holds it does not wrap around: NextID fails with ErrIDsExhausted. It is
// safe for concurrent use.
type IDGenerator struct {
	mu   sync.Mutex
	now  Clock
	rand io.Reader
	last [16]byte
	// rnd receives the random bits: a buffer of the generator's own
	// (under mu), since a local array handed to an io.Reader escapes.
	rnd [10]byte
}

// NewIDGenerator returns a generator reading time from now and randomness
// from rand. Nil arguments mean time.Now and a per-generator ChaCha8 source
// seeded from the operating system.
func NewIDGenerator(now Clock, rand io.Reader) *IDGenerator {
	if now == nil {
		now = time.Now
	}
	if rand == nil {
		rand = newSeededReader()
	}
	return &IDGenerator{now: now, rand: rand}
}

// ErrIDsExhausted is returned by NextID when no ID of the format sorts
// after the floor: the previous ID (or after) is the largest ID of the
// last millisecond the format holds (year 10889), or a malformed ID beyond
// it. It is never returned for a clock that stands still or steps back.
var ErrIDsExhausted = errors.New("checkpoint: no checkpoint ID sorts after the last one")

// NextID returns a new ID greater than after (which may be "") and than
// every ID returned before. A malformed after is ignored; an after that is
// well-formed hex but not a UUIDv7 is still sorted after. When no
// UUIDv7-shaped ID sorts after both, it returns "" and an error wrapping
// ErrIDsExhausted that names the floor, and the generator is unchanged.
func (g *IDGenerator) NextID(after string) (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var id [16]byte
	ms := uint64(g.now().UnixMilli())
	for i := 0; i < 6; i++ {
		id[i] = byte(ms >> (40 - 8*i))
	}
	if _, err := io.ReadFull(g.rand, g.rnd[:]); err != nil {
		// A failing reader leaves zero bits; monotonicity below still holds.
		clear(g.rnd[:])
	}
	copy(id[6:], g.rnd[:])
	id[6] = 0x70 | id[6]&0x0f // version 7
	id[8] = 0x80 | id[8]&0x3f // RFC 4122 variant
	floor := g.last
	if a, ok := parseID(after); ok && compareID(a, floor) > 0 {
		floor = a
	}
	if compareID(id, floor) <= 0 {
		var ok bool
		if id, ok = successor(floor); !ok {
			return "", fmt.Errorf("%w: after checkpoint %q", ErrIDsExhausted, formatID(floor))
		}
	}
	g.last = id
	return formatID(id), nil
}

// Next is NextID for callers that cannot handle an error (graph.WithIDs
// takes a function of this shape): it returns "" when NextID fails. Every
// saver refuses "" as a checkpoint ID with an error wrapping ErrInvalid,
// so an exhausted generator stops a run before anything is written
// instead of wrapping around to a smaller ID.
func (g *IDGenerator) Next(after string) string {
	id, _ := g.NextID(after)
	return id
}

func compareID(a, b [16]byte) int {
	for i := range a {
		if a[i] != b[i] {
			if a[i] < b[i] {
				return -1
			}
			return 1
		}
	}
	return 0
}

// successor returns the smallest UUIDv7 (version nibble 7, variant bits
// 10) greater than id, and false when there is none. For a UUIDv7 that is
// id plus one in the 74 random bits, carrying into the timestamp; an id
// that is not a UUIDv7 is first brought to the nearest UUIDv7 above it.
func successor(id [16]byte) ([16]byte, bool) {
	switch version, variant := id[6]>>4, id[8]>>6; {
	case version < 7:
		return firstOfMilli(id), true
	case version > 7:
		return nextMilli(id)
	case variant < 2:
		id[8] = 0x80
		clear(id[9:])
		return id, true
	case variant > 2:
		return nextRandA(id)
	}
	for i := 15; i >= 9; i-- {
		if id[i]++; id[i] != 0 {
			return id, true
		}
	}
	if id[8]&0x3f < 0x3f {
		id[8]++
		return id, true
	}
	return nextRandA(id)
}

// nextRandA returns the smallest UUIDv7 whose timestamp and first 12
// random bits (the low nibble of byte 6 and byte 7) come after id's.
func nextRandA(id [16]byte) ([16]byte, bool) {
	id[8] = 0x80
	clear(id[9:])
	if id[7]++; id[7] != 0 {
		return id, true
	}
	if id[6]&0x0f < 0x0f {
		id[6]++
		return id, true
	}
	return nextMilli(id)
}

// firstOfMilli returns the smallest UUIDv7 with id's timestamp.
func firstOfMilli(id [16]byte) [16]byte {
	var out [16]byte
	copy(out[:6], id[:6])
	out[6], out[8] = 0x70, 0x80
	return out
}

// nextMilli returns the smallest UUIDv7 of the millisecond after id's,
// and false when id's timestamp is the largest 48 bits hold.
func nextMilli(id [16]byte) ([16]byte, bool) {
	for i := 5; i >= 0; i-- {
		if id[i]++; id[i] != 0 {
			return firstOfMilli(id), true
		}
	}
	return [16]byte{}, false
}

func formatID(id [16]byte) string {
	var b [36]byte
	hex.Encode(b[0:8], id[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], id[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], id[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], id[8:10])
	b[23] = '-'
	hex.Encode(b[24:], id[10:])
	return string(b[:])
}

func parseID(s string) ([16]byte, bool) {
	var id [16]byte
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return id, false
	}
	parts := [][2]int{{0, 8}, {9, 13}, {14, 18}, {19, 23}, {24, 36}}
	off := 0
	for _, p := range parts {
		n, err := hex.Decode(id[off:], []byte(s[p[0]:p[1]]))
		if err != nil {
			return id, false
		}
		off += n
	}
	return id, true
}
