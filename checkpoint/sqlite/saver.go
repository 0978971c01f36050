package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/lockstepgo/lockstep/checkpoint"
	// The driver registers itself as "sqlite3" with database/sql; this
	// package is the only one in the module that imports it.
	_ "github.com/mattn/go-sqlite3"
)

// Saver is a checkpoint.Saver on one SQLite file. It implements
// checkpoint.Saver, ThreadLister, InterruptLister, Pruner, Vacuumer,
// ChainPutter, LeaseInspector and TopologyStore. It
// is safe for concurrent use by many goroutines, and several processes (or
// several Savers in one process) may open the same file: writes are
// serialised by SQLite's write lock, reads run in parallel with them.
type Saver struct {
	cfg *resolved
	db  *sql.DB
	// version is the file's schema version: schemaVersion, or an older one
	// that OpenExisting opened without migrating (see oldestReadable).
	version int

	closed atomic.Bool

	// wsem serialises this Saver's writes on its dedicated connection
	// (a one-slot semaphore, so that waiting honours the context).
	wsem  chan struct{}
	wconn *sql.Conn            // guarded by wsem
	stmts map[string]*sql.Stmt // prepared on wconn; guarded by wsem
	heads *headCache           // heads as wconn read or wrote them; guarded by wsem
	wal   walKeeper            // guarded by wsem
	// tx is the write transaction in progress, kept here so that a write
	// does not allocate one; guarded by wsem and cleared when it ends.
	tx wtx
	// group queues the writes waiting to commit together (group.go).
	group groupQueue

	closeOnce sync.Once
	closeErr  error
}

var (
	_ checkpoint.Saver           = (*Saver)(nil)
	_ checkpoint.ThreadLister    = (*Saver)(nil)
	_ checkpoint.InterruptLister = (*Saver)(nil)
	_ checkpoint.Pruner          = (*Saver)(nil)
	_ checkpoint.Vacuumer        = (*Saver)(nil)
	_ checkpoint.ChainPutter     = (*Saver)(nil)
	_ checkpoint.TopologyStore   = (*Saver)(nil)
)

// Open opens (creating it if needed) the database file at path and brings
// its schema up to date, in one transaction. It fails with a *ConfigError
// (ErrInvalidConfig) for an invalid path or Config, with a *SchemaError
// matching ErrSchemaTooNew when the file was written by a newer schema and
// ErrSchemaInvalid when its schema version is one no lockstep writes, with
// a *WALError matching ErrForeignWAL when the -wal beside it is another
// database's (see the package doc), each time leaving the file byte for
// byte as it was, and otherwise with an error wrapping the driver's error
// (a file that is not a database, for example). When this process may not
// write the file, its -wal or -shm, or may not create them in its
// directory, it fails with an error matching ErrReadOnly (and the fs
// error, such as fs.ErrPermission) before SQLite opens anything.
//
// A SQLite file that lockstep did not write is refused with an error
// matching ErrNotLockstep when it has a schema version of its own
// (another program's PRAGMA user_version); one with user_version 0 gets
// lockstep's tables beside its own, so that an application can keep its
// checkpoints in its own database.
func Open(path string, cfg Config) (*Saver, error) {
	return open(path, cfg, false)
}

// OpenExisting opens the lockstep database at path as Open does, but
// never creates, migrates or otherwise changes the file to do so: what
// only reads (an operator's tool inspecting a file it was pointed at)
// cannot damage a file that is not what it expected. It fails with an
// error matching fs.ErrNotExist (and ErrNotLockstep) when there is no file
// or it is empty, ErrNotLockstep for a SQLite file without lockstep's
// tables, a *SchemaError matching ErrSchemaTooOld for a file an older
// lockstep wrote whose tables this code cannot read as they are (before
// schema 4; Open migrates it) and one matching ErrSchemaTooNew for a
// newer one, ErrSchemaInvalid and ErrForeignWAL as Open does, and
// otherwise as Open does. The file is not modified on any of these
// errors. A schema-4 file opens as it is: it has no topologies table, so
// that Topology and LatestTopology find nothing and PutTopology fails
// with a *SchemaError (ErrSchemaTooOld).
func OpenExisting(path string, cfg Config) (*Saver, error) {
	return open(path, cfg, true)
}

func open(path string, cfg Config, existing bool) (*Saver, error) {
	r, err := resolve(path, cfg)
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	if err := probe(ctx, r, existing); err != nil {
		return nil, err
	}
	db, err := sql.Open(r.driverName, r.dsn())
	if err != nil {
		return nil, fmt.Errorf("checkpoint/sqlite: open %q: %w", path, err)
	}
	db.SetMaxOpenConns(r.maxOpenConns)
	db.SetMaxIdleConns(r.maxOpenConns)
	s := &Saver{cfg: r, db: db, wsem: make(chan struct{}, 1), stmts: map[string]*sql.Stmt{}, heads: newHeadCache()}
	if err := s.init(ctx, existing); err != nil {
		s.closeConns()
		return nil, err
	}
	return s, nil
}

// probe reads the schema version of an existing file, whether it has
// lockstep's tables, and its identity, through a connection that sets no
// journal mode (a read-only one when a -wal with frames is beside the
// file), so that a file too new for this code, not lockstep's, or read
// with another database's -wal, is rejected before anything could write
// to it. A new (or empty) file is created with auto_vacuum=INCREMENTAL
// and WAL, unless existing is set: then the file must already be a
// lockstep database at the current schema. Before a new file is created,
// a -wal already beside its path is refused (checkOrphanWAL).
func probe(ctx context.Context, r *resolved, existing bool) error {
	st, err := os.Stat(r.path)
	if errors.Is(err, os.ErrNotExist) || err == nil && st.Size() == 0 {
		if existing {
			if err == nil {
				err = fs.ErrNotExist // an empty file holds no database
			}
			return fmt.Errorf("%w: %s: no database (%w)", ErrNotLockstep, strconv.Quote(r.path), err)
		}
		if err := checkOrphanWAL(r.path); err != nil {
			return err
		}
		if err := writable(r.path, true); err != nil {
			return err
		}
		return create(ctx, r)
	}
	if err != nil {
		return fmt.Errorf("checkpoint/sqlite: open %q: %w", r.path, err)
	}
	if !existing {
		if err := writable(r.path, false); err != nil {
			return err
		}
	}
	// SQLite replays the -wal beside the file at the first read, and the
	// last connection to close copies it into the file and deletes it.
	// When there is one, the probe reads the file with it through a
	// read-only connection, which can do neither: nothing is written
	// until the identity check below passed.
	w, err := readWAL(r.path + "-wal")
	if err != nil {
		return fmt.Errorf("checkpoint/sqlite: open %q: read its -wal: %w", r.path, err)
	}
	dsn := r.probeDSN()
	if w.exists {
		dsn = r.readOnlyDSN()
	}
	db, err := sql.Open(r.driverName, dsn)
	if err != nil {
		return fmt.Errorf("checkpoint/sqlite: open %q: %w", r.path, err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	f, err := readSchema(ctx, db)
	if err != nil && w.frames > 0 && isCorrupt(err) {
		return &WALError{Path: r.path, Foreign: true, Err: err,
			Reason: fmt.Sprintf("SQLite cannot read the file with the %d frames of the -wal replayed (%v): the -wal holds pages of another database, or the file is damaged", w.frames, err)}
	}
	if err != nil {
		return openErr(r.path, "open", err)
	}
	if err := f.identity(r.path, w.frames); err != nil {
		return err
	}
	if err := f.check(r.path, existing); err != nil {
		if w.frames > 0 && (errors.Is(err, ErrNotLockstep) || errors.Is(err, ErrSchemaInvalid)) {
			// What was read may be another database's pages.
			return fmt.Errorf("%w (read with the %d frames of the -wal beside it: if that -wal came from another database, move it and the -shm away)", err, w.frames)
		}
		return err
	}
	if f.unset() && !existing {
		// No table yet: a file whose creation was cut short (or an empty
		// database). create gives it what a new file gets first; it
		// changes nothing in a file that already has them.
		db.Close()
		return create(ctx, r)
	}
	return nil
}

// openErr wraps an error of SQLite met while opening the file at path:
// one matching ErrReadOnly when SQLite refused to write (SQLITE_READONLY:
// a read-only file, -wal, -shm, directory or mount that the checks before
// it did not see), otherwise the driver's error naming the path.
func openErr(path, what string, err error) error {
	if isReadOnly(err) {
		return fmt.Errorf("%w: SQLite may not write %s, its -wal or -shm file or its directory (Open writes them; to only inspect the database, use the lockstep CLI): %w",
			ErrReadOnly, strconv.Quote(path), err)
	}
	return fmt.Errorf("checkpoint/sqlite: %s %q: %w", what, path, err)
}

// walAutocheckpoint is the WAL size, in pages, at which the writer
// connection copies the WAL back into the database after a commit: 4000
// pages (16 MiB at the default page size), far below docs/reliability.md's
// 64 MiB bound. With schema 1 (~9.5 pages a Put, mostly the same hot
// pages) it measured ~1.5x faster Puts than SQLite's default of 1000. With
// schema 2 (~3.2 pages a Put) the two are within noise at synchronous
// NORMAL; 1000 measured ~10% faster for short runs at FULL (the WAL is
// reused sooner), 4000 ~1.4x faster for a burst of 1000 large Puts (W2,
// which then finishes before the first checkpoint).
const walAutocheckpoint = 4000

// writer returns the writer connection, taking and configuring a new one
// when there is none. The caller holds wsem.
func (s *Saver) writer(ctx context.Context) (*sql.Conn, error) {
	if s.wconn != nil {
		return s.wconn, nil
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := conn.ExecContext(ctx, "PRAGMA wal_autocheckpoint = "+strconv.Itoa(walAutocheckpoint)); err != nil {
		conn.Close()
		return nil, err
	}
	s.wconn = conn
	return conn, nil
}

// writable checks, without changing anything, that this process may
// write the file at path (when it exists) or create it in its directory
// (when create is set), and write or create the -wal and -shm files SQLite
// keeps beside an existing file, so that a read-only location fails with
// ErrReadOnly and says why, instead of with SQLite's "unable to open
// database file" or "attempt to write a readonly database". It neither
// opens the file nor creates one (see checkWrite).
func writable(path string, create bool) error {
	denied := func(err error) bool { return errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS) }
	err := checkWrite(path, create)
	switch {
	case err == nil:
	case create && denied(err):
		return fmt.Errorf("%w: cannot create %s: its directory is not writable by this process (SQLite also keeps -wal and -shm files there): %w",
			ErrReadOnly, strconv.Quote(path), err)
	case create:
		return fmt.Errorf("checkpoint/sqlite: create %q: %w", path, err)
	case denied(err):
		return fmt.Errorf("%w: %s is not writable by this process (Open writes the database, its -wal and -shm files; to only inspect it, use the lockstep CLI): %w",
			ErrReadOnly, strconv.Quote(path), err)
	default:
		return nil // anything else (a directory, ...) is for SQLite to report
	}
	if create {
		return nil
	}
	sidecar, err := checkSidecars(path)
	switch {
	case err == nil || !denied(err):
		return nil // SQLite is better placed to report anything else
	case sidecar == "":
		return fmt.Errorf("%w: %s is in a directory this process may not write, and SQLite must create the database's -wal and -shm files there (Open writes them; to only inspect the database, use the lockstep CLI): %w",
			ErrReadOnly, strconv.Quote(path), err)
	}
	return fmt.Errorf("%w: %s's %s file is not writable by this process, and SQLite writes it with the database (Open writes them; to only inspect the database, use the lockstep CLI): %w",
		ErrReadOnly, strconv.Quote(path), sidecar, err)
}

// create gives a new (or empty) file what it gets before its tables, in
// this order: auto_vacuum=INCREMENTAL (which can only be chosen before the
// first page is written), its identity (identify), written to the
// database file itself in one rollback-journal transaction so that it is
// in the file from the start and in no -wal, and then WAL mode.
// The tables follow in set-up's one transaction (setUp). A process killed
// here leaves a file with no tables, which the next Open sets up. Hook
// points: "sqlite.create.identity" (committed, not WAL yet) and
// "sqlite.create.wal".
func create(ctx context.Context, r *resolved) error {
	db, err := sql.Open(r.driverName, r.createDSN())
	if err != nil {
		return fmt.Errorf("checkpoint/sqlite: create %q: %w", r.path, err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	conn, err := db.Conn(ctx)
	if err != nil {
		return openErr(r.path, "create", err)
	}
	defer conn.Close()
	if err := func() (err error) {
		if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
			return err
		}
		defer func() {
			if err != nil {
				conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
			}
		}()
		// Under the write lock: another process creating the same file
		// may have given it its identity, or set it up, already.
		f, err := readSchema(ctx, conn)
		if err != nil {
			return err
		}
		if f.unset() {
			if err := identify(ctx, conn, f); err != nil {
				return err
			}
		}
		_, err = conn.ExecContext(ctx, "COMMIT")
		return err
	}(); err != nil {
		return openErr(r.path, "create", err)
	}
	r.callHook("sqlite.create.identity")
	var mode string
	if err := conn.QueryRowContext(ctx, "PRAGMA journal_mode = WAL").Scan(&mode); err != nil {
		return openErr(r.path, "create", err)
	}
	r.callHook("sqlite.create.wal")
	return nil
}

// init checks the writer's journal mode, sets the file up (not for
// OpenExisting: probe let only a file this code reads as it is through,
// and nothing may be written; its schema version is recorded) and starts
// watching the -wal (see walWatch).
func (s *Saver) init(ctx context.Context, existing bool) error {
	conn, err := s.writer(ctx)
	if err != nil {
		return openErr(s.cfg.path, "open", err)
	}
	var mode string
	if err := conn.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return openErr(s.cfg.path, "open", err)
	}
	if mode != "wal" {
		return fmt.Errorf("checkpoint/sqlite: open %q: journal mode is %q, not WAL (is the file on a network filesystem?)", s.cfg.path, mode)
	}
	if existing {
		if err := conn.QueryRowContext(ctx, "PRAGMA user_version").Scan(&s.version); err != nil {
			return openErr(s.cfg.path, "open", err)
		}
		if s.version < oldestReadable || s.version > schemaVersion {
			return &SchemaError{Path: s.cfg.path, File: s.version, Code: schemaVersion}
		}
	} else {
		if err := setUp(ctx, conn, s.cfg.path, s.cfg.hook); err != nil {
			var se *SchemaError
			if errors.As(err, &se) || errors.Is(err, ErrNotLockstep) || errors.Is(err, ErrCannotMigrate) {
				return err
			}
			return openErr(s.cfg.path, "open", err)
		}
		s.version = schemaVersion
	}
	return s.watchWAL(ctx)
}

// DB returns the saver's connection pool, for packages that keep their own
// tables in the same file. Every pooled connection has WAL, the configured
// synchronous mode, busy_timeout and foreign keys on, and transactions
// begun with BeginTx are BEGIN IMMEDIATE. The pool is closed by Close;
// callers must not close it themselves.
func (s *Saver) DB() *sql.DB { return s.db }

// Path returns the database file's path.
func (s *Saver) Path() string { return s.cfg.path }

// Close waits for a write in progress, closes every connection and
// returns the first error closing them gave. Operations after Close fail
// with an error matching checkpoint.ErrClosed. Closing twice is not an
// error.
func (s *Saver) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.wsem <- struct{}{}
		s.group.drain(s.live())
		s.closeErr = s.closeConns()
	})
	return s.closeErr
}

// closeConns closes the writer's statements and connection and the pool.
func (s *Saver) closeConns() error {
	s.wal.unfollow() // first: on Windows, SQLite's last close deletes the -wal
	var errs []error
	for k, st := range s.stmts {
		errs = append(errs, st.Close())
		delete(s.stmts, k)
	}
	if s.wconn != nil {
		errs = append(errs, s.wconn.Close())
		s.wconn = nil
	}
	errs = append(errs, s.db.Close())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("checkpoint/sqlite: close %q: %w", s.cfg.path, err)
	}
	return nil
}

func (s *Saver) live() error {
	if s.closed.Load() {
		return fmt.Errorf("%w (%s)", checkpoint.ErrClosed, strconv.Quote(s.cfg.path))
	}
	return nil
}

// hook calls the test hook, if any, at the point prefix+suffix (the name
// is only built when there is a hook).
func (s *Saver) hook(prefix, suffix string) {
	if s.cfg.hook != nil {
		s.cfg.hook(prefix + suffix)
	}
}

// detached returns ctx without its cancellation: ctx itself when it has
// none (context.WithoutCancel allocates, and most callers pass a context
// that cannot be cancelled).
func detached(ctx context.Context) context.Context {
	if _, ok := ctx.Deadline(); !ok && ctx.Done() == nil {
		return ctx
	}
	return context.WithoutCancel(ctx)
}

// wtx is a write transaction on the writer connection.
type wtx struct {
	s   *Saver
	ctx context.Context // not cancellable: statements inside run to the end
	// After a successful COMMIT (still under wsem), the head the
	// transaction wrote is recorded: the Put put (its last one, for a
	// chain), or the rows a PutWrites added to prevHead.
	savedPut  *preparedPut
	writeRef  *checkpoint.Ref
	writeRows []writeRow
	// prevHead is the cached head of the thread written, as it was before
	// the transaction (nil when there was none).
	prevHead *cachedHead
	// sp is where a group member stands with its savepoint (runMember);
	// spNone outside a group.
	sp savepointState
	// firstOnly: the member's first write is its only refusable one
	// (writeGroupedFirst, execFirst).
	firstOnly bool
}

// savepointState is where a group member's statements stand with the
// member's savepoint (see runMember).
type savepointState uint8

const (
	spNone   savepointState = iota // not a group member: no savepoint
	spLazy                         // a member that has written nothing: exec takes the savepoint first
	spTaken                        // the member's savepoint is open
	spAtomic                       // the member wrote one self-contained statement without one (execFirst)
)

// stmt returns the statement for query, prepared once on the writer.
func (t *wtx) stmt(query string) (*sql.Stmt, error) {
	if st, ok := t.s.stmts[query]; ok {
		return st, nil
	}
	st, err := t.s.wconn.PrepareContext(t.ctx, query)
	if err != nil {
		return nil, err
	}
	if len(t.s.stmts) >= 256 { // bounded: drop everything and start over
		for k, old := range t.s.stmts {
			old.Close()
			delete(t.s.stmts, k)
		}
	}
	t.s.stmts[query] = st
	return st, nil
}

// exec runs a statement that may write, in a group member's savepoint
// (taken first if the member has none yet), and returns the rows it
// changed.
func (t *wtx) exec(query string, args ...any) (int64, error) {
	if t.sp == spLazy {
		if err := t.savepoint(); err != nil {
			return 0, err
		}
	}
	return t.execNow(query, args...)
}

// execFirst is exec for the first write of a member whose writer said it
// cannot be refused once that statement wrote (writeGroupedFirst): a
// statement that either writes or, refused by a constraint, writes
// nothing at all (SQLite undoes a failed statement by itself), so that
// it needs no savepoint of its own. Anywhere else it is exec.
func (t *wtx) execFirst(query string, args ...any) (int64, error) {
	if t.sp != spLazy || !t.firstOnly {
		return t.exec(query, args...)
	}
	n, err := t.execNow(query, args...)
	if err == nil {
		t.sp = spAtomic
	}
	return n, err
}

// savepoint opens the group member's savepoint.
func (t *wtx) savepoint() error {
	if _, err := t.execNow("SAVEPOINT member"); err != nil {
		return err
	}
	t.sp = spTaken
	return nil
}

// execNow runs a statement on the writer and returns the rows it changed.
func (t *wtx) execNow(query string, args ...any) (int64, error) {
	st, err := t.stmt(query)
	if err != nil {
		return 0, err
	}
	res, err := st.ExecContext(t.ctx, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (t *wtx) queryRow(query string, args ...any) *sql.Row {
	st, err := t.stmt(query)
	if err != nil {
		// QueryRowContext on the connection reports the same error from
		// Scan.
		return t.s.wconn.QueryRowContext(t.ctx, query, args...)
	}
	return st.QueryRowContext(t.ctx, args...)
}

// errRollback carries an error decided inside a transaction (a conflict,
// a busy lease): the transaction is rolled back and err returned as is.
type errRollback struct{ err error }

func (e errRollback) Error() string { return e.err.Error() }

// write runs fn in one BEGIN IMMEDIATE transaction on the writer
// connection and commits it. prefix names the hook points
// ("sqlite.put"); "" calls no hooks. Nothing is written when fn or the
// commit fails. A failed COMMIT gives a *StoreError matching
// ErrCommitIndeterminate.
func (s *Saver) write(ctx context.Context, op opInfo, prefix string, fn func(t *wtx) error) error {
	if err := s.live(); err != nil {
		return err
	}
	select {
	case s.wsem <- struct{}{}:
	case <-ctx.Done():
		return op.storeErr(ctx.Err())
	}
	defer func() { <-s.wsem }()
	return s.writeLocked(ctx, op, prefix, fn)
}

// writeLocked is write for a caller that holds wsem.
func (s *Saver) writeLocked(ctx context.Context, op opInfo, prefix string, fn func(t *wtx) error) error {
	defer func() { s.tx = wtx{} }()
	if err := s.live(); err != nil {
		return err
	}
	if s.wal.lost != nil {
		return s.wal.lost
	}
	if err := ctx.Err(); err != nil {
		return op.storeErr(err)
	}
	if _, err := s.writer(ctx); err != nil {
		return op.storeErr(err)
	}
	bg := detached(ctx)
	s.tx = wtx{s: s, ctx: bg}
	t := &s.tx
	if op.changesHeads() {
		// Dropped first, recorded again only once committed.
		t.prevHead = s.heads.entry(op.thread, op.ns)
		s.heads.dropThread(op.thread)
	}
	// BEGIN waits up to busy_timeout for the write lock; the caller's
	// context can cut that short.
	begin, err := t.stmt("BEGIN IMMEDIATE")
	if err == nil {
		_, err = begin.ExecContext(ctx)
	}
	if err != nil {
		// A failed BEGIN normally leaves no transaction, but make sure.
		s.rollback(bg)
		return op.storeErr(err)
	}
	if prefix != "" {
		s.hook(prefix, ".begin")
	}
	if err := fn(t); err != nil {
		s.rollback(bg)
		var rb errRollback
		if errors.As(err, &rb) {
			return rb.err
		}
		return op.storeErr(err)
	}
	if prefix != "" {
		s.hook(prefix, ".beforeCommit")
	}
	if err := s.checkWALInUse(); err != nil {
		s.rollback(bg)
		return s.saveDetachedWAL(bg)
	}
	stamped := s.stampPage1(t)
	commit, err := t.stmt("COMMIT")
	if err != nil {
		s.rollback(bg)
		return op.storeErr(err)
	}
	if _, err := commit.ExecContext(bg); err != nil {
		s.rollback(bg)
		return op.commitErr(err)
	}
	switch {
	case t.savedPut != nil:
		s.heads.putRow(t.savedPut)
	case t.writeRef != nil:
		s.heads.addWrites(t.prevHead, *t.writeRef, t.writeRows)
	}
	if prefix != "" {
		s.hook(prefix, ".afterCommit")
	}
	s.wal.walCommitted(stamped)
	s.keepWAL(bg)
	return nil
}

// rollback ends any open transaction on the writer. If that fails the
// connection is discarded and a fresh one is taken at the next write, so a
// transaction left open can never swallow later writes.
func (s *Saver) rollback(ctx context.Context) {
	if s.wconn == nil {
		return
	}
	if _, err := s.wconn.ExecContext(ctx, "ROLLBACK"); err == nil || !inTransaction(s.wconn) {
		return
	}
	s.dropWriter()
}

func (s *Saver) dropWriter() {
	for k, st := range s.stmts {
		st.Close()
		delete(s.stmts, k)
	}
	// Tell database/sql the connection is bad so that it is closed rather
	// than returned to the pool with a transaction open.
	s.wconn.Raw(func(any) error { return driver.ErrBadConn })
	s.wconn.Close()
	s.wconn = nil
	s.heads.reset(-1) // a new connection counts data_version anew
}

// inTransaction reports whether a transaction is open on conn (true when
// that cannot be told, so that the caller errs on the side of discarding
// the connection). A ROLLBACK fails harmlessly when SQLite already ended
// the transaction itself, as it does after some I/O errors.
func inTransaction(conn *sql.Conn) bool {
	in := true
	conn.Raw(func(dc any) error {
		for range 8 {
			switch c := dc.(type) {
			case interface{ AutoCommit() bool }:
				in = !c.AutoCommit()
				return nil
			case interface{ Raw() driver.Conn }: // a wrapping driver
				dc = c.Raw()
			default:
				return nil
			}
		}
		return nil
	})
	return in
}

// read runs fn in one read transaction on a pooled connection, so that its
// statements see one snapshot of the database.
func (s *Saver) read(ctx context.Context, op opInfo, fn func(c *sql.Conn) error) error {
	if err := s.live(); err != nil {
		return err
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		if s.closed.Load() {
			return s.live()
		}
		return op.storeErr(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN"); err != nil {
		return op.storeErr(err)
	}
	err = fn(conn)
	if _, rerr := conn.ExecContext(detached(ctx), "ROLLBACK"); rerr != nil && inTransaction(conn) {
		conn.Raw(func(any) error { return driver.ErrBadConn })
	}
	if err != nil {
		var rb errRollback
		if errors.As(err, &rb) {
			return rb.err
		}
		var ce *checkpoint.CorruptError
		if errors.As(err, &ce) || errors.Is(err, checkpoint.ErrNotFound) || errors.Is(err, checkpoint.ErrInvalid) {
			return err
		}
		return op.storeErr(err)
	}
	return nil
}
