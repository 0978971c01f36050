//go:build race

package sqlite

// raceEnabled scales iteration counts down under the race detector.
const raceEnabled = true
