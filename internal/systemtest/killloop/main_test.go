package killloop_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/lockstepgo/lockstep/internal/systemtest"
)

// TestMain runs the kill loop's child, one of the examples' programs (the
// test binary re-runs itself with LOCKSTEP_CHILD set), and checks for
// goroutine leaks otherwise.
func TestMain(m *testing.M) {
	systemtest.RunChild(map[string]func() int{killLoopRole: runKillLoopChild})
	goleak.VerifyTestMain(m)
}
