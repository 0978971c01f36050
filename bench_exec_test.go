package lockstep_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/nodes"
	"github.com/lockstepgo/lockstep/nodes/ledger"
)

type searchArgs struct {
	Query string `json:"query"`
	Limit int    `json:"limit,omitempty"`
}

type chargeArgs struct {
	Order  string `json:"order"`
	Amount int    `json:"amount"`
}

// BenchmarkExecutor measures the executor's cost per call: memo-hit is a
// read answered from the memo (scope, validation, gate, memo lookup,
// decision log); ledger-write is a new write through the SQLite ledger in
// the checkpoint database (intent, a trivial body, outcome).
func BenchmarkExecutor(b *testing.B) {
	ctx := context.Background()
	search, err := nodes.NewTool("search_tickets", "Find tickets by text; returns matching ticket IDs.",
		func(ctx context.Context, a searchArgs, env nodes.Env) ([]string, error) {
			return []string{"TKT-3"}, nil
		},
		nodes.Idempotent())
	if err != nil {
		b.Fatal(err)
	}
	charge, err := nodes.NewTool("charge", "Charge an order; returns the charge ID.",
		func(ctx context.Context, a chargeArgs, env nodes.Env) (string, error) { return "ch_" + a.Order, nil })
	if err != nil {
		b.Fatal(err)
	}
	b.Run("memo-hit", func(b *testing.B) {
		ex, err := nodes.NewExecutor([]*nodes.Tool{search})
		if err != nil {
			b.Fatal(err)
		}
		call := nodes.Call{Tool: "search_tickets", Args: json.RawMessage(`{"query":"login","limit":10}`), Scope: "t", Memo: nodes.NewMemo(nil)}
		if _, err := ex.Execute(ctx, call); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if r, err := ex.Execute(ctx, call); err != nil || r.Status != nodes.StatusCacheHit {
				b.Fatal(r, err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e3/float64(b.N), "us/call")
	})
	b.Run("ledger-write", func(b *testing.B) {
		s, _ := openBenchDB(b, sqlite.SyncNormal)
		l, err := ledger.NewSQL(ctx, s.DB(), ledger.Options{})
		if err != nil {
			b.Fatal(err)
		}
		ex, err := nodes.NewExecutor([]*nodes.Tool{charge}, nodes.WithLedger(l))
		if err != nil {
			b.Fatal(err)
		}
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			i++
			args, _ := json.Marshal(chargeArgs{Order: fmt.Sprintf("O-%d", i), Amount: 1})
			if r, err := ex.Execute(ctx, nodes.Call{Tool: "charge", Args: args, Scope: "t"}); err != nil || r.Status != nodes.StatusExecuted {
				b.Fatal(r, err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e3/float64(b.N), "us/call")
	})
}

// BenchmarkApprovals/resolve-race: 64 resolvers (half approving, half
// rejecting) race on each of 200 approvals in the SQLite decision store
// that shares the checkpoint file. ms/total is the wall time of one round
// of 12,800 decisions; winners must be 200.
func BenchmarkApprovals(b *testing.B) {
	b.Run("resolve-race", func(b *testing.B) {
		const approvals, resolvers = 200, 64
		ctx := context.Background()
		s, _ := openBenchDB(b, sqlite.SyncFull)
		now := time.Now()
		store, err := approval.OpenSQLStore(ctx, s.DB(), func() time.Time { return now })
		if err != nil {
			b.Fatal(err)
		}
		args := json.RawMessage(`{"amount":40,"order":"A-7"}`)
		hash, _ := approval.ArgsHash("refund", args)
		var total time.Duration
		winners := 0
		for i := range b.N {
			items := make([]approval.Item, approvals)
			for j := range items {
				id := fmt.Sprintf("race-%d-%d", i, j)
				items[j] = approval.Item{ID: id, Thread: "thread-" + id, Checkpoint: "cp", TaskID: "task", Node: "refund", PausedAt: now,
					Request: approval.Request{Type: approval.RequestType, Kind: approval.KindGate, Tool: "refund", Args: args, ArgsHash: hash,
						Rationale: "the parcel was lost", Risk: approval.RiskHigh, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}}
			}
			start := time.Now()
			won := make([]int, approvals)
			var mu sync.Mutex
			var wg sync.WaitGroup
			gate := make(chan struct{})
			for r := range resolvers {
				wg.Go(func() {
					<-gate
					v := approval.Verdict{Outcome: approval.Approved, Reviewer: fmt.Sprintf("reviewer-%d", r)}
					if r%2 == 1 {
						v.Outcome = approval.Rejected
					}
					for j, it := range items {
						_, err := store.Decide(ctx, it, v)
						switch {
						case err == nil:
							mu.Lock()
							won[j]++
							mu.Unlock()
						case errors.Is(err, approval.ErrAlreadyDecided):
						default:
							b.Errorf("approval %s: %v", it.ID, err)
						}
					}
				})
			}
			close(gate)
			wg.Wait()
			total += time.Since(start)
			for j, n := range won {
				if n != 1 {
					b.Fatalf("approval %d has %d winners", j, n)
				}
				winners++
			}
		}
		b.ReportMetric(float64(total.Microseconds())/1e3/float64(b.N), "ms/total")
		b.ReportMetric(float64(winners)/float64(b.N), "winners")
	})
}
