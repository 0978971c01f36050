package lockstep_test

import (
	"os"
	"testing"

	"github.com/lockstepgo/lockstep/internal/systemtest"
	"go.uber.org/goleak"
)

// TestMain runs child roles for the system tests still at the root (the
// test binary re-runs itself with LOCKSTEP_CHILD set) and the soak
// (LOCKSTEP_SOAK_CHILD), and checks for goroutine leaks otherwise.
func TestMain(m *testing.M) {
	if cfg := os.Getenv(soakChildEnv); cfg != "" {
		os.Exit(soakChild(cfg))
	}
	systemtest.RunChild(map[string]func() int{
		freezeRole: runFreezeChild,
		fenceRole:  runFenceChild,
		w6Role:     runW6Child,
	})
	goleak.VerifyTestMain(m)
}
