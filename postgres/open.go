package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Config configures Open. The zero value is usable: schema "lockstep", a
// pool of 10 connections, a 10 s connect timeout, prepared statements.
type Config struct {
	// Schema is the PostgreSQL schema that holds lockstep's tables
	// (default "lockstep"). Several lockstep deployments may share a
	// database, each in its own schema. 1 to 63 bytes.
	Schema string

	// MaxConns is the pool's size (default 10); MinConns the connections
	// kept open when idle (default 0).
	MaxConns, MinConns int32
	// ConnectTimeout bounds each new connection (default 10 s).
	ConnectTimeout time.Duration
	// MaxConnLifetime and MaxConnIdleTime recycle connections (pgxpool's
	// defaults: 1 h and 30 min).
	MaxConnLifetime, MaxConnIdleTime time.Duration
	// HealthCheckPeriod is how often idle connections are checked
	// (default 1 min). Connections idle for more than a second are also
	// pinged before use, so one broken by a server restart is replaced
	// instead of failing a run.
	HealthCheckPeriod time.Duration

	// PgBouncer makes every statement self-contained for a pooler in
	// transaction mode (PgBouncer's pool_mode = transaction): no prepared
	// statements (pgx's QueryExecModeExec), so no statement depends on
	// anything a previous transaction left on a server connection. The
	// stores never rely on session state either way: no SET, no
	// session-level advisory locks, no LISTEN, no temporary tables.
	PgBouncer bool
	// ExecMode overrides the statement mode: "cache_statement" (the
	// default without PgBouncer: prepared once per connection),
	// "cache_describe", "describe_exec", "exec" (the default with
	// PgBouncer) or "simple_protocol".
	ExecMode string

	// Now is the clock of the stores (default time.Now): it stamps and
	// judges leases, decisions and ledger records, as the SQLite stores'
	// clocks do.
	Now func() time.Time
	// LedgerRetention is the ledger's retention (ledger.Options.Retention;
	// default ledger.DefaultRetention).
	LedgerRetention time.Duration

	// GroupCommitMax bounds group commit: how many Put, PutChain and
	// PutWrites calls of concurrent runs one transaction may carry
	// (default 64; 1 turns group commit off; at most 4096). Calls that
	// arrive while half the pool's connections (at least one) are
	// already sending write batches wait and go together in the next
	// batch, each with its own result; a lone call is never delayed. See
	// the package doc, Group commit.
	GroupCommitMax int
	// GroupCommitBytes bounds the bytes of checkpoints and writes one
	// group carries (default 8 MiB, at most 1 GiB); a single call larger
	// than that still runs, alone.
	GroupCommitBytes int

	// Hook is for tests: crash tests kill the process from it. Production
	// code leaves it nil, and then it costs nothing. When set, the saver
	// calls it at named points of its writes, named as the SQLite
	// saver's are where they mean the same: "postgres.put.begin" (after
	// BEGIN, when the checkpoint needs an explicit transaction),
	// "postgres.put.beforeCommit" (its statements ran and COMMIT is not
	// sent; for a checkpoint of one round trip, just before it is sent)
	// and "postgres.put.afterCommit" (committed, the caller not told);
	// "postgres.writes.begin", ".beforeCommit" and ".afterCommit" for
	// pending writes in the same way; for a checkpoint or pending writes
	// that carry joins (an approval's consumption, a ledger outcome),
	// "postgres.join.beforeCommit" and "postgres.join.afterCommit" right
	// after the write's own ".beforeCommit" and ".afterCommit" (the joint
	// commit); "postgres.fenced.begin" (the thread's lease checked and
	// held locked), "postgres.fenced.beforeCommit" and
	// "postgres.fenced.afterCommit" around a fenced write (Fenced, and a
	// fenced ledger's intents and outcomes of their own);
	// "postgres.lease.begin", ".beforeCommit" and ".afterCommit" around a
	// Claim (a lease taken or renewed); and, for the work of a pool of
	// workers, "postgres.claim.beforeSend" and "postgres.claim.afterCommit"
	// around ClaimDue's one statement, and "postgres.settle.begin",
	// "postgres.settle.beforeCommit" and "postgres.settle.afterCommit"
	// around Settle's one round trip (its ".beforeCommit" comes before it
	// is sent: a crash there commits nothing). A refused write calls no
	// ".afterCommit". It runs on the writing goroutine, inside the
	// transaction for the points before a commit: it must be fast, must
	// not panic and must not call the stores.
	Hook func(point string)

	// Tracer, when set, sees every query and batch (pgx.QueryTracer,
	// optionally pgx.BatchTracer): for observability, and for tests that
	// count round trips.
	Tracer pgx.QueryTracer
}

const defaultSchema = "lockstep"

// The group commit defaults (Config.GroupCommitMax, GroupCommitBytes).
const (
	DefaultGroupCommitMax   = 64
	DefaultGroupCommitBytes = 8 << 20
)

func (c Config) resolved() (Config, error) {
	if c.Schema == "" {
		c.Schema = defaultSchema
	}
	if len(c.Schema) > 63 || !utf8.ValidString(c.Schema) || strings.ContainsRune(c.Schema, 0) {
		return c, &ConfigError{Field: "Config.Schema", Reason: fmt.Sprintf("%q is not a schema name of 1 to 63 bytes", c.Schema), Err: ErrInvalidConfig}
	}
	if c.MaxConns < 0 || c.MinConns < 0 || (c.MaxConns > 0 && c.MinConns > c.MaxConns) {
		return c, &ConfigError{Field: "Config.MaxConns", Reason: fmt.Sprintf("MaxConns %d and MinConns %d: want 0 <= MinConns <= MaxConns", c.MaxConns, c.MinConns), Err: ErrInvalidConfig}
	}
	if c.MaxConns == 0 {
		c.MaxConns = 10
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"ConnectTimeout", c.ConnectTimeout}, {"MaxConnLifetime", c.MaxConnLifetime}, {"MaxConnIdleTime", c.MaxConnIdleTime}, {"HealthCheckPeriod", c.HealthCheckPeriod}, {"LedgerRetention", c.LedgerRetention}} {
		if d.v < 0 {
			return c, &ConfigError{Field: "Config." + d.name, Reason: fmt.Sprintf("negative duration %v", d.v), Err: ErrInvalidConfig}
		}
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = 10 * time.Second
	}
	if c.GroupCommitMax == 0 {
		c.GroupCommitMax = DefaultGroupCommitMax
	}
	if c.GroupCommitMax < 1 || c.GroupCommitMax > 4096 {
		return c, &ConfigError{Field: "Config.GroupCommitMax", Reason: fmt.Sprintf("%d: want between 1 (no group commit) and 4096", c.GroupCommitMax), Err: ErrInvalidConfig}
	}
	if c.GroupCommitBytes == 0 {
		c.GroupCommitBytes = DefaultGroupCommitBytes
	}
	if c.GroupCommitBytes < 1 || c.GroupCommitBytes > 1<<30 {
		return c, &ConfigError{Field: "Config.GroupCommitBytes", Reason: fmt.Sprintf("%d: want between 1 and 1073741824 (1 GiB)", c.GroupCommitBytes), Err: ErrInvalidConfig}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c, nil
}

// execMode returns the pgx statement mode of the config.
func (c Config) execMode() (pgx.QueryExecMode, error) {
	mode := c.ExecMode
	if mode == "" {
		mode = "cache_statement"
		if c.PgBouncer {
			mode = "exec"
		}
	}
	switch mode {
	case "cache_statement":
		return pgx.QueryExecModeCacheStatement, nil
	case "cache_describe":
		return pgx.QueryExecModeCacheDescribe, nil
	case "describe_exec":
		return pgx.QueryExecModeDescribeExec, nil
	case "exec":
		return pgx.QueryExecModeExec, nil
	case "simple_protocol":
		return pgx.QueryExecModeSimpleProtocol, nil
	}
	return 0, &ConfigError{Field: "Config.ExecMode", Reason: fmt.Sprintf("unknown mode %q (want cache_statement, cache_describe, describe_exec, exec or simple_protocol)", mode), Err: ErrInvalidConfig}
}

// DB is a lockstep database on PostgreSQL: one connection pool shared by
// the checkpoint saver (Saver), the approval store (Approvals) and the
// idempotency ledger (Ledger), so that the writes that must commit
// together do (see the package doc). It is safe for concurrent use.
type DB struct {
	pool   *pgxpool.Pool
	cfg    Config
	schema string
	q      *queries
	closed atomic.Bool

	saver     *Saver
	approvals *ApprovalStore
	ledger    *Ledger
}

// Open connects to the PostgreSQL database url names (a postgres:// or
// postgresql:// URL), creates lockstep's tables in Config.Schema when
// they do not exist or migrates older ones (see the package doc), and
// returns the stores on one pool. It returns a *ConfigError (ErrNotPostgres
// for a URL that is not PostgreSQL's, ErrInvalidConfig), ErrNotPostgres
// for a server that does not speak PostgreSQL, a *SchemaError
// (ErrSchemaTooNew, ErrSchemaInvalid), ErrNotLockstep for a schema of
// another application, ErrUnsupported for a server lockstep cannot use,
// or a *StoreError (ErrUnavailable) when the database cannot be reached.
// On every error nothing was changed.
func Open(ctx context.Context, url string, cfg Config) (*DB, error) {
	return open(ctx, url, cfg, false)
}

// OpenExisting is Open for tools that only inspect a database they were
// pointed at (the lockstep CLI): it never creates or migrates anything,
// and opens only a database whose schema holds lockstep's tables at this
// version. It fails as Open does, and with ErrNotLockstep when there are
// no lockstep tables and a *SchemaError matching ErrSchemaTooOld when
// they are older.
func OpenExisting(ctx context.Context, url string, cfg Config) (*DB, error) {
	return open(ctx, url, cfg, true)
}

// IsURL reports whether s looks like a PostgreSQL URL (postgres:// or
// postgresql://), as the CLI's --db flag tells a Postgres database from
// a SQLite file.
func IsURL(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

func open(ctx context.Context, url string, cfg Config, existing bool) (*DB, error) {
	cfg, err := cfg.resolved()
	if err != nil {
		return nil, err
	}
	if !IsURL(url) {
		return nil, &ConfigError{Field: "url", Reason: "not a PostgreSQL URL: want postgres://user@host:port/database (or postgresql://)", Err: ErrNotPostgres}
	}
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgconn's parse errors may quote the URL, password included.
		return nil, &ConfigError{Field: "url", Reason: "the PostgreSQL URL does not parse", Err: ErrNotPostgres}
	}
	mode, err := cfg.execMode()
	if err != nil {
		return nil, err
	}
	pc.MaxConns, pc.MinConns = cfg.MaxConns, cfg.MinConns
	pc.ConnConfig.ConnectTimeout = cfg.ConnectTimeout
	pc.ConnConfig.DefaultQueryExecMode = mode
	if cfg.MaxConnLifetime > 0 {
		pc.MaxConnLifetime = cfg.MaxConnLifetime
	}
	if cfg.MaxConnIdleTime > 0 {
		pc.MaxConnIdleTime = cfg.MaxConnIdleTime
	}
	if cfg.HealthCheckPeriod > 0 {
		pc.HealthCheckPeriod = cfg.HealthCheckPeriod
	}
	if cfg.Tracer != nil {
		pc.ConnConfig.Tracer = cfg.Tracer
	}
	if pc.ConnConfig.RuntimeParams == nil {
		pc.ConnConfig.RuntimeParams = map[string]string{}
	}
	if _, ok := pc.ConnConfig.RuntimeParams["application_name"]; !ok {
		pc.ConnConfig.RuntimeParams["application_name"] = "lockstep"
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, &ConfigError{Field: "url", Reason: "the PostgreSQL URL does not configure a pool", Err: ErrNotPostgres}
	}
	db := &DB{pool: pool, cfg: cfg, schema: cfg.Schema}
	if err := db.setUp(ctx, existing); err != nil {
		pool.Close()
		return nil, err
	}
	db.q = newQueries(cfg.Schema)
	db.saver = &Saver{db: db, group: groupQueue{slots: make(chan struct{}, max(1, cfg.MaxConns/2))}}
	db.approvals = &ApprovalStore{db: db}
	if db.ledger, err = newLedger(db); err != nil {
		pool.Close()
		return nil, err
	}
	return db, nil
}

// setUp checks the server and brings the schema up to date.
func (db *DB) setUp(ctx context.Context, existing bool) error {
	var version int
	var encoding string
	err := db.pool.QueryRow(ctx, `SELECT current_setting('server_version_num')::int, current_setting('server_encoding')`).Scan(&version, &encoding)
	if err != nil {
		if sqlState(err) == "" && !connectionLost(err) {
			return fmt.Errorf("%w: the server at the URL does not answer as PostgreSQL does: %v", ErrNotPostgres, err)
		}
		if isProtocolError(err) {
			return fmt.Errorf("%w: the server at the URL does not speak PostgreSQL's protocol", ErrNotPostgres)
		}
		return storeErr("connect", "", err, false)
	}
	if version < 140000 {
		return fmt.Errorf("%w: PostgreSQL %d.%d; lockstep needs 14 or later", ErrUnsupported, version/10000, version%10000)
	}
	if encoding != "UTF8" {
		return fmt.Errorf("%w: the database's encoding is %s; lockstep needs UTF8 (JSONB holds text in the database encoding)", ErrUnsupported, encoding)
	}
	if existing {
		st, err := readSchema(ctx, db.pool, db.schema)
		if err != nil {
			return storeErr("read the schema", "", err, false)
		}
		return st.check(db.schema, true)
	}
	return migrate(ctx, db.pool, db.schema)
}

// isProtocolError reports whether err says the peer is not a PostgreSQL
// server (it answered, but not with the protocol).
func isProtocolError(err error) bool {
	s := err.Error()
	return strings.Contains(s, "unexpected message") || strings.Contains(s, "bad message") || strings.Contains(s, "received unexpected")
}

// Saver returns the checkpoint saver.
func (db *DB) Saver() *Saver { return db.saver }

// Approvals returns the approval store.
func (db *DB) Approvals() *ApprovalStore { return db.approvals }

// Ledger returns the idempotency ledger, fenced by the DB's Saver (see
// Ledger.WithOptions).
func (db *DB) Ledger() *Ledger { return db.ledger }

// Pool returns the connection pool, for an application that keeps its own
// tables in the same database. It stays the DB's: do not close it.
func (db *DB) Pool() *pgxpool.Pool { return db.pool }

// Schema returns the PostgreSQL schema that holds the tables.
func (db *DB) Schema() string { return db.schema }

// Close closes the pool. Afterwards every method of the stores fails with
// their ErrClosed. Closing twice does nothing; Close always returns nil.
func (db *DB) Close() error {
	if db.closed.CompareAndSwap(false, true) {
		db.pool.Close()
	}
	return nil
}

// now returns the stores' clock.
func (db *DB) now() time.Time { return db.cfg.Now() }

var errPoolClosed = errors.New("postgres: the database was closed")
