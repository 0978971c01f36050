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
	// it (and SQLite's -wal and -shm files beside it) in its directory,
	// and this process may not. Nothing was created or changed. An
	// operator who may only read a database inspects it with the lockstep
	// CLI (see its doc) instead.
	ErrReadOnly = errors.New("checkpoint/sqlite: the database is read-only to this process")
	// ErrInvalidConfig: a Config field or the path is invalid (see
	// ConfigError).
	ErrInvalidConfig = errors.New("checkpoint/sqlite: invalid configuration")
	// ErrCannotMigrate: the file holds data the current schema cannot
	// represent (a schema-1 thread whose head is not its newest
	// checkpoint). The migration was rolled back and the file left as it
	// was; the error names the thread.
	ErrCannotMigrate = errors.New("checkpoint/sqlite: the file cannot be migrated to the current schema")
)

// SchemaError reports a database whose schema version (PRAGMA
// user_version) this code cannot use. It matches ErrSchemaTooNew when the
// file's version is newer than the code's, and ErrSchemaTooOld when it is
// older (only OpenExisting refuses those; Open migrates them).
type SchemaError struct {
	Path string
	File int // the file's schema version
	Code int // the newest schema version this code knows
}

// Error names the file and both schema versions.
func (e *SchemaError) Error() string {
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
	return target == ErrSchemaTooNew && e.File > e.Code || target == ErrSchemaTooOld && e.File < e.Code
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

// Is matches ErrStoreBusy and ErrCommitIndeterminate.
func (e *StoreError) Is(target error) bool {
	switch target {
	case ErrStoreBusy:
		return isBusy(e.Err)
	case ErrCommitIndeterminate:
		return e.Commit
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
// of op.thread (every operation but taking and dropping a lease can).
func (o opInfo) changesHeads() bool { return o.op != "claim" && o.op != "release" }

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
