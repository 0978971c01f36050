package postgres

import (
	"errors"
	"testing"

	"github.com/lockstepgo/lockstep/nodes/ledger"
	"github.com/lockstepgo/lockstep/nodes/ledger/ledgertest"
)

// TestLedgerContract runs the ledger's shared contract on PostgreSQL.
func TestLedgerContract(t *testing.T) {
	testURL(t)
	ledgertest.Run(t, func(t *testing.T, opts ledger.Options) ledger.Ledger {
		// The shared suite's runs hold no lease in this DB's saver: it is the
		// contract of the unfenced ledger (the fence is tested with a saver in
		// package approval's fence tests and by TestLedgerFencedByDefault).
		opts.Unfenced = true
		db := openTest(t, Config{MaxConns: 8})
		l, err := db.Ledger().WithOptions(opts)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}, ledgertest.Options{TextOnly: true})
}

// TestLedgerFencedByDefault: the DB's ledger is fenced by its saver
// unless Unfenced is set; Unfenced with a Fence, and another DB's saver
// as the Fence, are refused with ledger.ErrInvalid.
func TestLedgerFencedByDefault(t *testing.T) {
	testURL(t)
	db := openTest(t, Config{MaxConns: 4})
	other := openTest(t, Config{MaxConns: 2})
	if !db.Ledger().Fenced() {
		t.Error("DB.Ledger() is not fenced")
	}
	for _, c := range []struct {
		name   string
		opts   ledger.Options
		fenced bool
	}{
		{"no options", ledger.Options{}, true},
		{"its saver", ledger.Options{Fence: db.Saver()}, true},
		{"unfenced", ledger.Options{Unfenced: true}, false},
	} {
		l, err := db.Ledger().WithOptions(c.opts)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if l.Fenced() != c.fenced {
			t.Errorf("%s: Fenced() = %v, want %v", c.name, l.Fenced(), c.fenced)
		}
	}
	for name, o := range map[string]ledger.Options{
		"unfenced with a fence": {Unfenced: true, Fence: db.Saver()},
		"another DB's saver":    {Fence: other.Saver()},
	} {
		if _, err := db.Ledger().WithOptions(o); !errors.Is(err, ledger.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}
