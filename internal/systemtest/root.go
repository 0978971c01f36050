package systemtest

import (
	"os"
	"path/filepath"
	"testing"
)

// ModuleRoot returns the directory of the module's go.mod, found from the
// working directory upwards (a package's test runs in its own
// directory). It fails the test (t.Fatal) when there is none.
func ModuleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory: run the test inside the module")
		}
		dir = parent
	}
}
