package ledger_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/lockstepgo/lockstep/nodes/ledger"
)

// TestSQLSchemaVersionsOutOfRange (issue 16 item 5): a version in
// lockstep_ledger_meta that no code writes (below 1, above SchemaVersion,
// not an integer), or the ledger's tables without their version row, make
// NewSQL fail with an error matching ErrSchemaVersion and leave the file
// byte for byte as it was. Before, a text or real version failed with an
// untyped conversion error, and a missing row was taken for a new
// database and labelled current over whatever tables were there.
func TestSQLSchemaVersionsOutOfRange(t *testing.T) {
	for _, tc := range []struct {
		name string
		stmt string
	}{
		{"-1", `UPDATE lockstep_ledger_meta SET version = -1 WHERE name = 'ledger'`},
		{"0", `UPDATE lockstep_ledger_meta SET version = 0 WHERE name = 'ledger'`},
		{"newer", `UPDATE lockstep_ledger_meta SET version = ` + strconv.Itoa(ledger.SchemaVersion+1) + ` WHERE name = 'ledger'`},
		{"maximum int64", `UPDATE lockstep_ledger_meta SET version = 9223372036854775807 WHERE name = 'ledger'`},
		{"text", `UPDATE lockstep_ledger_meta SET version = 'two' WHERE name = 'ledger'`},
		{"real", `UPDATE lockstep_ledger_meta SET version = 1.5 WHERE name = 'ledger'`},
		{"blob", `UPDATE lockstep_ledger_meta SET version = x'02' WHERE name = 'ledger'`},
		{"no version row", `DELETE FROM lockstep_ledger_meta WHERE name = 'ledger'`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "l.db")
			db := openDB(t, path)
			if _, err := ledger.NewSQL(ctx, db, ledger.Options{}); err != nil {
				t.Fatal(err)
			}
			if _, err := db.Exec(tc.stmt); err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			before, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			db = openDB(t, path)
			_, err = ledger.NewSQL(ctx, db, ledger.Options{})
			if !errors.Is(err, ledger.ErrSchemaVersion) {
				t.Fatalf("NewSQL: %v, want ErrSchemaVersion", err)
			}
			t.Logf("NewSQL: %v", err)
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			if after, err := os.ReadFile(path); err != nil || !bytes.Equal(before, after) {
				t.Errorf("the refused NewSQL changed the file (%v)", err)
			}
		})
	}
}
