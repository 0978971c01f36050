package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/postgres"
)

// sqliteMagic starts every SQLite database file.
const sqliteMagic = "SQLite format 3\x00"

// database is a lockstep database as the commands read it: a SQLite file
// (*sqlite.Saver) or a PostgreSQL schema (pgDatabase).
type database interface {
	checkpoint.Saver
	checkpoint.ThreadLister
	checkpoint.InterruptLister
	checkpoint.LeaseInspector
	checkpoint.TopologyStore
	Close() error
}

var (
	_ database = (*sqlite.Saver)(nil)
	_ database = pgDatabase{}
)

// pgDatabase is a PostgreSQL database opened with postgres.OpenExisting:
// its saver, and its approval store for the commands that read or record
// decisions.
type pgDatabase struct {
	*postgres.Saver
	db *postgres.DB
}

// Close closes the pool.
func (p pgDatabase) Close() error { return p.db.Close() }

// dbName names --db in messages: the path, or a URL without its password.
func (e *env) dbName() string {
	if postgres.IsURL(e.opts.db) {
		if u, err := url.Parse(e.opts.db); err == nil {
			return u.Redacted()
		}
		return "the PostgreSQL database of --db"
	}
	return e.opts.db
}

// openSaver opens the database named by --db, for a command that writes
// to it when write is set: a PostgreSQL URL (postgres:// or
// postgresql://) or a SQLite file. It never creates, migrates or otherwise
// changes a database to open it: a missing, empty, non-SQLite or
// non-lockstep file, or one an older lockstep wrote, is a failure that
// says what to do, and so is a database the user may only read when write
// is set or when reading it would create files (see readOnly). The caller
// closes the saver.
func (e *env) openSaver(write bool) (database, error) {
	path := e.opts.db
	if path == "" {
		return nil, usageError("--db needs a file path or a PostgreSQL URL", "pass --db PATH or --db postgres://..., or leave it out for ./lockstep.db")
	}
	if postgres.IsURL(path) {
		return e.openPostgres()
	}
	noDB := func(msg string, err error) error {
		return &failure{code: exitInternal, kind: kindNoDatabase, msg: msg,
			hint: "run an example first or pass --db PATH", err: err}
	}
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, noDB("no database at "+path, err)
	case err != nil:
		return nil, noDB(fmt.Sprintf("cannot read %s: %v", path, err), err)
	case st.IsDir():
		return nil, noDB(path+" is a directory, not a database file", nil)
	case st.Size() == 0:
		return nil, noDB(path+" is empty, not a lockstep database", nil)
	}
	if ok, err := isSQLite(path); err != nil {
		return nil, noDB(fmt.Sprintf("cannot read %s: %v", path, err), err)
	} else if !ok {
		return nil, noDB(path+" is not a SQLite database", nil)
	}
	// Opening for writing creates and changes nothing (no O_CREATE, no
	// O_TRUNC): it only asks whether this user may write the file.
	if f, err := os.OpenFile(path, os.O_RDWR, 0); err == nil {
		f.Close()
	} else if err := readOnly(path, write, err); err != nil {
		return nil, err
	} else {
		e.readOnly = true
	}
	// OpenExisting neither creates, migrates nor otherwise changes the
	// file: --db may name some other program's database by mistake.
	s, err := sqlite.OpenExisting(path, sqlite.Config{})
	switch {
	case errors.Is(err, sqlite.ErrNotLockstep):
		return nil, noDB(path+" is not a lockstep database (it has none of lockstep's tables; it was not modified)", err)
	case errors.Is(err, sqlite.ErrSchemaTooOld):
		return nil, &failure{code: exitInternal, kind: kindNoDatabase, msg: path + " was written by an older lockstep (it was not modified)",
			hint: "open it once with the program that uses it, which upgrades it, or with this version's library", err: err}
	case err != nil:
		return nil, &failure{code: exitInternal, kind: kindInternal, msg: fmt.Sprintf("cannot open %s: %v", path, err),
			hint: "check that --db names a lockstep database, that you may write to it and its directory (SQLite keeps -wal and -shm files beside it), and that this lockstep is as new as the program that wrote it", err: err}
	}
	return s, nil
}

// openPostgres opens the PostgreSQL database of --db with
// postgres.OpenExisting, which creates and migrates nothing.
func (e *env) openPostgres() (database, error) {
	name := e.dbName()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := postgres.OpenExisting(ctx, e.opts.db, postgres.Config{Schema: os.Getenv("LOCKSTEP_POSTGRES_SCHEMA"), MaxConns: 4, Now: e.now})
	noDB := func(msg, hint string) error {
		return &failure{code: exitInternal, kind: kindNoDatabase, msg: msg, hint: hint, err: err}
	}
	switch {
	case err == nil:
		return pgDatabase{Saver: db.Saver(), db: db}, nil
	case errors.Is(err, postgres.ErrNotLockstep):
		return nil, noDB(name+" holds no lockstep tables in its schema (nothing was changed)",
			"open it once with postgres.Open from the program that runs the graphs, or set LOCKSTEP_POSTGRES_SCHEMA to the schema it uses (Config.Schema)")
	case errors.Is(err, postgres.ErrSchemaTooOld):
		return nil, noDB(name+" was written by an older lockstep (it was not modified)",
			"open it once with the program that uses it, which upgrades it, or with this version's library")
	case errors.Is(err, postgres.ErrSchemaTooNew), errors.Is(err, postgres.ErrSchemaInvalid):
		return nil, &failure{code: exitInternal, kind: kindInternal, msg: fmt.Sprintf("cannot open %s: %v", name, err), hint: "use a newer lockstep", err: err}
	case errors.Is(err, postgres.ErrNotPostgres), errors.Is(err, postgres.ErrInvalidConfig):
		f := usageError(fmt.Sprintf("--db %s: %v", name, err), "pass --db postgres://USER@HOST:PORT/DATABASE, or the path of a SQLite file")
		f.err = err
		return nil, f
	}
	return nil, &failure{code: exitInternal, kind: kindInternal, msg: fmt.Sprintf("cannot open %s: %v", name, err),
		hint: "check that the server is up and reachable, and that the URL's user may read the lockstep schema", err: err}
}

// readOnly decides whether a database the user may not write (cause says
// why) can be opened. A command that writes cannot run. A reading command
// can when the database's -wal and -shm files exist and are readable:
// SQLite (3.22 and later) then reads a WAL database without writing
// anything, through a read-only -shm, and sees the writer's latest commit
// as usual, whether a program has the database open or left the files
// after a crash. Without them SQLite would have to create them, which
// fails in a directory the user may not write and, in one they may,
// leaves files that the program writing the database cannot open for
// writing (they take the database file's permissions and the reader's
// owner), so that its writes fail. Opening the database as immutable
// would read it without them, but would read torn pages if a program
// started writing meanwhile: that is not offered.
func readOnly(path string, write bool, cause error) error {
	fail := func(msg, hint string, err error) error {
		return &failure{code: exitInternal, kind: kindReadOnly, msg: msg, hint: hint, err: err}
	}
	if write {
		return fail(path+" is read-only to you: this command records a decision in it, and nothing was recorded",
			"run it as a user who may write the database file, its -wal and -shm files and its directory", cause)
	}
	var missing []string
	for _, sfx := range []string{"-wal", "-shm"} {
		f, err := os.Open(path + sfx)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			missing = append(missing, path+sfx)
		case err != nil:
			return fail(fmt.Sprintf("%s is read-only to you, and you cannot read %s%s: %v", path, path, sfx, err),
				"ask for read access to the database's -wal and -shm files (SQLite creates them with the database file's permissions)", err)
		default:
			f.Close()
		}
	}
	if len(missing) > 0 {
		return fail(fmt.Sprintf("%s is read-only to you, and there is no %s (no program has the database open)", path, strings.Join(missing, " or ")),
			"reading a WAL database needs its -wal and -shm files, and lockstep does not create them for a user who may not write the database "+
				"(the program that writes it could not use them): run this while that program has the database open, "+
				"as a user who may write it, or on a copy of the file made while nothing writes it", cause)
	}
	return nil
}

// isSQLite reports whether the file at path starts with SQLite's header.
func isSQLite(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	head := make([]byte, len(sqliteMagic))
	if _, err := io.ReadFull(f, head); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return false, nil
		}
		return false, err
	}
	return string(head) == sqliteMagic, nil
}

// readDecisions returns the approval decisions of the database for a
// command that reads them, and whether what the store records reaches the
// file (durable). Seeing a request expired records its expiry (see
// approval.Inbox.List), and a reading command records it too when it can:
// the SQL store when the approval tables exist and the user may write the
// file. Otherwise the store records in memory only: an empty store when
// there are no approval tables (reading never creates them), and a view
// of the SQL store whose decisions stay in memory when the file is
// read-only to the user.
func (e *env) readDecisions(ctx context.Context, db database) (_ approval.Store, durable bool, _ error) {
	if p, ok := db.(pgDatabase); ok {
		return p.db.Approvals(), true, nil
	}
	s := db.(*sqlite.Saver)
	var n int
	err := s.DB().QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'approval_schema'`).Scan(&n)
	if err != nil {
		return nil, false, fmt.Errorf("read the approval tables of %s: %w", e.dbName(), err)
	}
	if n == 0 {
		return approval.NewMemoryStore(e.now), false, nil
	}
	st, err := e.writeDecisions(ctx, s)
	if err != nil {
		return nil, false, err
	}
	if e.readOnly {
		return readOnlyStore{Store: st, mem: approval.NewMemoryStore(e.now)}, false, nil
	}
	return st, true, nil
}

// readOnlyStore is the approval store of a database the user may only
// read: it reads the file's decisions, and records in memory only (the
// expiries that a listing observes), so that reading never writes.
type readOnlyStore struct {
	approval.Store
	mem *approval.MemoryStore
}

// Decide checks and keeps the decision in memory; nothing is written.
func (r readOnlyStore) Decide(ctx context.Context, item approval.Item, v approval.Verdict) (approval.Decision, error) {
	return r.mem.Decide(ctx, item, v)
}

// writeDecisions opens the approval decision store in the database,
// creating its tables if needed. Tables an older lockstep wrote are
// refused and left as they are, as OpenExisting refuses the saver's: a
// program that still runs the older version writes rows this one would
// read as corrupt once the CLI had upgraded them.
func (e *env) writeDecisions(ctx context.Context, db database) (approval.Store, error) {
	if p, ok := db.(pgDatabase); ok {
		return p.db.Approvals(), nil
	}
	s := db.(*sqlite.Saver)
	var version sql.NullInt64
	err := s.DB().QueryRowContext(ctx, `SELECT max(version) FROM approval_schema`).Scan(&version)
	if err == nil && version.Valid && version.Int64 < approval.SchemaVersion {
		return nil, &failure{code: exitInternal, kind: kindNoDatabase,
			msg:  fmt.Sprintf("the approval tables of %s were written by an older lockstep (approval schema version %d; this one writes %d), and were not modified", e.dbName(), version.Int64, approval.SchemaVersion),
			hint: "open it once with the program that uses it, which upgrades it, or with this version's library"}
	}
	st, err := approval.OpenSQLStore(ctx, s.DB(), e.now)
	if err != nil {
		return nil, fmt.Errorf("open the approval decisions of %s: %w", e.dbName(), err)
	}
	return st, nil
}

// readHead reads a thread's latest checkpoint. An unknown thread is a
// not-found failure that says how to list the threads.
func (e *env) readHead(ctx context.Context, s database, thread string) (*checkpoint.Tuple, error) {
	head, err := s.Get(ctx, checkpoint.Ref{Thread: thread}, checkpoint.GetOptions{})
	if errors.Is(err, checkpoint.ErrNotFound) {
		return nil, notFound(fmt.Sprintf("no thread %s in %s", quote(thread), e.dbName()), "run `lockstep threads` to list the threads", err)
	}
	if err != nil {
		return nil, fmt.Errorf("read thread %s: %w", quote(thread), err)
	}
	return head, nil
}

// readLease reads the lease of a thread's root namespace as stored
// (checkpoint.LeaseInspector): the run holding it (or that held it last,
// if it lapsed), its runner, its epoch and until when. It returns nil when
// no run holds it (released, or never taken).
func (e *env) readLease(ctx context.Context, s database, thread string, now time.Time) (*leaseJSON, error) {
	info, err := s.Lease(ctx, thread, "")
	switch {
	case errors.Is(err, checkpoint.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read the lease of thread %s: %w", quote(thread), err)
	case info.Owner == "":
		return nil, nil
	}
	return &leaseJSON{Owner: info.Owner, Runner: info.Runner, Epoch: info.Epoch, Until: info.Until.UTC(), Live: info.Live(now)}, nil
}
