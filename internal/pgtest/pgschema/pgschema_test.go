package pgschema_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/lockstepgo/lockstep/internal/pgtest/pgschema"
	"github.com/lockstepgo/lockstep/postgres"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestNew: the schema exists at the current version while the test
// runs (skipped without a database).
func TestNew(t *testing.T) {
	url, schema := pgschema.New(t, "pgschema_")
	db, err := postgres.OpenExisting(t.Context(), url, postgres.Config{Schema: schema, MaxConns: 1})
	if err != nil {
		t.Fatalf("the schema New returned (%s) does not open as lockstep's: %v", schema, err)
	}
	db.Close()
}
