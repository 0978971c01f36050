package escalate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/lockstepgo/lockstep/internal/testhook"
)

// The points of the tools' bodies at which a test hook in the run's
// context (internal/testhook) is called: before the tracker (or the
// outbox) writes, and after it wrote, before the tool returns and its
// outcome is recorded. Crash tests kill the process there.
const (
	HookBeforeCreate = "tool:create_issue:before-effect"
	HookAfterCreate  = "tool:create_issue:after-effect"
	HookBeforeQueue  = "tool:queue_escalation:before-effect"
	HookAfterQueue   = "tool:queue_escalation:after-effect"
)

// StatusError is the tracker's HTTP failure: its status code.
type StatusError struct {
	Status int
}

// Error returns the status and its text.
func (e *StatusError) Error() string {
	return fmt.Sprintf("issue tracker answered %d %s", e.Status, http.StatusText(e.Status))
}

// NewIssue is what a create request carries.
type NewIssue struct {
	Repository string
	Title      string
	Body       string
	Severity   string
}

// Issue is an issue of the tracker.
type Issue struct {
	Number     int    `json:"number"`
	URL        string `json:"url"`
	Repository string `json:"repository"`
	Title      string `json:"title"`
	CreatedAt  string `json:"created_at"`
	// Existing is set when the idempotency key had created the issue
	// before: this is that issue, and nothing was created now.
	Existing bool `json:"existing,omitempty"`
}

// Tracker is a fake issue tracker (think GitHub issues) with the two
// failures this example needs: it is slow to answer a create (Latency,
// after it has created the issue), and it can be down (SetOutage: every
// request fails with 503). It keeps its issues in table tracker_issues of
// the lockstep database file and deduplicates creates by idempotency key,
// so a retry of a create that timed out returns the issue the first
// attempt created. It is safe for concurrent use.
type Tracker struct {
	db      *sql.DB
	now     func() time.Time
	latency time.Duration

	outage   atomic.Bool
	requests atomic.Int64
	creates  atomic.Int64
}

// OpenTracker creates the tracker's table in db if needed and returns the
// tracker. latency is how long a create takes to answer after it created
// the issue; now stamps issues (nil: time.Now).
func OpenTracker(ctx context.Context, db *sql.DB, now func() time.Time, latency time.Duration) (*Tracker, error) {
	if now == nil {
		now = time.Now
	}
	_, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS tracker_issues (
		number          INTEGER PRIMARY KEY AUTOINCREMENT,
		idempotency_key TEXT NOT NULL UNIQUE,
		repository      TEXT NOT NULL,
		title           TEXT NOT NULL,
		body            TEXT NOT NULL,
		severity        TEXT NOT NULL,
		created_at      TEXT NOT NULL
	)`)
	if err != nil {
		return nil, fmt.Errorf("tracker: create table: %w", err)
	}
	return &Tracker{db: db, now: now, latency: latency}, nil
}

// SetOutage turns the outage on or off: while it is on, every request
// fails with a *StatusError of 503.
func (t *Tracker) SetOutage(on bool) { t.outage.Store(on) }

// Create creates an issue under the idempotency key (required), or returns
// the issue the key created before, at once. A new issue is created first
// and answered Latency later: when ctx ends before that (the client gave
// up), Create returns ctx's error, and the issue exists all the same.
func (t *Tracker) Create(ctx context.Context, in NewIssue, key string) (Issue, error) {
	t.requests.Add(1)
	if t.outage.Load() {
		return Issue{}, &StatusError{Status: http.StatusServiceUnavailable}
	}
	if key == "" {
		return Issue{}, &StatusError{Status: http.StatusBadRequest}
	}
	// The server finishes its write whether or not the client waits.
	server := context.WithoutCancel(ctx)
	testhook.Hit(ctx, HookBeforeCreate)
	res, err := t.db.ExecContext(server, `INSERT INTO tracker_issues (idempotency_key, repository, title, body, severity, created_at)
		VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (idempotency_key) DO NOTHING`,
		key, in.Repository, in.Title, in.Body, in.Severity, t.now().UTC().Format(time.RFC3339))
	if err != nil {
		return Issue{}, fmt.Errorf("tracker: create: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return Issue{}, fmt.Errorf("tracker: create: %w", err)
	}
	is, err := t.byKey(server, key)
	if err != nil {
		return Issue{}, err
	}
	if n == 0 {
		is.Existing = true
		return is, nil
	}
	t.creates.Add(1)
	testhook.Hit(ctx, HookAfterCreate)
	timer := time.NewTimer(t.latency)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return Issue{}, ctx.Err()
	case <-timer.C:
		return is, nil
	}
}

func (t *Tracker) byKey(ctx context.Context, key string) (Issue, error) {
	var is Issue
	err := t.db.QueryRowContext(ctx, `SELECT number, repository, title, created_at FROM tracker_issues WHERE idempotency_key = ?`, key).
		Scan(&is.Number, &is.Repository, &is.Title, &is.CreatedAt)
	if err != nil {
		return Issue{}, fmt.Errorf("tracker: read issue: %w", err)
	}
	is.URL = issueURL(is.Repository, is.Number)
	return is, nil
}

func issueURL(repo string, n int) string {
	return fmt.Sprintf("https://tracker.example/%s/issues/%d", repo, n)
}

// Issues returns every issue, by number.
func (t *Tracker) Issues(ctx context.Context) ([]Issue, error) {
	rows, err := t.db.QueryContext(ctx, `SELECT number, repository, title, created_at FROM tracker_issues ORDER BY number`)
	if err != nil {
		return nil, fmt.Errorf("tracker: list issues: %w", err)
	}
	defer rows.Close()
	var out []Issue
	for rows.Next() {
		var is Issue
		if err := rows.Scan(&is.Number, &is.Repository, &is.Title, &is.CreatedAt); err != nil {
			return nil, fmt.Errorf("tracker: list issues: %w", err)
		}
		is.URL = issueURL(is.Repository, is.Number)
		out = append(out, is)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("tracker: list issues: %w", err)
	}
	return out, nil
}

// Requests returns how many requests this Tracker value received (in this
// process).
func (t *Tracker) Requests() int { return int(t.requests.Load()) }

// Creates returns how many issues this Tracker value created (in this
// process).
func (t *Tracker) Creates() int { return int(t.creates.Load()) }

// Outbox is the local queue of escalations that could not be filed: table
// escalation_outbox of the lockstep database file. An operator (or a job)
// files them when the tracker is back. It is safe for concurrent use.
type Outbox struct {
	db  *sql.DB
	now func() time.Time
}

// Queued is an escalation in the outbox.
type Queued struct {
	ID         string `json:"outbox_id"`
	Repository string `json:"repository"`
	Title      string `json:"title"`
	QueuedAt   string `json:"queued_at"`
}

// OpenOutbox creates the outbox table in db if needed and returns the
// outbox (now: nil means time.Now).
func OpenOutbox(ctx context.Context, db *sql.DB, now func() time.Time) (*Outbox, error) {
	if now == nil {
		now = time.Now
	}
	_, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS escalation_outbox (
		id              INTEGER PRIMARY KEY AUTOINCREMENT,
		idempotency_key TEXT NOT NULL UNIQUE,
		repository      TEXT NOT NULL,
		title           TEXT NOT NULL,
		body            TEXT NOT NULL,
		severity        TEXT NOT NULL,
		queued_at       TEXT NOT NULL
	)`)
	if err != nil {
		return nil, fmt.Errorf("outbox: create table: %w", err)
	}
	return &Outbox{db: db, now: now}, nil
}

// Add queues an escalation under the idempotency key (required), or
// returns the entry the key queued before.
func (o *Outbox) Add(ctx context.Context, in NewIssue, key string) (Queued, error) {
	if key == "" {
		return Queued{}, errors.New("outbox: an idempotency key is required")
	}
	testhook.Hit(ctx, HookBeforeQueue)
	_, err := o.db.ExecContext(ctx, `INSERT INTO escalation_outbox (idempotency_key, repository, title, body, severity, queued_at)
		VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (idempotency_key) DO NOTHING`,
		key, in.Repository, in.Title, in.Body, in.Severity, o.now().UTC().Format(time.RFC3339))
	if err != nil {
		return Queued{}, fmt.Errorf("outbox: add: %w", err)
	}
	var (
		q  Queued
		id int64
	)
	err = o.db.QueryRowContext(ctx, `SELECT id, repository, title, queued_at FROM escalation_outbox WHERE idempotency_key = ?`, key).
		Scan(&id, &q.Repository, &q.Title, &q.QueuedAt)
	if err != nil {
		return Queued{}, fmt.Errorf("outbox: add: %w", err)
	}
	q.ID = fmt.Sprintf("OUT-%04d", id)
	testhook.Hit(ctx, HookAfterQueue)
	return q, nil
}

// Len returns how many escalations the outbox holds.
func (o *Outbox) Len(ctx context.Context) (int, error) {
	var n int
	if err := o.db.QueryRowContext(ctx, `SELECT count(*) FROM escalation_outbox`).Scan(&n); err != nil {
		return 0, fmt.Errorf("outbox: count: %w", err)
	}
	return n, nil
}
