package lockstep_test

import (
	"testing"

	"github.com/lockstepgo/lockstep/internal/systemtest"
	"go.uber.org/goleak"
)

// TestMain runs the W6 benchmark's worker processes (the test binary
// re-runs itself with LOCKSTEP_CHILD set; bench_workers_test.go) and
// checks for goroutine leaks otherwise. The root package holds only the
// end-to-end example (graph_test.go) and the fixed benchmarks; the system
// tests live under internal/systemtest.
func TestMain(m *testing.M) {
	systemtest.RunChild(map[string]func() int{w6Role: runW6Child})
	goleak.VerifyTestMain(m)
}
