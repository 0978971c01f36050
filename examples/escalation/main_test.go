package main

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/lockstepgo/lockstep/examples/internal/demotest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun runs the command twice on one file: the second run files
// nothing, and says so.
func TestRun(t *testing.T) {
	demotest.RunTwice(t, run, "created 1 issue(s)", "created 0 issue(s)")
}
