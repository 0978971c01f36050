package sqlite

import (
	"context"
	"database/sql"
	"fmt"
)

// migration moves the schema from version-1 to version.
type migration struct {
	version int
	stmts   []string
}

// migrations are applied in order, each in its own IMMEDIATE transaction
// together with the PRAGMA user_version that records it. They are never
// edited once released: a change is a new migration.
var migrations = []migration{
	{version: 1, stmts: []string{
		// One row per thread and namespace: the head checkpoint and the
		// lease of the runner that owns the thread.
		`CREATE TABLE threads (
			thread_id          TEXT NOT NULL,
			checkpoint_ns      TEXT NOT NULL DEFAULT '',
			head_checkpoint_id TEXT,
			step               INTEGER,
			source             TEXT,
			lease_owner        TEXT,
			lease_until        INTEGER,
			updated_at         TEXT,
			PRIMARY KEY (thread_id, checkpoint_ns)
		) WITHOUT ROWID`,
		`CREATE TABLE checkpoints (
			thread_id            TEXT NOT NULL,
			checkpoint_ns        TEXT NOT NULL DEFAULT '',
			checkpoint_id        TEXT NOT NULL,
			parent_checkpoint_id TEXT,
			step                 INTEGER NOT NULL,
			source               TEXT NOT NULL,
			created_at           TEXT NOT NULL,
			metadata             TEXT NOT NULL,
			versions             TEXT NOT NULL,
			mark                 TEXT NOT NULL DEFAULT '',
			crc                  INTEGER NOT NULL,
			PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
		) WITHOUT ROWID`,
		// blobs and writes keep a rowid: their values can be large, and a
		// rowid table keeps up to a page of payload inline where a
		// WITHOUT ROWID table spills rows above ~1 KiB to overflow pages.
		`CREATE TABLE blobs (
			thread_id     TEXT NOT NULL,
			checkpoint_ns TEXT NOT NULL DEFAULT '',
			channel       TEXT NOT NULL,
			version       TEXT NOT NULL,
			base          TEXT NOT NULL DEFAULT '',
			kind          TEXT NOT NULL CHECK (kind IN ('value', 'append')),
			value         TEXT NOT NULL,
			crc           INTEGER NOT NULL,
			PRIMARY KEY (thread_id, checkpoint_ns, channel, version)
		)`,
		`CREATE TABLE writes (
			thread_id     TEXT NOT NULL,
			checkpoint_ns TEXT NOT NULL DEFAULT '',
			checkpoint_id TEXT NOT NULL,
			task_id       TEXT NOT NULL,
			idx           INTEGER NOT NULL,
			channel       TEXT NOT NULL,
			value         TEXT NOT NULL,
			node          TEXT NOT NULL DEFAULT '',
			path          TEXT NOT NULL DEFAULT '',
			created_at    TEXT NOT NULL,
			crc           INTEGER NOT NULL,
			PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
		)`,
		// Interrupt writes only, in save order: the cross-thread inbox
		// (PendingInterrupts) walks this instead of every thread.
		`CREATE INDEX writes_interrupts ON writes (channel) WHERE channel = '__interrupt__'`,
	}},
}

// schemaVersion is the newest schema this code knows.
var schemaVersion = migrations[len(migrations)-1].version

// migrate brings the schema up to schemaVersion on conn. It is idempotent:
// on a current file it reads user_version and writes nothing. A file newer
// than the code gives a *SchemaError (the probe in Open catches that before
// any connection that could write is opened; this is the second line).
func migrate(ctx context.Context, conn *sql.Conn, path string) error {
	var v int
	if err := conn.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return fmt.Errorf("checkpoint/sqlite: %q: read schema version: %w", path, err)
	}
	if v == schemaVersion {
		return nil
	}
	if v > schemaVersion {
		return &SchemaError{Path: path, File: v, Code: schemaVersion}
	}
	for _, m := range migrations {
		if err := applyMigration(ctx, conn, path, m); err != nil {
			return err
		}
	}
	return nil
}

func applyMigration(ctx context.Context, conn *sql.Conn, path string, m migration) (err error) {
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("checkpoint/sqlite: %q: migrate to schema %d: %w", path, m.version, err)
	}
	defer func() {
		if err != nil {
			conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()
	// Read the version again under the write lock: another process may
	// have migrated since.
	var v int
	if err := conn.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return fmt.Errorf("checkpoint/sqlite: %q: read schema version: %w", path, err)
	}
	if v > schemaVersion {
		return &SchemaError{Path: path, File: v, Code: schemaVersion}
	}
	if v >= m.version {
		_, err := conn.ExecContext(ctx, "COMMIT")
		return err
	}
	for _, s := range m.stmts {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("checkpoint/sqlite: %q: migrate to schema %d: %w", path, m.version, err)
		}
	}
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", m.version)); err != nil {
		return fmt.Errorf("checkpoint/sqlite: %q: migrate to schema %d: %w", path, m.version, err)
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("checkpoint/sqlite: %q: migrate to schema %d: commit: %w", path, m.version, err)
	}
	return nil
}
