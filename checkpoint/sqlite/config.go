package sqlite

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// Synchronous is SQLite's synchronous setting in WAL mode: how often a
// commit waits for the disk.
type Synchronous string

// The synchronous settings Open accepts.
const (
	// SyncFull (the default) syncs the WAL at every commit: a commit that
	// returned survives a process crash and a power loss.
	SyncFull Synchronous = "FULL"
	// SyncNormal syncs only at WAL checkpoints. A commit that returned
	// survives a process crash (SIGKILL included), but a power loss or an
	// operating-system crash may roll back the last commits (those since
	// the last WAL checkpoint). The database is never corrupted and the
	// commits that survive form a prefix: the lost ones are the newest.
	SyncNormal Synchronous = "NORMAL"
)

// Defaults applied by Open to zero Config fields.
const (
	DefaultBusyTimeout      = 5 * time.Second
	DefaultMaxOpenConns     = 8
	DefaultGroupCommitMax   = 64
	DefaultGroupCommitBytes = 8 << 20
)

// Bounds on the group commit settings.
const (
	maxGroupCommitMax   = 4096
	maxGroupCommitBytes = 1 << 30
)

// Config tunes Open. The zero value means the defaults.
type Config struct {
	// Synchronous is SyncFull (default) or SyncNormal.
	Synchronous Synchronous
	// BusyTimeout is how long a statement waits for a lock held by another
	// connection or process before it fails with an error matching
	// ErrStoreBusy (default 5s). It is applied in whole milliseconds.
	BusyTimeout time.Duration
	// MaxOpenConns caps the connection pool, the saver's dedicated writer
	// connection included (default 8, at least 2). Readers and the users
	// of DB share the rest.
	MaxOpenConns int
	// GroupCommitMax bounds group commit: how many Put, PutChain and
	// PutWrites calls that wait for this Saver's writer at once may commit
	// in one transaction (default 64; 1 turns group commit off; at most
	// 4096). Each call keeps its own result: one that is refused (a
	// conflict, a busy or fenced lease, an invalid row) fails alone and
	// the others commit; a crash leaves each call's checkpoint and writes
	// whole or absent. A call that finds the writer idle commits at once,
	// alone: nothing ever waits for company.
	GroupCommitMax int
	// GroupCommitBytes bounds the bytes one group's calls write in all
	// (default 8 MiB, at most 1 GiB); a single call larger than that
	// still commits, alone.
	GroupCommitBytes int
	// Now is the clock for leases and timestamps (default time.Now).
	Now checkpoint.Clock
	// Hook is for tests: crash tests kill the process from it. Production
	// code leaves it nil, and then it costs nothing. When set, the saver
	// calls it at named points of its write transactions:
	// "sqlite.put.begin" (after BEGIN IMMEDIATE), "sqlite.put.beforeCommit",
	// "sqlite.put.afterCommit", "sqlite.writes.begin",
	// "sqlite.writes.beforeCommit" and "sqlite.writes.afterCommit" (in a
	// group commit, each member's ".begin" as it starts, then
	// "sqlite.group.member" after its statements, and every member's
	// ".beforeCommit" and ".afterCommit" around the one COMMIT); and,
	// while Open creates and sets up a file, "sqlite.create.identity",
	// "sqlite.create.wal", "sqlite.setup.begin", "sqlite.setup.schema<N>"
	// (after the statements of the migration to schema N),
	// "sqlite.setup.beforeCommit" and "sqlite.setup.afterCommit". It runs
	// on the writing goroutine, mostly inside a transaction that holds the
	// file's write lock, so the saver's other writes, and other processes'
	// on the file, wait for it: it must be fast, must not panic and must
	// not call the saver.
	Hook func(point string)
	// DriverName is for tests: fault tests open the file through a
	// driver that wraps go-sqlite3 and fails chosen operations. Production
	// code leaves it empty, which means go-sqlite3 ("sqlite3"). When set,
	// it names a database/sql driver registered with sql.Register that
	// wraps go-sqlite3 and takes its DSN parameters: they set WAL mode,
	// Synchronous, BusyTimeout, foreign keys and immediate transactions,
	// and Open checks only the journal mode, so a driver that ignores the
	// others leaves the saver without the guarantees this package states.
	DriverName string
}

// ConfigError reports an invalid Config field (or path). It matches
// ErrInvalidConfig.
type ConfigError struct {
	Field  string // "Synchronous", "BusyTimeout", "MaxOpenConns", "GroupCommitMax", "GroupCommitBytes" or "path"
	Value  string
	Reason string
}

// Error names the field, its value and what is wrong with it.
func (e *ConfigError) Error() string {
	return fmt.Sprintf("checkpoint/sqlite: invalid %s %s: %s", e.Field, e.Value, e.Reason)
}

// Is makes errors.Is(err, ErrInvalidConfig) true.
func (e *ConfigError) Is(target error) bool { return target == ErrInvalidConfig }

// resolved is a validated Config with defaults applied.
type resolved struct {
	path         string
	sync         Synchronous
	busyMillis   int64
	maxOpenConns int
	groupMax     int
	groupBytes   int
	now          checkpoint.Clock
	hook         func(string)
	driverName   string
}

const driverName = "sqlite3"

// resolve validates cfg and applies defaults. It returns a *ConfigError.
func resolve(path string, cfg Config) (*resolved, error) {
	r := &resolved{path: path, sync: cfg.Synchronous, maxOpenConns: cfg.MaxOpenConns, now: cfg.Now, hook: cfg.Hook, driverName: cfg.DriverName}
	switch {
	case path == "":
		return nil, &ConfigError{Field: "path", Value: `""`, Reason: "a database file is required"}
	case path == ":memory:" || strings.HasPrefix(path, "file:"):
		return nil, &ConfigError{Field: "path", Value: strconv.Quote(path), Reason: "give a file path (use checkpoint.MemorySaver for an in-memory saver)"}
	case strings.ContainsAny(path, "?\x00"):
		return nil, &ConfigError{Field: "path", Value: strconv.Quote(path), Reason: "must not contain '?' or NUL"}
	}
	switch strings.ToUpper(string(r.sync)) {
	case "":
		r.sync = SyncFull
	case string(SyncFull):
		r.sync = SyncFull
	case string(SyncNormal):
		r.sync = SyncNormal
	default:
		return nil, &ConfigError{Field: "Synchronous", Value: strconv.Quote(string(cfg.Synchronous)), Reason: `want "FULL" or "NORMAL"`}
	}
	bt := cfg.BusyTimeout
	if bt == 0 {
		bt = DefaultBusyTimeout
	}
	if bt < time.Millisecond || bt > time.Hour {
		return nil, &ConfigError{Field: "BusyTimeout", Value: cfg.BusyTimeout.String(), Reason: "want between 1ms and 1h"}
	}
	r.busyMillis = int64((bt + time.Millisecond - 1) / time.Millisecond)
	if r.maxOpenConns == 0 {
		r.maxOpenConns = DefaultMaxOpenConns
	}
	if r.maxOpenConns < 2 || r.maxOpenConns > 1024 {
		return nil, &ConfigError{Field: "MaxOpenConns", Value: strconv.Itoa(cfg.MaxOpenConns), Reason: "want between 2 and 1024 (one connection is the writer)"}
	}
	r.groupMax, r.groupBytes = cfg.GroupCommitMax, cfg.GroupCommitBytes
	if r.groupMax == 0 {
		r.groupMax = DefaultGroupCommitMax
	}
	if r.groupMax < 1 || r.groupMax > maxGroupCommitMax {
		return nil, &ConfigError{Field: "GroupCommitMax", Value: strconv.Itoa(cfg.GroupCommitMax), Reason: "want between 1 (no group commit) and 4096"}
	}
	if r.groupBytes == 0 {
		r.groupBytes = DefaultGroupCommitBytes
	}
	if r.groupBytes < 1 || r.groupBytes > maxGroupCommitBytes {
		return nil, &ConfigError{Field: "GroupCommitBytes", Value: strconv.Itoa(cfg.GroupCommitBytes), Reason: "want between 1 and 1073741824 (1 GiB)"}
	}
	if r.now == nil {
		r.now = time.Now
	}
	if r.driverName == "" {
		r.driverName = driverName
	}
	return r, nil
}

// dsn returns the data source name every pooled connection is opened with:
// every pragma is in it, because database/sql has no per-connection setup
// hook and a pragma run once would miss the other pooled connections.
func (r *resolved) dsn() string {
	v := url.Values{}
	v.Set("_journal_mode", "WAL")
	v.Set("_synchronous", string(r.sync))
	v.Set("_busy_timeout", strconv.FormatInt(r.busyMillis, 10))
	v.Set("_foreign_keys", "on")
	v.Set("_txlock", "immediate")
	v.Set("_stmt_cache_size", "32")
	return r.path + "?" + v.Encode()
}

// createDSN opens a new file once, before the pool (see create): with
// auto_vacuum, which can only be chosen before the first page is written,
// and no journal mode, so that the first transaction writes the database
// file itself; create then switches it to WAL. It is not in the pool's DSN
// because setting auto_vacuum rewrites the header of an existing file.
func (r *resolved) createDSN() string {
	return r.path + "?_auto_vacuum=incremental&_busy_timeout=" + strconv.FormatInt(r.busyMillis, 10)
}

// callHook calls Config.Hook, if set, at point.
func (r *resolved) callHook(point string) {
	if r.hook != nil {
		r.hook(point)
	}
}

// readOnlyDSN opens a file read-only (a URI, for SQLite's mode=ro): such
// a connection reads the -wal beside the file as any other does, but never
// copies it into the file, which the last read-write connection to close
// does.
func (r *resolved) readOnlyDSN() string {
	return fileURI(r.path) + "?mode=ro&_busy_timeout=" + strconv.FormatInt(r.busyMillis, 10)
}

// fileURI turns a file path into a SQLite URI naming it: '%' and '#' are
// escaped ('?' cannot be in the path, see resolve), and a Windows drive
// path gets the leading slash SQLite wants.
func fileURI(path string) string {
	p := filepath.ToSlash(path)
	if len(p) >= 2 && p[1] == ':' {
		p = "/" + p
	}
	p = strings.NewReplacer("%", "%25", "#", "%23").Replace(p)
	return "file:" + p
}

// probeDSN opens a file without changing anything in it: no journal mode,
// so a file written by a newer schema can be inspected and left alone.
func (r *resolved) probeDSN() string {
	return r.path + "?_busy_timeout=" + strconv.FormatInt(r.busyMillis, 10)
}
