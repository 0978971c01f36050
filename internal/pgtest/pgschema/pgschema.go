// Package pgschema gives a test on PostgreSQL a schema of its own,
// created through package postgres and dropped when the test ends. It is
// test support: only tests import it (package postgres's own tests
// cannot, since it imports postgres).
package pgschema

import (
	"context"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/internal/pgtest"
	"github.com/lockstepgo/lockstep/postgres"
)

// New returns the test database's URL (as pgtest.URL does, skipping the test
// without one) and a schema no other test uses (named prefix and random
// digits), created at the current version now and dropped, with
// everything in it, once the test's other cleanups have run (the pools
// opened on it closed). It fails the test (t.Fatal) when the schema cannot
// be created.
func New(t testing.TB, prefix string) (url, schema string) {
	t.Helper()
	url = pgtest.URL(t)
	schema = pgtest.SchemaName(prefix)
	db, err := postgres.Open(context.Background(), url, postgres.Config{Schema: schema, MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := db.Pool().Exec(ctx, `DROP SCHEMA IF EXISTS "`+schema+`" CASCADE`); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
		db.Close()
	})
	return url, schema
}
