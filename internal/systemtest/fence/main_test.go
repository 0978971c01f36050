package fence_test

import (
	"testing"

	"github.com/lockstepgo/lockstep/internal/systemtest"
	"go.uber.org/goleak"
)

// TestMain runs the fence test's child runner (the test binary re-runs
// itself with LOCKSTEP_CHILD set) and checks for goroutine leaks
// otherwise.
func TestMain(m *testing.M) {
	systemtest.RunChild(map[string]func() int{fenceRole: runFenceChild})
	goleak.VerifyTestMain(m)
}
