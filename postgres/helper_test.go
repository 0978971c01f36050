package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockstepgo/lockstep/internal/pgtest"
)

// helperEnv selects a child-process role when the test binary re-runs
// itself (the fencing and migration tests).
const helperEnv = "LOCKSTEP_POSTGRES_HELPER"

// testURL is the test database's URL, with the skip rule of every
// Postgres test (pgtest.URL); newSchemaName a schema name no other test
// uses.
var testURL = pgtest.URL

func newSchemaName() string { return pgtest.SchemaName("t_") }

// dropSchema removes a test's schema with everything in it.
func dropSchema(t testing.TB, url, schema string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Errorf("drop schema %s: %v", schema, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
		t.Errorf("drop schema %s: %v", schema, err)
	}
}

// openTest opens a DB on a schema of its own, dropped at cleanup.
func openTest(t testing.TB, cfg Config) *DB {
	t.Helper()
	url := testURL(t)
	if cfg.Schema == "" {
		cfg.Schema = newSchemaName()
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = 4
	}
	db, err := Open(context.Background(), url, cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		db.Close()
		dropSchema(t, url, cfg.Schema)
	})
	return db
}

// runHelper runs a child-process role; it returns the exit code.
func runHelper(role string) int {
	switch role {
	case "open":
		return helperOpen()
	case "load":
		return helperLoad()
	}
	return 3
}
