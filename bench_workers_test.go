package lockstep_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/postgres"
	"github.com/lockstepgo/lockstep/workers"
)

// W6's shape (issue 18): 192 threads (a multiple of every in-flight count,
// so the last wave is full) of a 5-node chain whose nodes each wait 50 ms,
// 16 threads in flight per worker process.
const (
	w6Role     = "w6-worker"
	w6DBEnv    = "LOCKSTEP_W6_DB"
	w6PGEnv    = "LOCKSTEP_W6_SCHEMA" // set: LOCKSTEP_W6_DB is a Postgres URL, this its schema
	w6NameEnv  = "LOCKSTEP_W6_NAME"   // the worker's runner name, its own
	w6Threads  = 192
	w6Nodes    = 5
	w6Wait     = 50 * time.Millisecond
	w6InFlight = 16
)

// w6State is W6's state: the input and one entry per node.
type w6State struct {
	Order string
	Log   []string `lockstep:"append"`
}

func w6Graph() *graph.Graph[w6State] {
	g := graph.New[w6State]()
	prev := graph.START
	for i := 1; i <= w6Nodes; i++ {
		name := fmt.Sprintf("n%d", i)
		g.AddNode(name, func(ctx context.Context, s w6State) (graph.Update[w6State], error) {
			t := time.NewTimer(w6Wait) // a stand-in for a model call
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
				return graph.Update[w6State]{}, ctx.Err()
			}
			return graph.Set(w6State{Log: []string{name}}, "Log"), nil
		})
		g.AddEdge(prev, name)
		prev = name
	}
	return g.AddEdge(prev, graph.END)
}

// w6Compile compiles W6's graph on s under the runner name, as every
// worker process does (each under a name of its own: two live processes
// under one name would take each other's leases back).
func w6Compile(s checkpoint.Saver, runner string) (*graph.Runnable[w6State], error) {
	return w6Graph().Compile(graph.WithSaver(s), graph.WithRunner(runner))
}

// w6Open opens W6's database: the SQLite file at db, or, with schema set,
// the Postgres schema of the URL db. It returns the saver, how many inputs
// are still queued, and its close.
func w6Open(ctx context.Context, db, schema string) (checkpoint.Saver, func() (int, error), func(), error) {
	if schema == "" {
		s, err := sqlite.Open(db, sqlite.Config{})
		if err != nil {
			return nil, nil, nil, err
		}
		queued := func() (n int, err error) {
			err = s.DB().QueryRowContext(ctx, `SELECT count(*) FROM queued_inputs`).Scan(&n)
			return n, err
		}
		return s, queued, func() { s.Close() }, nil
	}
	pg, err := postgres.Open(ctx, db, postgres.Config{Schema: schema, MaxConns: w6InFlight + 4})
	if err != nil {
		return nil, nil, nil, err
	}
	queued := func() (n int, err error) {
		err = pg.Pool().QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema}.Sanitize()+`.queued_inputs`).Scan(&n)
		return n, err
	}
	return pg.Saver(), queued, func() { pg.Close() }, nil
}

// runW6Child is a W6 worker process: a pool of w6InFlight on the database
// LOCKSTEP_W6_DB (and LOCKSTEP_W6_SCHEMA) names, until its standard input
// closes. It prints READY once its pool runs.
func runW6Child() int {
	s, _, closeDB, err := w6Open(context.Background(), os.Getenv(w6DBEnv), os.Getenv(w6PGEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	defer closeDB()
	r, err := w6Compile(s, os.Getenv(w6NameEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	pool, err := workers.New(r, workers.Options{Concurrency: w6InFlight, Poll: 10 * time.Millisecond})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error, 1)
	go func() { done <- pool.Run(ctx) }()
	fmt.Println("READY")
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent closes it
	stop()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	return 0
}

// BenchmarkW6Workers (issue 18's W6): worker processes on one database
// work 192 queued threads of a 5-node chain whose nodes each wait 50 ms,
// 16 in flight per worker. One op is the 192 threads, from queueing their
// input (in one transaction, Pool.EnqueueAll) to the last one settled.
// threads/s is the throughput; efficiency is it over the latency-bound
// ideal (in-flight threads / 250 ms): 1 means
// the engine adds nothing to the nodes' own wait.
//
// On Postgres (backend=postgres, skipped without LOCKSTEP_POSTGRES_URL)
// the workers share a fresh schema of the database.
//
//	go test -run '^$' -bench W6Workers -benchtime 3x .
func BenchmarkW6Workers(b *testing.B) {
	for _, backend := range []string{"sqlite", "postgres"} {
		for _, n := range []int{1, 2, 4} {
			b.Run(fmt.Sprintf("backend=%s/workers=%d", backend, n), func(b *testing.B) { benchW6(b, backend, n) })
		}
	}
}

func benchW6(b *testing.B, backend string, procs int) {
	path, schema := filepath.Join(b.TempDir(), "w6.db"), ""
	if backend == "postgres" {
		schema = openBenchPostgres(b, nil).Schema() // created now, dropped when b ends
		path = os.Getenv("LOCKSTEP_POSTGRES_URL")
	}
	s, queued, closeDB, err := w6Open(b.Context(), path, schema)
	if err != nil {
		b.Fatal(err)
	}
	defer closeDB()
	r, err := w6Compile(s, "w6-parent")
	if err != nil {
		b.Fatal(err)
	}
	pool, err := workers.New(r, workers.Options{})
	if err != nil {
		b.Fatal(err)
	}
	for i := range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "LOCKSTEP_CHILD="+w6Role, w6DBEnv+"="+path, w6PGEnv+"="+schema, fmt.Sprintf("%s=w6-%d", w6NameEnv, i))
		stdin, err := cmd.StdinPipe()
		if err != nil {
			b.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			stdin.Close()
			if err := cmd.Wait(); err != nil {
				b.Errorf("W6 worker %d: %v", i, err)
			}
		})
		if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "READY\n" {
			b.Fatalf("W6 worker %d did not start: %q, %v", i, line, err)
		}
	}
	ctx := b.Context()
	var elapsed time.Duration
	b.ResetTimer()
	for it := range b.N {
		start := time.Now()
		batch := make([]workers.Input[w6State], w6Threads)
		for k := range batch {
			th := fmt.Sprintf("w6-%d-%03d", it, k)
			batch[k] = workers.Input[w6State]{Thread: th, Update: graph.Set(w6State{Order: th}, "Order"), Key: "order"}
		}
		if _, err := pool.EnqueueAll(ctx, batch); err != nil { // one transaction
			b.Fatal(err)
		}
		for {
			n, err := queued()
			if err != nil {
				b.Fatal(err)
			}
			if n == 0 {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		elapsed += time.Since(start)
		b.StopTimer()
		snap, err := r.GetState(ctx, fmt.Sprintf("w6-%d-%03d", it, w6Threads-1))
		if err != nil || snap.Status != graph.StatusDone || len(snap.Values.Log) != w6Nodes {
			b.Fatalf("the last thread: %+v, %v; want done after %d nodes", snap, err, w6Nodes)
		}
		b.StartTimer()
	}
	perSec := float64(w6Threads*b.N) / elapsed.Seconds()
	ideal := float64(procs*w6InFlight) / (w6Nodes * w6Wait).Seconds()
	b.ReportMetric(perSec, "threads/s")
	b.ReportMetric(perSec/ideal, "efficiency")
}
