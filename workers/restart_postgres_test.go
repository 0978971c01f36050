package workers_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/crashtest"
	"github.com/lockstepgo/lockstep/internal/pgtest"
	"github.com/lockstepgo/lockstep/postgres"
	"github.com/lockstepgo/lockstep/retry"
	"github.com/lockstepgo/lockstep/workers"
)

// TestPoolSurvivesPostgresRestart (issue 18: a Postgres restart mid-load):
// a pool works 96 queued bookings, each charged once through the ledger;
// once a quarter of them are confirmed, the server restarts (pg_ctl
// restart, fast shutdown: every connection breaks, runs in flight fail
// with ErrUnavailable). The same pool, never restarted, recovers (its
// failed attempts are retried as its retry policy says): every booking
// ends confirmed, its steps once each in its state, every charge made
// exactly once, nothing left queued, leased or due.
func TestPoolSurvivesPostgresRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Postgres cluster of its own")
	}
	url, ctl := pgtest.OwnCluster(t)
	ctx := t.Context()
	const bookings = 96
	db, err := postgres.Open(ctx, url, postgres.Config{MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	witnessPath := filepath.Join(t.TempDir(), "witness")
	w, err := crashtest.OpenWitness(witnessPath, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	r, err := bookingGraph(db.Ledger(), w, witnessPath, func(string) {}).Compile(
		graph.WithSaver(db.Saver()), graph.WithRunner("restart"), graph.WithLeaseTTL(fleetLease))
	if err != nil {
		t.Fatal(err)
	}
	again := retry.Policy{MaxAttempts: 1000, Initial: 50 * time.Millisecond, Multiplier: 2, Max: time.Second}
	pool, err := workers.New(r, workers.Options{Concurrency: 8, Poll: 50 * time.Millisecond, Retry: &again})
	if err != nil {
		t.Fatal(err)
	}
	for i := range bookings {
		b := bookingThread(i)
		if _, err := pool.Enqueue(ctx, b, graph.Set(booking{Booking: b}, "Booking"), workers.RunKey("book")); err != nil {
			t.Fatal(err)
		}
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	stopped := make(chan error, 1)
	go func() { stopped <- pool.Run(runCtx) }()
	confirmed := func() int {
		n := 0
		for i := range bookings {
			if snap, err := r.GetState(ctx, bookingThread(i)); err == nil && snap.Status == graph.StatusDone {
				n++
			}
		}
		return n
	}
	// Bounded waits, generous for a loaded machine.
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(3 * time.Minute)
		for !ok() {
			if time.Now().After(deadline) {
				for i := range bookings {
					th := bookingThread(i)
					snap, err := r.GetState(ctx, th)
					if err == nil && snap.Status == graph.StatusDone {
						continue
					}
					l, lerr := db.Saver().Lease(ctx, th, "")
					q, qerr := db.Saver().Queued(ctx, th, 0)
					t.Logf("%s: %s %+v (%v); lease %+v (%v); %d queued (%v)", th, snap.Status, snap.Values, err, l, lerr, len(q), qerr)
				}
				t.Fatalf("%s: not within 3 minutes (%d of %d confirmed)", what, confirmed(), bookings)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("a quarter of the bookings confirmed", func() bool { return confirmed() >= bookings/4 })
	before := confirmed()
	ctl("restart")
	t.Logf("the server restarted with %d of %d bookings confirmed", before, bookings)
	waitFor("every booking confirmed after the restart", func() bool { return confirmed() == bookings })
	stop()
	if err := <-stopped; !errors.Is(err, context.Canceled) {
		t.Fatalf("the pool's Run: %v, want context.Canceled", err)
	}
	if before == bookings {
		t.Fatalf("every booking was confirmed before the restart: the test restarted nothing mid-load")
	}
	effects, err := crashtest.ReadWitness(witnessPath)
	if err != nil {
		t.Fatal(err)
	}
	charged := map[string]int{}
	for _, e := range effects {
		charged[e.Key]++
	}
	for i := range bookings {
		th := bookingThread(i)
		snap, err := r.GetState(ctx, th)
		if err != nil {
			t.Fatal(err)
		}
		want := booking{Booking: th, Log: []string{"reserve", "charge", "confirm"}, Charge: "ch-" + th}
		if diff := cmp.Diff(want, snap.Values); snap.Status != graph.StatusDone || diff != "" {
			t.Errorf("%s: %s, state (-want +got):\n%s", th, snap.Status, diff)
		}
		if c := charged["charge:"+th]; c != 1 {
			t.Errorf("%s charged %d times, want 1", th, c)
		}
		if q, err := db.Saver().Queued(ctx, th, 0); err != nil || len(q) > 0 {
			t.Errorf("%s: %d inputs still queued (%v)", th, len(q), err)
		}
	}
	later, err := postgres.Open(ctx, url, postgres.Config{MaxConns: 1, Now: func() time.Time { return time.Now().Add(time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	defer later.Close()
	if b, err := later.Saver().ClaimDue(ctx, checkpoint.DueQuery{Owners: []string{"probe"}, TTL: time.Minute}); err != nil || len(b.Threads) > 0 {
		t.Errorf("due after the load: %s, %v; want nothing", fmt.Sprint(b.Threads), err)
	}
}
