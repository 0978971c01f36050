package fence_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/systemtest"
	"github.com/lockstepgo/lockstep/interrupt"
	"github.com/lockstepgo/lockstep/postgres"
)

// fenceRole is the LOCKSTEP_CHILD role of the stale runner of
// TestStaleWriterFenced (main_test.go's TestMain dispatches it).
const fenceRole = "fence"

const (
	envFenceDB   = "LOCKSTEP_FENCE_DB" // "sqlite:<path>" or "postgres:<schema>"
	fenceThread  = "thread-8796"
	fenceTTL     = 500 * time.Millisecond
	fenceStale   = "stale result"
	fenceAnswer  = "stale runner's write"
	fenceMessage = "FINAL"
)

type fenceState struct {
	Result string
	Log    []string `lockstep:"append"`
}

// fenceGraph is one node, work, between START and END; what work does is
// the runner's.
func fenceGraph(work graph.NodeFunc[fenceState]) *graph.Graph[fenceState] {
	return graph.New[fenceState]().AddNode("work", work).AddEdge(graph.START, "work")
}

// openFenceSaver opens the backend named like envFenceDB.
func openFenceSaver(spec string) (checkpoint.Saver, func(), error) {
	kind, arg, _ := strings.Cut(spec, ":")
	switch kind {
	case "sqlite":
		s, err := sqlite.Open(arg, sqlite.Config{})
		if err != nil {
			return nil, nil, err
		}
		return s, func() { s.Close() }, nil
	case "postgres":
		db, err := postgres.Open(context.Background(), os.Getenv("LOCKSTEP_POSTGRES_URL"), postgres.Config{Schema: arg, MaxConns: 2})
		if err != nil {
			return nil, nil, err
		}
		return db.Saver(), func() { db.Close() }, nil
	}
	return nil, nil, fmt.Errorf("unknown backend %q", spec)
}

// runFenceChild is the stale runner A: it starts the thread and, in work,
// says READY and blocks on its standard input (the parent stops it there
// with SIGSTOP, past its lease); thawed, it returns its result, which it
// must not be able to save. It reports how its run ended and exits 0.
func runFenceChild() int {
	s, closeSaver, err := openFenceSaver(os.Getenv(envFenceDB))
	if err != nil {
		fmt.Fprintln(os.Stderr, "fence child:", err)
		return 3
	}
	defer closeSaver()
	in := bufio.NewReader(os.Stdin)
	g := fenceGraph(func(ctx context.Context, st fenceState) (graph.Update[fenceState], error) {
		fmt.Println("READY")
		if _, err := in.ReadString('\n'); err != nil {
			return graph.Update[fenceState]{}, err
		}
		return graph.Set(fenceState{Result: fenceStale, Log: []string{fenceAnswer}}, "Result", "Log"), nil
	})
	r, err := g.Compile(graph.WithSaver(s), graph.WithLeaseTTL(fenceTTL), graph.WithRunner("runner-a"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "fence child:", err)
		return 3
	}
	_, err = r.Invoke(context.Background(), fenceThread, graph.Update[fenceState]{})
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	fmt.Printf("%s %s %s\n", fenceMessage, systemtest.EndClass(err), strconv.Quote(msg))
	return 0
}

// TestStaleWriterFenced reproduces langchain-ai/langgraph#8796 (D17) on
// SQLite and on PostgreSQL: two processes run one thread, both believing
// they own it. Runner A (a child process) starts the thread and is frozen
// with SIGSTOP inside its node, past its lease. Runner B (this process)
// takes the thread over, runs the same node, which pauses on an interrupt,
// and releases the thread, leaving the head where it was. A is thawed and
// finishes its node. Its writes (its heartbeat's claim, its step's
// checkpoint) carry its fence, the lease it took at epoch 1; the lease
// passed on to B at epoch 2, so each is refused: A's run ends with an
// error matching checkpoint.ErrThreadBusy, and nothing of A's node is
// saved: the thread still waits on B's interrupt, no checkpoint or
// pending write holds A's result, and the lease epoch is still B's. Before
// the fence A's Put found the head unchanged and the lease free, took it
// (epoch 3) and forked the chain past B's interrupt.
func TestStaleWriterFenced(t *testing.T) {
	backends := map[string]func(t *testing.T) string{
		"sqlite": func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "fence.db") },
		"postgres": func(t *testing.T) string {
			url := os.Getenv("LOCKSTEP_POSTGRES_URL")
			if url == "" {
				if os.Getenv("CI") == "true" {
					t.Fatal("LOCKSTEP_POSTGRES_URL is not set and CI=true")
				}
				t.Skip("LOCKSTEP_POSTGRES_URL not set: the Postgres tests skip (eval \"$(.ci/postgres.sh start /tmp/lockstep-pg)\" starts a cluster)")
			}
			var b [6]byte
			_, _ = rand.Read(b[:])
			schema := "fence_" + hex.EncodeToString(b[:])
			t.Cleanup(func() {
				ctx := context.Background()
				if conn, err := pgx.Connect(ctx, url); err == nil {
					conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
					conn.Close(ctx)
				}
			})
			return "postgres:" + schema
		},
	}
	for name, spec := range backends {
		t.Run(name, func(t *testing.T) { testStaleWriterFenced(t, spec(t)) })
	}
}

func testStaleWriterFenced(t *testing.T, spec string) {
	ctx := context.Background()
	s, closeSaver, err := openFenceSaver(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer closeSaver()

	cmd := systemtest.Command(ctx, fenceRole, envFenceDB+"="+spec)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	killed := false
	defer func() {
		if !killed {
			cmd.Process.Signal(syscall.SIGCONT)
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()
	next := func(what string) string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("runner A exited before %s; stderr:\n%s", what, stderr.String())
			}
			return l
		case <-time.After(60 * time.Second):
			t.Fatalf("runner A did not say %s within a minute; stderr:\n%s", what, stderr.String())
		}
		return ""
	}
	if l := next("READY"); l != "READY" {
		t.Fatalf("runner A said %q, want READY", l)
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Wait until A's lease has lapsed (it cannot renew it while stopped).
	li := s.(checkpoint.LeaseInspector)
	for deadline := time.Now().Add(60 * time.Second); ; {
		info, err := li.Lease(ctx, fenceThread, "")
		if err != nil {
			t.Fatal(err)
		}
		if info.Epoch != 1 || info.Owner == "" {
			t.Fatalf("A's lease before the takeover: %+v, want A's at epoch 1", info)
		}
		if !info.Live(time.Now()) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("A's lease did not lapse within a minute")
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Runner B takes the thread over; its node pauses on an interrupt.
	g := fenceGraph(func(ctx context.Context, st fenceState) (graph.Update[fenceState], error) {
		ans, err := interrupt.Ask[string](ctx, "which result?")
		if err != nil {
			return graph.Update[fenceState]{}, err
		}
		return graph.Set(fenceState{Result: ans}, "Result"), nil
	})
	rb, err := g.Compile(graph.WithSaver(s), graph.WithLeaseTTL(fenceTTL), graph.WithRunner("runner-b"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := rb.Continue(ctx, fenceThread)
	if err != nil || res.Status != graph.StatusWaiting {
		t.Fatalf("runner B's takeover: %v, status %v; want it waiting on its interrupt", err, res.Status)
	}
	before, err := li.Lease(ctx, fenceThread, "")
	if err != nil || before.Epoch != 2 || before.Owner != "" {
		t.Fatalf("after B paused: %+v, %v; want epoch 2, released", before, err)
	}
	head := func() *checkpoint.Tuple {
		tp, err := s.Get(ctx, checkpoint.Ref{Thread: fenceThread}, checkpoint.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tp
	}
	headBefore := head().Checkpoint.ID

	// A is thawed and finishes its node.
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if _, err := stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	final := next(fenceMessage)
	killed = true
	if err := cmd.Wait(); err != nil {
		t.Fatalf("runner A: %v; stderr:\n%s", err, stderr.String())
	}
	fields := strings.SplitN(final, " ", 3)
	if len(fields) != 3 || fields[0] != fenceMessage || fields[1] != "busy" {
		t.Fatalf("runner A ended with %q, want its writes refused with checkpoint.ErrThreadBusy", final)
	}

	// Nothing of A's node landed.
	tps, err := s.List(ctx, fenceThread, checkpoint.ListOptions{AllNamespaces: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, tp := range tps {
		b, _ := json.Marshal(tp)
		if bytes.Contains(b, []byte(fenceStale)) || bytes.Contains(b, []byte(fenceAnswer)) {
			t.Errorf("checkpoint %s holds the stale runner's result: %s", tp.Checkpoint.ID, b)
		}
	}
	if h := head().Checkpoint.ID; h != headBefore {
		t.Errorf("the head moved from %s to %s: the stale runner forked the chain", headBefore, h)
	}
	after, err := li.Lease(ctx, fenceThread, "")
	if err != nil || after.Epoch != 2 || after.Owner != "" {
		t.Errorf("the lease after A was refused: %+v, %v; want B's epoch 2, released (A took nothing)", after, err)
	}
	snap, err := rb.GetState(ctx, fenceThread)
	if err != nil || snap.Status != graph.StatusWaiting || len(snap.Interrupts) != 1 {
		t.Errorf("the thread after A: %v, %+v; want it waiting on B's interrupt", err, snap)
	}
}
