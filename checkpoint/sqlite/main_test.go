package sqlite

import (
	"database/sql"
	"os"
	"path/filepath"
	"sync"
	"testing"

	sqlite3 "github.com/mattn/go-sqlite3"
	"go.uber.org/goleak"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/internal/faultdb"
)

// helperEnv selects a child-process role when the test binary re-runs
// itself (crash, load and single-writer tests).
const helperEnv = "LOCKSTEP_SQLITE_HELPER"

func TestMain(m *testing.M) {
	if role := os.Getenv(helperEnv); role != "" {
		os.Exit(runHelper(role))
	}
	goleak.VerifyTestMain(m)
}

// faultDriverName is the name the fault-injecting driver is registered
// under, once, for the tests that use it.
const faultDriverName = "sqlite3_fault"

var (
	faultOnce sync.Once
	faultDrv  *faultdb.Driver
)

// faults returns the registered fault driver, reset. Tests that use it
// must not run in parallel with each other.
func faults(t *testing.T) *faultdb.Driver {
	t.Helper()
	faultOnce.Do(func() {
		faultDrv = faultdb.New(&sqlite3.SQLiteDriver{})
		sql.Register(faultDriverName, faultDrv)
	})
	faultDrv.Reset()
	t.Cleanup(faultDrv.Reset)
	return faultDrv
}

// openTemp opens a saver on a new file under t.TempDir(), closed (and
// checked for leaked connections) at cleanup.
func openTemp(t testing.TB, cfg Config) *Saver {
	t.Helper()
	return openAt(t, filepath.Join(t.TempDir(), "lockstep.db"), cfg)
}

func openAt(t testing.TB, path string, cfg Config) *Saver {
	t.Helper()
	s, err := Open(path, cfg)
	if err != nil {
		t.Fatalf("Open(%q): %v", path, err)
	}
	t.Cleanup(func() { closeChecked(t, s) })
	return s
}

// closeChecked closes s and checks that no connection stays open (R49).
func closeChecked(t testing.TB, s *Saver) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if n := s.DB().Stats().OpenConnections; n != 0 {
		t.Errorf("after Close: %d open connections, want 0", n)
	}
}

var _ checkpoint.Saver = (*Saver)(nil)
