package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// helperEnv selects a child-process role when the test binary re-runs
// itself (the fencing and migration tests).
const helperEnv = "LOCKSTEP_POSTGRES_HELPER"

// testURL returns the URL of the test database (LOCKSTEP_POSTGRES_URL).
// Without one the test is skipped, with one line saying how to run it,
// except under CI=true, where a missing database fails the test.
func testURL(t testing.TB) string {
	t.Helper()
	url := os.Getenv("LOCKSTEP_POSTGRES_URL")
	if url == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("LOCKSTEP_POSTGRES_URL is not set and CI=true: .ci/run starts a cluster and sets it")
		}
		t.Skip("LOCKSTEP_POSTGRES_URL not set: the Postgres tests skip (eval \"$(.ci/postgres.sh start /tmp/lockstep-pg)\" starts a cluster)")
	}
	return url
}

// newSchemaName returns a schema name no other test uses.
func newSchemaName() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "t_" + hex.EncodeToString(b[:])
}

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
