package lockstep_test

import (
	"testing"

	"github.com/lockstepgo/lockstep/internal/systemtest"
	"go.uber.org/goleak"
)

// TestMain runs child roles for the system tests still at the root (the
// test binary re-runs itself with LOCKSTEP_CHILD set) and checks for
// goroutine leaks otherwise.
func TestMain(m *testing.M) {
	systemtest.RunChild(map[string]func() int{
		w6Role: runW6Child,
	})
	goleak.VerifyTestMain(m)
}
