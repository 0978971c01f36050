package main

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/lockstepgo/lockstep/examples/internal/demotest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun runs the command twice on one file: the second run pays
// nothing, and says so.
func TestRun(t *testing.T) {
	demotest.RunTwice(t, run, "This run paid 1.", "This run paid 0.")
	demotest.RefusesArgs(t, run, []string{"--bad"}, []string{"extra"})
}
