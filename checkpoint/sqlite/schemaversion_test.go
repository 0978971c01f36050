package sqlite

import (
	"database/sql"
	"errors"
	"path/filepath"
	"strconv"
	"testing"
)

// editDB runs statements on the file at path through a plain connection,
// as the sqlite3 shell would, and closes it (which leaves no -wal).
func editDB(t *testing.T, path string, stmts ...string) {
	t.Helper()
	db, err := sql.Open(driverName, path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// TestSchemaVersionsOutOfRange (issue 16 item 5): a stored schema version
// no lockstep writes, or one that does not match the tables beside it, is
// a typed error from Open and OpenExisting, and the file stays byte for
// byte as it was. Before, user_version -1, or 0 beside lockstep's tables,
// failed with an untyped "table threads already exists" from the first
// migration.
func TestSchemaVersionsOutOfRange(t *testing.T) {
	lockstepDB := func(t *testing.T, stmts ...string) string {
		path := filepath.Join(t.TempDir(), "v.db")
		s := openAt(t, path, Config{})
		putLine(t, s, "t", 2)
		closeChecked(t, s)
		editDB(t, path, stmts...)
		return path
	}
	for _, tc := range []struct {
		name     string
		file     func(t *testing.T) string
		open     error // what Open's error matches
		existing error // what OpenExisting's error matches
	}{
		{"user_version -1", func(t *testing.T) string { return lockstepDB(t, "PRAGMA user_version = -1") }, ErrSchemaInvalid, ErrSchemaInvalid},
		{"user_version -2147483648", func(t *testing.T) string { return lockstepDB(t, "PRAGMA user_version = -2147483648") }, ErrSchemaInvalid, ErrSchemaInvalid},
		{"user_version 0 beside lockstep's tables", func(t *testing.T) string { return lockstepDB(t, "PRAGMA user_version = 0") }, ErrSchemaInvalid, ErrSchemaInvalid},
		{"user_version 1 on the current tables", func(t *testing.T) string { return lockstepDB(t, "PRAGMA user_version = 1") }, ErrSchemaInvalid, ErrSchemaInvalid},
		{"user_version newer", func(t *testing.T) string {
			return lockstepDB(t, "PRAGMA user_version = "+strconv.Itoa(schemaVersion+1))
		}, ErrSchemaTooNew, ErrSchemaTooNew},
		{"user_version 2147483647", func(t *testing.T) string { return lockstepDB(t, "PRAGMA user_version = 2147483647") }, ErrSchemaTooNew, ErrSchemaTooNew},
		{"the current user_version on schema 1's tables", func(t *testing.T) string {
			path := copySchema1(t)
			editDB(t, path, "PRAGMA user_version = "+strconv.Itoa(schemaVersion))
			return path
		}, ErrSchemaInvalid, ErrSchemaInvalid},
		{"user_version 0 on schema 1's tables", func(t *testing.T) string {
			path := copySchema1(t)
			editDB(t, path, "PRAGMA user_version = 0")
			return path
		}, ErrSchemaInvalid, ErrSchemaInvalid},
		{"another program's table named writes", func(t *testing.T) string {
			path := foreignDB(t, 0)
			editDB(t, path, "CREATE TABLE writes (x)")
			return path
		}, ErrNotLockstep, ErrNotLockstep},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.file(t)
			dir := filepath.Dir(path)
			before := dirFiles(t, dir)
			for _, open := range []struct {
				name string
				fn   func(string, Config) (*Saver, error)
				want error
			}{{"OpenExisting", OpenExisting, tc.existing}, {"Open", Open, tc.open}} {
				s, err := openNoPanicWith(t, open.fn, path)
				if err == nil {
					s.Close()
					t.Fatalf("%s succeeded", open.name)
				}
				var se *SchemaError
				if !errors.Is(err, open.want) || open.want != ErrNotLockstep && !errors.As(err, &se) {
					t.Fatalf("%s: %v (%T), want it to match %v", open.name, err, err, open.want)
				}
				if open.want == ErrSchemaInvalid && (errors.Is(err, ErrSchemaTooOld) || errors.Is(err, ErrSchemaTooNew)) {
					t.Errorf("%s: %v also matches ErrSchemaTooOld or ErrSchemaTooNew", open.name, err)
				}
				t.Logf("%s: %v", open.name, err)
				if diff, ok := sameFiles(before, dirFiles(t, dir)); !ok {
					t.Fatalf("%s changed the files: %s", open.name, diff)
				}
			}
		})
	}
}

// openNoPanicWith calls open and turns a panic into a test failure.
func openNoPanicWith(t *testing.T, open func(string, Config) (*Saver, error), path string) (s *Saver, err error) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("Open(%q) panicked: %v", path, p)
		}
	}()
	return open(path, Config{})
}
