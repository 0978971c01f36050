package postgres

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/interrupt"
)

type loadState struct {
	Count  int
	Answer string
	Log    []string `lockstep:"append"`
}

// loadGraph is a 4-node chain whose third node asks a question.
func loadGraph() *graph.Graph[loadState] {
	step := func(name string) graph.NodeFunc[loadState] {
		return func(ctx context.Context, s loadState) (graph.Update[loadState], error) {
			return graph.Set(loadState{Count: s.Count + 1, Log: []string{name}}, "Count", "Log"), nil
		}
	}
	return graph.New[loadState]().AddNode("a", step("a")).AddNode("b", step("b")).
		AddNode("ask", func(ctx context.Context, s loadState) (graph.Update[loadState], error) {
			ans, err := interrupt.Ask[string](ctx, "go on?")
			if err != nil {
				return graph.Update[loadState]{}, err
			}
			return graph.Set(loadState{Count: s.Count + 1, Answer: ans, Log: []string{"ask"}}, "Count", "Answer", "Log"), nil
		}).
		AddNode("d", step("d")).
		AddEdge(graph.START, "a").AddEdge("a", "b").AddEdge("b", "ask").AddEdge("ask", "d").AddEdge("d", graph.END)
}

const (
	loadProcs      = 4
	loadGoroutines = 8
	loadRuns       = 6 // threads per goroutine
)

// loadThread names a thread of the load.
func loadThread(proc, g, i int) string { return fmt.Sprintf("p%d-g%d-%d", proc, g, i) }

// runLoad runs the goroutines of process proc on db: each runs its
// threads to their interrupt and resumes them to the end. It returns
// every error a caller saw.
func runLoad(db *DB, proc int) []error {
	r, err := loadGraph().Compile(graph.WithSaver(db.Saver()), graph.WithRunner(fmt.Sprintf("proc-%d", proc)))
	if err != nil {
		return []error{err}
	}
	ctx := context.Background()
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for g := range loadGoroutines {
		wg.Go(func() {
			for i := range loadRuns {
				th := loadThread(proc, g, i)
				res, err := r.Invoke(ctx, th, graph.Set(loadState{Log: []string{"input"}}, "Log"))
				if err == nil && res.Status != graph.StatusWaiting {
					err = fmt.Errorf("thread %s: %s after the invoke, want waiting", th, res.Status)
				}
				if err == nil {
					res, err = r.Resume(ctx, th, graph.Command[loadState]{Resume: "yes"})
				}
				if err == nil && res.Status != graph.StatusDone {
					err = fmt.Errorf("thread %s: %s after the resume, want done", th, res.Status)
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("thread %s: %w", th, err))
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return errs
}

// helperLoad is one process of TestLoadProcesses: it runs its load on the
// schema LOCKSTEP_POSTGRES_SCHEMA, prints every error and exits 1 if any.
func helperLoad() int {
	proc, _ := strconv.Atoi(os.Getenv("LOCKSTEP_LOAD_PROC"))
	db, err := Open(context.Background(), os.Getenv("LOCKSTEP_POSTGRES_URL"), Config{Schema: os.Getenv("LOCKSTEP_POSTGRES_SCHEMA"), MaxConns: 4})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer db.Close()
	errs := runLoad(db, proc)
	for _, err := range errs {
		fmt.Fprintln(os.Stderr, err)
	}
	if len(errs) > 0 {
		return 1
	}
	return 0
}

// TestLoadProcesses: 8 goroutines in each of 4 processes, on one schema
// (opened, and so migrated, by all at once), run threads to an interrupt
// and resume them, sharing pools of 4 connections: no caller sees an
// error, and every thread ends as the graph says, each node's write
// once.
func TestLoadProcesses(t *testing.T) {
	url := testURL(t)
	schema := newSchemaName()
	t.Cleanup(func() { dropSchema(t, url, schema) })
	var wg sync.WaitGroup
	outs := make([]string, loadProcs)
	fails := make([]error, loadProcs)
	for p := range loadProcs {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), helperEnv+"=load", "LOCKSTEP_POSTGRES_SCHEMA="+schema, "LOCKSTEP_LOAD_PROC="+strconv.Itoa(p))
		wg.Go(func() {
			out, err := cmd.CombinedOutput()
			outs[p], fails[p] = string(out), err
		})
	}
	wg.Wait()
	for p := range loadProcs {
		if fails[p] != nil {
			t.Errorf("process %d: %v\n%s", p, fails[p], outs[p])
		}
	}
	db := openTest(t, Config{Schema: schema})
	r, err := loadGraph().Compile(graph.WithSaver(db.Saver()))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"input", "a", "b", "ask", "d"}
	for p := range loadProcs {
		for g := range loadGoroutines {
			for i := range loadRuns {
				th := loadThread(p, g, i)
				s, err := r.GetState(context.Background(), th)
				if err != nil || s.Status != graph.StatusDone || s.Values.Count != 4 || !slices.Equal(s.Values.Log, want) {
					t.Errorf("thread %s: %v, %v %+v; want done with %v", th, err, s.Status, s.Values, want)
				}
			}
		}
	}
}
