package postgres

import (
	"testing"

	"github.com/lockstepgo/lockstep/nodes/ledger"
	"github.com/lockstepgo/lockstep/nodes/ledger/ledgertest"
)

// TestLedgerContract runs the ledger's shared contract on PostgreSQL.
func TestLedgerContract(t *testing.T) {
	testURL(t)
	ledgertest.Run(t, func(t *testing.T, opts ledger.Options) ledger.Ledger {
		db := openTest(t, Config{MaxConns: 8})
		l, err := db.Ledger().WithOptions(opts)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}, ledgertest.Options{TextOnly: true})
}
