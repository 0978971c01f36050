package approval_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/graph"
)

// resolveRace has 64 resolvers (32 approve, 32 reject) decide each of the
// items, all starting at one gate and walking the items in the same order
// so that they collide on every approval. It returns the winning reviewer
// per approval, what every loser was told, and any other error.
func resolveRace(ctx context.Context, s approval.Store, items []approval.Item, resolvers int) (winners map[string][]string, told map[string][]approval.Decision, other []error) {
	winners, told = map[string][]string{}, map[string][]approval.Decision{}
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		gate = make(chan struct{})
	)
	for g := range resolvers {
		wg.Go(func() {
			<-gate
			for i, it := range items {
				// Half the resolvers approve each approval and half reject
				// it; who is which alternates, so that whichever goroutine
				// the scheduler favours, both outcomes win somewhere.
				v := approval.Verdict{Outcome: approval.Approved, Reviewer: fmt.Sprintf("approver-%02d", g), Note: "fine"}
				if (g+i)%2 == 1 {
					v = approval.Verdict{Outcome: approval.Rejected, Reviewer: fmt.Sprintf("rejecter-%02d", g), Note: "no"}
				}
				_, err := s.Decide(ctx, it, v)
				var lost *approval.AlreadyDecidedError
				mu.Lock()
				switch {
				case err == nil:
					winners[it.ID] = append(winners[it.ID], v.Reviewer)
				case errors.As(err, &lost):
					told[it.ID] = append(told[it.ID], lost.Winner)
				default:
					other = append(other, err)
				}
				mu.Unlock()
			}
		})
	}
	close(gate)
	wg.Wait()
	return winners, told, other
}

// TestResolveRace (R35): 64 resolvers (32 approve, 32 reject) race on each
// of 200 approvals. Each approval gets exactly one winner; every loser gets
// an *AlreadyDecidedError naming that winner; no other error (no
// SQLITE_BUSY) surfaces. Then the worker resumes every thread through the
// real graph, each follows its winner, and each approved refund is paid
// exactly once (the witness counts payments made inside graph.Durable).
func TestResolveRace(t *testing.T) {
	approvals, resolvers := 200, 64
	if raceEnabled {
		approvals = 50 // the same 64 resolvers racing for each, fewer rounds
	}
	for _, k := range storeKinds {
		t.Run(k.name, func(t *testing.T) {
			ctx := context.Background()
			clock := newClock()
			store, _ := k.open(t, clock.Now)
			f := newFixture(t, clock, store)
			in := approval.NewInbox(f.saver, store)
			for i := range approvals {
				f.start(t, fmt.Sprintf("thread-%03d", i), fmt.Sprintf("order-%03d", i), 10+i)
			}
			items := allPending(t, in, approval.Filter{Limit: approval.MaxPageSize})
			if len(items) != approvals {
				t.Fatalf("%d pending, want %d", len(items), approvals)
			}
			start := time.Now()
			winners, told, other := resolveRace(ctx, store, items, resolvers)
			t.Logf("%s: %d x %d decisions in %v", k.name, resolvers, approvals, time.Since(start))
			if len(other) > 0 {
				t.Fatalf("%d errors other than a lost race (BUSY?), first: %v", len(other), other[0])
			}
			approved := map[string]bool{}
			for _, it := range items {
				if len(winners[it.ID]) != 1 {
					t.Fatalf("approval %s has %d winners: %v", it.ID, len(winners[it.ID]), winners[it.ID])
				}
				rec, err := store.Get(ctx, it.ID)
				if err != nil {
					t.Fatal(err)
				}
				if rec.Decision.Reviewer != winners[it.ID][0] {
					t.Errorf("approval %s: stored %s, winner %s", it.ID, rec.Decision.Reviewer, winners[it.ID][0])
				}
				if len(told[it.ID]) != resolvers-1 {
					t.Errorf("approval %s: %d losers, want %d", it.ID, len(told[it.ID]), resolvers-1)
				}
				for _, w := range told[it.ID] {
					if diff := cmp.Diff(rec.Decision, w); diff != "" {
						t.Fatalf("approval %s: a loser was told another winner (-stored +told):\n%s", it.ID, diff)
					}
				}
				approved[it.Thread] = rec.Decision.Outcome == approval.Approved
			}
			if p, err := in.List(ctx, approval.Filter{}); err != nil || len(p.Items) != 0 {
				t.Errorf("inbox after the race: %d items, %v; decided approvals must leave it", len(p.Items), err)
			}

			w := newWorker(t, store, approval.ResumeGraph(f.run), approval.WorkerOptions{})
			rep, err := w.RunOnce(ctx)
			if err != nil || rep.Resumed != approvals {
				t.Fatalf("worker: %+v, %v", rep, err)
			}
			if rep, err := w.RunOnce(ctx); err != nil || rep != (approval.WorkerReport{}) {
				t.Errorf("second pass: %+v, %v", rep, err)
			}
			nApproved := 0
			for _, it := range items {
				want := 0
				if approved[it.Thread] {
					want = 1
					nApproved++
				}
				if got := f.witness.count(it.Thread); got != want {
					t.Errorf("thread %s paid %d times, want %d", it.Thread, got, want)
				}
				s := f.state(t, it.Thread)
				if s.Status != graph.StatusDone || (s.Values.Outcome == approval.Approved) != approved[it.Thread] {
					t.Errorf("thread %s: %s, outcome %s; want done following its winner", it.Thread, s.Status, s.Values.Outcome)
				}
			}
			t.Logf("%s: %d approved and paid once, %d rejected and never paid", k.name, nApproved, approvals-nApproved)
		})
	}
}
