package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/faultdb"

	sqlite3 "github.com/mattn/go-sqlite3"
)

// Child processes: the test binary re-runs itself with helperEnv set to a
// role (docs/reliability.md H3). Parameters come in environment variables.
const (
	envDB        = "LOCKSTEP_SQLITE_DB"
	envThreads   = "LOCKSTEP_SQLITE_THREADS"
	envKillPoint = "LOCKSTEP_SQLITE_KILL_POINT"
	envKillAt    = "LOCKSTEP_SQLITE_KILL_AT"
	envKillSQL   = "LOCKSTEP_SQLITE_KILL_SQL"
	envCount     = "LOCKSTEP_SQLITE_COUNT"
	envPrefix    = "LOCKSTEP_SQLITE_PREFIX"
)

// runHelper runs a child-process role and returns its exit code.
func runHelper(role string) int {
	var err error
	switch role {
	case "crash":
		err = helperCrash()
	case "load":
		err = helperLoad()
	case "runner":
		err = helperRunner()
	case "walgone":
		err = helperWALGone()
	case "setup":
		err = helperSetUp()
	case "romount":
		err = helperReadOnlyMount()
	case "groupcrash":
		err = helperGroupCrash()
	default:
		err = fmt.Errorf("unknown helper role %q", role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	return 0
}

// ackSaver prints "ACK <thread> <checkpoint>" after every Put that
// returned nil: only then is a checkpoint acknowledged.
type ackSaver struct {
	*Saver
	out io.Writer
}

func (a ackSaver) Put(ctx context.Context, req checkpoint.PutRequest) error {
	err := a.Saver.Put(ctx, req)
	if err == nil {
		fmt.Fprintf(a.out, "ACK %s %s\n", req.Thread, req.Checkpoint.ID)
	}
	return err
}

// crashState is the state of the crash-test graph.
type crashState struct {
	Count int
	Log   []string `lockstep:"append"`
}

// crashGraph: a -> {b, c} (parallel; c is slower, so b's writes are saved
// as pending writes while c runs) -> d -> e -> f. Every node appends its
// name to Log; the chain nodes count.
func crashGraph(s checkpoint.Saver) (*graph.Runnable[crashState], error) {
	g := graph.New[crashState]()
	count := func(name string) graph.NodeFunc[crashState] {
		return func(ctx context.Context, st crashState) (graph.Update[crashState], error) {
			return graph.Set(crashState{Count: st.Count + 1, Log: []string{name}}, "Count", "Log"), nil
		}
	}
	logOnly := func(name string, d time.Duration) graph.NodeFunc[crashState] {
		return func(ctx context.Context, st crashState) (graph.Update[crashState], error) {
			time.Sleep(d)
			return graph.Set(crashState{Log: []string{name}}, "Log"), nil
		}
	}
	g.AddNode("a", count("a")).AddNode("b", logOnly("b", 0)).AddNode("c", logOnly("c", 2*time.Millisecond))
	g.AddNode("d", count("d")).AddNode("e", count("e")).AddNode("f", count("f"))
	g.AddEdge(graph.START, "a").AddEdge("a", "b").AddEdge("a", "c").AddEdge("b", "d").AddEdge("c", "d")
	g.AddEdge("d", "e").AddEdge("e", "f").AddEdge("f", graph.END)
	return g.Compile(graph.WithSaver(s), graph.WithLeaseTTL(50*time.Millisecond))
}

// runThreads brings every thread to done: Invoke a new one, Continue one
// that a crash interrupted.
func runThreads(ctx context.Context, r *graph.Runnable[crashState], threads []string) error {
	for _, th := range threads {
		snap, err := r.GetState(ctx, th)
		switch {
		case errors.Is(err, graph.ErrThreadNotFound):
			_, err = r.Invoke(ctx, th, graph.Set(crashState{}, "Count"))
		case err != nil:
			return err
		case snap.Status == graph.StatusDone:
			continue
		default:
			_, err = continueUntilFree(ctx, r, th)
		}
		if err != nil {
			return fmt.Errorf("thread %s: %w", th, err)
		}
	}
	return nil
}

// continueUntilFree continues a thread, waiting out the lease a killed
// runner left behind.
func continueUntilFree(ctx context.Context, r *graph.Runnable[crashState], th string) (graph.Result[crashState], error) {
	for {
		res, err := r.Continue(ctx, th)
		if !errors.Is(err, checkpoint.ErrThreadBusy) {
			return res, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// helperCrash runs the crash graph on the threads in envThreads,
// acknowledging each Put on stdout, and kills itself with SIGKILL at the
// envKillAt-th call of the hook point envKillPoint (if set).
func helperCrash() error {
	point := os.Getenv(envKillPoint)
	at, _ := strconv.Atoi(os.Getenv(envKillAt))
	seen := 0
	hook := func(p string) {
		if p == point {
			seen++
			if seen == at {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {} // never returns
			}
		}
	}
	cfg := Config{Synchronous: SyncNormal, Hook: hook}
	if stmt := os.Getenv(envKillSQL); stmt != "" {
		// Kill the process at the at-th execution of the statement, before
		// SQLite runs it (faultdb, docs/reliability.md H1 and R02).
		drv := faultdb.New(&sqlite3.SQLiteDriver{})
		op := faultdb.OpExec
		if stmt == "COMMIT" {
			op = faultdb.OpCommit
		}
		drv.Arm(faultdb.Fault{Op: op, Match: stmt, N: at, Action: func() {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}})
		sql.Register(faultDriverName, drv)
		cfg.DriverName = faultDriverName
	}
	s, err := Open(os.Getenv(envDB), cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	r, err := crashGraph(ackSaver{Saver: s, out: os.Stdout})
	if err != nil {
		return err
	}
	if err := runThreads(context.Background(), r, strings.Fields(os.Getenv(envThreads))); err != nil {
		return err
	}
	fmt.Println("DONE")
	return nil
}
