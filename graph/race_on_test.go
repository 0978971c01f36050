//go:build race

package graph_test

// raceEnabled scales the crash loop down under the race detector.
const raceEnabled = true
