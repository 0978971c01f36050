package crash_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/lockstepgo/lockstep/internal/systemtest"
)

// TestMain runs the child roles of the crash tests (the test binary
// re-runs itself with LOCKSTEP_CHILD set) and checks for goroutine leaks
// otherwise.
func TestMain(m *testing.M) {
	systemtest.RunChild(map[string]func() int{
		"interrupt-then-die": func() int { return runChild("interrupt-then-die") },
		"runkey-then-die":    func() int { return runChild("runkey-then-die") },
		"resume-then-die":    func() int { return runChild("resume-then-die") },
		subgraphCrashRole:    runSubgraphCrashChild,
		branchRole:           runBranchChild,
		pgCommitRole:         runPGCommitChild,
	})
	goleak.VerifyTestMain(m)
}
