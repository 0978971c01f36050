//go:build race

package reviewweb_test

// raceEnabled is whether the tests run under the race detector.
const raceEnabled = true
