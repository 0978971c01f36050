package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// SchemaVersion is the version of the tables this code writes. Open
// migrates older ones forward; both Open and OpenExisting refuse newer
// ones.
const SchemaVersion = 5

// migrations[i] moves the tables from version i to i+1. They are run in
// one transaction under a transaction-scoped advisory lock, together with
// the rows of $S.schema_version that record them, so that any number of
// processes opening one database at once run each exactly once, and a
// process killed half way leaves the database as it was. "$S." is
// replaced with the quoted schema name. They are never edited once
// released: a change is a new migration.
var migrations = []string{
	// Version 1.
	`CREATE TABLE $S.threads (
		thread_id     text COLLATE "C"   NOT NULL,
		checkpoint_ns text COLLATE "C"   NOT NULL DEFAULT '',
		head          text,
		lease_owner   text,
		lease_runner  text,
		lease_epoch   bigint NOT NULL DEFAULT 0,
		lease_until   bigint,
		updated_at    bigint NOT NULL,
		PRIMARY KEY (thread_id, checkpoint_ns)
	);
	CREATE INDEX threads_updated ON $S.threads (updated_at DESC, thread_id) WHERE checkpoint_ns = '' AND head IS NOT NULL;
	CREATE TABLE $S.checkpoints (
		thread_id            text COLLATE "C"   NOT NULL,
		checkpoint_ns        text COLLATE "C"   NOT NULL DEFAULT '',
		checkpoint_id        text COLLATE "C"   NOT NULL,
		parent_checkpoint_id text,
		step                 bigint NOT NULL,
		source               text COLLATE "C"   NOT NULL,
		created_at           text COLLATE "C"   NOT NULL,
		metadata             jsonb  NOT NULL,
		metadata_text        text,
		versions             jsonb  NOT NULL,
		mark                 text COLLATE "C"   NOT NULL DEFAULT '',
		crc                  bytea  NOT NULL,
		PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
	);
	CREATE TABLE $S.blobs (
		thread_id     text COLLATE "C"  NOT NULL,
		checkpoint_ns text COLLATE "C"  NOT NULL DEFAULT '',
		channel       text COLLATE "C"  NOT NULL,
		version       text COLLATE "C"  NOT NULL,
		kind          text COLLATE "C"  NOT NULL CHECK (kind IN ('value', 'append')),
		base          text COLLATE "C"  NOT NULL DEFAULT '',
		value         jsonb NOT NULL,
		crc           bytea NOT NULL,
		PRIMARY KEY (thread_id, checkpoint_ns, channel, version)
	);
	CREATE TABLE $S.writes (
		thread_id     text COLLATE "C"    NOT NULL,
		checkpoint_ns text COLLATE "C"    NOT NULL DEFAULT '',
		checkpoint_id text COLLATE "C"    NOT NULL,
		task_id       text COLLATE "C"    NOT NULL,
		idx           integer NOT NULL,
		channel       text COLLATE "C"    NOT NULL,
		value         jsonb   NOT NULL,
		node          text COLLATE "C"    NOT NULL DEFAULT '',
		path          text COLLATE "C"    NOT NULL DEFAULT '',
		created_at    bigint  NOT NULL,
		seq           bigint  GENERATED ALWAYS AS IDENTITY,
		crc           bytea   NOT NULL,
		PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
	);
	CREATE INDEX writes_interrupts ON $S.writes (seq) WHERE channel = '__interrupt__' AND checkpoint_ns = '';
	CREATE TABLE $S.approval_decisions (
		id                text COLLATE "C"  PRIMARY KEY,
		thread            text COLLATE "C"  NOT NULL,
		checkpoint        text COLLATE "C"  NOT NULL,
		tool              text COLLATE "C"  NOT NULL,
		owner             text COLLATE "C"  NOT NULL,
		outcome           text COLLATE "C"  NOT NULL CHECK (outcome IN ('approved', 'rejected', 'edited', 'expired')),
		reviewer          text COLLATE "C"  NOT NULL CHECK (reviewer <> ''),
		note              text COLLATE "C"  NOT NULL,
		args              jsonb,
		args_hash         text COLLATE "C"  NOT NULL,
		decided_at        text COLLATE "C"  NOT NULL,
		request           jsonb NOT NULL,
		resumed_at        text,
		resume_note       text COLLATE "C"  NOT NULL DEFAULT '',
		resume_attempts   integer NOT NULL DEFAULT 0,
		resume_error      text COLLATE "C"  NOT NULL DEFAULT '',
		resume_not_before text COLLATE "C"  NOT NULL DEFAULT ''
	);
	CREATE INDEX approval_decisions_unresumed ON $S.approval_decisions (decided_at, id) WHERE resumed_at IS NULL;
	CREATE INDEX approval_decisions_thread ON $S.approval_decisions (thread);
	CREATE TABLE $S.approval_executions (
		approval_id     text COLLATE "C" PRIMARY KEY REFERENCES $S.approval_decisions (id),
		idempotency_key text COLLATE "C" NOT NULL,
		args_hash       text COLLATE "C" NOT NULL,
		result          jsonb,
		error           text COLLATE "C" NOT NULL DEFAULT '',
		recorded_at     text COLLATE "C" NOT NULL
	);
	CREATE TABLE $S.ledger (
		key          text COLLATE "C"   PRIMARY KEY,
		tool         text COLLATE "C"   NOT NULL,
		args_hash    text COLLATE "C"   NOT NULL,
		state        text COLLATE "C"   NOT NULL CHECK (state IN ('pending', 'done')),
		result       jsonb,
		failure      jsonb,
		owner        text COLLATE "C"   NOT NULL,
		lease_until  bigint NOT NULL,
		created_at   bigint NOT NULL,
		completed_at bigint,
		thread_id    text COLLATE "C"   NOT NULL DEFAULT '',
		run_id       text COLLATE "C"   NOT NULL DEFAULT ''
	);
	CREATE INDEX ledger_created ON $S.ledger (created_at);
	CREATE TABLE $S.messages (
		scope       text COLLATE "C"   NOT NULL,
		id          text COLLATE "C"   NOT NULL,
		fingerprint text COLLATE "C"   NOT NULL,
		claimed_at  bigint NOT NULL,
		PRIMARY KEY (scope, id)
	);
	CREATE FUNCTION $S.crc(VARIADIC parts text[]) RETURNS bytea
		LANGUAGE sql IMMUTABLE PARALLEL SAFE
		RETURN decode(md5(coalesce((SELECT string_agg(coalesce(octet_length(p)::text || ':' || p, '-'), '' ORDER BY i)
			FROM unnest(parts) WITH ORDINALITY AS u(p, i)), '')), 'hex');`,
	// Version 2: the topologies of the graphs that write to the schema
	// (checkpoint.TopologyStore), one row per distinct topology, keyed by
	// its fingerprint. data is the topology's exact text (its fingerprint
	// hashes those bytes, which JSONB would respell); topology is the same
	// document as JSONB, for psql. stored_seq orders the stores of one
	// name: the newest is the largest.
	`CREATE TABLE $S.topologies (
		fingerprint text COLLATE "C" PRIMARY KEY CHECK (fingerprint ~ '^[0-9a-f]{32}$'),
		name        text COLLATE "C" NOT NULL CHECK (name <> ''),
		data        text NOT NULL,
		topology    jsonb GENERATED ALWAYS AS (data::jsonb) STORED,
		created_at  text COLLATE "C" NOT NULL,
		stored_at   text COLLATE "C" NOT NULL,
		stored_seq  bigint NOT NULL
	);
	CREATE INDEX topologies_newest ON $S.topologies (name, stored_seq);
	-- Every approval and ledger row carries a checksum over its key and
	-- every column (see Integrity in the package doc), computed here once
	-- for the rows of version 1, which carried none to check first.
	ALTER TABLE $S.approval_decisions ADD COLUMN crc bytea, ADD COLUMN resume_crc bytea;
	UPDATE $S.approval_decisions SET
		crc = $S.crc(id, thread, checkpoint, tool, owner, outcome, reviewer, note, args::text, args_hash, decided_at, request::text),
		resume_crc = $S.crc(id, resumed_at, resume_note, resume_attempts::text, resume_error, resume_not_before);
	ALTER TABLE $S.approval_decisions ALTER COLUMN crc SET NOT NULL, ALTER COLUMN resume_crc SET NOT NULL;
	ALTER TABLE $S.approval_executions ADD COLUMN crc bytea;
	UPDATE $S.approval_executions SET crc = $S.crc(approval_id, idempotency_key, args_hash, result::text, error, recorded_at);
	ALTER TABLE $S.approval_executions ALTER COLUMN crc SET NOT NULL;
	ALTER TABLE $S.ledger ADD COLUMN crc bytea;
	UPDATE $S.ledger SET crc = $S.crc(key, tool, args_hash, state, result::text, failure::text, owner,
		lease_until::text, created_at::text, completed_at::text, thread_id, run_id);
	ALTER TABLE $S.ledger ALTER COLUMN crc SET NOT NULL;
	ALTER TABLE $S.messages ADD COLUMN crc bytea;
	UPDATE $S.messages SET crc = $S.crc(scope, id, fingerprint, claimed_at::text);
	ALTER TABLE $S.messages ALTER COLUMN crc SET NOT NULL;`,
	// Version 3: the work of a pool of workers (checkpoint.DueWork and
	// checkpoint.InputQueue). A thread's root row says when it is due
	// (due_at, Unix nanoseconds on the saver's clock; NULL: not marked),
	// whose claim marked it (due_owner, the claim's token), the failed
	// attempts recorded, and the head its queued input is parked behind
	// (due_parked); queued_inputs holds the input queued per thread, in
	// input_id order, with its exact JSON text (the run key's input, as
	// the pool encoded it) and the same as JSONB for psql. The partial
	// indexes are what ClaimDue walks. The migration only adds.
	`ALTER TABLE $S.threads ADD COLUMN due_at bigint, ADD COLUMN due_owner text COLLATE "C",
		ADD COLUMN due_attempts integer NOT NULL DEFAULT 0, ADD COLUMN due_parked text COLLATE "C";
	CREATE INDEX threads_due ON $S.threads (due_at, thread_id) WHERE due_at IS NOT NULL AND checkpoint_ns = '';
	CREATE INDEX threads_leased ON $S.threads (lease_until, thread_id) WHERE lease_owner IS NOT NULL AND checkpoint_ns = '';
	CREATE INDEX threads_parked ON $S.threads (thread_id) WHERE due_parked IS NOT NULL AND checkpoint_ns = '';
	CREATE TABLE $S.queued_inputs (
		input_id   bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		thread_id  text COLLATE "C" NOT NULL,
		run_key    text COLLATE "C" NOT NULL CHECK (run_key <> ''),
		input_text text NOT NULL,
		input      jsonb GENERATED ALWAYS AS (input_text::jsonb) STORED,
		created_at text COLLATE "C" NOT NULL,
		crc        bytea NOT NULL,
		UNIQUE (thread_id, run_key)
	);
	CREATE INDEX queued_inputs_thread ON $S.queued_inputs (thread_id, input_id);`,
	// Version 4: resume claims that name their holder
	// (approval.ResumeClaimer): the worker and the claim that hold a
	// resume, so that a worker takes back at once a claim a killed process
	// of its name left. Both are empty in the rows of older versions,
	// whose resume checksums stay as they are: the checksum covers them
	// only when one is set.
	`ALTER TABLE $S.approval_decisions ADD COLUMN resume_claimant text COLLATE "C" NOT NULL DEFAULT '',
		ADD COLUMN resume_claim text COLLATE "C" NOT NULL DEFAULT '';
	CREATE INDEX approval_decisions_claimant ON $S.approval_decisions (resume_claimant, decided_at, id) WHERE resumed_at IS NULL AND resume_claimant <> '';`,
	// Version 5: approvals consumed in the transaction of the save that
	// carries their decision into the thread (approval.Consumer, D16),
	// one row each, with its checksum. Approvals of older versions have
	// none. The migration only adds.
	`CREATE TABLE $S.approval_consumptions (
		approval_id text COLLATE "C" PRIMARY KEY REFERENCES $S.approval_decisions (id),
		consumed_at text COLLATE "C" NOT NULL,
		crc         bytea NOT NULL
	);`,
}

// versionTable creates the table that records the applied versions.
const versionTable = `CREATE TABLE IF NOT EXISTS $S.schema_version (
	version    integer PRIMARY KEY,
	app        text    NOT NULL DEFAULT 'lockstep' CHECK (app = 'lockstep'),
	applied_at timestamptz NOT NULL DEFAULT now()
)`

// sqlFor replaces "$S." in a statement with the quoted schema name.
func sqlFor(schema, stmt string) string {
	return strings.ReplaceAll(stmt, "$S.", pgx.Identifier{schema}.Sanitize()+".")
}

// lockKey is the advisory lock key of a schema's migrations: a hash of
// its name, so that two lockstep schemas in one database migrate
// independently.
func lockKey(schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte("lockstep/postgres/migrate/" + schema))
	return int64(h.Sum64())
}

// schemaState is what a database holds under the schema name.
type schemaState struct {
	exists   bool // the schema exists
	objects  int  // tables, views, sequences, functions in it
	versions bool // it has a schema_version table
	ours     bool // whose app column says lockstep (or that is empty)
	min, max int
	n        int
}

type queryRower interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// readSchema reads what the database holds under schema, without writing.
func readSchema(ctx context.Context, q queryRower, schema string) (schemaState, error) {
	var st schemaState
	err := q.QueryRow(ctx, `SELECT
		EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1),
		(SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1)
			+ (SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1),
		EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = 'schema_version' AND c.relkind = 'r')`,
		schema).Scan(&st.exists, &st.objects, &st.versions)
	if err != nil || !st.versions {
		return st, err
	}
	var apps int
	var min, max *int32
	err = q.QueryRow(ctx, sqlFor(schema, `SELECT min(version), max(version), count(*), count(*) FILTER (WHERE app <> 'lockstep') FROM $S.schema_version`)).Scan(&min, &max, &st.n, &apps)
	if err != nil {
		if sqlState(err) == "42703" { // no app column: not our table
			return st, nil
		}
		return st, err
	}
	st.ours = apps == 0
	if min != nil {
		st.min, st.max = int(*min), int(*max)
	}
	return st, nil
}

// check says whether this code can use the tables st describes: nil, or
// a typed error. existing is OpenExisting's rule: only the current
// version, never an empty or missing schema.
func (st schemaState) check(schema string, existing bool) error {
	switch {
	case !st.exists || (st.objects == 0 && !st.versions):
		if existing {
			return fmt.Errorf("%w: the database has no schema %q with lockstep tables; open it with postgres.Open from a program that runs graphs to create them (nothing was changed)", ErrNotLockstep, schema)
		}
		return nil
	case !st.versions || !st.ours:
		return fmt.Errorf("%w: schema %q exists and holds %d objects that are not lockstep's (no lockstep schema_version table); choose another Config.Schema (nothing was changed)", ErrNotLockstep, schema, st.objects)
	case st.n == 0:
		if existing {
			return fmt.Errorf("%w: schema %q has no lockstep tables yet (nothing was changed)", ErrNotLockstep, schema)
		}
		return nil
	case st.min != 1 || st.n != st.max:
		return &SchemaError{Schema: schema, Database: st.max, Code: SchemaVersion,
			Invalid: fmt.Sprintf("schema_version holds versions %d to %d in %d rows; lockstep writes 1 to the current one, one row each", st.min, st.max, st.n)}
	case st.max > SchemaVersion:
		return &SchemaError{Schema: schema, Database: st.max, Code: SchemaVersion}
	case existing && st.max < SchemaVersion:
		return &SchemaError{Schema: schema, Database: st.max, Code: SchemaVersion}
	}
	return nil
}

// migrate brings the schema up to SchemaVersion. A database already at
// it is only read, so opening never waits for a migration lock. Otherwise
// one transaction takes the schema's advisory lock (transaction-scoped, so
// it holds through a transaction-mode pooler such as PgBouncer), reads the
// versions again, applies the missing migrations and records them; a
// process that waited for the lock finds them applied and does nothing.
func migrate(ctx context.Context, pool interface {
	queryRower
	Begin(ctx context.Context) (pgx.Tx, error)
}, schema string) error {
	st, err := readSchema(ctx, pool, schema)
	if err != nil {
		return storeErr("read the schema", "", err, false)
	}
	if err := st.check(schema, false); err != nil {
		return err
	}
	if st.max == SchemaVersion {
		return nil
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return storeErr("migrate", "", err, false)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, lockKey(schema)); err != nil {
		return storeErr("migrate: lock", "", err, false)
	}
	if st, err = readSchema(ctx, tx, schema); err != nil {
		return storeErr("migrate: read the schema", "", err, false)
	}
	if err := st.check(schema, false); err != nil {
		return err
	}
	if st.max == SchemaVersion {
		return nil // another process migrated while this one waited
	}
	if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{schema}.Sanitize()); err != nil {
		return storeErr("migrate: create the schema", "", err, false)
	}
	if _, err := tx.Exec(ctx, sqlFor(schema, versionTable)); err != nil {
		return storeErr("migrate: create the version table", "", err, false)
	}
	for v := st.max; v < SchemaVersion; v++ {
		if _, err := tx.Exec(ctx, sqlFor(schema, migrations[v])); err != nil {
			return storeErr(fmt.Sprintf("migrate to version %d", v+1), "", err, false)
		}
		if _, err := tx.Exec(ctx, sqlFor(schema, `INSERT INTO $S.schema_version (version) VALUES ($1)`), v+1); err != nil {
			return storeErr(fmt.Sprintf("migrate to version %d", v+1), "", err, false)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		if errors.Is(err, context.Canceled) {
			return err
		}
		return storeErr("migrate: commit", "", err, true)
	}
	return nil
}
