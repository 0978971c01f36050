package soak_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs a soak process (the test binary re-runs itself with
// LOCKSTEP_SOAK_CHILD set to its configuration) and checks for goroutine
// leaks otherwise.
func TestMain(m *testing.M) {
	if cfg := os.Getenv(soakChildEnv); cfg != "" {
		os.Exit(soakChild(cfg))
	}
	goleak.VerifyTestMain(m)
}
