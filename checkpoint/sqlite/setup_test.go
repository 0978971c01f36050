package sqlite

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// setupPoints are the hook points of creating and setting up a file, in
// order.
var setupPoints = []string{
	"sqlite.create.identity", "sqlite.create.wal",
	"sqlite.setup.begin", "sqlite.setup.schema1", "sqlite.setup.schema2", "sqlite.setup.schema3", "sqlite.setup.schema4", "sqlite.setup.schema5",
	"sqlite.setup.schema6", "sqlite.setup.schema7",
	"sqlite.setup.beforeCommit",
	"sqlite.setup.afterCommit",
}

// TestSetUpKilled (issue 15 item 6): a process killed at any point of
// creating and setting up a new file leaves either a file with no
// lockstep tables, which OpenExisting (the CLI's open) calls so, naming
// a creation cut short, and leaves byte for byte as it is, or a current
// lockstep database; never one that reads as written by an older
// lockstep (before, creating the tables and migrating them were two
// transactions, and a kill between them left a schema-1 file). The next
// Open then sets the file up: current schema, an identity, and a thread
// round-trips.
func TestSetUpKilled(t *testing.T) {
	for i, point := range setupPoints {
		t.Run(point, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "new.db")
			killSetUp(t, path, point)
			before := dirFiles(t, filepath.Dir(path))
			s, err := OpenExisting(path, Config{})
			committed := i == len(setupPoints)-1
			switch {
			case committed && err != nil:
				t.Fatalf("OpenExisting after the set-up committed: %v", err)
			case committed:
				closeChecked(t, s)
			case err == nil:
				s.Close()
				t.Fatal("OpenExisting opened a file whose set-up was cut short")
			case errors.Is(err, ErrSchemaTooOld) || !errors.Is(err, ErrNotLockstep):
				t.Fatalf("OpenExisting: %v, want ErrNotLockstep (no tables yet) and not ErrSchemaTooOld", err)
			default:
				t.Logf("OpenExisting: %v", err)
				if diff, ok := sameFiles(before, dirFiles(t, filepath.Dir(path))); !ok {
					t.Errorf("OpenExisting changed the files: %s", diff)
				}
			}
			s = openAt(t, path, Config{})
			checkSetUp(t, s)
			putLine(t, s, "t", 2)
			if got := listIDs(t, s, "t"); len(got) != 2 {
				t.Errorf("%d checkpoints, want 2", len(got))
			}
		})
	}
}

// TestMigrationKilled (issue 15 item 6): a schema-1 file whose migration
// is killed half way stays a schema-1 file, which OpenExisting rightly
// calls older, unchanged; the next Open migrates it.
func TestMigrationKilled(t *testing.T) {
	path := copySchema1(t)
	before := fileBytes(t, path)
	killSetUp(t, path, "sqlite.setup.schema2")
	if _, err := OpenExisting(path, Config{}); !errors.Is(err, ErrSchemaTooOld) {
		t.Fatalf("OpenExisting: %v, want ErrSchemaTooOld", err)
	}
	if !bytes.Equal(before, fileBytes(t, path)) {
		t.Error("the killed migration changed the schema-1 file")
	}
	s := openAt(t, path, Config{})
	checkSetUp(t, s)
}

// killSetUp runs a child that opens path and is killed at point.
func killSetUp(t *testing.T, path, point string) {
	t.Helper()
	c, sc := startChild(t, "setup", envDB+"="+path, envKillPoint+"="+point)
	if !c.wait(t, sc) {
		t.Fatalf("the child was not killed at %s\n%s", point, c.stderr.String())
	}
}

// checkSetUp checks that s's file is a current lockstep database with an
// identity.
func checkSetUp(t *testing.T, s *Saver) {
	t.Helper()
	f, err := readSchema(t.Context(), s.DB())
	if err != nil {
		t.Fatal(err)
	}
	if f.version != schemaVersion || !f.lockstep() || f.appID == 0 || !f.hasMarker || f.marker != f.appID {
		t.Errorf("after Open: schema %d, lockstep tables %v, identity %08x and %08x (marked %v); want schema %d and one identity",
			f.version, f.lockstep(), f.appID, f.marker, f.hasMarker, schemaVersion)
	}
	integrityOK(t, s.DB())
}

// helperSetUp is the child of the set-up kill tests: it opens envDB and
// kills itself at the hook point envKillPoint.
func helperSetUp() error {
	point := os.Getenv(envKillPoint)
	s, err := Open(os.Getenv(envDB), Config{Hook: func(p string) {
		if p == point {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}})
	if err != nil {
		return err
	}
	return s.Close()
}
