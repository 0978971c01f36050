package refunds

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/lockstepgo/lockstep/internal/testhook"
)

// The points of issue_refund's body at which a test hook in the run's
// context (internal/testhook) is called: before the shop pays, and after
// it committed the payment, before the tool returns and its outcome is
// recorded. Crash tests kill the process there.
const (
	HookBeforeRefund = "tool:issue_refund:before-effect"
	HookAfterRefund  = "tool:issue_refund:after-effect"
)

// Errors of Shop.
var (
	// ErrNoOrder: the shop has no such order.
	ErrNoOrder = errors.New("shop: no such order")
	// ErrOverRefund: the refund would exceed what the order has left to
	// refund.
	ErrOverRefund = errors.New("shop: refund exceeds the order's amount")
)

// Order is an order of the shop.
type Order struct {
	ID            string `json:"order_id"`
	Customer      string `json:"customer"`
	Email         string `json:"email"`
	Item          string `json:"item"`
	AmountCents   int    `json:"amount_cents"`
	PlacedOn      string `json:"placed_on"`
	RefundedCents int    `json:"refunded_cents"`
}

// History is what the shop knows of a customer, for the reviewer.
type History struct {
	Orders        int `json:"orders"`
	Refunds       int `json:"refunds"`
	RefundedCents int `json:"refunded_cents"`
}

// Payment is a refund the shop paid.
type Payment struct {
	ID          string `json:"payment_id"`
	Order       string `json:"order_id"`
	AmountCents int    `json:"amount_cents"`
	Reason      string `json:"reason"`
	PaidAt      string `json:"paid_at"`
	// Existing is set when the idempotency key had paid before: this is
	// that payment, and nothing was paid now.
	Existing bool `json:"existing,omitempty"`
}

// Shop is a fake web shop with a payment provider. Its orders live in table
// shop_orders and every refund it pays in refund_payments, in the lockstep
// database file, so that counts hold across processes and restarts.
// Refunds are deduplicated by idempotency key, as payment providers do. It
// is safe for concurrent use.
type Shop struct {
	db  *sql.DB
	now func() time.Time
}

// OpenShop creates the shop's tables in db if needed, with its orders, and
// returns the shop. now stamps payments (nil: time.Now).
func OpenShop(ctx context.Context, db *sql.DB, now func() time.Time) (*Shop, error) {
	if now == nil {
		now = time.Now
	}
	for _, stmt := range []string{
		`CREATE TABLE IF NOT EXISTS shop_orders (
			id           TEXT PRIMARY KEY,
			customer     TEXT NOT NULL,
			email        TEXT NOT NULL,
			item         TEXT NOT NULL,
			amount_cents INTEGER NOT NULL,
			placed_on    TEXT NOT NULL
		)`,
		`CREATE TABLE IF NOT EXISTS refund_payments (
			id              INTEGER PRIMARY KEY AUTOINCREMENT,
			idempotency_key TEXT NOT NULL UNIQUE,
			order_id        TEXT NOT NULL REFERENCES shop_orders (id),
			amount_cents    INTEGER NOT NULL,
			reason          TEXT NOT NULL,
			paid_at         TEXT NOT NULL
		)`,
		`INSERT OR IGNORE INTO shop_orders (id, customer, email, item, amount_cents, placed_on) VALUES
			('A-0907', 'Mia Chen', 'mia@example.com', 'Phone case', 1990, '2026-01-15'),
			('A-1001', 'Mia Chen', 'mia@example.com', 'Wireless headphones', 8990, '2026-04-02'),
			('A-1002', 'Leo Park', 'leo@example.com', 'Espresso machine', 24900, '2026-04-05')`,
	} {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return nil, fmt.Errorf("shop: create tables: %w", err)
		}
	}
	return &Shop{db: db, now: now}, nil
}

// Order returns order id, with what was refunded of it. It fails with
// ErrNoOrder for an unknown order.
func (s *Shop) Order(ctx context.Context, id string) (Order, error) {
	var o Order
	err := s.db.QueryRowContext(ctx, `SELECT o.id, o.customer, o.email, o.item, o.amount_cents, o.placed_on,
			(SELECT coalesce(sum(p.amount_cents), 0) FROM refund_payments p WHERE p.order_id = o.id)
		FROM shop_orders o WHERE o.id = ?`, id).
		Scan(&o.ID, &o.Customer, &o.Email, &o.Item, &o.AmountCents, &o.PlacedOn, &o.RefundedCents)
	if errors.Is(err, sql.ErrNoRows) {
		return Order{}, fmt.Errorf("%w: %q", ErrNoOrder, id)
	}
	if err != nil {
		return Order{}, fmt.Errorf("shop: read order: %w", err)
	}
	return o, nil
}

// History returns what the shop knows of customer.
func (s *Shop) History(ctx context.Context, customer string) (History, error) {
	var h History
	err := s.db.QueryRowContext(ctx, `SELECT
			(SELECT count(*) FROM shop_orders WHERE customer = ?1),
			(SELECT count(*) FROM refund_payments p JOIN shop_orders o ON o.id = p.order_id WHERE o.customer = ?1),
			(SELECT coalesce(sum(p.amount_cents), 0) FROM refund_payments p JOIN shop_orders o ON o.id = p.order_id WHERE o.customer = ?1)`,
		customer).Scan(&h.Orders, &h.Refunds, &h.RefundedCents)
	if err != nil {
		return History{}, fmt.Errorf("shop: read history: %w", err)
	}
	return h, nil
}

// Refund pays amountCents back on order id under the idempotency key
// (required), or returns the payment the key made before. It fails with
// ErrNoOrder or ErrOverRefund.
func (s *Shop) Refund(ctx context.Context, id string, amountCents int, reason, key string) (Payment, error) {
	if key == "" {
		return Payment{}, errors.New("shop: an idempotency key is required")
	}
	testhook.Hit(ctx, HookBeforeRefund)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Payment{}, fmt.Errorf("shop: refund: %w", err)
	}
	defer tx.Rollback()
	var (
		p   Payment
		pid int64
	)
	err = tx.QueryRowContext(ctx, `SELECT id, order_id, amount_cents, reason, paid_at FROM refund_payments WHERE idempotency_key = ?`, key).
		Scan(&pid, &p.Order, &p.AmountCents, &p.Reason, &p.PaidAt)
	switch {
	case err == nil:
		p.ID, p.Existing = paymentID(pid), true
		return p, nil
	case !errors.Is(err, sql.ErrNoRows):
		return Payment{}, fmt.Errorf("shop: refund: %w", err)
	}
	var amount, refunded int
	err = tx.QueryRowContext(ctx, `SELECT amount_cents, (SELECT coalesce(sum(amount_cents), 0) FROM refund_payments WHERE order_id = ?1)
		FROM shop_orders WHERE id = ?1`, id).Scan(&amount, &refunded)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return Payment{}, fmt.Errorf("%w: %q", ErrNoOrder, id)
	case err != nil:
		return Payment{}, fmt.Errorf("shop: refund: %w", err)
	case amountCents > amount-refunded:
		return Payment{}, fmt.Errorf("%w: %s has %s left to refund", ErrOverRefund, id, Euros(amount-refunded))
	}
	p = Payment{Order: id, AmountCents: amountCents, Reason: reason, PaidAt: s.now().UTC().Format(time.RFC3339)}
	res, err := tx.ExecContext(ctx, `INSERT INTO refund_payments (idempotency_key, order_id, amount_cents, reason, paid_at) VALUES (?, ?, ?, ?, ?)`,
		key, p.Order, p.AmountCents, p.Reason, p.PaidAt)
	if err != nil {
		return Payment{}, fmt.Errorf("shop: refund: %w", err)
	}
	if pid, err = res.LastInsertId(); err != nil {
		return Payment{}, fmt.Errorf("shop: refund: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return Payment{}, fmt.Errorf("shop: refund: %w", err)
	}
	p.ID = paymentID(pid)
	testhook.Hit(ctx, HookAfterRefund)
	return p, nil
}

func paymentID(id int64) string { return fmt.Sprintf("RF-%04d", id) }

// PaymentByKey returns the payment made under idempotency key, and false
// when the key paid nothing.
func (s *Shop) PaymentByKey(ctx context.Context, key string) (Payment, bool, error) {
	var (
		p  Payment
		id int64
	)
	err := s.db.QueryRowContext(ctx, `SELECT id, order_id, amount_cents, reason, paid_at FROM refund_payments WHERE idempotency_key = ?`, key).
		Scan(&id, &p.Order, &p.AmountCents, &p.Reason, &p.PaidAt)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return Payment{}, false, nil
	case err != nil:
		return Payment{}, false, fmt.Errorf("shop: payment by key: %w", err)
	}
	p.ID = paymentID(id)
	return p, true, nil
}

// Payments returns every refund paid, oldest first.
func (s *Shop) Payments(ctx context.Context) ([]Payment, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, order_id, amount_cents, reason, paid_at FROM refund_payments ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("shop: list payments: %w", err)
	}
	defer rows.Close()
	var out []Payment
	for rows.Next() {
		var (
			p  Payment
			id int64
		)
		if err := rows.Scan(&id, &p.Order, &p.AmountCents, &p.Reason, &p.PaidAt); err != nil {
			return nil, fmt.Errorf("shop: list payments: %w", err)
		}
		p.ID = paymentID(id)
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("shop: list payments: %w", err)
	}
	return out, nil
}

// Euros formats cents as euros ("89.90 EUR").
func Euros(cents int) string { return fmt.Sprintf("%d.%02d EUR", cents/100, cents%100) }
