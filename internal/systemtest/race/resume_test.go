package race_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/interrupt"
)

type reproState struct {
	Log []string `lockstep:"append"`
}

// TestConcurrentResumesKeepEveryAnswer: a task waits on two interrupts
// (the tool node asks for every gated call of a message at once), and two
// callers resume them by ID at the same time (an approval worker with
// Concurrency > 1, or two workers). Both Resume calls return nil, so both
// answers must be durable and the thread done.
//
// Found by TestCrashLoop (seeds 1001 and 20: a thread waiting on an
// approval whose decision the worker had marked resumed). It used to fail
// on MemorySaver and SQLite alike: Runnable.Resume read the task's saved
// answers before it held the thread's lease, merged its own, and saved the
// __resume__ write, which replaces the task's previous one; the second
// write, built on the stale read, dropped the first answer. Resume now
// claims the thread before it reads. It came back with the runner's
// take-back of its own lease: a run that was alone on the thread when it
// sent its claim took the lease from a run of the same Runnable that had
// claimed it meanwhile, and both read and wrote (graph's
// TestSameRunnableRunsKeptApart forces that interleaving).
func TestConcurrentResumesKeepEveryAnswer(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"memory", "sqlite"} {
		t.Run(name, func(t *testing.T) {
			var s checkpoint.Saver = checkpoint.NewMemorySaver(nil)
			if name == "sqlite" {
				ss, err := sqlite.Open(filepath.Join(t.TempDir(), "r.db"), sqlite.Config{Synchronous: sqlite.SyncNormal})
				if err != nil {
					t.Fatal(err)
				}
				defer ss.Close()
				s = ss
			}
			r, err := graph.New[reproState]().AddNode("ask", func(ctx context.Context, _ reproState) (graph.Update[reproState], error) {
				a, errA := interrupt.AskKey[string](ctx, "a", "a?")
				b, errB := interrupt.AskKey[string](ctx, "b", "b?")
				if err := errors.Join(errA, errB); err != nil {
					return graph.Update[reproState]{}, err
				}
				return graph.Set(reproState{Log: []string{a + b}}, "Log"), nil
			}).AddEdge(graph.START, "ask").Compile(graph.WithSaver(s), graph.WithLeaseTTL(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			lost := 0
			const n = 200
			for i := range n {
				th := fmt.Sprintf("t%d", i)
				res, err := r.Invoke(ctx, th, graph.Update[reproState]{})
				if err != nil || len(res.Interrupts) != 2 {
					t.Fatalf("invoke: %v %v", err, res.Interrupts)
				}
				var wg sync.WaitGroup
				for _, in := range res.Interrupts {
					wg.Go(func() {
						for {
							_, err := r.Resume(ctx, th, graph.Command[reproState]{ResumeByID: map[string]any{in.ID: "x"}})
							if errors.Is(err, checkpoint.ErrThreadBusy) || errors.Is(err, checkpoint.ErrConflict) {
								time.Sleep(100 * time.Microsecond)
								continue
							}
							if err != nil {
								t.Errorf("resume %s: %v", in.ID, err)
							}
							return
						}
					})
				}
				wg.Wait()
				snap, err := r.GetState(ctx, th)
				if err != nil {
					t.Fatal(err)
				}
				if snap.Status != graph.StatusDone {
					lost++
					if lost == 1 {
						t.Logf("thread %s after both resumes returned nil: %s, waiting on %v", th, snap.Status, snap.Interrupts)
					}
				}
			}
			if lost > 0 {
				t.Errorf("%d of %d threads lost an answer", lost, n)
			}
		})
	}
}
