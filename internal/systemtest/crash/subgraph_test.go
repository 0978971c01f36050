package crash_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/testhook"
)

// subgraphCrashRole is the LOCKSTEP_CHILD role of the subgraph crash
// tests' children.
const subgraphCrashRole = "subgraph-crash"

// subgraphCrashGraph: before → {sub, sib} → after, where sub runs a
// subgraph START → ask → END whose ask node charges (a durable step), asks,
// then ships (a durable step). Every effect is witnessed.
func subgraphCrashGraph(w witness, s *sqlite.Saver) (*graph.Runnable[crashState], error) {
	effect := func(name string) graph.NodeFunc[crashState] {
		return func(ctx context.Context, st crashState) (graph.Update[crashState], error) {
			if err := w.record(name); err != nil {
				return graph.Update[crashState]{}, err
			}
			return graph.Set(crashState{Log: []string{name}}, "Log"), nil
		}
	}
	child, err := graph.New[crashState]().
		AddNode("ask", crashAsk(w)).
		AddEdge(graph.START, "ask").Compile(graph.WithName("shipping"))
	if err != nil {
		return nil, err
	}
	return graph.New[crashState]().
		AddNode("before", effect("before")).
		AddSubgraph("sub", graph.Subgraph(child)).
		AddNode("sib", effect("sib")).
		AddNode("after", effect("after")).
		AddEdge(graph.START, "before").AddEdge("before", "sub").AddEdge("before", "sib").
		AddJoin([]string{"sub", "sib"}, "after").
		Compile(graph.WithSaver(s), graph.WithLeaseTTL(crashLease), graph.WithName("orders"))
}

// runSubgraphCrashChild runs the thread in a child process: Invoke on a
// new thread, Resume("yes") when it waits, Continue when it is pending,
// until it is done ("DONE"). With LOCKSTEP_KILL_POINT it dies at the
// LOCKSTEP_KILL_AT-th time the run passes that point (a graph point or a
// SQLite one), counted from the phase LOCKSTEP_KILL_PHASE (invoke, resume
// or continue) on.
func runSubgraphCrashChild() int {
	db, w, thread := os.Getenv("LOCKSTEP_DB"), witness(os.Getenv("LOCKSTEP_WITNESS")), os.Getenv("LOCKSTEP_THREAD")
	point, phase := os.Getenv("LOCKSTEP_KILL_POINT"), os.Getenv("LOCKSTEP_KILL_PHASE")
	killAt, _ := strconv.Atoi(os.Getenv("LOCKSTEP_KILL_AT"))
	var armed atomic.Bool
	var hits atomic.Int32
	hook := func(p string) {
		if armed.Load() && p == point && int(hits.Add(1)) == killAt {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
	}
	s, err := sqlite.Open(db, sqlite.Config{Hook: hook})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	r, err := subgraphCrashGraph(w, s)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	ctx := testhook.With(context.Background(), hook)
	deadline := time.Now().Add(20 * crashLease)
	for {
		var res graph.Result[crashState]
		var step string
		snap, err := r.GetState(ctx, thread)
		switch {
		case errors.Is(err, graph.ErrThreadNotFound):
			step = "invoke"
			armed.Store(armed.Load() || phase == step)
			res, err = r.Invoke(ctx, thread, graph.Update[crashState]{})
		case err != nil:
			fmt.Fprintln(os.Stderr, "state:", err)
			return 4
		case snap.Status == graph.StatusDone:
			fmt.Println("DONE")
			return 0
		case snap.Status == graph.StatusWaiting:
			step = "resume"
			armed.Store(armed.Load() || phase == step)
			res, err = r.Resume(ctx, thread, graph.Command[crashState]{Resume: "yes"})
		default:
			step = "continue"
			armed.Store(armed.Load() || phase == step)
			res, err = r.Continue(ctx, thread)
		}
		if err != nil && !(errors.Is(err, checkpoint.ErrThreadBusy) && time.Now().Before(deadline)) {
			fmt.Fprintln(os.Stderr, step+":", res.Status, err)
			return 5
		}
		if err != nil {
			time.Sleep(crashLease / 10) // the dead process's lease
		}
	}
}

// A SIGKILL at the subgraph boundary loses nothing and repeats nothing
// that committed: killed in the child's run, right after the subgraph's
// interrupt was saved, after the resumed subgraph node ran but before its
// checkpoint, after the subgraph finished and committed but before the
// parent's step did, and at the parent's save after it. A restarted
// process finishes the thread; the durable effects in the subgraph happen
// once, the parent's finished sibling never runs again, and the state
// holds each write once.
func TestCrashAtSubgraphBoundary(t *testing.T) {
	rows := []struct {
		name         string
		phase, point string
		at           int
		want         map[string]int
	}{
		// The waiting subgraph's interrupt is committed with the
		// parent's: die after the parent saves its pending writes.
		{name: "after the interrupt saved", phase: "invoke", point: "sqlite.writes.afterCommit", at: 4,
			want: map[string]int{"before": 1, "sib": 1, "charge": 1, "ship": 1, "after": 1, "ask-run": 2}},
		// Died with the subgraph's interrupt saved in its namespace but
		// not yet in the parent's: the restarted run finds the step
		// pending, and the subgraph asks again.
		{name: "before the interrupt reached the parent", phase: "invoke", point: "sqlite.writes.afterCommit", at: 3,
			want: map[string]int{"before": 1, "sib": 1, "charge": 1, "ship": 1, "after": 1, "ask-run": 3}},
		{name: "after the resumed subgraph node ran", phase: "resume", point: testhook.GraphAfterTask, at: 1,
			want: map[string]int{"before": 1, "sib": 1, "charge": 1, "ship": 1, "after": 1, "ask-run": 3}},
		{name: "after the subgraph committed, before the parent", phase: "resume", point: testhook.GraphAfterTask, at: 2,
			want: map[string]int{"before": 1, "sib": 1, "charge": 1, "ship": 1, "after": 1, "ask-run": 2}},
		{name: "at the parent's save after the subgraph", phase: "resume", point: "sqlite.put.beforeCommit", at: 2,
			want: map[string]int{"before": 1, "sib": 1, "charge": 1, "ship": 1, "after": 1, "ask-run": 2}},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			dir := t.TempDir()
			db, w := filepath.Join(dir, "crash.db"), witness(filepath.Join(dir, "witness"))
			t.Setenv("LOCKSTEP_KILL_POINT", row.point)
			t.Setenv("LOCKSTEP_KILL_PHASE", row.phase)
			t.Setenv("LOCKSTEP_KILL_AT", strconv.Itoa(row.at))
			out, err := startChild(t, subgraphCrashRole, db, w, "t1")
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(out, "DONE") {
				t.Fatalf("the child was never killed at %s #%d in %s", row.point, row.at, row.phase)
			}
			t.Setenv("LOCKSTEP_KILL_POINT", "")
			// startChild reports a child that was not killed as an error:
			// this one must finish.
			if out, err = startChild(t, subgraphCrashRole, db, w, "t1"); !strings.Contains(out, "DONE") {
				t.Fatalf("the restarted child: %q, %v", out, err)
			}
			got := map[string]int{}
			for effect := range row.want {
				got[effect] = w.count(effect)
			}
			if !mapsEqual(got, row.want) {
				t.Errorf("effects %v, want %v", got, row.want)
			}
			s, err := sqlite.Open(db, sqlite.Config{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			r, err := subgraphCrashGraph(w, s)
			if err != nil {
				t.Fatal(err)
			}
			snap, err := r.GetState(context.Background(), "t1")
			if err != nil || snap.Status != graph.StatusDone {
				t.Fatalf("final state: %s (%v)", snap.Status, err)
			}
			log := slices.Clone(snap.Values.Log)
			slices.Sort(log)
			if want := []string{"after", "ask:yes", "before", "sib"}; !slices.Equal(log, want) {
				t.Errorf("log %q, want each of %q once", snap.Values.Log, want)
			}
		})
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
