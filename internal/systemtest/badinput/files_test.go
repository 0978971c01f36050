package badinput_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/internal/systemtest"
	"github.com/lockstepgo/lockstep/nodes/ledger"
)

// TestBadInputDatabaseFiles (issue 16 items 5 and 9, G12): a database
// file the application opens (saver, ledger and approval store, as the
// soak's payments agent does) whose stored schema versions are ones no
// code writes, or with another database's -wal beside it, is refused with
// the typed error of the part that cannot use it, without a panic, and
// every file is left byte for byte as it was (the -shm, SQLite's index of
// the -wal, may be rebuilt).
func TestBadInputDatabaseFiles(t *testing.T) {
	edit := func(stmts ...string) func(t *testing.T, path string) {
		return func(t *testing.T, path string) {
			db, err := sql.Open("sqlite3", path)
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
	}
	for _, tc := range []struct {
		name   string
		tamper func(t *testing.T, path string)
		want   error
	}{
		{"saver schema version -1", edit("PRAGMA user_version = -1"), sqlite.ErrSchemaInvalid},
		{"saver schema version 0 beside its tables", edit("PRAGMA user_version = 0"), sqlite.ErrSchemaInvalid},
		{"saver schema version newer", edit("PRAGMA user_version = 99"), sqlite.ErrSchemaTooNew},
		{"file identity changed", edit("PRAGMA application_id = 7"), sqlite.ErrSchemaInvalid},
		{"approval schema version -1", edit("DELETE FROM approval_schema", "INSERT INTO approval_schema (version) VALUES (-1)"), approval.ErrSchemaVersion},
		{"approval schema version 0", edit("DELETE FROM approval_schema", "INSERT INTO approval_schema (version) VALUES (0)"), approval.ErrSchemaVersion},
		{"approval schema version newer", edit("INSERT INTO approval_schema (version) VALUES (" + strconv.Itoa(approval.SchemaVersion+1) + ")"), approval.ErrSchemaVersion},
		{"ledger schema version -1", edit("UPDATE lockstep_ledger_meta SET version = -1"), ledger.ErrSchemaVersion},
		{"ledger schema version text", edit("UPDATE lockstep_ledger_meta SET version = 'two'"), ledger.ErrSchemaVersion},
		{"ledger schema version newer", edit("UPDATE lockstep_ledger_meta SET version = 99"), ledger.ErrSchemaVersion},
		{"ledger schema version missing", edit("DELETE FROM lockstep_ledger_meta"), ledger.ErrSchemaVersion},
		{"another database's -wal", func(t *testing.T, path string) {
			// Another payments database, open and written to, as an
			// operator would find it: its -wal copied beside this file.
			f := newBadFixture(t)
			wal, err := os.ReadFile(f.app.Saver.Path() + "-wal")
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path+"-wal", wal, 0o600); err != nil {
				t.Fatal(err)
			}
		}, sqlite.ErrForeignWAL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			cfg := systemtest.SoakAppConfig{DB: filepath.Join(dir, "bad.db"), Provider: filepath.Join(t.TempDir(), "provider.db")}
			app, err := systemtest.OpenSoakApp(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := app.Runner.Invoke(ctx, "pay-wait", systemtest.SoakUser("pay-wait")); err != nil {
				t.Fatal(err)
			}
			if err := app.Close(); err != nil {
				t.Fatal(err)
			}
			tc.tamper(t, cfg.DB)
			before := badFiles(t, dir)
			app, err = openSoakAppNoPanic(t, ctx, cfg)
			if err == nil {
				app.Close()
				t.Fatal("the application opened the file")
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("open: %v (%T), want it to match %v", err, err, tc.want)
			}
			if diff := badFilesDiff(before, badFiles(t, dir)); diff != "" {
				t.Errorf("the refused open changed the files: %s", diff)
			}
		})
	}
}

func openSoakAppNoPanic(t *testing.T, ctx context.Context, cfg systemtest.SoakAppConfig) (app *systemtest.SoakApp, err error) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("opening panicked: %v", p)
		}
	}()
	return systemtest.OpenSoakApp(ctx, cfg)
}

// badFiles returns the contents of the files in dir, by name.
func badFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string][]byte{}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		m[e.Name()] = b
	}
	return m
}

// badFilesDiff names the first file that differs between a and b, apart
// from the -shm, which any reader may rebuild.
func badFilesDiff(a, b map[string][]byte) string {
	for _, m := range []map[string][]byte{a, b} {
		for name := range m {
			if strings.HasSuffix(name, "-shm") {
				continue
			}
			x, inA := a[name]
			y, inB := b[name]
			switch {
			case !inA:
				return name + " appeared"
			case !inB:
				return name + " is gone"
			case !bytes.Equal(x, y):
				return name + " changed"
			}
		}
	}
	return ""
}
