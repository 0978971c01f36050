package checkpoint

import (
	crand "crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"io"
	"math/rand/v2"
	"sync"
)

// seededReader is an io.Reader over a ChaCha8 stream seeded once from the
// operating system. Each generator owns one, so no state is global.
type seededReader struct {
	mu sync.Mutex
	r  *rand.ChaCha8
}

func newSeededReader() *seededReader {
	var seed [32]byte
	if _, err := crand.Read(seed[:]); err != nil {
		// crypto/rand never fails on supported platforms; fall back to a
		// fixed seed rather than panicking.
		binary.LittleEndian.PutUint64(seed[:], 0x6c6f636b73746570)
	}
	return &seededReader{r: rand.NewChaCha8(seed)}
}

func (s *seededReader) Read(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.r.Read(p)
}

// NewOwnerID returns a random 128-bit identifier in hex, read from r (a
// fresh OS-seeded source when r is nil). The runtime uses it for run IDs and
// lease owners.
func NewOwnerID(r io.Reader) string {
	if r == nil {
		r = crand.Reader
	}
	var b [16]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return "run-" + hex.EncodeToString(b[:])
	}
	return hex.EncodeToString(b[:])
}
