package approval

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/rowsum"
)

// Consumer is a Store that records an approval as consumed in the
// transaction of the save that carries its decision into the thread
// (D16): the consumption lands exactly when the thread's answer does, and
// is fenced by the resuming run's lease as that save is (D17), so that a
// run that lost the thread consumes nothing. SQLStore implements it, and
// so does the Postgres store (package postgres); MemoryStore does not: it
// shares no transaction with any saver, and the thread's first-wins
// resume (graph.ErrAlreadyAnswered) is what keeps a decision from being
// delivered twice there.
type Consumer interface {
	Store
	// Consumption returns the work that records approval id as consumed
	// (Trail.Consumed), to run in the saver's transaction
	// (graph.WithAnswerJoin). Run in a transaction of another database
	// (the store and the saver are not opened on one), it fails with an
	// error matching checkpoint.ErrNotJoinable, and the save writes
	// nothing. An approval with no decision fails with ErrNotFound. An
	// approval consumed before stays as it was: the first consumption is
	// the one recorded.
	Consumption(id string) checkpoint.Join
}

// ResumeGraphConsuming is ResumeGraph that consumes the approval in the
// save that carries its decision into the thread (graph.WithAnswerJoin
// with c.Consumption): Trail.Consumed is set exactly when the thread holds
// the answer, after a crash at any point included, and never by a run
// that had lost the thread (its save is refused with an error matching
// checkpoint.ErrThreadBusy, and nothing of it lands). c must be opened on
// the saver's database (an SQLStore on the SQLite saver's DB, the
// Postgres DB's Approvals with its Saver): otherwise every resume fails
// with an error matching checkpoint.ErrNotJoinable, as it does on a saver
// that is no checkpoint.Joiner, and the thread waits as it did. When an
// earlier attempt delivered the decision, the thread is continued as
// ResumeGraph continues it, and the consumption recorded then stays.
//
// A Worker consumes by default (see ResumeGraph): ResumeGraphConsuming is
// for a ResumeFunc that must consume, whatever the worker's options, or
// that consumes in another store than the worker's.
func ResumeGraphConsuming[S any](r *graph.Runnable[S], c Consumer, opts ...graph.RunOption) ResumeFunc {
	return func(ctx context.Context, rec Record) error {
		withJoin := append(append([]graph.RunOption(nil), opts...), graph.WithAnswerJoin(c.Consumption(rec.ID)))
		return resumeGraph(ctx, r, rec, withJoin, opts)
	}
}

// consumptionKey is the context key of the consumption a Worker hands
// its ResumeFunc.
type consumptionKey struct{}

// withConsumption returns ctx carrying j, the work that consumes the
// approval being resumed in the saver's transaction.
func withConsumption(ctx context.Context, j checkpoint.Join) context.Context {
	return context.WithValue(ctx, consumptionKey{}, j)
}

// ConsumptionFrom returns the work that consumes the approval a Worker is
// resuming with ctx, in the transaction of the save that carries its
// decision (graph.WithAnswerJoin), and true: a Worker whose store is a
// Consumer hands it to its ResumeFunc's context, unless
// WorkerOptions.NoConsume is set. It returns nil and false for any other
// context. ResumeGraph uses it; a ResumeFunc of its own that resumes the
// thread with graph.Runnable.Resume passes it as ResumeGraph does.
func ConsumptionFrom(ctx context.Context) (checkpoint.Join, bool) {
	j, ok := ctx.Value(consumptionKey{}).(checkpoint.Join)
	return j, ok && j != nil
}

// consumptionDomain is the checksum domain of approval_consumptions rows.
const consumptionDomain = "lockstep/approval/consumption/v1"

// consumptionSum is the checksum of the consumption row of approval id.
func consumptionSum(id, at string) int64 {
	return rowsum.New(consumptionDomain).String(id).String(at).Value()
}

var _ Consumer = (*SQLStore)(nil)

// sqlJoinTx is checkpoint.SQLTx: what a saver on database/sql hands a
// join.
type sqlJoinTx interface {
	DB() *sql.DB
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Consumption implements Consumer: in the saver's transaction it inserts
// the approval's approval_consumptions row, unless it has one. It fails
// with an error matching checkpoint.ErrNotJoinable when tx is not a
// transaction on the store's *sql.DB, ErrClosed after Close, ErrNotFound
// when the approval has no decision, and the database's error otherwise.
func (s *SQLStore) Consumption(id string) checkpoint.Join {
	return func(ctx context.Context, tx any) error {
		if err := s.live(id); err != nil {
			return err
		}
		st, ok := tx.(sqlJoinTx)
		if !ok || st.DB() != s.db {
			return fmt.Errorf("approval: consume approval %s: %w: the store is not opened on the saver's database (open it on the saver's DB())", quoteShort(id), checkpoint.ErrNotJoinable)
		}
		at := sqlTime(s.now())
		res, err := st.ExecContext(ctx, `INSERT INTO approval_consumptions (approval_id, consumed_at, crc)
			SELECT id, ?, ? FROM approval_decisions WHERE id = ? ON CONFLICT (approval_id) DO NOTHING`, at, consumptionSum(id, at), id)
		if err != nil {
			return fmt.Errorf("approval: consume approval %s: %w", quoteShort(id), err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("approval: consume approval %s: %w", quoteShort(id), err)
		} else if n == 1 {
			return nil
		}
		var one int
		err = st.QueryRowContext(ctx, `SELECT 1 FROM approval_decisions WHERE id = ?`, id).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return newError(id, ErrNotFound, "no decision to consume")
		}
		if err != nil {
			return fmt.Errorf("approval: consume approval %s: %w", quoteShort(id), err)
		}
		return nil // consumed before: the first consumption stays
	}
}

// consumed reads when approval id was consumed (zero: never). A row that
// does not verify is a *CorruptError.
func (s *SQLStore) consumed(ctx context.Context, id string) (time.Time, error) {
	var at string
	var crc int64
	err := s.db.QueryRowContext(ctx, `SELECT consumed_at, crc FROM approval_consumptions WHERE approval_id = ?`, id).Scan(&at, &crc)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("approval: read the consumption of approval %s: %w", quoteShort(id), err)
	}
	if crc != consumptionSum(id, at) {
		return time.Time{}, corrupt(id, "consumption", errors.New("its checksum does not match its approval ID and contents (damaged, or copied from another approval)"))
	}
	t, err := readTime("consumed_at", at)
	if err != nil {
		return time.Time{}, corrupt(id, "consumption", err)
	}
	return t, nil
}
