package main

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/lockstepgo/lockstep/examples/internal/demotest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun runs the command twice on one file: the second run closes
// nothing, and says so.
func TestRun(t *testing.T) {
	demotest.RunTwice(t, run, "1 ticket(s) were closed", "0 ticket(s) were closed")
}
