package sqlite

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/faultdb"
)

// TestRunnerTakesBackItsOwnLease (issue 15 item 3): the disk fills in the
// middle of a run, so that the step's save fails and so does the release
// of the lease (itself a write). Once space is back, the same Runnable's
// Continue takes its own lease back at once and finishes the thread,
// where it used to get ErrThreadBusy for the whole lease TTL (the clock
// does not move here). Another Runnable (another runner) is refused with a
// *checkpoint.BusyError naming the run and runner holding the thread,
// the epoch, and the lease's end, that says it is another runner's.
func TestRunnerTakesBackItsOwnLease(t *testing.T) {
	for _, code := range []sqlite3.ErrNo{sqlite3.ErrFull, sqlite3.ErrIoErr} {
		t.Run(code.Error(), func(t *testing.T) {
			drv := faults(t)
			clock := newFakeClock()
			s := openTemp(t, Config{DriverName: faultDriverName, Now: clock.Now})
			ctx := t.Context()
			type state struct {
				Log []string `lockstep:"append"`
			}
			var filled atomic.Bool
			build := func(runner string) *graph.Runnable[state] {
				g := graph.New[state]()
				g.AddNode("fill", func(ctx context.Context, st state) (graph.Update[state], error) {
					if !filled.Swap(true) {
						// The disk fills while the node runs: every write
						// from now on fails, the release included.
						drv.Arm(faultdb.Fault{Op: faultdb.OpBegin, Match: "BEGIN IMMEDIATE", Mode: faultdb.Persistent, Err: sqliteErr(code)})
					}
					return graph.Set(state{Log: []string{"fill"}}, "Log"), nil
				})
				g.AddEdge(graph.START, "fill").AddEdge("fill", graph.END)
				opts := []graph.Option{graph.WithSaver(s), graph.WithClock(clock.Now), graph.WithLeaseTTL(time.Hour)}
				if runner != "" {
					opts = append(opts, graph.WithRunner(runner))
				}
				r, err := g.Compile(opts...)
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			r := build("")
			if _, err := r.Invoke(ctx, "t", graph.Set(state{}, "Log")); err == nil {
				t.Fatal("Invoke succeeded on a full disk")
			}
			drv.Reset() // space is back
			held, err := s.Lease(ctx, "t", "")
			if err != nil || !held.Live(clock.Now()) || held.Runner != r.Runner() {
				t.Fatalf("lease after the failed release: %+v, %v; want the run's lease still live", held, err)
			}

			other := build("other-runner")
			_, err = other.Continue(ctx, "t")
			var be *checkpoint.BusyError
			if !errors.As(err, &be) || be.Owner != held.Owner || be.Runner != r.Runner() || be.Epoch != held.Epoch || !be.Until.Equal(held.Until) || be.SameRunner {
				t.Fatalf("another runner's Continue: %v, want a *BusyError naming %+v", err, held)
			}
			if msg := err.Error(); !strings.Contains(msg, "another runner's lease") || !strings.Contains(msg, "retry after") {
				t.Errorf("another runner's error %q does not say whose lease it is and when to retry", msg)
			}

			res, err := r.Continue(ctx, "t")
			if err != nil {
				t.Fatalf("the same Runnable's Continue after space came back: %v, want it to take its own lease back", err)
			}
			if res.Status != graph.StatusDone || len(res.Values.Log) != 1 {
				t.Errorf("Continue: %s %v, want done with one fill", res.Status, res.Values.Log)
			}
			after, err := s.Lease(ctx, "t", "")
			if err != nil || after.Owner != "" || after.Epoch != held.Epoch+1 {
				t.Errorf("lease after the taken-back run: %+v, %v; want released at epoch %d", after, err, held.Epoch+1)
			}
		})
	}
}
