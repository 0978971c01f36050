package checkpoint_test

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
)

var uuidV7 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// steppedClock returns a clock that starts at start and moves by step on
// every call (a negative step runs backwards; zero freezes it). It is safe
// for concurrent use.
func steppedClock(start time.Time, step time.Duration) checkpoint.Clock {
	var mu sync.Mutex
	now := start
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		t := now
		now = now.Add(step)
		return t
	}
}

func seeded(n uint64) *rand.ChaCha8 {
	var seed [32]byte
	seed[0] = byte(n)
	return rand.NewChaCha8(seed)
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("entropy exhausted") }

type constReader byte

func (c constReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(c)
	}
	return len(p), nil
}

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// TestIDGeneratorIncreasing: IDs are UUIDv7-shaped and strictly increasing
// whatever the clock does and whatever the random source returns.
func TestIDGeneratorIncreasing(t *testing.T) {
	tests := []struct {
		name  string
		clock checkpoint.Clock
		rand  func() io.Reader
	}{
		{"forward clock", steppedClock(t0, time.Millisecond), func() io.Reader { return seeded(1) }},
		{"frozen clock", steppedClock(t0, 0), func() io.Reader { return seeded(2) }},
		{"clock running backwards", steppedClock(t0, -time.Millisecond), func() io.Reader { return seeded(3) }},
		{"clock jumping back a day", func() checkpoint.Clock {
			c := steppedClock(t0, time.Millisecond)
			n := 0
			return func() time.Time {
				n++
				if n > 500 {
					return c().Add(-24 * time.Hour)
				}
				return c()
			}
		}(), func() io.Reader { return seeded(4) }},
		{"failing random source", steppedClock(t0, 0), func() io.Reader { return failingReader{} }},
		{"all-ones random source", steppedClock(t0, 0), func() io.Reader { return constReader(0xff) }},
		{"all-zeros random source", steppedClock(t0, 0), func() io.Reader { return constReader(0) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := checkpoint.NewIDGenerator(tc.clock, tc.rand())
			prev := ""
			for i := 0; i < 1000; i++ {
				id := g.Next("")
				if !uuidV7.MatchString(id) {
					t.Fatalf("ID %d = %q is not UUIDv7-shaped", i, id)
				}
				if id <= prev {
					t.Fatalf("ID %d = %s is not greater than the one before, %s", i, id, prev)
				}
				prev = id
			}
		})
	}
}

// TestIDGeneratorAfter: Next(after) is greater than after and than every
// earlier ID; a malformed after is ignored.
func TestIDGeneratorAfter(t *testing.T) {
	g := checkpoint.NewIDGenerator(steppedClock(t0, 0), seeded(5))
	future := checkpoint.NewIDGenerator(steppedClock(t0.Add(time.Hour), 0), seeded(6)).Next("")
	last := g.Next("")
	tests := []struct {
		name  string
		after string
	}{
		{"empty", ""},
		{"an ID from the future", future},
		{"an older ID", "00000000-0000-7000-8000-000000000000"},
		{"the last ID", ""}, // filled in below
		{"malformed", "not-an-id"},
		{"wrong length", future + "0"},
		{"bad hex", strings.Replace(future, future[:1], "g", 1)},
	}
	for _, tc := range tests {
		after := tc.after
		if tc.name == "the last ID" {
			after = last
		}
		id := g.Next(after)
		if !uuidV7.MatchString(id) {
			t.Errorf("Next(%s) = %q, not UUIDv7-shaped", tc.name, id)
		}
		if id <= last {
			t.Errorf("Next(%s) = %s, not greater than the previous ID %s", tc.name, id, last)
		}
		if uuidV7.MatchString(after) && id <= after {
			t.Errorf("Next(%s) = %s, not greater than after %s", tc.name, id, after)
		}
		last = id
	}
}

// TestIDGeneratorTimestamp: the first 48 bits are the clock's Unix
// milliseconds when the clock moves forward.
func TestIDGeneratorTimestamp(t *testing.T) {
	at := time.Date(2031, 2, 3, 4, 5, 6, 789_000_000, time.UTC)
	g := checkpoint.NewIDGenerator(func() time.Time { return at }, seeded(7))
	id := g.Next("")
	ms, err := strconv.ParseInt(id[0:8]+id[9:13], 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	if ms != at.UnixMilli() {
		t.Errorf("timestamp of %s = %d, want %d", id, ms, at.UnixMilli())
	}
}

// TestIDGeneratorConcurrent: concurrent callers get distinct IDs, each
// caller's in increasing order (run with -race).
func TestIDGeneratorConcurrent(t *testing.T) {
	const workers, each = 8, 500
	g := checkpoint.NewIDGenerator(steppedClock(t0, 0), nil)
	out := make([][]string, workers)
	var wg sync.WaitGroup
	for w := range out {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				out[w] = append(out[w], g.Next(""))
			}
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for w, ids := range out {
		for i, id := range ids {
			if seen[id] {
				t.Fatalf("ID %s returned twice", id)
			}
			seen[id] = true
			if i > 0 && id <= ids[i-1] {
				t.Fatalf("worker %d: ID %s not greater than %s", w, id, ids[i-1])
			}
		}
	}
}

// TestIDGeneratorDefaults: nil arguments mean the system clock and an
// OS-seeded source; two generators do not repeat each other.
func TestIDGeneratorDefaults(t *testing.T) {
	a, b := checkpoint.NewIDGenerator(nil, nil), checkpoint.NewIDGenerator(nil, nil)
	x, y := a.Next(""), b.Next("")
	if !uuidV7.MatchString(x) || !uuidV7.MatchString(y) {
		t.Fatalf("IDs %q, %q are not UUIDv7-shaped", x, y)
	}
	if x == y {
		t.Errorf("two generators returned the same ID %s", x)
	}
}

func TestNewOwnerID(t *testing.T) {
	hex32 := regexp.MustCompile(`^[0-9a-f]{32}$`)
	tests := []struct {
		name string
		r    io.Reader
		want func(string) bool
	}{
		{"nil reader", nil, hex32.MatchString},
		{"given reader", bytes.NewReader(bytes.Repeat([]byte{0xab}, 16)), func(s string) bool { return s == strings.Repeat("ab", 16) }},
		{"failing reader", failingReader{}, func(s string) bool { return strings.HasPrefix(s, "run-") }},
	}
	for _, tc := range tests {
		if got := checkpoint.NewOwnerID(tc.r); !tc.want(got) {
			t.Errorf("NewOwnerID(%s) = %q", tc.name, got)
		}
	}
	if a, b := checkpoint.NewOwnerID(nil), checkpoint.NewOwnerID(nil); a == b {
		t.Errorf("NewOwnerID(nil) returned %s twice", a)
	}
}

// TestIDGeneratorSuccessor: when the clock gives an ID that does not sort
// after the floor (the previous ID or after), NextID returns the smallest
// UUIDv7 above the floor, carrying from the random bits into the
// timestamp, and well-formed even when after is not a UUIDv7.
func TestIDGeneratorSuccessor(t *testing.T) {
	tests := []struct {
		name, after, want string
	}{
		{"random bits", "0197f000-0000-7000-8000-0000000000ff", "0197f000-0000-7000-8000-000000000100"},
		{"carry over the variant bits", "0197f000-0000-7000-bfff-ffffffffffff", "0197f000-0000-7001-8000-000000000000"},
		{"carry over the version nibble", "0197f000-0000-7fff-bfff-ffffffffffff", "0197f000-0001-7000-8000-000000000000"},
		{"carry through the timestamp", "0197ffff-ffff-7fff-bfff-ffffffffffff", "01980000-0000-7000-8000-000000000000"},
		{"version below 7", "0197f000-0000-4fff-ffff-ffffffffffff", "0197f000-0000-7000-8000-000000000000"},
		{"version above 7", "0197f000-0000-8000-0000-000000000000", "0197f000-0001-7000-8000-000000000000"},
		{"variant below 10", "0197f000-0000-7000-7fff-ffffffffffff", "0197f000-0000-7000-8000-000000000000"},
		{"variant above 10", "0197f000-0000-7000-c000-000000000000", "0197f000-0000-7001-8000-000000000000"},
		{"variant above 10 at the last random value", "0197f000-0000-7fff-c000-000000000000", "0197f000-0001-7000-8000-000000000000"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// The clock stands at the epoch, so every ID comes from the floor.
			g := checkpoint.NewIDGenerator(func() time.Time { return time.UnixMilli(0) }, constReader(0))
			got, err := g.NextID(tc.after)
			if err != nil {
				t.Fatalf("NextID(%s): %v", tc.after, err)
			}
			if got != tc.want {
				t.Errorf("NextID(%s) = %s, want %s", tc.after, got, tc.want)
			}
			if !uuidV7.MatchString(got) || got <= tc.after {
				t.Errorf("NextID(%s) = %s: not a UUIDv7 sorting after it", tc.after, got)
			}
		})
	}
}

// TestIDGeneratorExhausted: past the largest ID the format holds, NextID
// fails with ErrIDsExhausted and Next returns "" instead of wrapping
// around to a smaller ID; the generator keeps its floor, so a later call
// fails alike.
func TestIDGeneratorExhausted(t *testing.T) {
	const largest = "ffffffff-ffff-7fff-bfff-ffffffffffff"
	tests := []struct {
		name  string
		clock checkpoint.Clock
		after string
	}{
		{"after the largest ID", steppedClock(t0, 0), largest},
		{"after a malformed ID beyond it", steppedClock(t0, 0), "ffffffff-ffff-ffff-ffff-ffffffffffff"},
		{"clock at the last millisecond, all-ones random bits", func() time.Time { return time.UnixMilli(1<<48 - 1) }, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := checkpoint.NewIDGenerator(tc.clock, constReader(0xff))
			if tc.after == "" {
				// The clock's own ID is the largest; the next call has
				// nothing above it.
				first, err := g.NextID("")
				if err != nil || first != largest {
					t.Fatalf("first NextID = %q, %v; want %s", first, err, largest)
				}
			}
			for i := range 2 {
				id, err := g.NextID(tc.after)
				if !errors.Is(err, checkpoint.ErrIDsExhausted) || id != "" {
					t.Fatalf("call %d: NextID(%q) = %q, %v; want \"\" and an error matching ErrIDsExhausted", i, tc.after, id, err)
				}
				if !strings.Contains(err.Error(), `"ffffffff-ffff-`) {
					t.Errorf("error %q does not name the floor, quoted", err)
				}
			}
			if id := g.Next(tc.after); id != "" {
				t.Errorf("Next(%q) = %q, want \"\"", tc.after, id)
			}
		})
	}
}
