package nodes_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockstepgo/lockstep/nodes"
	"github.com/lockstepgo/lockstep/nodes/ledger"
)

// charger is a payment service that does NOT dedupe by idempotency key:
// every request it receives charges again. body says how a request ends.
type charger struct {
	charges atomic.Int32
}

func (ch *charger) tool(t testing.TB, body func(ctx context.Context) error, opts ...nodes.ToolOption) *nodes.Tool {
	return mustTool(t)(nodes.NewTool("charge", "Charge an order. Returns the charge.",
		func(ctx context.Context, a OrderArgs, env nodes.Env) (map[string]any, error) {
			ch.charges.Add(1) // the effect happens first, whatever the answer
			if err := body(ctx); err != nil {
				return nil, err
			}
			return map[string]any{"order_id": a.OrderID, "charged": true}, nil
		}, append([]nodes.ToolOption{nodes.Timeout(5 * time.Second)}, opts...)...))
}

// TestUnknownOutcomeNotRunAgain (R31, R34, D11): a write whose attempt
// may have taken effect (it timed out, or the run's context ended while
// it ran) is neither retried nor run again by a repeat, on a service that
// does not dedupe: its intent stays pending, as after a crash, so a repeat
// is "in progress" while the lease lasts and "outcome unknown" after, and
// the charge happens once. A late success is recorded and replayed. Only a
// human's decision (Call.Reconciled) runs it again. A tool that declares
// DedupesByKey is retried with the same key (control: on this service,
// which does not dedupe, that charges twice).
func TestUnknownOutcomeNotRunAgain(t *testing.T) {
	waitCtx := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
	call := charge("O-1", 30, "th")
	setup := func(t *testing.T, body func(context.Context) error, opts ...nodes.ToolOption) (*charger, *ledger.Memory, *nodes.Executor) {
		ch := &charger{}
		l := newMemLedger(t, nil)
		ex, _ := nodes.NewExecutor([]*nodes.Tool{ch.tool(t, body, opts...)}, nodes.WithLedger(l))
		return ch, l, ex
	}
	pending := func(t *testing.T, l *ledger.Memory) {
		t.Helper()
		if es := l.Entries(); len(es) != 1 || es[0].State != ledger.StatePending {
			t.Fatalf("ledger %+v, want the intent pending", es)
		}
	}

	t.Run("timeout", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ch, l, ex := setup(t, waitCtx)
			_, err := ex.Execute(context.Background(), call)
			var te *nodes.TimeoutError
			var toolErr *nodes.ToolError
			if !errors.As(err, &te) || !te.Indeterminate() || !errors.As(err, &toolErr) || toolErr.Attempts != 1 || errors.Is(err, nodes.ErrRetriesExhausted) {
				t.Fatalf("Execute: %v, want one indeterminate attempt, not retried", err)
			}
			pending(t, l)
			if _, err := ex.Execute(context.Background(), call); !errors.Is(err, ledger.ErrInProgress) {
				t.Errorf("repeat within the lease: %v, want ErrInProgress", err)
			}
			time.Sleep(time.Hour) // past the intent's lease
			if _, err := ex.Execute(context.Background(), call); !errors.Is(err, ledger.ErrOutcomeUnknown) {
				t.Errorf("repeat after the lease: %v, want ErrOutcomeUnknown", err)
			}
			if n := ch.charges.Load(); n != 1 {
				t.Fatalf("%d charges, want 1", n)
			}
			// A human looked and decided it did not happen: it runs again.
			reconciled := call
			reconciled.Reconciled = true
			if _, err := ex.Execute(context.Background(), reconciled); !errors.As(err, &te) || ch.charges.Load() != 2 {
				t.Errorf("reconciled run: %v, %d charges; want it run (and time out) again", err, ch.charges.Load())
			}
		})
	})

	t.Run("late success", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ch, l, ex := setup(t, func(context.Context) error { time.Sleep(6 * time.Second); return nil })
			if _, err := ex.Execute(context.Background(), call); !errors.Is(err, nodes.ErrToolTimeout) {
				t.Fatalf("Execute: %v, want a timeout", err)
			}
			pending(t, l)
			time.Sleep(2 * time.Second) // the abandoned body answers at 6s
			synctest.Wait()
			res, err := ex.Execute(context.Background(), call)
			if err != nil || res.Status != nodes.StatusReplayed || ch.charges.Load() != 1 {
				t.Errorf("repeat after the late success: %+v %v, %d charges; want a replay of it", res, err, ch.charges.Load())
			}
		})
	})

	t.Run("cancelled while running", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ch, l, ex := setup(t, waitCtx)
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(time.Second, cancel)
			if _, err := ex.Execute(ctx, call); !errors.Is(err, context.Canceled) {
				t.Fatalf("Execute: %v, want the cancellation", err)
			}
			pending(t, l)
			if _, err := ex.Execute(context.Background(), call); !errors.Is(err, ledger.ErrInProgress) || ch.charges.Load() != 1 {
				t.Errorf("repeat: %v, %d charges; want ErrInProgress and 1 charge", err, ch.charges.Load())
			}
		})
	})

	t.Run("no fallback", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// A fallback is another way of doing the same thing: after a
			// write that may have happened, it could do it twice.
			var queued atomic.Int32
			queue := mustTool(t)(nodes.NewTool("queue_charge", "Queue the charge.", func(ctx context.Context, a OrderArgs, env nodes.Env) (string, error) {
				queued.Add(1)
				return "queued", nil
			}))
			ch, l, ex := setup(t, waitCtx, nodes.Fallback(queue))
			if _, err := ex.Execute(context.Background(), call); !errors.Is(err, nodes.ErrToolTimeout) || queued.Load() != 0 || ch.charges.Load() != 1 {
				t.Errorf("Execute: %v, %d queued, %d charges; want the timeout, no fallback, 1 charge", err, queued.Load(), ch.charges.Load())
			}
			pending(t, l)
		})
	})

	t.Run("dedupes by key", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ch, l, ex := setup(t, waitCtx, nodes.DedupesByKey(), nodes.Retry(upTo(2)))
			_, err := ex.Execute(context.Background(), call)
			var toolErr *nodes.ToolError
			if !errors.As(err, &toolErr) || toolErr.Attempts != 2 || !errors.Is(err, nodes.ErrRetriesExhausted) {
				t.Fatalf("Execute: %v, want two attempts", err)
			}
			if es := l.Entries(); len(es) != 0 {
				t.Errorf("ledger %+v, want the intent released", es)
			}
			if n := ch.charges.Load(); n != 2 {
				t.Errorf("%d charges, want 2: DedupesByKey on a service that does not dedupe charges twice", n)
			}
		})
	})
}
