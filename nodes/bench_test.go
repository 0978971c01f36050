package nodes_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/nodes"
	"github.com/lockstepgo/lockstep/nodes/ledger"
)

// BenchmarkExecutor measures the executor's overhead per call:
//
//   - memo-hit: a read answered from the memo (scope, validation, gate,
//     memo lookup, decision log);
//   - ledger-write/memory and ledger-write/sqlite: a new write through the
//     ledger (intent, run of a trivial body, outcome: two transactions for
//     SQLite, on a WAL file with the saver's DSN and SQLite's default
//     synchronous setting).
func BenchmarkExecutor(b *testing.B) {
	ctx := context.Background()
	d := &desk{}
	b.Run("memo-hit", func(b *testing.B) {
		ex, _ := nodes.NewExecutor([]*nodes.Tool{d.searchTool(b)})
		memo := nodes.NewMemo(nil)
		c := nodes.Call{Tool: "search_tickets", Args: json.RawMessage(`{"query":"login","limit":10}`), Scope: "t", Memo: memo}
		if _, err := ex.Execute(ctx, c); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if r, err := ex.Execute(ctx, c); err != nil || r.Status != nodes.StatusCacheHit {
				b.Fatal(r, err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "us/call")
	})
	write := func(b *testing.B, l ledger.Ledger) {
		p := &payments{}
		ex, _ := nodes.NewExecutor([]*nodes.Tool{p.tool(b)}, nodes.WithLedger(l))
		b.ReportAllocs()
		b.ResetTimer()
		i := 0
		for b.Loop() {
			i++
			args, _ := json.Marshal(OrderArgs{OrderID: fmt.Sprintf("O-%d", i), Amount: 1})
			if r, err := ex.Execute(ctx, nodes.Call{Tool: "charge", Args: args, Scope: "t"}); err != nil || r.Status != nodes.StatusExecuted {
				b.Fatal(r, err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "us/call")
	}
	b.Run("ledger-write/memory", func(b *testing.B) {
		l, _ := ledger.NewMemory(ledger.Options{Retention: time.Hour})
		write(b, l)
	})
	b.Run("ledger-write/sqlite", func(b *testing.B) {
		db, err := sql.Open("sqlite3", crashDSN(filepath.Join(b.TempDir(), "bench.db")))
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		l, err := ledger.NewSQL(ctx, db, ledger.Options{})
		if err != nil {
			b.Fatal(err)
		}
		write(b, l)
	})
}
