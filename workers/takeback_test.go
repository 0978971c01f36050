package workers_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/postgres"
	"github.com/lockstepgo/lockstep/workers"
)

// The take-back test's worker processes (role "takeback"): a pool under
// the runner name envName on the database envDB (an SQLite file, or a
// Postgres URL with envSchema), whose graph's one node notes each start
// in the marks file and, in generation 1, waits until the release file
// exists. Its lease is an hour: far longer than the test waits.
const (
	envTBGen   = "WORKERS_TEST_TB_GEN"
	envTBMarks = "WORKERS_TEST_TB_MARKS"
	tbLease    = time.Hour
	tbThreads  = 4
)

type tbState struct {
	Input string
	By    string // the generation of the worker process that ran the node
}

// tbGraph is the take-back test's graph, for worker generation gen.
func tbGraph(gen, marks string) *graph.Graph[tbState] {
	work := func(ctx context.Context, st tbState) (graph.Update[tbState], error) {
		var none graph.Update[tbState]
		info, _ := graph.TaskFrom(ctx)
		if marks != "" {
			if err := appendSynced(marks, "start "+info.Thread+" "+gen); err != nil {
				return none, err
			}
		}
		if gen == "1" {
			for {
				if _, err := os.Stat(marks + ".release"); err == nil {
					break
				}
				select {
				case <-ctx.Done():
					return none, ctx.Err()
				case <-time.After(20 * time.Millisecond):
				}
			}
		}
		return graph.Set(tbState{By: gen}, "By"), nil
	}
	return graph.New[tbState]().AddNode("work", work).AddEdge(graph.START, "work").AddEdge("work", graph.END)
}

func appendSynced(path, line string) error {
	fh, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := fh.WriteString(line + "\n"); err != nil {
		fh.Close()
		return err
	}
	if err := fh.Sync(); err != nil {
		fh.Close()
		return err
	}
	return fh.Close()
}

// openTB opens the take-back test's store: SQLite when schema is "",
// Postgres otherwise.
func openTB(ctx context.Context, db, schema string) (workers.Store, func(), error) {
	if schema == "" {
		s, err := sqlite.Open(db, sqlite.Config{})
		if err != nil {
			return nil, nil, err
		}
		return s, func() { s.Close() }, nil
	}
	pdb, err := postgres.Open(ctx, db, postgres.Config{Schema: schema, MaxConns: 8})
	if err != nil {
		return nil, nil, err
	}
	return pdb.Saver(), func() { pdb.Close() }, nil
}

// takeBackChild is a worker process of TestTakeBackByName: its pool runs
// until SIGTERM.
func takeBackChild() error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	store, closeStore, err := openTB(ctx, os.Getenv(envDB), os.Getenv(envSchema))
	if err != nil {
		return err
	}
	defer closeStore()
	r, err := tbGraph(os.Getenv(envTBGen), os.Getenv(envTBMarks)).Compile(
		graph.WithSaver(store), graph.WithRunner(os.Getenv(envName)), graph.WithLeaseTTL(tbLease))
	if err != nil {
		return err
	}
	pool, err := workers.New(r, workers.Options{Concurrency: 2 * tbThreads, Poll: 50 * time.Millisecond})
	if err != nil {
		return err
	}
	if err := pool.Run(ctx); !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// TestTakeBackByName kills a worker process while its pool runs threads
// under leases of an hour, and starts a worker process under the same
// name: it takes the threads back at once (the test waits minutes, not
// an hour, so only the take-back explains the pickup) and finishes them.
// With "pause" the first process is stopped (SIGSTOP) instead, and
// continued once the second has finished: its runs, fenced by the epoch
// the take-back grew, land nothing. On SQLite and Postgres.
func TestTakeBackByName(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		for _, mode := range []string{"kill", "pause"} {
			t.Run(backend+"/"+mode, func(t *testing.T) { testTakeBack(t, backend, mode) })
		}
	}
}

func testTakeBack(t *testing.T, backend, mode string) {
	ctx := context.Background()
	dir := t.TempDir()
	db, schema := filepath.Join(dir, "lockstep.db"), ""
	if backend == "postgres" {
		db, schema = pgSchema(t)
	}
	store, closeStore, err := openTB(ctx, db, schema)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeStore)
	reader, err := tbGraph("reader", "").Compile(graph.WithSaver(store))
	if err != nil {
		t.Fatal(err)
	}
	feeder, err := workers.New(reader, workers.Options{})
	if err != nil {
		t.Fatal(err)
	}
	threads := make([]string, tbThreads)
	for i := range threads {
		threads[i] = fmt.Sprintf("tb-%d", i)
		if _, err := feeder.Enqueue(ctx, threads[i], graph.Set(tbState{Input: "in"}, "Input")); err != nil {
			t.Fatal(err)
		}
	}
	marks := filepath.Join(dir, "marks")
	const name = "worker-7"
	start := func(gen string) *exec.Cmd {
		t.Helper()
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envChild+"=takeback", envDB+"="+db, envSchema+"="+schema, envName+"="+name,
			envTBGen+"="+gen, envTBMarks+"="+marks)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if cmd.ProcessState == nil {
				_ = cmd.Process.Signal(syscall.SIGCONT)
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}
		})
		return cmd
	}
	// waitFor polls cond for a bounded time, far below the lease.
	waitFor := func(what string, cond func() (bool, error)) {
		t.Helper()
		for range 1800 { // 3 minutes
			ok, err := cond()
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("%s: not after 3 minutes (the lease is %v)", what, tbLease)
	}
	startedBy := func(gen string) int {
		b, err := os.ReadFile(marks)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		n := 0
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasSuffix(l, " "+gen) {
				n++
			}
		}
		return n
	}

	first := start("1")
	waitFor("the first worker runs every thread", func() (bool, error) { return startedBy("1") == tbThreads, nil })
	before, err := store.(checkpoint.RunnerLeases).LeasedBy(ctx, name, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(before) != tbThreads {
		t.Fatalf("leases of %s: %+v, want one per thread", name, before)
	}
	epochs := map[string]uint64{}
	for _, l := range before {
		epochs[l.Thread] = l.Epoch
	}
	switch mode {
	case "kill":
		if err := first.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = first.Wait()
	case "pause":
		if err := first.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}

	second := start("2")
	done := func() (bool, error) {
		for _, th := range threads {
			snap, err := reader.GetState(ctx, th)
			if err != nil || snap.Status != graph.StatusDone {
				return false, nil
			}
		}
		return true, nil
	}
	waitFor("the second worker, under the same name, finishes every thread", done)
	for _, th := range threads {
		info, err := store.(checkpoint.LeaseInspector).Lease(ctx, th, "")
		if err != nil {
			t.Fatal(err)
		}
		if info.Epoch <= epochs[th] {
			t.Errorf("thread %s: epoch %d after the take-back, want above %d", th, info.Epoch, epochs[th])
		}
	}
	if mode == "pause" {
		// The first process goes on: its nodes return, and every write of
		// theirs is refused.
		if err := appendSynced(marks+".release", "go"); err != nil {
			t.Fatal(err)
		}
		if err := first.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		// It settles what it held (each refused) before it stops.
		time.Sleep(500 * time.Millisecond) // not an assertion: gives the refused writes a chance to be tried
		if err := first.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := first.Wait(); err != nil {
			t.Errorf("the first worker: %v", err)
		}
	}
	if err := second.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := second.Wait(); err != nil {
		t.Errorf("the second worker: %v", err)
	}
	for _, th := range threads {
		hist, err := reader.History(ctx, th, graph.HistoryOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range hist {
			if s.Values.By == "1" {
				t.Errorf("thread %s: checkpoint %s holds the first worker's result", th, s.Config.CheckpointID)
			}
		}
		if snap, err := reader.GetState(ctx, th); err != nil || snap.Values.By != "2" {
			t.Errorf("thread %s: %v %+v, want the second worker's result", th, err, snap.Values)
		}
	}
	if n := startedBy("2"); n != tbThreads {
		t.Errorf("the second worker started %d nodes, want %d", n, tbThreads)
	}
}
