package systemtest

import (
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
)

// Seed returns the seed of a randomised test: the number the environment
// variable env holds, so that the seed a failure printed replays the run,
// or a random one (below 2^63, so it prints the same signed or not) when
// env is unset. A value that is not a number fails the test (t.Fatal).
// The test prints the seed, with the command that replays it, itself.
func Seed(t testing.TB, env string) uint64 {
	t.Helper()
	s := os.Getenv(env)
	if s == "" {
		return rand.Uint64() >> 1
	}
	seed, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: want the seed a failure printed (a decimal number): %v", env, s, err)
	}
	return seed
}
