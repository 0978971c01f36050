//go:build !race

package checkpointtest

// raceEnabled scales the long chains' lengths down under the race
// detector, where each step costs several times as much: the shapes
// (whole values, segments, long appends) stay the same.
const raceEnabled = false
