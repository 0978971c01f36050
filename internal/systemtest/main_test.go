package systemtest_test

import (
	"testing"

	"github.com/lockstepgo/lockstep/internal/systemtest"
	"go.uber.org/goleak"
)

// roleExit is the status the test role "exit-7" exits with.
const roleExit = 7

// TestMain runs the harness's own test role (the test binary re-runs
// itself with LOCKSTEP_CHILD set) and checks for goroutine leaks
// otherwise.
func TestMain(m *testing.M) {
	systemtest.RunChild(map[string]func() int{"exit-7": func() int { return roleExit }})
	goleak.VerifyTestMain(m)
}
