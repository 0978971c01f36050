package sqlite

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// migration moves the schema from version-1 to version: stmts, then data
// (rows rewritten in Go, where the checksums are computed), then post.
type migration struct {
	version int
	stmts   []string
	data    func(ctx context.Context, conn *sql.Conn) error
	post    []string
}

// migrations are applied in order, all of those a file needs in one
// IMMEDIATE transaction together with the PRAGMA user_version that records
// them (see setUp). They are never edited once released: a change is a new
// migration.
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
	// Version 4: a writes row's checksum covers its key (see
	// migrate_writes.go). The tables do not change.
	{version: 4, data: migrateWritesCRC},
	// Version 5: the topologies of the graphs that write to the file
	// (checkpoint.TopologyStore), one row per distinct topology, keyed by
	// its fingerprint. stored_seq orders the stores of one name (the
	// newest is the largest). The migration only adds the table, so that
	// OpenExisting reads a schema-4 file as it is (with no topologies).
	{version: 5, stmts: []string{
		`CREATE TABLE topologies (
			fingerprint TEXT NOT NULL PRIMARY KEY,
			name        TEXT NOT NULL,
			topology    TEXT NOT NULL,
			created_at  TEXT NOT NULL,
			stored_at   TEXT NOT NULL,
			stored_seq  INTEGER NOT NULL
		) WITHOUT ROWID`,
		`CREATE INDEX topologies_newest ON topologies (name, stored_seq)`,
	}},
	// Version 6: the work of a pool of workers (checkpoint.DueWork and
	// checkpoint.InputQueue). The threads row says when the thread is
	// due (due_at, unix nanoseconds on the saver's clock; NULL: not
	// marked), whose claim marked it (due_owner), the failed attempts
	// recorded, and the head its queued input is parked behind
	// (due_parked); queued_inputs holds the input queued per thread, in
	// input_id order. The partial indexes are what ClaimDue walks. The
	// migration only adds (columns no older reader reads, a table,
	// indexes), so that OpenExisting reads a schema-4 or schema-5 file as
	// it is (with no due work and no queued input).
	{version: 6, stmts: []string{
		`ALTER TABLE threads ADD COLUMN due_at INTEGER`,
		`ALTER TABLE threads ADD COLUMN due_owner TEXT`,
		`ALTER TABLE threads ADD COLUMN due_attempts INTEGER NOT NULL DEFAULT 0`,
		`ALTER TABLE threads ADD COLUMN due_parked TEXT`,
		`CREATE INDEX threads_due ON threads (due_at) WHERE due_at IS NOT NULL`,
		`CREATE INDEX threads_leased ON threads (lease_until) WHERE lease_owner IS NOT NULL`,
		`CREATE INDEX threads_parked ON threads (thread_id) WHERE due_parked IS NOT NULL`,
		`CREATE TABLE queued_inputs (
			input_id   INTEGER PRIMARY KEY AUTOINCREMENT,
			thread_id  TEXT NOT NULL,
			run_key    TEXT NOT NULL,
			input      TEXT NOT NULL,
			created_at TEXT NOT NULL,
			crc        INTEGER NOT NULL,
			UNIQUE (thread_id, run_key)
		)`,
		`CREATE INDEX queued_inputs_thread ON queued_inputs (thread_id, input_id)`,
	}},
	// Version 7: a checkpoints row lists, in links, the version each
	// append blob of its channels extends ({"<channel>":"<base>"}, '{}'
	// when it holds no append), so that a read walks an append chain
	// through a few bytes a row instead of parsing each row's channels
	// (see chainLinks). It is an index of channels, which stay the only
	// source of what a read returns: rows written before version 7 keep
	// links NULL and are walked through their channels, and a damaged
	// links can send the walk to the wrong rows, which costs the read its
	// fallback (rows by ID, through channels), never a wrong value. The
	// migration only adds the column, so that OpenExisting reads a
	// schema-4 to schema-6 file as it is.
	{version: 7, stmts: []string{
		`ALTER TABLE checkpoints ADD COLUMN links TEXT`,
	}},
}

// schemaVersion is the newest schema this code knows.
var schemaVersion = migrations[len(migrations)-1].version

// schemaNames are the tables, indexes and views lockstep's migrations
// create, by their sqlite_master names.
var schemaNames = []string{"threads", "checkpoints", "blobs", "writes", "writes_interrupts", "thread_heads", "checkpoints_v2", "threads_v2",
	"topologies", "topologies_newest",
	"threads_due", "threads_leased", "threads_parked", "queued_inputs", "queued_inputs_thread"}

// oldestReadable is the oldest schema OpenExisting opens without
// migrating. Every migration after it only adds tables, columns and
// indexes no reader of the older ones reads, and the saver treats a table
// or column the file does not have yet as empty (see topologySchema,
// dueSchema and linksSchema); a migration that changes what a reader of a table reads
// moves it up to its own version.
const oldestReadable = 4

// topologySchema is the first schema with the topologies table.
const topologySchema = 5

// dueSchema is the first schema with due work and queued input (the due
// columns of threads and the queued_inputs table).
const dueSchema = 6

// linksSchema is the first schema with the links column of checkpoints.
const linksSchema = 7

// fileTable is the table that holds the file's identity a second time
// (see assignFileID): one row, written once.
const fileTable = "lockstep_file"

// fileSchema is what set-up reads of a file before it changes anything.
type fileSchema struct {
	version int             // PRAGMA user_version
	names   map[string]bool // the schemaNames (and fileTable) the file has
	objects int             // tables, indexes and views of any name
	appID   uint32          // PRAGMA application_id: the file's identity (see assignFileID)
	// marker is the identity in fileTable; hasMarker is false when the
	// file has no such row (a file no lockstep of this version set up).
	marker    uint32
	hasMarker bool
}

// querier is a *sql.DB, *sql.Conn or *sql.Tx.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// readSchema reads the schema version, identity and lockstep objects of
// the file q is open on.
func readSchema(ctx context.Context, q querier) (fileSchema, error) {
	f := fileSchema{names: map[string]bool{}}
	var id int64
	if err := q.QueryRowContext(ctx, "SELECT (SELECT user_version FROM pragma_user_version), (SELECT application_id FROM pragma_application_id), (SELECT count(*) FROM sqlite_master)").Scan(&f.version, &id, &f.objects); err != nil {
		return f, fmt.Errorf("read the schema: %w", err)
	}
	f.appID = uint32(int32(id))
	rows, err := q.QueryContext(ctx, "SELECT name FROM sqlite_master WHERE name IN ('"+strings.Join(schemaNames, "', '")+"', '"+fileTable+"')")
	if err != nil {
		return f, fmt.Errorf("read the schema: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return f, fmt.Errorf("read the schema: %w", err)
		}
		f.names[name] = true
	}
	if err := rows.Err(); err != nil {
		return f, fmt.Errorf("read the schema: %w", err)
	}
	rows.Close()
	if f.names[fileTable] {
		var marker sql.NullInt64
		err := q.QueryRowContext(ctx, "SELECT id FROM "+fileTable+" LIMIT 1").Scan(&marker)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return f, fmt.Errorf("read the file's identity: %w", err)
		default:
			f.marker, f.hasMarker = uint32(int32(marker.Int64)), marker.Valid
		}
	}
	return f, nil
}

// identity returns the error that keeps the file from being used when its
// two copies of its identity differ (nil when they agree, or when there is
// only one): with frames of a -wal replayed, the pages of another
// database (*WALError, ErrForeignWAL); without, an application_id
// another program changed (*SchemaError, ErrSchemaInvalid).
func (f fileSchema) identity(path string, walFrames int) error {
	if !f.hasMarker || f.marker == f.appID {
		return nil
	}
	if walFrames > 0 {
		return &WALError{Path: path, Foreign: true, Reason: fmt.Sprintf("with the %d frames of the -wal replayed, the database header names the database %08x and its %s table %08x: the -wal holds pages of another database",
			walFrames, f.appID, fileTable, f.marker)}
	}
	return &SchemaError{Path: path, File: f.version, Code: schemaVersion, Invalid: fmt.Sprintf("its PRAGMA application_id is %08x and the identity lockstep gave it (table %s) %08x: another program changed application_id; set it back",
		f.appID, fileTable, f.marker)}
}

// lockstep reports whether the file has the two tables every schema has.
func (f fileSchema) lockstep() bool { return f.names["threads"] && f.names["checkpoints"] }

// unset reports whether the file has no schema yet: no table but, for one
// whose creation was cut short, fileTable (see create).
func (f fileSchema) unset() bool {
	return f.version == 0 && (f.objects == 0 || f.objects == 1 && f.names[fileTable])
}

// check returns the error that keeps set-up from using the file at path
// (nil when set-up may bring it to schemaVersion, or it is there), without
// changing anything: a version newer than the code's (*SchemaError,
// ErrSchemaTooNew); one no lockstep writes (*SchemaError,
// ErrSchemaInvalid): negative, 0 beside lockstep's tables, or not the
// version of the tables the file has; another program's database with a
// schema version of its own, or with a table lockstep would create
// (ErrNotLockstep). With existing (OpenExisting), only a file at
// oldestReadable or later passes.
func (f fileSchema) check(path string, existing bool) error {
	p := strconv.Quote(path)
	invalid := func(why string) error {
		return &SchemaError{Path: path, File: f.version, Code: schemaVersion, Invalid: why}
	}
	switch {
	case f.version > schemaVersion:
		// Perhaps a later schema renamed the tables: newer either way.
		return &SchemaError{Path: path, File: f.version, Code: schemaVersion}
	case f.version < 0:
		return invalid("negative")
	case f.version == 0 && f.lockstep():
		return invalid("0 means no lockstep tables yet, and the file has tables named threads and checkpoints: PRAGMA user_version was reset, or the tables are another program's")
	case existing && f.unset():
		return fmt.Errorf("%w: %s holds no lockstep tables yet: a database whose creation was cut short (a program stopped while it created the file; its next Open sets it up), or an empty one; check the path (the file was not modified)", ErrNotLockstep, p)
	case f.version == 0 && existing:
		return fmt.Errorf("%w: %s has no lockstep tables (schema version 0): check the path (the file was not modified)", ErrNotLockstep, p)
	case f.version == 0:
		for _, name := range schemaNames {
			if f.names[name] {
				return fmt.Errorf("%w: %s has a table, index or view named %q of its own, and lockstep's tables need that name: keep lockstep's tables in a file of their own (the file was not modified)", ErrNotLockstep, p, name)
			}
		}
		return nil
	case !f.lockstep():
		return fmt.Errorf("%w: %s has no lockstep tables (schema version %d): check the path (the file was not modified)", ErrNotLockstep, p, f.version)
	case f.version == 1 && !f.names["blobs"]:
		return invalid("schema 1 has a blobs table, and the file has none")
	case f.version >= 2 && f.names["blobs"]:
		return invalid(fmt.Sprintf("schema %d has no blobs table, and the file has one", f.version))
	case existing && f.version < oldestReadable:
		return &SchemaError{Path: path, File: f.version, Code: schemaVersion}
	}
	return nil
}

// setUp brings the schema of the file conn is open on up to schemaVersion
// and gives the file its identity, in ONE IMMEDIATE transaction: a process
// killed at any point of it leaves the file as it was (a new file then
// holds no tables, and the next Open sets it up), never a file half way
// between two schemas. It is idempotent: on a current file with an
// identity it reads and writes nothing. Errors are those of check, the
// migration's (ErrCannotMigrate) and the driver's. hook is Config.Hook
// (nil for none); its points are "sqlite.setup.begin", after each
// migration's statements "sqlite.setup.schema<N>",
// "sqlite.setup.beforeCommit" and "sqlite.setup.afterCommit".
func setUp(ctx context.Context, conn *sql.Conn, path string, hook func(string)) (err error) {
	if hook == nil {
		hook = func(string) {}
	}
	f, err := readSchema(ctx, conn)
	if err != nil {
		return fmt.Errorf("checkpoint/sqlite: %q: %w", path, err)
	}
	if err := f.check(path, false); err != nil {
		return err
	}
	if err := f.identity(path, 0); err != nil || f.version == schemaVersion && f.appID != 0 && f.hasMarker {
		return err
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("checkpoint/sqlite: %q: set up the schema: %w", path, err)
	}
	defer func() {
		if err != nil {
			conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()
	hook("sqlite.setup.begin")
	// Read it again under the write lock: another process may have set
	// the file up since.
	if f, err = readSchema(ctx, conn); err != nil {
		return fmt.Errorf("checkpoint/sqlite: %q: %w", path, err)
	}
	if err := f.check(path, false); err != nil {
		return err
	}
	if err := f.identity(path, 0); err != nil {
		return err
	}
	for _, m := range migrations {
		if f.version >= m.version {
			continue
		}
		if err := applyMigration(ctx, conn, m); err != nil {
			return fmt.Errorf("checkpoint/sqlite: %q: migrate to schema %d: %w", path, m.version, err)
		}
		hook("sqlite.setup.schema" + strconv.Itoa(m.version))
	}
	if f.version != schemaVersion {
		if _, err := conn.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", schemaVersion)); err != nil {
			return fmt.Errorf("checkpoint/sqlite: %q: migrate to schema %d: %w", path, schemaVersion, err)
		}
	}
	if err := identify(ctx, conn, f); err != nil {
		return fmt.Errorf("checkpoint/sqlite: %q: %w", path, err)
	}
	hook("sqlite.setup.beforeCommit")
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("checkpoint/sqlite: %q: set up the schema: commit: %w", path, err)
	}
	hook("sqlite.setup.afterCommit")
	return nil
}

// applyMigration runs one migration's statements, data step and post
// statements in the transaction set-up holds.
func applyMigration(ctx context.Context, conn *sql.Conn, m migration) error {
	for _, s := range m.stmts {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			return err
		}
	}
	if m.data != nil {
		if err := m.data(ctx, conn); err != nil {
			return err
		}
	}
	for _, s := range m.post {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// identify is the identity step of create and set-up, kept apart from
// the schema migrations (older code ignores what it writes, so it needs
// no schema version): the file gets an identity, a random PRAGMA
// application_id when it has none (one another program set is kept), and
// a second copy of it in fileTable, written once. A new file gets both in
// create's rollback-journal transaction, so that the fileTable page is in
// the database file and in no -wal; the header (page 1) is written again
// in every generation of the -wal (see Saver.stampPage1). Read with a
// -wal of another database that holds its page 1, the file's header then
// names the other database and its fileTable row still this one, and
// probe refuses it. The caller holds the write lock, so that two
// processes never give one file two identities.
func identify(ctx context.Context, conn *sql.Conn, f fileSchema) error {
	id := f.appID
	if id == 0 {
		var err error
		if id, err = newFileID(); err != nil {
			return err
		}
		if _, err := conn.ExecContext(ctx, fmt.Sprintf("PRAGMA application_id = %d", int32(id))); err != nil {
			return fmt.Errorf("set the file's identity: %w", err)
		}
	}
	if f.hasMarker {
		return nil
	}
	if _, err := conn.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+fileTable+" (id INTEGER NOT NULL)"); err != nil {
		return fmt.Errorf("record the file's identity: %w", err)
	}
	if _, err := conn.ExecContext(ctx, "INSERT INTO "+fileTable+" (id) VALUES (?)", int64(int32(id))); err != nil {
		return fmt.Errorf("record the file's identity: %w", err)
	}
	return nil
}

// newFileID returns a random non-zero file identity.
func newFileID() (uint32, error) {
	var b [4]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			return 0, fmt.Errorf("draw the file's identity: %w", err)
		}
		if id := binary.BigEndian.Uint32(b[:]); id != 0 {
			return id, nil
		}
	}
}
