package nodes_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(crashHelperEnv) != "" {
		os.Exit(crashHelperMain())
	}
	if os.Getenv(successorChildEnv) != "" {
		os.Exit(successorChild())
	}
	goleak.VerifyTestMain(m)
}
