package main

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/lockstepgo/lockstep/examples/internal/demotest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun runs the command twice on one file: the second run refunds
// nothing, and says so.
func TestRun(t *testing.T) {
	demotest.RunTwice(t, run, "payments made 1 refund(s)", "payments made 0 refund(s)")
}
