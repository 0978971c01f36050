package sqlite

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	sqlite3 "github.com/mattn/go-sqlite3"
)

// Sentinel errors of the SQLite saver. Match them with errors.Is. The
// saver also returns the sentinels and typed errors of package checkpoint
// (ErrNotFound, ErrConflict, ErrThreadBusy, ErrCorrupt, ErrInvalid,
// ErrClosed).
var (
	// ErrStoreBusy: SQLite reported the database busy or locked after
	// Config.BusyTimeout (another connection or process held the write
	// lock that long). Nothing was written; the operation may be retried.
	ErrStoreBusy = errors.New("checkpoint/sqlite: database is busy")
	// ErrCommitIndeterminate: COMMIT returned an error. SQLite may still
	// have made the transaction durable (an I/O error after the WAL frames
	// were written, for example), so the caller must not assume either
	// outcome: read the thread's head back to find out, as the graph
	// runtime does. The saver never reports such a write as saved.
	ErrCommitIndeterminate = errors.New("checkpoint/sqlite: commit failed; the write may or may not be durable")
	// ErrSchemaTooNew: the file was written by a newer version of this
	// package (see SchemaError). The file was not modified.
	ErrSchemaTooNew = errors.New("checkpoint/sqlite: database schema is newer than this code")
	// ErrSchemaTooOld: OpenExisting found a file written by an older
	// version of this package, which only Open migrates (see
	// SchemaError). The file was not modified.
	ErrSchemaTooOld = errors.New("checkpoint/sqlite: database schema is older than this code")
	// ErrNotLockstep: the file is a SQLite database but not one this
	// package wrote (another program set its schema version, and it has
	// none of lockstep's tables), or, for OpenExisting, it holds no
	// lockstep database at all. The file was not modified.
	ErrNotLockstep = errors.New("checkpoint/sqlite: not a lockstep database")
	// ErrReadOnly: Open needs to write the database file, and to create
	// it (and SQLite's -wal and -shm files beside it) in its directory, or
	// to write the -wal and -shm that are there, and this process may not
	// (modes, a read-only mount; or SQLite reported SQLITE_READONLY). Open
	// checks before SQLite opens anything, so nothing was created or
	// changed. A later write that SQLite refuses as read-only is a
	// *StoreError matching it. An operator who may only read a database
	// inspects it with the lockstep CLI (see its doc) instead.
	ErrReadOnly = errors.New("checkpoint/sqlite: the database is read-only to this process")
	// ErrInvalidConfig: a Config field or the path is invalid (see
	// ConfigError).
	ErrInvalidConfig = errors.New("checkpoint/sqlite: invalid configuration")
	// ErrSchemaInvalid: the file's schema version (PRAGMA user_version)
	// is one no lockstep writes: negative, 0 on a file that already has
	// lockstep's tables, or a version whose tables are not the ones that
	// version has (see SchemaError). The file was damaged or edited by
	// hand; it was not modified.
	ErrSchemaInvalid = errors.New("checkpoint/sqlite: database schema version is not valid")
	// ErrForeignWAL: the -wal file beside the database holds pages of
	// another database (or there is a -wal and no database), which SQLite
	// would replay into this one, replacing its data (see WALError). Open
	// and OpenExisting read the -wal themselves before SQLite does, refuse
	// the file, and change nothing.
	ErrForeignWAL = errors.New("checkpoint/sqlite: the -wal file beside the database belongs to another database")
	// ErrWALDeleted: the -wal file SQLite was writing was deleted, moved or
	// replaced while the saver had the database open (see WALError). The
	// saver refuses every later write: it would go to a file no other
	// connection or process reads, and be lost when the process exits.
	ErrWALDeleted = errors.New("checkpoint/sqlite: the database's -wal file was deleted or replaced while in use")
	// ErrCannotMigrate: the file holds data the current schema cannot
	// represent (a schema-1 thread whose head is not its newest
	// checkpoint). The migration was rolled back and the file left as it
	// was; the error names the thread.
	ErrCannotMigrate = errors.New("checkpoint/sqlite: the file cannot be migrated to the current schema")
)

// SchemaError reports a database whose schema version (PRAGMA
// user_version) this code cannot use. It matches ErrSchemaTooNew when the
// file's version is newer than the code's, ErrSchemaTooOld when it is
// older (only OpenExisting refuses those; Open migrates them), and
// ErrSchemaInvalid, and neither of the others, when Invalid is set.
type SchemaError struct {
	Path string
	File int // the file's schema version
	Code int // the newest schema version this code knows
	// Invalid says why File is a version no lockstep writes (negative, 0
	// beside lockstep's tables, or not the version of the tables the file
	// has); empty for a valid version.
	Invalid string
}

// Error names the file and both schema versions, and says what to do.
func (e *SchemaError) Error() string {
	if e.Invalid != "" {
		return fmt.Sprintf("checkpoint/sqlite: %s has schema version %d, which no lockstep writes (%s): the file is damaged or was edited by hand; restore it from a backup or set PRAGMA user_version to the version of its tables (the file was not modified)",
			strconv.Quote(e.Path), e.File, e.Invalid)
	}
	if e.File < e.Code {
		return fmt.Sprintf("checkpoint/sqlite: %s has schema version %d, older than this code's %d: open it with Open, which migrates it (the file was not modified)",
			strconv.Quote(e.Path), e.File, e.Code)
	}
	return fmt.Sprintf("checkpoint/sqlite: %s has schema version %d, this code knows up to %d: if it is a lockstep database, open it with a newer version of lockstep (the file was not modified)",
		strconv.Quote(e.Path), e.File, e.Code)
}

// Is makes errors.Is(err, ErrSchemaTooNew) true when the file is newer,
// and errors.Is(err, ErrSchemaTooOld) when it is older.
func (e *SchemaError) Is(target error) bool {
	if e.Invalid != "" {
		return target == ErrSchemaInvalid
	}
	return target == ErrSchemaTooNew && e.File > e.Code || target == ErrSchemaTooOld && e.File < e.Code
}

// WALError reports a -wal file that is not the one the database needs. It
// matches ErrForeignWAL when Foreign is set (Open found another database's
// -wal beside the file, and changed nothing) and ErrWALDeleted otherwise
// (the -wal the saver was writing was deleted or replaced under it).
type WALError struct {
	Path    string // the database file
	Foreign bool
	// Reason says what was found: the identities that differ, the inodes.
	Reason string
	// Saved, for ErrWALDeleted: the commits acknowledged before the saver
	// noticed were copied from the deleted -wal into the database file, so
	// that they survive the process.
	Saved bool
	// Err is the driver's error when SQLite could not read the file with
	// the -wal (SQLITE_CORRUPT, SQLITE_NOTADB); nil otherwise.
	Err error
}

// Unwrap returns Err.
func (e *WALError) Unwrap() error { return e.Err }

// Error says what was found, what it means for the data, and what to do.
func (e *WALError) Error() string {
	p := strconv.Quote(e.Path)
	if e.Foreign {
		return fmt.Sprintf("checkpoint/sqlite: %s: the -wal file beside it is not this database's (%s), and opening the database would replay it into the file, so it was not opened and nothing was modified: "+
			"if the -wal came from another database, move it and the -shm away; if the database file was restored from a copy, restore the -wal saved with it, or none",
			p, e.Reason)
	}
	saved := "the commits acknowledged before were copied into the database file"
	if !e.Saved {
		saved = "the commits acknowledged since the last checkpoint are only in the deleted file: Close the saver before the process exits, which copies them into the database"
	}
	return fmt.Sprintf("checkpoint/sqlite: %s: its -wal file was deleted or replaced while this saver was writing it (%s); the saver refuses every later write, which would go to a file no other connection or process reads and be lost when this process exits; "+
		"%s. Close the saver and open the database again, and never delete, move or replace the -wal or -shm file of a database in use",
		p, e.Reason, saved)
}

// Is matches ErrForeignWAL or ErrWALDeleted.
func (e *WALError) Is(target error) bool {
	return e.Foreign && target == ErrForeignWAL || !e.Foreign && target == ErrWALDeleted
}

// StoreError reports a failure of SQLite itself (I/O error, disk full,
// busy, a failed commit...) during an operation of the saver. It wraps the
// driver's error (a sqlite3.Error, which errors.As finds), matches
// ErrStoreBusy when SQLite was busy or locked, and ErrCommitIndeterminate
// when the failure was the COMMIT.
type StoreError struct {
	Op         string // "put", "put writes", "claim", "get", "list"...
	Thread     string
	NS         string
	Checkpoint string
	Commit     bool // the COMMIT failed: the outcome is unknown
	Err        error
}

// Error names the operation, thread, namespace and checkpoint, says when
// the outcome of a commit is unknown, and ends with the driver's message.
func (e *StoreError) Error() string {
	s := "checkpoint/sqlite: " + e.Op
	if e.Thread != "" {
		s += " thread " + strconv.Quote(e.Thread)
	}
	if e.NS != "" {
		s += " ns " + strconv.Quote(e.NS)
	}
	if e.Checkpoint != "" {
		s += " checkpoint " + strconv.Quote(e.Checkpoint)
	}
	if e.Commit {
		s += ": commit failed, the write may or may not be durable (re-read the head)"
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the driver's error.
func (e *StoreError) Unwrap() error { return e.Err }

// Is matches ErrStoreBusy, ErrCommitIndeterminate, and ErrReadOnly when
// SQLite refused to write (SQLITE_READONLY: the file, its -wal or -shm, or
// its directory became read-only to this process).
func (e *StoreError) Is(target error) bool {
	switch target {
	case ErrStoreBusy:
		return isBusy(e.Err)
	case ErrCommitIndeterminate:
		return e.Commit
	case ErrReadOnly:
		return isReadOnly(e.Err)
	}
	return false
}

// Retryable reports whether the operation may simply be retried: SQLite
// was busy or locked, and nothing was written.
func (e *StoreError) Retryable() bool { return isBusy(e.Err) && !e.Commit }

func isBusy(err error) bool {
	var se sqlite3.Error
	if errors.As(err, &se) {
		return se.Code == sqlite3.ErrBusy || se.Code == sqlite3.ErrLocked
	}
	var sp *sqlite3.Error
	if errors.As(err, &sp) && sp != nil {
		return sp.Code == sqlite3.ErrBusy || sp.Code == sqlite3.ErrLocked
	}
	return false
}

// isCorrupt reports whether err is SQLite's SQLITE_CORRUPT or
// SQLITE_NOTADB.
func isCorrupt(err error) bool {
	var se sqlite3.Error
	if errors.As(err, &se) {
		return se.Code == sqlite3.ErrCorrupt || se.Code == sqlite3.ErrNotADB
	}
	return false
}

// isReadOnly reports whether err is SQLite's SQLITE_READONLY (any of its
// extended codes: a read-only file, directory, -shm or mount).
func isReadOnly(err error) bool {
	var se sqlite3.Error
	if errors.As(err, &se) {
		return se.Code == sqlite3.ErrReadonly
	}
	var sp *sqlite3.Error
	if errors.As(err, &sp) && sp != nil {
		return sp.Code == sqlite3.ErrReadonly
	}
	return false
}

func isConstraint(err error) bool {
	var se sqlite3.Error
	if errors.As(err, &se) {
		return se.Code == sqlite3.ErrConstraint
	}
	return false
}

// opInfo names an operation for errors.
type opInfo struct {
	op, thread, ns, checkpoint string
}

// changesHeads reports whether the operation can change what Get reads
// of op.thread (every operation on a thread but taking and dropping a
// lease, and the work a pool of workers records, can; storing a topology
// is on none).
func (o opInfo) changesHeads() bool {
	switch o.op {
	case "claim", "release", "claim due", "hold", "settle", "enqueue", "fenced write":
		return false
	}
	return o.thread != ""
}

// storeErr wraps a driver error. Context errors and errors that are
// already typed pass through unchanged (wrapped with the operation).
func (o opInfo) storeErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("checkpoint/sqlite: %s thread %q: %w", o.op, o.thread, err)
	}
	var se *StoreError
	if errors.As(err, &se) {
		return err
	}
	return &StoreError{Op: o.op, Thread: o.thread, NS: o.ns, Checkpoint: o.checkpoint, Err: err}
}

func (o opInfo) commitErr(err error) error {
	return &StoreError{Op: o.op, Thread: o.thread, NS: o.ns, Checkpoint: o.checkpoint, Commit: true, Err: err}
}
