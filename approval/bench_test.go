package approval_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/approval"
)

// BenchmarkApprovals/resolve-race: 64 resolvers (32 approve, 32 reject)
// race on each of 200 approvals in a SQLite file (WAL, busy_timeout 5000,
// IMMEDIATE), as the root benchmark will. ms/total is the wall time of one
// round of 12,800 decisions; winners must be 200.
func BenchmarkApprovals(b *testing.B) {
	b.Run("resolve-race", func(b *testing.B) {
		const approvals, resolvers = 200, 64
		ctx := context.Background()
		db, _ := tempDB(b)
		clock := newClock()
		store := openSQLStore(b, db, clock.Now)
		schema := refundSchema(b)
		var total time.Duration
		winners := 0
		for i := range b.N {
			b.StopTimer()
			items := make([]approval.Item, approvals)
			for j := range items {
				items[j] = newItem(b, schema, clock.Now(), fmt.Sprintf("b%06d-%03d", i, j))
			}
			b.StartTimer()
			start := time.Now()
			won, _, other := resolveRace(ctx, store, items, resolvers)
			total += time.Since(start)
			if len(other) > 0 {
				b.Fatalf("%d errors other than a lost race, first: %v", len(other), other[0])
			}
			for _, it := range items {
				if len(won[it.ID]) != 1 {
					b.Fatalf("approval %s has %d winners", it.ID, len(won[it.ID]))
				}
				winners++
			}
		}
		b.ReportMetric(float64(total.Microseconds())/1e3/float64(b.N), "ms/total")
		b.ReportMetric(float64(winners)/float64(b.N), "winners")
	})
}
