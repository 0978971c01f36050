package leak_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/examples/escalation/escalate"
	"github.com/lockstepgo/lockstep/examples/hotelbooking/booking"
	"github.com/lockstepgo/lockstep/examples/refund/refunds"
	"github.com/lockstepgo/lockstep/examples/support/helpdesk"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/faultdb"
	"github.com/lockstepgo/lockstep/internal/systemtest"
)

// Leak checks (docs/reliability.md H7, R49): after Close the saver and the SQL
// stores that share its file hold no connection and no file descriptor,
// on success and on every error path; between operations no connection
// stays in use (a transaction or rows left open would also pin a WAL
// snapshot). Goroutines are checked for the whole package by TestMain's
// goleak.

// openFDs counts the process's open file descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count file descriptors: %v", err)
	}
	return len(entries)
}

// checkFDs runs cycle once to warm up (lazily opened runtime descriptors),
// then n times, and fails t if the descriptor count grew.
func checkFDs(t *testing.T, n int, cycle func(t *testing.T, i int)) {
	t.Helper()
	cycle(t, -1)
	base := openFDs(t)
	for i := range n {
		cycle(t, i)
		if t.Failed() {
			return
		}
	}
	if got := openFDs(t); got != base {
		t.Errorf("%d cycles: %d open file descriptors, %d before", n, got, base)
	}
}

// TestNoLeakAfterClose opens, uses and closes the saver and the stores of
// its file many times, through the graph, the approval inbox and worker,
// and the ledger, and through each example's Run.
func TestNoLeakAfterClose(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		n     int
		cycle func(t *testing.T, dir string) error
	}{
		{"saver open and close", 50, func(t *testing.T, dir string) error {
			s, err := sqlite.Open(filepath.Join(dir, "a.db"), sqlite.Config{})
			if err != nil {
				return err
			}
			return closeNoConns(s)
		}},
		{"saver refused on a file that is not a database", 20, func(t *testing.T, dir string) error {
			path := filepath.Join(dir, "junk.db")
			if err := os.WriteFile(path, []byte("this is not a database, and it is long enough to have a header"), 0o600); err != nil {
				return err
			}
			if s, err := sqlite.Open(path, sqlite.Config{}); err == nil {
				s.Close()
				return fmt.Errorf("Open on junk: no error")
			}
			return nil
		}},
		{"agent, approvals and ledger through the graph", 10, func(t *testing.T, dir string) error {
			app, err := systemtest.OpenSoakApp(ctx, systemtest.SoakAppConfig{DB: filepath.Join(dir, "app.db"), Provider: filepath.Join(dir, "provider.db")})
			if err != nil {
				return err
			}
			if err := leakAgentCycle(ctx, app, "t"); err != nil {
				app.Close()
				return err
			}
			if err := app.Provider.Close(); err != nil {
				return err
			}
			app.Provider = nil
			return closeNoConns(app.Saver)
		}},
		{"refund example", 3, func(t *testing.T, dir string) error {
			_, err := refunds.Run(ctx, refunds.Config{DB: filepath.Join(dir, "r.db")})
			return err
		}},
		{"hotel booking example", 3, func(t *testing.T, dir string) error {
			_, err := booking.Run(ctx, booking.Config{DB: filepath.Join(dir, "b.db")})
			return err
		}},
		{"support example", 3, func(t *testing.T, dir string) error {
			_, err := helpdesk.Run(ctx, helpdesk.Config{DB: filepath.Join(dir, "h.db")})
			return err
		}},
		{"escalation example", 3, func(t *testing.T, dir string) error {
			_, err := escalate.Run(ctx, escalate.Config{DB: filepath.Join(dir, "e.db")})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkFDs(t, tc.n, func(t *testing.T, i int) {
				if err := tc.cycle(t, t.TempDir()); err != nil {
					t.Fatalf("cycle %d: %v", i, err)
				}
			})
		})
	}
}

// closeNoConns closes s and checks that its pool is empty.
func closeNoConns(s *sqlite.Saver) error {
	if err := s.Close(); err != nil {
		return err
	}
	if n := s.DB().Stats().OpenConnections; n != 0 {
		return fmt.Errorf("after Close: %d open connections", n)
	}
	return nil
}

// leakAgentCycle runs one thread of the soak agent to its end: to the
// approval, decided in the inbox, resumed by the worker.
func leakAgentCycle(ctx context.Context, app *systemtest.SoakApp, thread string) error {
	res, err := app.Runner.Invoke(ctx, thread, systemtest.SoakUser(thread))
	if err != nil {
		return err
	}
	if res.Status != graph.StatusWaiting || len(res.Interrupts) != 1 {
		return fmt.Errorf("invoke: %s with %d interrupts, want waiting on the payment", res.Status, len(res.Interrupts))
	}
	if _, err := app.Inbox.Approve(ctx, res.Interrupts[0].ID, "alice", "ok"); err != nil {
		return err
	}
	rep, err := app.Worker.RunOnce(ctx)
	if err != nil || rep.Resumed != 1 {
		return fmt.Errorf("worker: %+v, %v", rep, err)
	}
	snap, err := app.Runner.GetState(ctx, thread)
	if err != nil || snap.Status != graph.StatusDone {
		return fmt.Errorf("after the worker: %s, %v", snap.Status, err)
	}
	return nil
}

// TestNoConnectionHeldAfterFailures injects one fault at a time, at every
// operation of an agent thread's life (before or after the operation,
// BUSY or IOERR), and checks after each failed call that no pooled
// connection stays in use: an error path that leaves a transaction or
// rows open would keep the write lock or pin a WAL snapshot for the life
// of the process. The saver's own writer connection is the one allowed.
func TestNoConnectionHeldAfterFailures(t *testing.T) {
	before, after := systemtest.SoakFaults()
	t.Cleanup(func() { before.Reset(); after.Reset() })
	ctx := context.Background()
	dir := t.TempDir()
	app, err := systemtest.OpenSoakApp(ctx, systemtest.SoakAppConfig{DB: filepath.Join(dir, "f.db"), Provider: filepath.Join(dir, "p.db"), DriverName: systemtest.SoakFaultDriver, LeaseTTL: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		before.Reset()
		after.Reset()
		if err := closeNoConns(app.Saver); err != nil {
			t.Error(err)
		}
		app.Provider.Close()
	}()
	// One clean thread counts the operations of a thread's life.
	before.Reset()
	if err := leakAgentCycle(ctx, app, "clean"); err != nil {
		t.Fatal(err)
	}
	ops := map[faultdb.Op]int{}
	for _, op := range []faultdb.Op{faultdb.OpBegin, faultdb.OpExec, faultdb.OpQuery, faultdb.OpCommit} {
		ops[op] = before.Count(op)
	}
	idle := app.Saver.DB().Stats().InUse
	steps := 0
	for _, op := range []faultdb.Op{faultdb.OpBegin, faultdb.OpExec, faultdb.OpQuery, faultdb.OpCommit} {
		for _, when := range []faultdb.When{faultdb.Before, faultdb.After} {
			if (op == faultdb.OpBegin && when == faultdb.After) || (op == faultdb.OpCommit && when == faultdb.Before) {
				continue // not realistic with faultdb (see the soak)
			}
			stride := max(1, ops[op]/12) // about a dozen points per kind
			for n := 1; n <= ops[op]; n += stride {
				steps++
				thread := fmt.Sprintf("%s-%d-%d", op, when, n)
				d := before
				if when == faultdb.After {
					d = after
				}
				before.Reset()
				after.Reset()
				d.Arm(faultdb.Fault{Op: op, N: n, When: when, Err: systemtest.SoakTransientSQLiteFault[n%2]})
				err := leakAgentCycle(ctx, app, thread)
				if inUse := app.Saver.DB().Stats().InUse; inUse > idle {
					t.Errorf("%s fault (%v) at %s #%d (call returned %v): %d connections in use after the call returned, want %d",
						whenName(when), systemtest.SoakTransientSQLiteFault[n%2], op, n, err, inUse, idle)
				}
			}
		}
	}
	t.Logf("%d fault points; %v operations per thread", steps, ops)
}

func whenName(w faultdb.When) string {
	if w == faultdb.After {
		return "after"
	}
	return "before"
}
