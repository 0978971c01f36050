package checkpoint_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// FuzzNextID feeds NextID the after IDs it meets in practice: read back
// from storage, typed by a user replaying from a checkpoint, or corrupt.
// Properties: it never panics; it fails only with ErrIDsExhausted,
// returning ""; it always returns a UUIDv7-shaped ID; that ID sorts after
// a well-formed after (in either letter case) and after every ID the
// generator returned before, whatever the clock says.
func FuzzNextID(f *testing.F) {
	for _, seed := range []struct {
		after string
		ms    int64
		rand  []byte
	}{
		{"", 1772352000000, []byte("0123456789")},
		{"019c a0b1-2c3d-7e4f-8a5b-6c7d8e9f0a1b", 1772352000000, nil},
		{"019ca0b1-2c3d-7e4f-8a5b-6c7d8e9f0a1b", 1772352000000, []byte("0123456789")},
		{"019CA0B1-2C3D-7E4F-8A5B-6C7D8E9F0A1B", 1, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
		{"ffffffff-ffff-7fff-bfff-ffffffffffff", 1772352000000, nil},
		{"ffffffff-ffff-ffff-ffff-ffffffffffff", 0, nil},
		{"00000000-0000-0000-0000-000000000000", -1, nil},
		{"not-an-id", 1772352000000, nil},
		{"019ca0b1-2c3d-7e4f-8a5b-6c7d8e9f0a1", 1772352000000, nil},
	} {
		f.Add(seed.after, seed.ms, seed.rand)
	}
	f.Fuzz(func(t *testing.T, after string, ms int64, random []byte) {
		clock := func() time.Time { return time.UnixMilli(ms) }
		g := checkpoint.NewIDGenerator(clock, bytes.NewReader(random))
		id, err := g.NextID(after)
		if err != nil {
			if !errors.Is(err, checkpoint.ErrIDsExhausted) || id != "" {
				t.Fatalf("NextID(%q) = %q, %v; want \"\" and ErrIDsExhausted", after, id, err)
			}
			return
		}
		if !uuidV7.MatchString(id) {
			t.Fatalf("NextID(%q) = %q, not UUIDv7-shaped", after, id)
		}
		if wellFormed(after) && id <= after {
			t.Fatalf("NextID(%q) = %q does not sort after it", after, id)
		}
		next, err := g.NextID("")
		if err != nil {
			if !errors.Is(err, checkpoint.ErrIDsExhausted) {
				t.Fatalf("second NextID: %v", err)
			}
			return
		}
		if next <= id {
			t.Fatalf("second ID %q does not sort after the first %q", next, id)
		}
	})
}

// wellFormed reports whether s is 8-4-4-4-12 hex digits of either case,
// the IDs NextID sorts after.
func wellFormed(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if c != '-' {
				return false
			}
		case '0' <= c && c <= '9', 'a' <= c && c <= 'f', 'A' <= c && c <= 'F':
		default:
			return false
		}
	}
	return true
}
