package crash_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/systemtest"
	"github.com/lockstepgo/lockstep/internal/testhook"
	"github.com/lockstepgo/lockstep/interrupt"
)

// witness appends one line per real side effect to a file, synced, so a
// SIGKILL cannot lose an effect that happened.
type witness string

func (w witness) record(effect string) error {
	f, err := os.OpenFile(string(w), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := fmt.Fprintln(f, effect); err != nil {
		return err
	}
	return f.Sync()
}

func (w witness) count(effect string) int {
	f, err := os.Open(string(w))
	if err != nil {
		return 0
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if sc.Text() == effect {
			n++
		}
	}
	return n
}

type crashState struct {
	Log    []string `lockstep:"append"`
	Answer string
}

// crashGraph: before (an effect) → ask (an effect in a durable step, then
// an interrupt) → after (an effect).
func crashGraph(w witness) *graph.Graph[crashState] {
	return graph.New[crashState]().
		AddNode("before", func(ctx context.Context, s crashState) (graph.Update[crashState], error) {
			if err := w.record("before"); err != nil {
				return graph.Update[crashState]{}, err
			}
			return graph.Set(crashState{Log: []string{"before"}}, "Log"), nil
		}).
		AddNode("ask", crashAsk(w)).
		AddNode("after", func(ctx context.Context, s crashState) (graph.Update[crashState], error) {
			if err := w.record("after"); err != nil {
				return graph.Update[crashState]{}, err
			}
			return graph.Set(crashState{Log: []string{"after"}}, "Log"), nil
		}).
		AddEdge(graph.START, "before").AddEdge("before", "ask").AddEdge("ask", "after")
}

// crashAsk is the ask node: an effect in a durable step, an interrupt,
// then another durable effect with the answer.
func crashAsk(w witness) graph.NodeFunc[crashState] {
	return func(ctx context.Context, s crashState) (graph.Update[crashState], error) {
		w.record("ask-run")
		if _, err := graph.Durable(ctx, "charge", func(ctx context.Context) (string, error) {
			return "ch_1", w.record("charge")
		}); err != nil {
			return graph.Update[crashState]{}, err
		}
		ans, err := interrupt.Ask[string](ctx, "ship?")
		if err != nil {
			return graph.Update[crashState]{}, err
		}
		if _, err := graph.Durable(ctx, "ship", func(ctx context.Context) (string, error) {
			return "sh_1", w.record("ship")
		}); err != nil {
			return graph.Update[crashState]{}, err
		}
		return graph.Set(crashState{Answer: ans, Log: []string{"ask:" + ans}}, "Answer", "Log"), nil
	}
}

const crashLease = 300 * time.Millisecond

// runChild is a crash-test child. It returns only when it is not killed.
func runChild(role string) int {
	db, w, thread := os.Getenv("LOCKSTEP_DB"), witness(os.Getenv("LOCKSTEP_WITNESS")), os.Getenv("LOCKSTEP_THREAD")
	var cfg sqlite.Config
	if role == "runkey-then-die" {
		// Die right after the Nth checkpoint commit, before Invoke returns.
		killAt, _ := strconv.Atoi(os.Getenv("LOCKSTEP_KILL_AT"))
		commits := 0
		cfg.Hook = func(p string) {
			if p == "sqlite.put.afterCommit" {
				if commits++; commits == killAt {
					syscall.Kill(os.Getpid(), syscall.SIGKILL)
				}
			}
		}
	}
	s, err := sqlite.Open(db, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	kill := func() { syscall.Kill(os.Getpid(), syscall.SIGKILL) }
	ctx := context.Background()
	switch role {
	case "interrupt-then-die":
		// Run to the interrupt, then die before exiting cleanly (no Close).
		r, _ := crashGraph(w).Compile(graph.WithSaver(s), graph.WithLeaseTTL(crashLease))
		res, err := r.Invoke(ctx, thread, graph.Update[crashState]{})
		if err != nil || res.Status != graph.StatusWaiting {
			fmt.Fprintln(os.Stderr, res.Status, err)
			return 4
		}
		fmt.Println("WAITING")
		kill()
	case "runkey-then-die":
		r, _ := crashGraph(w).Compile(graph.WithSaver(s), graph.WithLeaseTTL(crashLease))
		_, err := r.Invoke(ctx, thread, graph.Set(crashState{Log: []string{"in"}}, "Log"), graph.RunKey("order-7"))
		fmt.Fprintln(os.Stderr, "invoke returned:", err)
		return 6
	case "resume-then-die":
		// Resume; die after the resumed node ran, before its checkpoint.
		r, _ := crashGraph(w).Compile(graph.WithSaver(s), graph.WithLeaseTTL(crashLease))
		ctx := testhook.With(ctx, func(p string) {
			if p == testhook.GraphAfterTask {
				kill()
			}
		})
		_, err := r.Resume(ctx, thread, graph.Command[crashState]{Resume: "yes"})
		fmt.Fprintln(os.Stderr, "resume returned:", err)
		return 5
	}
	return 2
}

func startChild(t *testing.T, role, db string, w witness, thread string) (string, error) {
	t.Helper()
	cmd := systemtest.Command(context.Background(), role, "LOCKSTEP_DB="+db, "LOCKSTEP_WITNESS="+string(w), "LOCKSTEP_THREAD="+thread)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if st, ok := ee.Sys().(syscall.WaitStatus); ok && st.Signaled() && st.Signal() == syscall.SIGKILL {
			return string(out), nil // killed on purpose
		}
	}
	return string(out), fmt.Errorf("child %s: %v (stderr: %s)", role, err, stderr.String())
}

// reopenCrash opens a crash test's database after its children died, as a
// restarted process does, and compiles the crash graph on it. The saver is
// closed when the test ends.
func reopenCrash(t *testing.T, db string, w witness) (*graph.Runnable[crashState], *sqlite.Saver) {
	t.Helper()
	s, err := sqlite.Open(db, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	r, err := crashGraph(w).Compile(graph.WithSaver(s), graph.WithLeaseTTL(crashLease))
	if err != nil {
		t.Fatal(err)
	}
	return r, s
}

// retryBusy retries op while the dead child's lease has not expired.
func retryBusy[T any](t *testing.T, op func() (T, error)) (T, error) {
	t.Helper()
	deadline := time.Now().Add(10 * crashLease)
	for {
		v, err := op()
		if !errors.Is(err, checkpoint.ErrThreadBusy) || time.Now().After(deadline) {
			return v, err
		}
		time.Sleep(crashLease / 10)
	}
}

// An interrupt survives a SIGKILL right after it was saved: after the
// restart the thread is still waiting, and resuming runs nothing twice.
func TestCrashAfterInterruptSaved(t *testing.T) {
	dir := t.TempDir()
	db, w := filepath.Join(dir, "crash.db"), witness(filepath.Join(dir, "witness"))
	out, err := startChild(t, "interrupt-then-die", db, w, "t1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "WAITING") {
		t.Fatalf("child did not reach the interrupt: %q", out)
	}
	r, s := reopenCrash(t, db, w)
	var ok string
	if err := s.DB().QueryRow("PRAGMA integrity_check").Scan(&ok); err != nil || ok != "ok" {
		t.Fatalf("integrity_check = %q, %v", ok, err)
	}
	ctx := context.Background()
	snap, err := r.GetState(ctx, "t1")
	if err != nil || snap.Status != graph.StatusWaiting || len(snap.Interrupts) != 1 || snap.Next[0] != "ask" {
		t.Fatalf("after restart: %s %v %v (%v)", snap.Status, snap.Next, snap.Interrupts, err)
	}
	res, err := retryBusy(t, func() (graph.Result[crashState], error) {
		return r.Resume(ctx, "t1", graph.Command[crashState]{Resume: "yes"})
	})
	if err != nil || res.Status != graph.StatusDone {
		t.Fatalf("resume after restart: %v %v", res.Status, err)
	}
	for effect, want := range map[string]int{"before": 1, "charge": 1, "ship": 1, "after": 1, "ask-run": 2} {
		if got := w.count(effect); got != want {
			t.Errorf("%s happened %d times, want %d", effect, got, want)
		}
	}
}

// A SIGKILL after a resumed node ran but before its checkpoint: the answer
// and the node's durable steps were saved, so Continue finishes the node
// without repeating its effects, and committed steps never run again.
func TestCrashAfterResumedNodeBeforeCheckpoint(t *testing.T) {
	dir := t.TempDir()
	db, w := filepath.Join(dir, "crash.db"), witness(filepath.Join(dir, "witness"))
	if _, err := startChild(t, "interrupt-then-die", db, w, "t1"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(crashLease) // let the first child's lease lapse
	if _, err := startChild(t, "resume-then-die", db, w, "t1"); err != nil {
		t.Fatal(err)
	}
	r, _ := reopenCrash(t, db, w)
	ctx := context.Background()
	snap, err := r.GetState(ctx, "t1")
	// The answer is saved and the node has not committed: nothing waits for
	// a human any more, the step is pending.
	if err != nil || snap.Status != graph.StatusPending || len(snap.Interrupts) != 0 {
		t.Fatalf("after the second crash: %s %v (%v)", snap.Status, snap.Interrupts, err)
	}
	// The dead child's lease is still on the thread at first: wait it out,
	// or ErrThreadBusy would stand in for the refusal under test.
	if _, err := retryBusy(t, func() (graph.Result[crashState], error) {
		return r.Resume(ctx, "t1", graph.Command[crashState]{Resume: "again"})
	}); !errors.Is(err, graph.ErrNothingToResume) {
		t.Errorf("a second answer: %v, want ErrNothingToResume", err)
	}
	res, err := retryBusy(t, func() (graph.Result[crashState], error) { return r.Continue(ctx, "t1") })
	if err != nil || res.Status != graph.StatusDone || res.Values.Answer != "yes" {
		t.Fatalf("continue: %v %v %q", res.Status, err, res.Values.Answer)
	}
	for effect, want := range map[string]int{"before": 1, "charge": 1, "ship": 1, "after": 1, "ask-run": 3} {
		if got := w.count(effect); got != want {
			t.Errorf("%s happened %d times, want %d", effect, got, want)
		}
	}
}

// TestCrashAfterCommitBeforeAck (R03): a SIGKILL right after a checkpoint
// of a keyed Invoke committed, before Invoke returned. The caller retries
// the Invoke with the same RunKey: the input is not applied again, the
// committed nodes do not run again, the run continues to its interrupt
// (Result.Repeated), and a third try returns the waiting run without
// running the interrupted node again. Killed after the input and START
// checkpoints (1) and after the first node's (2).
func TestCrashAfterCommitBeforeAck(t *testing.T) {
	for _, killAt := range []int{1, 2} {
		t.Run(fmt.Sprintf("after commit %d", killAt), func(t *testing.T) {
			dir := t.TempDir()
			db, w := filepath.Join(dir, "crash.db"), witness(filepath.Join(dir, "witness"))
			t.Setenv("LOCKSTEP_KILL_AT", strconv.Itoa(killAt))
			if _, err := startChild(t, "runkey-then-die", db, w, "t1"); err != nil {
				t.Fatal(err)
			}
			r, _ := reopenCrash(t, db, w)
			ctx := context.Background()
			input := graph.Set(crashState{Log: []string{"in"}}, "Log")
			if w.count("before") != killAt-1 {
				t.Fatalf("before ran %d times in the child, want %d", w.count("before"), killAt-1)
			}
			for try := range 2 {
				res, err := retryBusy(t, func() (graph.Result[crashState], error) {
					return r.Invoke(ctx, "t1", input, graph.RunKey("order-7"))
				})
				if err != nil || res.Status != graph.StatusWaiting || !res.Repeated {
					t.Fatalf("retry %d: %s repeated=%v (%v)", try, res.Status, res.Repeated, err)
				}
			}
			res, err := r.Resume(ctx, "t1", graph.Command[crashState]{Resume: "yes"})
			if err != nil || res.Status != graph.StatusDone {
				t.Fatalf("resume: %s (%v)", res.Status, err)
			}
			if want := []string{"in", "before", "ask:yes", "after"}; !slices.Equal(res.Values.Log, want) {
				t.Errorf("log %q, want %q", res.Values.Log, want)
			}
			for effect, want := range map[string]int{"before": 1, "charge": 1, "ship": 1, "after": 1, "ask-run": 2} {
				if got := w.count(effect); got != want {
					t.Errorf("%s happened %d times, want %d", effect, got, want)
				}
			}
		})
	}
}
