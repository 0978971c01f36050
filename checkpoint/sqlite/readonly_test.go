package sqlite

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	sqlite3 "github.com/mattn/go-sqlite3"

	"github.com/lockstepgo/lockstep/internal/faultdb"
)

// dirNames lists dir's entries.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// TestOpenReadOnly: Open in a place this process may not write fails with
// ErrReadOnly (and fs.ErrPermission) saying what it needs, before SQLite
// opens anything, and creates or changes nothing; before, a new file in a
// read-only directory said "unable to open database file: no such file or
// directory" and an existing read-only file "attempt to write a readonly
// database". Root ignores the mode bits, so as root it skips; .ci/run
// runs it again as nobody.
func TestOpenReadOnly(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root ignores file modes; .ci/run runs this test as nobody")
	}
	dir := t.TempDir()
	old := filepath.Join(dir, "old.db")
	s, err := Open(old, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	before := fileBytes(t, old)
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T)
		path  string
	}{
		{"new file, read-only directory", func(t *testing.T) { chmod(t, dir, 0o555) }, filepath.Join(dir, "new.db")},
		{"existing file, read-only", func(t *testing.T) { chmod(t, old, 0o444) }, old},
		{"existing file, read-only directory and file", func(t *testing.T) { chmod(t, old, 0o444); chmod(t, dir, 0o555) }, old},
		// SQLite must create the -wal and -shm beside the file: before,
		// "attempt to write a readonly database", untyped.
		{"existing file, read-only directory", func(t *testing.T) { chmod(t, dir, 0o555) }, old},
	} {
		t.Run(tc.name, func(t *testing.T) {
			names := dirNames(t, dir)
			tc.setup(t)
			s, err := Open(tc.path, Config{})
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded")
			}
			if !errors.Is(err, ErrReadOnly) || !errors.Is(err, fs.ErrPermission) {
				t.Fatalf("Open: %v, want ErrReadOnly and fs.ErrPermission", err)
			}
			chmod(t, dir, 0o755)
			if got := dirNames(t, dir); !slices.Equal(got, names) {
				t.Errorf("directory now holds %v, before %v", got, names)
			}
			if !slices.Equal(fileBytes(t, old), before) {
				t.Error("the existing database changed")
			}
		})
	}
}

// TestOpenReadOnlySidecars (issue 16 item 6): Open of a database whose
// -wal or -shm this process may not write (another Saver has the database
// open, so they exist) fails with ErrReadOnly and fs.ErrPermission naming
// the file, and changes nothing; before, SQLite opened the database
// read-only and the first write said "attempt to write a readonly
// database". Root ignores the modes; .ci/run runs it again as nobody.
func TestOpenReadOnlySidecars(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root ignores file modes; .ci/run runs this test as nobody")
	}
	for _, sfx := range []string{"-wal", "-shm"} {
		t.Run(sfx, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "x.db")
			s1 := openAt(t, path, Config{})
			putLine(t, s1, "t", 2)
			chmod(t, path+sfx, 0o444)
			before := dirFiles(t, dir)
			s, err := Open(path, Config{})
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded")
			}
			if !errors.Is(err, ErrReadOnly) || !errors.Is(err, fs.ErrPermission) || !strings.Contains(err.Error(), sfx) {
				t.Fatalf("Open: %v, want ErrReadOnly and fs.ErrPermission naming %s", err, sfx)
			}
			t.Logf("Open: %v", err)
			if diff, ok := sameFiles(before, dirFiles(t, dir)); !ok {
				t.Errorf("Open changed the files: %s", diff)
			}
		})
	}
}

// TestOpenReadOnlyFromSQLite (issue 16 item 6): when SQLite itself
// refuses to write (SQLITE_READONLY) in a way the checks before it did not
// see, Open fails with ErrReadOnly wrapping the driver's error, and a
// later write with a *StoreError matching ErrReadOnly. The refusals come
// from the fault-injecting driver.
func TestOpenReadOnlyFromSQLite(t *testing.T) {
	drv := faults(t)
	drv.Arm(faultdb.Fault{Op: faultdb.OpExec, Match: "CREATE TABLE threads", Err: sqliteErr(sqlite3.ErrReadonly)})
	path := filepath.Join(t.TempDir(), "r.db")
	s, err := Open(path, Config{DriverName: faultDriverName})
	if err == nil {
		s.Close()
		t.Fatal("Open succeeded through SQLITE_READONLY")
	}
	var se sqlite3.Error
	if !errors.Is(err, ErrReadOnly) || !errors.As(err, &se) || se.Code != sqlite3.ErrReadonly {
		t.Fatalf("Open: %v, want ErrReadOnly wrapping SQLITE_READONLY", err)
	}
	drv.Reset()
	s = openAt(t, path, Config{DriverName: faultDriverName})
	l := putLine(t, s, "t", 1)
	drv.Arm(faultdb.Fault{Op: faultdb.OpExec, Match: "INSERT INTO checkpoints", Err: sqliteErr(sqlite3.ErrReadonly)})
	if err := s.Put(t.Context(), l.next()); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Put: %v, want ErrReadOnly", err)
	}
}

// chmod sets a mode and, at the end of the test, makes it writable again
// so that TempDir can be removed.
func chmod(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(path, mode|0o700) })
}

// TestOpenInAMissingDirectory: a path whose directory does not exist fails
// naming the path and fs.ErrNotExist, not ErrReadOnly, and creates nothing.
func TestOpenInAMissingDirectory(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "missing", "x.db")
	s, err := Open(path, Config{})
	if err == nil {
		s.Close()
		t.Fatal("Open succeeded")
	}
	if errors.Is(err, ErrReadOnly) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open: %v, want fs.ErrNotExist and not ErrReadOnly", err)
	}
	if got := dirNames(t, dir); len(got) != 0 {
		t.Errorf("directory now holds %v", got)
	}
}
