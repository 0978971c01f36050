package retry_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/retry"
)

const ms = time.Millisecond

// schedule returns Delay(1..n, u).
func schedule(p retry.Policy, n int, u float64) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = p.Delay(i+1, u)
	}
	return out
}

// TestDelaySchedules: the waits after 1, 2, ... failed attempts, with the
// jitter's draw in the middle (no spread), for the schedules the three
// former spellings had and the edges of the formula.
func TestDelaySchedules(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    retry.Policy
		want []time.Duration
	}{
		{"the zero policy: no wait", retry.Policy{}, []time.Duration{0, 0, 0, 0}},
		{"graph's former default: 100ms doubling to 10s",
			retry.Policy{Initial: 100 * ms, Multiplier: 2, Max: 10 * time.Second},
			[]time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 3200 * ms, 6400 * ms, 10 * time.Second, 10 * time.Second}},
		{"nodes' former default: 200ms doubling to 10s",
			retry.Policy{Initial: 200 * ms, Multiplier: 2, Max: 10 * time.Second, Jitter: 0.2},
			[]time.Duration{200 * ms, 400 * ms, 800 * ms, 1600 * ms, 3200 * ms, 6400 * ms, 10 * time.Second}},
		{"the approval worker's former default: 1s doubling to 5m",
			retry.Policy{Initial: time.Second, Max: 5 * time.Minute},
			[]time.Duration{1 * time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, 64 * time.Second, 128 * time.Second, 256 * time.Second, 5 * time.Minute}},
		{"capped by a Max below the default", retry.Policy{Initial: 100 * ms, Max: time.Second},
			[]time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, time.Second, time.Second}},
		{"Multiplier 1: constant", retry.Policy{Initial: 50 * ms, Multiplier: 1}, []time.Duration{50 * ms, 50 * ms, 50 * ms}},
		{"Multiplier 1.5", retry.Policy{Initial: 100 * ms, Multiplier: 1.5}, []time.Duration{100 * ms, 150 * ms, 225 * ms}},
		{"Initial equal to Max", retry.Policy{Initial: time.Second, Max: time.Second}, []time.Duration{time.Second, time.Second}},
		{"Initial 1ns", retry.Policy{Initial: 1}, []time.Duration{1, 2, 4, 8}},
		{"the largest durations do not overflow", retry.Policy{Initial: math.MaxInt64, Max: math.MaxInt64},
			[]time.Duration{math.MaxInt64, math.MaxInt64}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.p.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if d := cmp.Diff(tc.want, schedule(tc.p, len(tc.want), 0.5)); d != "" {
				t.Errorf("Delay(1..%d, 0.5) (-want +got):\n%s", len(tc.want), d)
			}
		})
	}
}

// TestDelayEdges: single computations at the edges of the arguments.
func TestDelayEdges(t *testing.T) {
	p := retry.Policy{Initial: 100 * ms, Max: time.Second, Jitter: 0.5}
	for _, tc := range []struct {
		name   string
		p      retry.Policy
		failed int
		u      float64
		want   time.Duration
	}{
		{"failed 0 counts as 1", p, 0, 0.5, 100 * ms},
		{"negative failed counts as 1", p, -7, 0.5, 100 * ms},
		{"the largest failed count is the cap", p, math.MaxInt, 0.5, time.Second},
		{"u 0: the low end", p, 1, 0, 50 * ms},
		{"u 0.25", p, 1, 0.25, 75 * ms},
		{"u 0.75", p, 1, 0.75, 125 * ms},
		{"u 1: the high end", p, 1, 1, 150 * ms},
		{"u below 0 is clamped", p, 1, -3, 50 * ms},
		{"u above 1 is clamped", p, 1, 7, 150 * ms},
		{"NaN counts as the middle", p, 1, math.NaN(), 100 * ms},
		{"the spread is capped at Max", p, 4, 1, time.Second},
		{"a capped wait spreads down", p, 9, 0, 500 * ms},
		{"Jitter 1 reaches zero", retry.Policy{Initial: 100 * ms, Jitter: 1}, 1, 0, 0},
		{"Jitter 1 reaches twice the wait", retry.Policy{Initial: 100 * ms, Jitter: 1}, 1, 1, 200 * ms},
		{"no jitter ignores u", retry.Policy{Initial: 100 * ms}, 1, 0, 100 * ms},
		{"no wait ignores u", retry.Policy{Jitter: 1}, 3, 1, 0},
	} {
		if got := tc.p.Delay(tc.failed, tc.u); got != tc.want {
			t.Errorf("%s: %+v.Delay(%d, %v) = %v, want %v", tc.name, tc.p, tc.failed, tc.u, got, tc.want)
		}
	}
}

// TestDelayWithinSpread: for random draws (seed printed on failure),
// every wait is in [base × (1 − Jitter), min(Max, base × (1 + Jitter))].
func TestDelayWithinSpread(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rnd := rand.New(rand.NewPCG(seed, 1))
	for range 2000 {
		p := retry.Policy{
			Initial:    time.Duration(1 + rnd.Int64N(int64(time.Second))),
			Multiplier: 1 + 3*rnd.Float64(),
			Jitter:     rnd.Float64(),
		}
		p.Max = p.Initial + time.Duration(rnd.Int64N(int64(time.Minute)))
		failed, u := 1+rnd.IntN(40), rnd.Float64()
		base := p.Delay(failed, 0.5)
		got := p.Delay(failed, u)
		lo, hi := time.Duration(float64(base)*(1-p.Jitter))-1, min(time.Duration(float64(base)*(1+p.Jitter))+1, p.Max)
		if got < lo || got > hi || base > p.Max {
			t.Fatalf("seed %d: %+v.Delay(%d, %v) = %v, base %v: want within [%v, %v]", seed, p, failed, u, got, base, lo, hi)
		}
	}
}

// TestZeroFields: what each zero field means, one case each.
func TestZeroFields(t *testing.T) {
	t.Run("MaxAttempts 0 means 3", func(t *testing.T) {
		for _, tc := range []struct{ max, want int }{{0, retry.DefaultMaxAttempts}, {1, 1}, {2, 2}, {10, 10}} {
			if got := (retry.Policy{MaxAttempts: tc.max}).Attempts(); got != tc.want {
				t.Errorf("MaxAttempts %d: Attempts() = %d, want %d", tc.max, got, tc.want)
			}
		}
		if retry.DefaultMaxAttempts != 3 {
			t.Errorf("DefaultMaxAttempts = %d, want 3 as documented", retry.DefaultMaxAttempts)
		}
	})
	t.Run("Initial 0 means no wait, whatever the other fields", func(t *testing.T) {
		p := retry.Policy{Multiplier: 3, Max: time.Hour, Jitter: 1, Rand: failingReader{t}}
		if d := cmp.Diff([]time.Duration{0, 0, 0}, schedule(p, 3, 1)); d != "" {
			t.Errorf("Delay (-want +got):\n%s", d)
		}
		if got := p.Wait(2); got != 0 {
			t.Errorf("Wait(2) = %v, want 0", got)
		}
	})
	t.Run("Multiplier 0 means 2", func(t *testing.T) {
		zero, two := retry.Policy{Initial: 10 * ms}, retry.Policy{Initial: 10 * ms, Multiplier: retry.DefaultMultiplier}
		if d := cmp.Diff(schedule(two, 5, 0.5), schedule(zero, 5, 0.5)); d != "" {
			t.Errorf("Multiplier 0 vs 2 (-2 +0):\n%s", d)
		}
		if got := zero.Delay(2, 0.5); got != 20*ms {
			t.Errorf("second wait %v, want 20ms", got)
		}
	})
	t.Run("Max 0 means 10s", func(t *testing.T) {
		p := retry.Policy{Initial: time.Second}
		if got := p.Delay(50, 0.5); got != retry.DefaultMax || retry.DefaultMax != 10*time.Second {
			t.Errorf("cap %v (DefaultMax %v), want 10s", got, retry.DefaultMax)
		}
		if got := (retry.Policy{Initial: time.Second, Jitter: 1}).Delay(50, 1); got != 10*time.Second {
			t.Errorf("a spread wait is capped at %v, want 10s", got)
		}
	})
	t.Run("Jitter 0 means none: Rand is not read", func(t *testing.T) {
		p := retry.Policy{Initial: 100 * ms, Rand: failingReader{t}}
		for failed, want := range map[int]time.Duration{1: 100 * ms, 2: 200 * ms, 3: 400 * ms} {
			if got := p.Wait(failed); got != want {
				t.Errorf("Wait(%d) = %v, want %v", failed, got, want)
			}
			for _, u := range []float64{0, 0.3, 0.99} {
				if got := p.Delay(failed, u); got != want {
					t.Errorf("Delay(%d, %v) = %v, want %v", failed, u, got, want)
				}
			}
		}
	})
	t.Run("Rand nil means crypto/rand", func(t *testing.T) {
		p := retry.Policy{Initial: time.Second, Jitter: 0.5}
		seen := map[time.Duration]bool{}
		for range 50 {
			got := p.Wait(1)
			if got < 500*ms || got > 1500*ms {
				t.Fatalf("Wait(1) = %v, want within [500ms, 1.5s]", got)
			}
			seen[got] = true
		}
		if len(seen) < 2 {
			t.Errorf("50 waits drawn from crypto/rand were all %v", seen)
		}
	})
}

// failingReader fails the test when it is read.
type failingReader struct{ t *testing.T }

func (r failingReader) Read([]byte) (int, error) {
	r.t.Helper()
	r.t.Error("Rand was read")
	return 0, io.EOF
}

// TestWaitReadsRand: a spread wait reads 8 bytes of Rand; the same bytes
// give the same wait, and a failed read does not spread it.
func TestWaitReadsRand(t *testing.T) {
	p := retry.Policy{Initial: time.Second, Jitter: 0.5}
	for _, tc := range []struct {
		name  string
		bytes []byte
		want  time.Duration
	}{
		{"all zero bits: the low end", make([]byte, 8), 500 * ms},
		{"the top bit alone: the middle", []byte{0, 0, 0, 0, 0, 0, 0, 0x80}, time.Second},
		{"a short read: the middle", []byte{1, 2, 3}, time.Second},
		{"an empty reader: the middle", nil, time.Second},
	} {
		r := bytes.NewReader(tc.bytes)
		p.Rand = r
		if got := p.Wait(1); got != tc.want {
			t.Errorf("%s: Wait(1) = %v, want %v", tc.name, got, tc.want)
		}
		if len(tc.bytes) >= 8 && r.Len() != len(tc.bytes)-8 {
			t.Errorf("%s: %d bytes read, want 8", tc.name, len(tc.bytes)-r.Len())
		}
	}
	// A seeded source reproduces a schedule.
	a, b := p, p
	a.Rand, b.Rand = rand.NewChaCha8([32]byte{7}), rand.NewChaCha8([32]byte{7})
	for failed := 1; failed <= 5; failed++ {
		if wa, wb := a.Wait(failed), b.Wait(failed); wa != wb {
			t.Errorf("Wait(%d) from one seed: %v and %v", failed, wa, wb)
		}
	}
}

// TestValidate: every field's refusals, each a *PolicyError naming the
// field and matching ErrInvalidPolicy; all of a policy's problems are
// reported; valid policies, the zero one included, pass unchanged.
func TestValidate(t *testing.T) {
	for _, p := range []retry.Policy{
		{},
		{MaxAttempts: 1},
		{MaxAttempts: 5, Initial: 100 * ms, Multiplier: 1, Max: time.Second, Jitter: 1},
		{Initial: 10 * time.Second},                    // equal to the default Max
		{Initial: time.Hour, Max: time.Hour},           // equal to Max
		{Multiplier: 1e300, Jitter: 0.2},               // large but finite
		{Initial: 0, Max: 0, Multiplier: 0, Jitter: 0}, // all zero
	} {
		if err := p.Validate(); err != nil {
			t.Errorf("%+v: %v, want valid", p, err)
		}
	}
	for _, tc := range []struct {
		name   string
		p      retry.Policy
		fields []string
	}{
		{"negative MaxAttempts", retry.Policy{MaxAttempts: -1}, []string{"MaxAttempts"}},
		{"negative Initial", retry.Policy{Initial: -ms}, []string{"Initial"}},
		{"Initial above Max", retry.Policy{Initial: 2 * time.Second, Max: time.Second}, []string{"Initial"}},
		{"Initial above the default Max", retry.Policy{Initial: time.Minute}, []string{"Initial"}},
		{"Multiplier below 1", retry.Policy{Multiplier: 0.5}, []string{"Multiplier"}},
		{"negative Multiplier", retry.Policy{Multiplier: -2}, []string{"Multiplier"}},
		{"NaN Multiplier", retry.Policy{Multiplier: math.NaN()}, []string{"Multiplier"}},
		{"infinite Multiplier", retry.Policy{Multiplier: math.Inf(1)}, []string{"Multiplier"}},
		{"negative Max", retry.Policy{Max: -time.Second}, []string{"Max"}},
		{"negative Jitter", retry.Policy{Jitter: -0.1}, []string{"Jitter"}},
		{"Jitter above 1", retry.Policy{Jitter: 1.5}, []string{"Jitter"}},
		{"NaN Jitter", retry.Policy{Jitter: math.NaN()}, []string{"Jitter"}},
		{"every field at once", retry.Policy{MaxAttempts: -3, Initial: -1, Multiplier: 0.9, Max: -1, Jitter: 2},
			[]string{"MaxAttempts", "Initial", "Multiplier", "Max", "Jitter"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.p
			err := tc.p.Validate()
			if !errors.Is(err, retry.ErrInvalidPolicy) {
				t.Fatalf("Validate() = %v, want an error matching ErrInvalidPolicy", err)
			}
			var pe *retry.PolicyError
			if !errors.As(err, &pe) || pe.Field != tc.fields[0] {
				t.Fatalf("Validate() = %v, want a *PolicyError for %s first", err, tc.fields[0])
			}
			var got []string
			for _, e := range unjoin(err) {
				var pe *retry.PolicyError
				if errors.As(e, &pe) {
					got = append(got, pe.Field)
					if pe.Value == "" || pe.Reason == "" {
						t.Errorf("%+v lacks a value or a reason", pe)
					}
				}
			}
			if d := cmp.Diff(tc.fields, got); d != "" {
				t.Errorf("fields refused (-want +got):\n%s", d)
			}
			if fmt.Sprintf("%+v", before) != fmt.Sprintf("%+v", tc.p) {
				t.Errorf("Validate changed the policy: %+v, was %+v", tc.p, before)
			}
		})
	}
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func TestPolicyErrorMessage(t *testing.T) {
	err := (retry.Policy{Initial: time.Minute}).Validate()
	want := "retry: invalid policy: Initial 1m0s: above Max 10s (Max 0 means 10s): no wait could be that long; raise Max"
	if err == nil || err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
}
