package checkpoint

import (
	"encoding/hex"
	"io"
	"sync"
	"time"
)

// IDGenerator makes checkpoint IDs. IDs are UUIDv7-shaped strings (36
// characters, lowercase hex): a millisecond timestamp followed by random
// bits. Lexicographic order is creation order: each ID is greater than every
// ID the generator returned before and greater than the after argument, even
// when the clock stands still or steps back. It is safe for concurrent use.
type IDGenerator struct {
	mu   sync.Mutex
	now  Clock
	rand io.Reader
	last [16]byte
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

// Next returns a new ID greater than after (which may be "") and than every
// ID returned before. A malformed after is ignored.
func (g *IDGenerator) Next(after string) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var id [16]byte
	ms := uint64(g.now().UnixMilli())
	for i := 0; i < 6; i++ {
		id[i] = byte(ms >> (40 - 8*i))
	}
	if _, err := io.ReadFull(g.rand, id[6:]); err != nil {
		// A failing reader leaves zero bits; monotonicity below still holds.
		clear(id[6:])
	}
	id[6] = 0x70 | id[6]&0x0f // version 7
	id[8] = 0x80 | id[8]&0x3f // RFC 4122 variant
	floor := g.last
	if a, ok := parseID(after); ok && compareID(a, floor) > 0 {
		floor = a
	}
	if compareID(id, floor) <= 0 {
		id = incrementID(floor)
	}
	g.last = id
	return formatID(id)
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

// incrementID adds one to the random tail, skipping the version and variant
// bits so that the result stays a well-formed UUIDv7.
func incrementID(id [16]byte) [16]byte {
	for i := 15; i >= 0; i-- {
		switch i {
		case 6: // low nibble only
			if id[6]&0x0f < 0x0f {
				id[6]++
				return id
			}
			id[6] &^= 0x0f
			continue
		case 8: // low 6 bits only
			if id[8]&0x3f < 0x3f {
				id[8]++
				return id
			}
			id[8] &^= 0x3f
			continue
		}
		id[i]++
		if id[i] != 0 {
			return id
		}
	}
	return id
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
