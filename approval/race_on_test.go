//go:build race

package approval_test

// raceEnabled is whether the tests run under the race detector, which
// the stress tests answer with fewer rounds of the same races.
const raceEnabled = true
