package helpdesk

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lockstepgo/lockstep/internal/testhook"
)

// The points of close_ticket's body at which a test hook in the run's
// context (internal/testhook) is called: before the helpdesk closes the
// ticket, and after it committed the close, before the tool returns and its
// outcome is recorded. Crash tests kill the process there.
const (
	HookBeforeClose = "tool:close_ticket:before-effect"
	HookAfterClose  = "tool:close_ticket:after-effect"
)

// Errors of Helpdesk.Close.
var (
	// ErrNoTicket: the helpdesk has no such ticket.
	ErrNoTicket = errors.New("helpdesk: no such ticket")
	// ErrClosed: the ticket was closed before (under another key).
	ErrClosed = errors.New("helpdesk: ticket already closed")
)

// Ticket is a support ticket.
type Ticket struct {
	ID       string `json:"id"`
	Subject  string `json:"subject"`
	Customer string `json:"customer"`
	Status   string `json:"status"` // "open" or "closed"
}

// Closure is a close the helpdesk made.
type Closure struct {
	Ticket     string `json:"ticket_id"`
	Resolution string `json:"resolution"`
	ClosedAt   string `json:"closed_at"`
	// Existing is set when the idempotency key had closed the ticket
	// before: this is that close, and nothing changed now.
	Existing bool `json:"existing,omitempty"`
}

// Helpdesk is a fake ticket system. Its tickets live in table
// helpdesk_tickets and every close it makes in helpdesk_closures, in the
// lockstep database file, so that counts hold across processes. Closes are
// deduplicated by idempotency key. It is safe for concurrent use.
type Helpdesk struct {
	db  *sql.DB
	now func() time.Time

	searches atomic.Int64
	closes   atomic.Int64
}

// OpenHelpdesk creates the helpdesk's tables in db if needed, with four
// tickets, and returns the helpdesk. now stamps closes (nil: time.Now).
func OpenHelpdesk(ctx context.Context, db *sql.DB, now func() time.Time) (*Helpdesk, error) {
	if now == nil {
		now = time.Now
	}
	for _, stmt := range []string{
		`CREATE TABLE IF NOT EXISTS helpdesk_tickets (
			id       TEXT PRIMARY KEY,
			subject  TEXT NOT NULL,
			customer TEXT NOT NULL,
			status   TEXT NOT NULL
		)`,
		`CREATE TABLE IF NOT EXISTS helpdesk_closures (
			id              INTEGER PRIMARY KEY AUTOINCREMENT,
			ticket_id       TEXT NOT NULL REFERENCES helpdesk_tickets (id),
			idempotency_key TEXT NOT NULL UNIQUE,
			resolution      TEXT NOT NULL,
			closed_at       TEXT NOT NULL
		)`,
		`INSERT OR IGNORE INTO helpdesk_tickets (id, subject, customer, status) VALUES
			('TKT-1', 'Invoice shows the wrong VAT number', 'Northwind Traders', 'open'),
			('TKT-2', 'Export to CSV times out', 'Contoso', 'open'),
			('TKT-3', 'Login fails after password reset', 'Fabrikam', 'open'),
			('TKT-4', 'Feature request: dark mode', 'Contoso', 'open')`,
	} {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return nil, fmt.Errorf("helpdesk: create tables: %w", err)
		}
	}
	return &Helpdesk{db: db, now: now}, nil
}

// Search returns the tickets whose subject contains query (any case).
func (h *Helpdesk) Search(ctx context.Context, query string) ([]Ticket, error) {
	h.searches.Add(1)
	all, err := h.Tickets(ctx)
	if err != nil {
		return nil, err
	}
	out := []Ticket{}
	for _, t := range all {
		if strings.Contains(strings.ToLower(t.Subject), strings.ToLower(query)) {
			out = append(out, t)
		}
	}
	return out, nil
}

// Close closes ticket id with a resolution under the idempotency key
// (required), or returns the close the key made before. It fails with
// ErrNoTicket for an unknown ticket and ErrClosed for a closed one.
func (h *Helpdesk) Close(ctx context.Context, id, resolution, key string) (Closure, error) {
	if key == "" {
		return Closure{}, errors.New("helpdesk: an idempotency key is required")
	}
	testhook.Hit(ctx, HookBeforeClose)
	tx, err := h.db.BeginTx(ctx, nil)
	if err != nil {
		return Closure{}, fmt.Errorf("helpdesk: close: %w", err)
	}
	defer tx.Rollback()
	var c Closure
	err = tx.QueryRowContext(ctx, `SELECT ticket_id, resolution, closed_at FROM helpdesk_closures WHERE idempotency_key = ?`, key).
		Scan(&c.Ticket, &c.Resolution, &c.ClosedAt)
	switch {
	case err == nil:
		c.Existing = true
		return c, nil
	case !errors.Is(err, sql.ErrNoRows):
		return Closure{}, fmt.Errorf("helpdesk: close: %w", err)
	}
	var status string
	err = tx.QueryRowContext(ctx, `SELECT status FROM helpdesk_tickets WHERE id = ?`, id).Scan(&status)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return Closure{}, fmt.Errorf("%w: %q", ErrNoTicket, id)
	case err != nil:
		return Closure{}, fmt.Errorf("helpdesk: close: %w", err)
	case status == "closed":
		return Closure{}, fmt.Errorf("%w: %q", ErrClosed, id)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE helpdesk_tickets SET status = 'closed' WHERE id = ?`, id); err != nil {
		return Closure{}, fmt.Errorf("helpdesk: close: %w", err)
	}
	c = Closure{Ticket: id, Resolution: resolution, ClosedAt: h.now().UTC().Format(time.RFC3339)}
	if _, err := tx.ExecContext(ctx, `INSERT INTO helpdesk_closures (ticket_id, idempotency_key, resolution, closed_at) VALUES (?, ?, ?, ?)`,
		c.Ticket, key, c.Resolution, c.ClosedAt); err != nil {
		return Closure{}, fmt.Errorf("helpdesk: close: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return Closure{}, fmt.Errorf("helpdesk: close: %w", err)
	}
	h.closes.Add(1)
	testhook.Hit(ctx, HookAfterClose)
	return c, nil
}

// Tickets returns every ticket, by ID.
func (h *Helpdesk) Tickets(ctx context.Context) ([]Ticket, error) {
	rows, err := h.db.QueryContext(ctx, `SELECT id, subject, customer, status FROM helpdesk_tickets ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("helpdesk: list tickets: %w", err)
	}
	defer rows.Close()
	var out []Ticket
	for rows.Next() {
		var t Ticket
		if err := rows.Scan(&t.ID, &t.Subject, &t.Customer, &t.Status); err != nil {
			return nil, fmt.Errorf("helpdesk: list tickets: %w", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("helpdesk: list tickets: %w", err)
	}
	return out, nil
}

// ClosureByKey returns the close made under idempotency key, and false
// when the key closed nothing.
func (h *Helpdesk) ClosureByKey(ctx context.Context, key string) (Closure, bool, error) {
	var c Closure
	err := h.db.QueryRowContext(ctx, `SELECT ticket_id, resolution, closed_at FROM helpdesk_closures WHERE idempotency_key = ?`, key).
		Scan(&c.Ticket, &c.Resolution, &c.ClosedAt)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return Closure{}, false, nil
	case err != nil:
		return Closure{}, false, fmt.Errorf("helpdesk: closure by key: %w", err)
	}
	return c, true, nil
}

// Closures returns how many closes helpdesk_closures holds (every run, every
// process).
func (h *Helpdesk) Closures(ctx context.Context) (int, error) {
	var n int
	if err := h.db.QueryRowContext(ctx, `SELECT count(*) FROM helpdesk_closures`).Scan(&n); err != nil {
		return 0, fmt.Errorf("helpdesk: count closures: %w", err)
	}
	return n, nil
}

// Searches returns how many searches this Helpdesk value ran (in this
// process).
func (h *Helpdesk) Searches() int { return int(h.searches.Load()) }

// Closes returns how many closes this Helpdesk value made (in this
// process); repeats of a key are not counted.
func (h *Helpdesk) Closes() int { return int(h.closes.Load()) }
