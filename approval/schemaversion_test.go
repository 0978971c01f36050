package approval_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/lockstepgo/lockstep/approval"
)

// TestSQLStoreSchemaVersionsOutOfRange (issue 16 item 5): approval_schema
// rows no build writes (a version newer than this build's, 0, a negative
// one, a gap) make OpenSQLStore fail with an error matching
// ErrSchemaVersion, without a panic, and leave the file byte for byte as
// it was. Before, version -1 panicked with an index out of range.
func TestSQLStoreSchemaVersionsOutOfRange(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stmts []string
	}{
		{"-1", []string{`DELETE FROM approval_schema`, `INSERT INTO approval_schema (version) VALUES (-1)`}},
		{"-1 beside 1", []string{`INSERT INTO approval_schema (version) VALUES (-1)`}},
		{"0", []string{`DELETE FROM approval_schema`, `INSERT INTO approval_schema (version) VALUES (0)`}},
		{"minimum int64", []string{`DELETE FROM approval_schema`, `INSERT INTO approval_schema (version) VALUES (-9223372036854775808)`}},
		{"newer", []string{fmt.Sprintf(`INSERT INTO approval_schema (version) VALUES (%d)`, approval.SchemaVersion+1)}},
		{"maximum int64", []string{`INSERT INTO approval_schema (version) VALUES (9223372036854775807)`}},
		{"a gap", []string{`DELETE FROM approval_schema`, fmt.Sprintf(`INSERT INTO approval_schema (version) VALUES (%d)`, approval.SchemaVersion)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "a.db")
			db := openDB(t, path)
			openSQLStore(t, db, nil)
			for _, q := range tc.stmts {
				if _, err := db.Exec(q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			before, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			db = openDB(t, path)
			_, err = openNoPanic(t, ctx, db)
			if !errors.Is(err, approval.ErrSchemaVersion) {
				t.Fatalf("OpenSQLStore: %v, want ErrSchemaVersion", err)
			}
			t.Logf("OpenSQLStore: %v", err)
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			if after, err := os.ReadFile(path); err != nil || !bytes.Equal(before, after) {
				t.Errorf("the refused open changed the file (%v)", err)
			}
		})
	}
}

func openNoPanic(t *testing.T, ctx context.Context, db *sql.DB) (s *approval.SQLStore, err error) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("OpenSQLStore panicked: %v", p)
		}
	}()
	return approval.OpenSQLStore(ctx, db, nil)
}
