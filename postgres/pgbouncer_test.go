package postgres

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/approval/approvaltest"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/checkpoint/checkpointtest"
	"github.com/lockstepgo/lockstep/nodes/ledger"
	"github.com/lockstepgo/lockstep/nodes/ledger/ledgertest"
)

// TestThroughPgBouncer runs the three stores' suites through PgBouncer in
// transaction mode (LOCKSTEP_PGBOUNCER_URL; .ci/postgres.sh starts one
// with PGBOUNCER=1): with Config.PgBouncer no statement relies on a
// server connection's session state, so every transaction may run on
// another server connection, migrations included.
func TestThroughPgBouncer(t *testing.T) {
	direct := testURL(t)
	bouncer := os.Getenv("LOCKSTEP_PGBOUNCER_URL")
	if bouncer == "" {
		t.Skip("LOCKSTEP_PGBOUNCER_URL not set: the PgBouncer tests skip (PGBOUNCER=1 .ci/postgres.sh start DIR starts one when pgbouncer is installed)")
	}
	open := func(t testing.TB, cfg Config) *DB {
		t.Helper()
		cfg.Schema, cfg.PgBouncer = newSchemaName(), true
		db, err := Open(context.Background(), bouncer, cfg)
		if err != nil {
			t.Fatalf("Open through PgBouncer: %v", err)
		}
		t.Cleanup(func() {
			db.Close()
			dropSchema(t, direct, cfg.Schema)
		})
		return db
	}
	t.Run("checkpointtest", func(t *testing.T) {
		checkpointtest.Run(t, checkpointtest.Options{New: func(t *testing.T, now checkpoint.Clock) checkpoint.Saver {
			return open(t, Config{Now: now, MaxConns: 2}).Saver()
		}})
	})
	t.Run("approvaltest", func(t *testing.T) {
		approvaltest.Run(t, func(t testing.TB, now func() time.Time) (approval.Store, func(ids ...string) string) {
			return open(t, Config{Now: now, MaxConns: 8}).Approvals(), nil
		})
	})
	t.Run("ledgertest", func(t *testing.T) {
		ledgertest.Run(t, func(t *testing.T, opts ledger.Options) ledger.Ledger {
			// The shared suite's runs hold no lease in this DB's saver: it is the
			// contract of the unfenced ledger (the fence is tested with a saver in
			// package approval's fence tests and by TestLedgerFencedByDefault).
			opts.Unfenced = true
			l, err := open(t, Config{MaxConns: 8}).Ledger().WithOptions(opts)
			if err != nil {
				t.Fatal(err)
			}
			return l
		}, ledgertest.Options{TextOnly: true})
	})
}
