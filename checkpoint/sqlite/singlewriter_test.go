package sqlite

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/interrupt"
)

type askState struct {
	Log    []string `lockstep:"append"`
	Answer string
}

// askGraph: first (slow) -> ask (interrupt.Ask) -> after (slow). exec is
// called with the node's name every time a node starts.
func askGraph(s checkpoint.Saver, exec func(string)) (*graph.Runnable[askState], error) {
	g := graph.New[askState]()
	g.AddNode("first", func(ctx context.Context, st askState) (graph.Update[askState], error) {
		exec("first")
		time.Sleep(30 * time.Millisecond)
		return graph.Set(askState{Log: []string{"first"}}, "Log"), nil
	})
	g.AddNode("ask", func(ctx context.Context, st askState) (graph.Update[askState], error) {
		exec("ask")
		answer, err := interrupt.Ask[string](ctx, "approve?")
		if err != nil {
			return graph.Update[askState]{}, err
		}
		return graph.Set(askState{Log: []string{"ask"}, Answer: answer}, "Log", "Answer"), nil
	})
	g.AddNode("after", func(ctx context.Context, st askState) (graph.Update[askState], error) {
		exec("after")
		time.Sleep(30 * time.Millisecond)
		return graph.Set(askState{Log: []string{"after"}}, "Log"), nil
	})
	g.AddEdge(graph.START, "first").AddEdge("first", "ask").AddEdge("ask", "after").AddEdge("after", graph.END)
	return g.Compile(graph.WithSaver(s))
}

// lostRace reports whether err is what a runner that lost the thread gets
// before running any node: the saver's ErrThreadBusy or ErrConflict when
// it tried to write while the winner owned the thread, or, when it read
// the thread only after the winner had moved on, the runtime's own
// fail-closed errors (a resume of an answered interrupt, new input on a
// waiting thread).
func lostRace(err error) bool {
	return errors.Is(err, checkpoint.ErrThreadBusy) || errors.Is(err, checkpoint.ErrConflict) ||
		errors.Is(err, graph.ErrNothingToResume) || errors.Is(err, graph.ErrPendingInterrupt)
}

func noForks(t *testing.T, s *Saver) {
	t.Helper()
	var forks int
	if err := s.DB().QueryRow(`SELECT count(*) FROM (SELECT 1 FROM checkpoints WHERE parent_checkpoint_id IS NOT NULL
		GROUP BY thread_id, checkpoint_ns, parent_checkpoint_id HAVING count(*) > 1)`).Scan(&forks); err != nil || forks != 0 {
		t.Fatalf("%d checkpoints with more than one child (%v)", forks, err)
	}
}

// TestOneWriterPerThreadGoroutines (D5, R11, R18): two runners, each with
// its own Saver on the same file, Invoke the same new thread at once, then
// Resume the same interrupt at once. Each time exactly one proceeds; the
// other gets an error matching ErrThreadBusy or ErrConflict before it runs
// any node (node executions are counted), and the chain never forks.
func TestOneWriterPerThreadGoroutines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "race.db")
	var mu sync.Mutex
	execs := map[string]int{}
	exec := func(n string) { mu.Lock(); execs[n]++; mu.Unlock() }
	var runners []*graph.Runnable[askState]
	var savers []*Saver
	for i := 0; i < 2; i++ {
		s := openAt(t, path, Config{Synchronous: SyncNormal})
		r, err := askGraph(s, exec)
		if err != nil {
			t.Fatal(err)
		}
		runners, savers = append(runners, r), append(savers, s)
	}
	ctx := t.Context()
	race := func(run func(r *graph.Runnable[askState], i int) error) (won int) {
		errs := make([]error, 2)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, r := range runners {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[i] = run(r, i)
			}()
		}
		close(start)
		wg.Wait()
		won = -1
		for i, err := range errs {
			switch {
			case err == nil:
				if won >= 0 {
					t.Fatal("both runners proceeded")
				}
				won = i
			case !lostRace(err):
				t.Fatalf("runner %d: %v, want ErrThreadBusy or ErrConflict", i, err)
			default:
				t.Logf("runner %d lost: %v", i, err)
			}
		}
		if won < 0 {
			t.Fatalf("no runner proceeded: %v", errs)
		}
		return won
	}
	race(func(r *graph.Runnable[askState], i int) error {
		res, err := r.Invoke(ctx, "th", graph.Set(askState{}, "Log"))
		if err == nil && res.Status != graph.StatusWaiting {
			return fmt.Errorf("status %s", res.Status)
		}
		return err
	})
	if execs["first"] != 1 || execs["ask"] != 1 {
		t.Fatalf("node executions after the Invoke race: %v, want first 1, ask 1", execs)
	}
	won := race(func(r *graph.Runnable[askState], i int) error {
		res, err := r.Resume(ctx, "th", graph.Command[askState]{Resume: fmt.Sprint("answer-", i)})
		if err == nil && res.Status != graph.StatusDone {
			return fmt.Errorf("status %s", res.Status)
		}
		return err
	})
	if execs["ask"] != 2 || execs["after"] != 1 || execs["first"] != 1 {
		t.Fatalf("node executions after the Resume race: %v, want first 1, ask 2, after 1", execs)
	}
	snap, err := runners[0].GetState(ctx, "th")
	if err != nil || snap.Values.Answer != fmt.Sprint("answer-", won) {
		t.Fatalf("state %+v (%v), want the winner's answer", snap.Values, err)
	}
	noForks(t, savers[0])
}

// helperRunner is a child of TestOneWriterPerThreadProcesses: it waits
// for the start file, runs Invoke or Resume on the thread and reports node
// executions and the outcome.
func helperRunner() error {
	db := os.Getenv(envDB)
	mode := os.Getenv(envPrefix)
	for {
		if _, err := os.Stat(db + "." + mode); err == nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	s, err := Open(db, Config{Synchronous: SyncNormal})
	if err != nil {
		return err
	}
	defer s.Close()
	r, err := askGraph(s, func(n string) { fmt.Println("EXEC", n) })
	if err != nil {
		return err
	}
	ctx := context.Background()
	if mode == "invoke" {
		_, err = r.Invoke(ctx, "th", graph.Set(askState{}, "Log"))
	} else {
		_, err = r.Resume(ctx, "th", graph.Command[askState]{Resume: "from-" + os.Getenv(envCount)})
	}
	switch {
	case err == nil:
		fmt.Println("RESULT ok")
	case lostRace(err):
		fmt.Println("RESULT lost")
		fmt.Fprintln(os.Stderr, "lost:", err)
	default:
		fmt.Println("RESULT error", err)
	}
	return nil
}

// TestOneWriterPerThreadProcesses (D5, R11): the same race between two
// processes: both Invoke a new thread, then both Resume its interrupt.
// Exactly one of each pair proceeds, the loser runs no node, and the chain
// never forks.
func TestOneWriterPerThreadProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "race.db")
	s := openAt(t, path, Config{Synchronous: SyncNormal})
	execs := map[string]int{}
	for _, mode := range []string{"invoke", "resume"} {
		var cs []*child
		var scs []*bufio.Scanner
		for i := 0; i < 2; i++ {
			c, sc := startChild(t, "runner", envDB+"="+path, envPrefix+"="+mode, envCount+"="+fmt.Sprint(i))
			cs, scs = append(cs, c), append(scs, sc)
		}
		time.Sleep(50 * time.Millisecond) // both children up and polling
		if err := os.WriteFile(path+"."+mode, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		results := map[string]int{}
		for i, c := range cs {
			for scs[i].Scan() {
				line := scs[i].Text()
				if n, ok := strings.CutPrefix(line, "EXEC "); ok {
					execs[n]++
				}
				if r, ok := strings.CutPrefix(line, "RESULT "); ok {
					results[r]++
				}
			}
			if err := c.cmd.Wait(); err != nil {
				t.Fatalf("runner: %v\n%s", err, c.stderr.String())
			}
		}
		if results["ok"] != 1 || results["lost"] != 1 {
			t.Fatalf("%s race: results %v, want one ok and one lost", mode, results)
		}
		for _, c := range cs {
			if c.stderr.Len() > 0 {
				t.Logf("%s: %s", mode, strings.TrimSpace(c.stderr.String()))
			}
		}
	}
	if execs["first"] != 1 || execs["ask"] != 2 || execs["after"] != 1 {
		t.Fatalf("node executions %v, want first 1, ask 2, after 1", execs)
	}
	noForks(t, s)
}
