package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/jackc/pgx/v5/pgconn"
)

// Sentinel errors of the Postgres stores. Match them with errors.Is. The
// saver also returns the sentinels and typed errors of package checkpoint
// (ErrNotFound, ErrConflict, ErrThreadBusy, ErrCorrupt, ErrInvalid,
// ErrClosed), the approval store those of package approval, and the
// ledger those of package ledger.
var (
	// ErrNotPostgres: the URL is not a PostgreSQL URL (postgres:// or
	// postgresql://), or the server it names does not speak PostgreSQL's
	// protocol. Nothing was connected to or changed.
	ErrNotPostgres = errors.New("postgres: not a PostgreSQL URL or server")
	// ErrInvalidConfig: a Config field is out of range (see ConfigError).
	ErrInvalidConfig = errors.New("postgres: invalid configuration")
	// ErrUnavailable: the database could not be reached, or the
	// connection broke (a dropped connection, a server restart, a
	// statement timeout). Nothing was written, except for a commit whose
	// connection broke after the statement was sent, which is
	// ErrCommitIndeterminate as well. The operation may be retried: the
	// pool replaces broken connections.
	ErrUnavailable = errors.New("postgres: database unavailable")
	// ErrCommitIndeterminate: the connection broke after a write was
	// sent and before its result came back, so the write may or may not
	// have committed: read the thread's head back to find out, as the
	// graph runtime does. The saver never reports such a write as saved.
	ErrCommitIndeterminate = errors.New("postgres: the connection broke during a commit; the write may or may not be durable")
	// ErrSchemaTooNew: the database holds lockstep tables of a newer
	// version than this code knows (see SchemaError). Nothing was changed.
	ErrSchemaTooNew = errors.New("postgres: database schema is newer than this code")
	// ErrSchemaTooOld: OpenExisting found lockstep tables of an older
	// version, which only Open migrates (see SchemaError). Nothing was
	// changed.
	ErrSchemaTooOld = errors.New("postgres: database schema is older than this code")
	// ErrSchemaInvalid: the recorded schema versions are ones no lockstep
	// writes (a gap, 0 or negative: edited or damaged). Nothing was
	// changed.
	ErrSchemaInvalid = errors.New("postgres: database schema version is not valid")
	// ErrNotLockstep: the schema (Config.Schema) exists and is another
	// application's (it has tables or other objects and no lockstep
	// version table), or, for OpenExisting, the database holds no
	// lockstep schema at all. Nothing was changed.
	ErrNotLockstep = errors.New("postgres: not a lockstep database")
	// ErrUnsupported: the server cannot hold lockstep's data (an encoding
	// other than UTF8, a version before PostgreSQL 13), or a value cannot
	// be stored in JSONB without changing it (see the package doc). Nothing
	// was written.
	ErrUnsupported = errors.New("postgres: not supported by this database")
)

// ConfigError reports an invalid Config field or URL. It matches
// ErrInvalidConfig, or ErrNotPostgres for the URL.
type ConfigError struct {
	Field  string
	Reason string
	Err    error // ErrInvalidConfig or ErrNotPostgres
}

// Error names the field and what is wrong with it.
func (e *ConfigError) Error() string {
	return fmt.Sprintf("postgres: %s: %s", e.Field, e.Reason)
}

// Is matches the error's kind.
func (e *ConfigError) Is(target error) bool { return target == e.Err }

// SchemaError reports lockstep tables of a version this code cannot use.
// It matches ErrSchemaTooNew, ErrSchemaTooOld or ErrSchemaInvalid.
type SchemaError struct {
	Schema   string // the Postgres schema holding the tables
	Database int    // the newest version the database records
	Code     int    // the newest version this code knows
	Invalid  string // why the recorded versions are not valid, when they are not
}

// Error says what the database holds, what this code knows and what to
// do.
func (e *SchemaError) Error() string {
	switch {
	case e.Invalid != "":
		return fmt.Sprintf("postgres: schema %s: %s: the version table was edited or damaged (nothing was changed)", strconv.Quote(e.Schema), e.Invalid)
	case e.Database > e.Code:
		return fmt.Sprintf("postgres: schema %s has lockstep tables of version %d; this build knows up to %d: use a newer build (nothing was changed)", strconv.Quote(e.Schema), e.Database, e.Code)
	default:
		return fmt.Sprintf("postgres: schema %s has lockstep tables of version %d; this build reads only version %d: open it once with postgres.Open (a program that runs graphs) to migrate it (nothing was changed)", strconv.Quote(e.Schema), e.Database, e.Code)
	}
}

// Is matches ErrSchemaTooNew, ErrSchemaTooOld or ErrSchemaInvalid.
func (e *SchemaError) Is(target error) bool {
	switch {
	case e.Invalid != "":
		return target == ErrSchemaInvalid
	case e.Database > e.Code:
		return target == ErrSchemaTooNew
	default:
		return target == ErrSchemaTooOld
	}
}

// StoreError is a failure of the database or of the connection to it,
// for one operation. It matches ErrUnavailable when the connection broke
// or could not be made (and ErrCommitIndeterminate when it broke after a
// write was sent), and unwraps to the driver's error (a *pgconn.PgError
// carries the SQLSTATE).
type StoreError struct {
	Op     string // "put", "get", "begin", ...
	Thread string // the thread, when the operation has one
	Err    error
	// Indeterminate: the write may have committed (ErrCommitIndeterminate).
	Indeterminate bool
	unavailable   bool
}

// Error names the operation, the thread and the cause, and says what to
// do.
func (e *StoreError) Error() string {
	s := "postgres: " + e.Op
	if e.Thread != "" {
		s += " (thread " + strconv.Quote(e.Thread) + ")"
	}
	s += ": " + e.Err.Error()
	switch {
	case e.Indeterminate:
		s += " (the connection broke after the write was sent: it may or may not have committed; read the thread back)"
	case e.unavailable:
		s += " (the database is unreachable or restarting; nothing was written; retry)"
	}
	return s
}

// Unwrap returns the driver's error.
func (e *StoreError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrUnavailable) true for connection failures
// and errors.Is(err, ErrCommitIndeterminate) for an indeterminate commit.
func (e *StoreError) Is(target error) bool {
	switch target {
	case ErrUnavailable:
		return e.unavailable || e.Indeterminate
	case ErrCommitIndeterminate:
		return e.Indeterminate
	}
	return false
}

// connectionLost reports whether err says the connection to the server
// broke or could not be made: network errors, a server shutting down or
// starting (SQLSTATE class 08, 57P01-57P03), or pgconn's own "connection
// closed" errors.
func connectionLost(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case len(pe.Code) == 5 && pe.Code[:2] == "08":
			return true
		case pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03":
			return true
		}
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	if pgconn.Timeout(err) {
		return true
	}
	// pgconn wraps a broken connection's read and write errors; anything
	// that is neither a server error nor a context error is the
	// connection's.
	return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// storeErr wraps a database error of op. write says whether the
// operation was a write whose statement may have reached the server.
// Context errors are returned as they are.
func storeErr(op, thread string, err error, write bool) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		if write && !pgconn.SafeToRetry(err) {
			// Cancelled after the write was sent: the server may have
			// committed it before it saw the cancellation.
			return &StoreError{Op: op, Thread: thread, Err: err, Indeterminate: true}
		}
		return err
	}
	lost := connectionLost(err)
	e := &StoreError{Op: op, Thread: thread, Err: err, unavailable: lost}
	if lost && write && !pgconn.SafeToRetry(err) {
		e.Indeterminate = true
	}
	return e
}

// sqlState returns err's SQLSTATE, or "".
func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}
