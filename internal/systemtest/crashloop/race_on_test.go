//go:build race

package crashloop_test

// crashLoopRace scales the crash loop down under the race detector.
const crashLoopRace = true
