package sqlite

import (
	"context"
	"database/sql"
	"fmt"
)

// migration moves the schema from version-1 to version: stmts, then data
// (rows rewritten in Go, where the checksums are computed), then post.
type migration struct {
	version int
	stmts   []string
	data    func(ctx context.Context, conn *sql.Conn) error
	post    []string
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
	// Version 2: one row per checkpoint holds everything a Put writes
	// (its changed channels and the task writes that produced it), the
	// head is the largest checkpoint ID, and the threads row keeps only
	// the lease. blobs goes away.
	{version: 2, stmts: []string{
		// A rowid table: rows of a few KiB stay on their leaf page (a
		// WITHOUT ROWID table spills rows above ~1 KiB to overflow pages),
		// and inserts in ID order append to the right edge of the table.
		`CREATE TABLE checkpoints_v2 (
			thread_id            TEXT NOT NULL,
			checkpoint_ns        TEXT NOT NULL DEFAULT '',
			checkpoint_id        TEXT NOT NULL,
			parent_checkpoint_id TEXT,
			step                 INTEGER NOT NULL,
			source               TEXT NOT NULL,
			created_at           TEXT NOT NULL,
			metadata             TEXT NOT NULL,
			versions             TEXT NOT NULL,
			channels             TEXT NOT NULL,
			task_writes          TEXT,
			mark                 TEXT NOT NULL DEFAULT '',
			pruned               INTEGER NOT NULL DEFAULT 0,
			crc                  INTEGER NOT NULL,
			PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
		)`,
		`CREATE TABLE threads_v2 (
			thread_id     TEXT NOT NULL,
			checkpoint_ns TEXT NOT NULL DEFAULT '',
			lease_owner   TEXT,
			lease_until   INTEGER,
			updated_at    TEXT,
			PRIMARY KEY (thread_id, checkpoint_ns)
		) WITHOUT ROWID`,
	}, data: migrateRows1, post: []string{
		`DROP TABLE blobs`,
		`DROP TABLE checkpoints`,
		`DROP TABLE threads`,
		`ALTER TABLE checkpoints_v2 RENAME TO checkpoints`,
		`ALTER TABLE threads_v2 RENAME TO threads`,
		// Every thread's head, for people using the sqlite3 shell (and
		// Threads): the largest checkpoint ID of each (thread, namespace),
		// one primary-key seek per thread.
		`CREATE VIEW thread_heads AS
		SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id, c.step, c.source, c.created_at,
			max(coalesce(t.updated_at, ''), c.created_at) AS updated_at, t.lease_owner, t.lease_until, c.metadata, c.versions
		FROM threads t
		JOIN checkpoints c ON c.thread_id = t.thread_id AND c.checkpoint_ns = t.checkpoint_ns
			AND c.checkpoint_id = (SELECT max(m.checkpoint_id) FROM checkpoints m
				WHERE m.thread_id = t.thread_id AND m.checkpoint_ns = t.checkpoint_ns)`,
	}},
	// Version 3: the threads row records the lease's runner and epoch
	// (checkpoint.Lease): a thread leased under schema 2 has epoch 0 until
	// its next claim, and no runner. The view shows both.
	{version: 3, stmts: []string{
		`ALTER TABLE threads ADD COLUMN lease_runner TEXT`,
		`ALTER TABLE threads ADD COLUMN lease_epoch INTEGER NOT NULL DEFAULT 0`,
		`DROP VIEW thread_heads`,
		`CREATE VIEW thread_heads AS
		SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id, c.step, c.source, c.created_at,
			max(coalesce(t.updated_at, ''), c.created_at) AS updated_at, t.lease_owner, t.lease_until, c.metadata, c.versions,
			t.lease_runner, t.lease_epoch
		FROM threads t
		JOIN checkpoints c ON c.thread_id = t.thread_id AND c.checkpoint_ns = t.checkpoint_ns
			AND c.checkpoint_id = (SELECT max(m.checkpoint_id) FROM checkpoints m
				WHERE m.thread_id = t.thread_id AND m.checkpoint_ns = t.checkpoint_ns)`,
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
	if m.data != nil {
		if err := m.data(ctx, conn); err != nil {
			return fmt.Errorf("checkpoint/sqlite: %q: migrate to schema %d: %w", path, m.version, err)
		}
	}
	for _, s := range m.post {
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
