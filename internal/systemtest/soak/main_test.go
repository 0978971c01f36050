package soak_test

import (
	"os"
	"testing"

	"github.com/lockstepgo/lockstep/internal/systemtest"
	"go.uber.org/goleak"
)

// TestMain runs a soak process (the test binary re-runs itself with
// LOCKSTEP_CHILD set, its configuration in LOCKSTEP_SOAK_CHILD) and checks
// for goroutine leaks otherwise.
func TestMain(m *testing.M) {
	systemtest.RunChild(map[string]func() int{soakRole: func() int { return soakChild(os.Getenv(soakChildEnv)) }})
	goleak.VerifyTestMain(m)
}
