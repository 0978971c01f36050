package booking

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/lockstepgo/lockstep/internal/testhook"
)

// The points of book_hotel's body at which a test hook in the run's
// context (internal/testhook) is called: before the hotel API writes the
// booking, and after it wrote it, before the tool returns and its outcome
// is recorded. Crash tests kill the process there.
const (
	HookBeforeBook = "tool:book_hotel:before-effect"
	HookAfterBook  = "tool:book_hotel:after-effect"
)

// ErrUnknownHotel is returned by HotelAPI for a hotel it does not list.
var ErrUnknownHotel = errors.New("hotel api: unknown hotel")

// ErrPriceChanged is returned by HotelAPI.Book when the total is not the
// quoted price.
var ErrPriceChanged = errors.New("hotel api: the total does not match the current price")

// nightlyRate returns the fake hotel's price per night in euros.
func nightlyRate(hotel, city string) (int, bool) {
	switch hotel + "|" + city {
	case "Hotel Ritz|Lisbon":
		return 220, true
	case "Palácio Suites|Porto":
		return 380, true
	case "Casa do Rio|Porto":
		return 95, true
	}
	return 0, false
}

// HotelAPI is a fake hotel reservation service. It keeps its bookings in
// its own table, hotel_bookings, in the lockstep database file, so that
// they outlive the process and are counted the same by every process (and
// seen by the sqlite3 shell next to the checkpoints). Like a real booking
// API it deduplicates bookings by idempotency key: a repeat of the same
// key returns the booking it made the first time. It is safe for
// concurrent use.
type HotelAPI struct {
	db  *sql.DB
	now func() time.Time

	quotes  atomic.Int64
	creates atomic.Int64
}

// OpenHotelAPI creates the hotel_bookings table in db if needed and returns
// the API over it. now stamps bookings (nil means time.Now).
func OpenHotelAPI(ctx context.Context, db *sql.DB, now func() time.Time) (*HotelAPI, error) {
	if now == nil {
		now = time.Now
	}
	_, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS hotel_bookings (
		id              INTEGER PRIMARY KEY AUTOINCREMENT,
		idempotency_key TEXT NOT NULL UNIQUE,
		guest           TEXT NOT NULL,
		hotel           TEXT NOT NULL,
		city            TEXT NOT NULL,
		check_in        TEXT NOT NULL,
		nights          INTEGER NOT NULL,
		total_eur       INTEGER NOT NULL,
		created_at      TEXT NOT NULL
	)`)
	if err != nil {
		return nil, fmt.Errorf("hotel api: create table: %w", err)
	}
	return &HotelAPI{db: db, now: now}, nil
}

// Quote is a price for a stay.
type Quote struct {
	Hotel      string `json:"hotel"`
	City       string `json:"city"`
	CheckIn    string `json:"check_in"`
	Nights     int    `json:"nights"`
	NightlyEUR int    `json:"nightly_eur"`
	TotalEUR   int    `json:"total_eur"`
}

// Quote prices a stay. It fails with ErrUnknownHotel for a hotel the API
// does not list.
func (h *HotelAPI) Quote(ctx context.Context, a QuoteArgs) (Quote, error) {
	h.quotes.Add(1)
	rate, ok := nightlyRate(a.Hotel, a.City)
	if !ok {
		return Quote{}, fmt.Errorf("%w: %q in %q", ErrUnknownHotel, a.Hotel, a.City)
	}
	return Quote{Hotel: a.Hotel, City: a.City, CheckIn: a.CheckIn, Nights: a.Nights, NightlyEUR: rate, TotalEUR: rate * a.Nights}, nil
}

// Booking is a reservation the API made.
type Booking struct {
	Confirmation string `json:"confirmation"`
	Guest        string `json:"guest"`
	Hotel        string `json:"hotel"`
	City         string `json:"city"`
	CheckIn      string `json:"check_in"`
	Nights       int    `json:"nights"`
	TotalEUR     int    `json:"total_eur"`
	CreatedAt    string `json:"created_at"`
	// Existing is set when the idempotency key had booked before: this is
	// that booking, and nothing new was booked.
	Existing bool `json:"existing,omitempty"`
}

// Book makes a reservation under the idempotency key (required), or
// returns the one the key made before. It fails with ErrUnknownHotel or
// ErrPriceChanged when the stay cannot be booked at that total.
func (h *HotelAPI) Book(ctx context.Context, a BookArgs, key string) (Booking, error) {
	if key == "" {
		return Booking{}, errors.New("hotel api: an idempotency key is required")
	}
	rate, ok := nightlyRate(a.Hotel, a.City)
	if !ok {
		return Booking{}, fmt.Errorf("%w: %q in %q", ErrUnknownHotel, a.Hotel, a.City)
	}
	if rate*a.Nights != a.TotalEUR {
		return Booking{}, fmt.Errorf("%w: %d nights at %q cost %d EUR, not %d", ErrPriceChanged, a.Nights, a.Hotel, rate*a.Nights, a.TotalEUR)
	}
	testhook.Hit(ctx, HookBeforeBook)
	res, err := h.db.ExecContext(ctx, `INSERT INTO hotel_bookings (idempotency_key, guest, hotel, city, check_in, nights, total_eur, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (idempotency_key) DO NOTHING`,
		key, a.Guest, a.Hotel, a.City, a.CheckIn, a.Nights, a.TotalEUR, h.now().UTC().Format(time.RFC3339))
	if err != nil {
		return Booking{}, fmt.Errorf("hotel api: book: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return Booking{}, fmt.Errorf("hotel api: book: %w", err)
	}
	testhook.Hit(ctx, HookAfterBook)
	b, err := h.byKey(ctx, key)
	if err != nil {
		return Booking{}, err
	}
	if n == 1 {
		h.creates.Add(1)
	} else {
		b.Existing = true
	}
	return b, nil
}

func (h *HotelAPI) byKey(ctx context.Context, key string) (Booking, error) {
	var (
		b  Booking
		id int64
	)
	err := h.db.QueryRowContext(ctx, `SELECT id, guest, hotel, city, check_in, nights, total_eur, created_at
		FROM hotel_bookings WHERE idempotency_key = ?`, key).
		Scan(&id, &b.Guest, &b.Hotel, &b.City, &b.CheckIn, &b.Nights, &b.TotalEUR, &b.CreatedAt)
	if err != nil {
		return Booking{}, fmt.Errorf("hotel api: read booking: %w", err)
	}
	b.Confirmation = confirmation(id)
	return b, nil
}

func confirmation(id int64) string { return fmt.Sprintf("HB-%04d", id) }

// Bookings returns every booking in the table, oldest first.
func (h *HotelAPI) Bookings(ctx context.Context) ([]Booking, error) {
	rows, err := h.db.QueryContext(ctx, `SELECT id, guest, hotel, city, check_in, nights, total_eur, created_at FROM hotel_bookings ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("hotel api: list bookings: %w", err)
	}
	defer rows.Close()
	var out []Booking
	for rows.Next() {
		var (
			b  Booking
			id int64
		)
		if err := rows.Scan(&id, &b.Guest, &b.Hotel, &b.City, &b.CheckIn, &b.Nights, &b.TotalEUR, &b.CreatedAt); err != nil {
			return nil, fmt.Errorf("hotel api: list bookings: %w", err)
		}
		b.Confirmation = confirmation(id)
		out = append(out, b)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("hotel api: list bookings: %w", err)
	}
	return out, nil
}

// Quotes returns how many quotes this API value answered (in this
// process).
func (h *HotelAPI) Quotes() int { return int(h.quotes.Load()) }

// Creates returns how many bookings this API value created (in this
// process); repeats of a key are not counted.
func (h *HotelAPI) Creates() int { return int(h.creates.Load()) }
