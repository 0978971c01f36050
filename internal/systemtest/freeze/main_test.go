package freeze_test

import (
	"testing"

	"github.com/lockstepgo/lockstep/internal/systemtest"
	"go.uber.org/goleak"
)

// TestMain runs the freeze test's child runner (the test binary re-runs
// itself with LOCKSTEP_CHILD set) and checks for goroutine leaks
// otherwise.
func TestMain(m *testing.M) {
	systemtest.RunChild(map[string]func() int{freezeRole: runFreezeChild})
	goleak.VerifyTestMain(m)
}
