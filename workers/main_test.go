package workers_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs the worker processes of the multi-process tests (see
// fleet_test.go) when the environment names a role, the tests otherwise.
func TestMain(m *testing.M) {
	if role := os.Getenv(envChild); role != "" {
		os.Exit(runFleetChild(role))
	}
	goleak.VerifyTestMain(m)
}
