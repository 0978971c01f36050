package approval_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/approval"
)

// TestClosedStore: after Close (or, for a SQLStore, once the database was
// closed under it) every method of both stores fails with an *Error
// matching ErrClosed that names the approval, and changes nothing; Close
// twice returns nil.
func TestClosedStore(t *testing.T) {
	type opened struct {
		store approval.Store
		close func() error  // what closes it: the store's Close or the database's
		dump  func() string // the stored rows, read after the close ("" when gone with the store)
	}
	kinds := []struct {
		name string
		open func(t *testing.T, now func() time.Time) opened
	}{
		{"memory", func(t *testing.T, now func() time.Time) opened {
			s := approval.NewMemoryStore(now)
			return opened{store: s, close: s.Close, dump: func() string { return "" }}
		}},
		{"sql", func(t *testing.T, now func() time.Time) opened {
			path := filepath.Join(t.TempDir(), "lockstep.db")
			db := openDB(t, path)
			s := openSQLStore(t, db, now)
			return opened{store: s, close: s.Close, dump: func() string { return dumpTables(t, openDB(t, path)) }}
		}},
		{"sql database closed", func(t *testing.T, now func() time.Time) opened {
			path := filepath.Join(t.TempDir(), "lockstep.db")
			db := openDB(t, path)
			s := openSQLStore(t, db, now)
			return opened{store: s, close: db.Close, dump: func() string { return dumpTables(t, openDB(t, path)) }}
		}},
	}
	// Each call would succeed on an open store holding the approved a1.
	calls := []struct {
		name   string
		wantID string // the approval the error names
		call   func(ctx context.Context, s approval.Store, a1, a2 approval.Item) error
	}{
		{"Decide", "a2", func(ctx context.Context, s approval.Store, _, a2 approval.Item) error {
			_, err := s.Decide(ctx, a2, approval.Verdict{Outcome: approval.Approved, Reviewer: "alice"})
			return err
		}},
		{"Get", "a1", func(ctx context.Context, s approval.Store, _, _ approval.Item) error {
			_, err := s.Get(ctx, "a1")
			return err
		}},
		{"Decided", "", func(ctx context.Context, s approval.Store, _, _ approval.Item) error {
			_, err := s.Decided(ctx, []string{"a1"})
			return err
		}},
		{"Unresumed", "", func(ctx context.Context, s approval.Store, _, _ approval.Item) error {
			_, err := s.Unresumed(ctx, 0)
			return err
		}},
		{"ClaimResume", "a1", func(ctx context.Context, s approval.Store, _, _ approval.Item) error {
			_, err := s.ClaimResume(ctx, "a1", time.Hour)
			return err
		}},
		{"FinishResume", "a1", func(ctx context.Context, s approval.Store, _, _ approval.Item) error {
			return s.FinishResume(ctx, "a1", "resumed")
		}},
		{"RetryResume", "a1", func(ctx context.Context, s approval.Store, _, _ approval.Item) error {
			return s.RetryResume(ctx, "a1", "busy", time.Hour)
		}},
		{"RecordOutcome", "a1", func(ctx context.Context, s approval.Store, a1, _ approval.Item) error {
			return s.RecordOutcome(ctx, "a1", approval.Execution{IdempotencyKey: "k1", ArgsHash: a1.Request.ArgsHash, Result: json.RawMessage(`{"ok":true}`)})
		}},
		{"Audit", "a1", func(ctx context.Context, s approval.Store, _, _ approval.Item) error {
			_, err := s.Audit(ctx, "a1")
			return err
		}},
	}
	for _, k := range kinds {
		for _, c := range calls {
			t.Run(k.name+"/"+c.name, func(t *testing.T) {
				ctx := context.Background()
				clock := newClock()
				o := k.open(t, clock.Now)
				a1 := newItem(t, refundSchema(t), clock.Now(), "a1")
				a2 := newItem(t, refundSchema(t), clock.Now(), "a2")
				if _, err := o.store.Decide(ctx, a1, approval.Verdict{Outcome: approval.Approved, Reviewer: "alice"}); err != nil {
					t.Fatal(err)
				}
				if err := o.close(); err != nil {
					t.Fatalf("close: %v", err)
				}
				before := o.dump()
				for i := range 2 { // a refusal does not reopen anything
					err := c.call(ctx, o.store, a1, a2)
					var ae *approval.Error
					if !errors.Is(err, approval.ErrClosed) || !errors.As(err, &ae) || ae.ID != c.wantID {
						t.Fatalf("%s after close (call %d): %v, want an *approval.Error for %q matching ErrClosed", c.name, i+1, err, c.wantID)
					}
				}
				if diff := cmp.Diff(before, o.dump()); diff != "" {
					t.Errorf("%s after close changed the stored rows (-before +after):\n%s", c.name, diff)
				}
				for i := range 2 {
					if err := o.store.(io.Closer).Close(); err != nil {
						t.Errorf("store Close #%d after close: %v, want nil", i+1, err)
					}
				}
				if err := c.call(ctx, o.store, a1, a2); !errors.Is(err, approval.ErrClosed) {
					t.Errorf("%s after Close twice: %v, want ErrClosed", c.name, err)
				}
			})
		}
	}
}
