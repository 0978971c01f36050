package sqlite

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// child is a helper process of the crash tests.
type child struct {
	cmd    *exec.Cmd
	acks   []string // "thread id"
	done   bool
	stderr bytes.Buffer
}

func startChild(t *testing.T, role string, env ...string) (*child, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{helperEnv + "=" + role}, env...)...)
	c := &child{cmd: cmd}
	cmd.Stderr = &c.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return c, bufio.NewScanner(out)
}

// wait reads the child's output to the end and reports whether it was
// killed by SIGKILL.
func (c *child) wait(t *testing.T, sc *bufio.Scanner) (killed bool) {
	t.Helper()
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "ACK "):
			c.acks = append(c.acks, strings.TrimPrefix(line, "ACK "))
		case line == "DONE":
			c.done = true
		}
	}
	err := c.cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return true
		}
		t.Fatalf("child failed: %v\n%s", err, c.stderr.String())
	}
	if err != nil {
		t.Fatal(err)
	}
	return false
}

// checkRecovered opens the file after a crash: integrity_check is ok, no
// torn step, every acknowledged checkpoint is present, every checkpoint
// reads back with its data (List of every thread verifies every row and
// materialises every chain), and no checkpoint has two children (the
// chain never forks).
func checkRecovered(t *testing.T, path string, acks []string) {
	t.Helper()
	s := openAt(t, path, Config{Synchronous: SyncNormal})
	defer closeChecked(t, s)
	integrityOK(t, s.DB())
	for _, a := range acks {
		thread, id, _ := strings.Cut(a, " ")
		if _, err := s.Get(t.Context(), checkpoint.Ref{Thread: thread, ID: id}, checkpoint.GetOptions{}); err != nil {
			t.Fatalf("acknowledged checkpoint %s of %s: %v", id, thread, err)
		}
	}
	rows, err := s.DB().Query(`SELECT DISTINCT thread_id FROM checkpoints`)
	if err != nil {
		t.Fatal(err)
	}
	var threads []string
	for rows.Next() {
		var th string
		rows.Scan(&th)
		threads = append(threads, th)
	}
	rows.Close()
	for _, th := range threads {
		if _, err := s.List(t.Context(), th, checkpoint.ListOptions{AllNamespaces: true}); err != nil {
			t.Fatalf("thread %s does not read back: %v", th, err)
		}
	}
	var forks int
	if err := s.DB().QueryRow(`SELECT count(*) FROM (SELECT 1 FROM checkpoints WHERE parent_checkpoint_id IS NOT NULL
		GROUP BY thread_id, checkpoint_ns, parent_checkpoint_id HAVING count(*) > 1)`).Scan(&forks); err != nil || forks != 0 {
		t.Fatalf("%d checkpoints with more than one child (%v)", forks, err)
	}
}

// finalStates reads every thread's final state through the graph.
func finalStates(t *testing.T, path string, threads []string) map[string]crashState {
	t.Helper()
	s := openAt(t, path, Config{Synchronous: SyncNormal})
	defer closeChecked(t, s)
	r, err := crashGraph(s)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]crashState{}
	for _, th := range threads {
		snap, err := r.GetState(t.Context(), th)
		if err != nil {
			t.Fatal(err)
		}
		if len(snap.Next) != 0 {
			t.Fatalf("thread %s not done: next %v", th, snap.Next)
		}
		out[th] = snap.Values
	}
	return out
}

// referenceStates runs the crash graph without crashes on the memory saver.
func referenceStates(t *testing.T, threads []string) map[string]crashState {
	t.Helper()
	r, err := crashGraph(checkpoint.NewMemorySaver(nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := runThreads(context.Background(), r, threads); err != nil {
		t.Fatal(err)
	}
	out := map[string]crashState{}
	for _, th := range threads {
		snap, err := r.GetState(t.Context(), th)
		if err != nil {
			t.Fatal(err)
		}
		out[th] = snap.Values
	}
	return out
}

// crashCycle runs one child that may be killed, checks the file, then
// runs children without kills until the threads are done. It returns
// whether the first child was killed.
func crashCycle(t *testing.T, path string, threads []string, env []string, killAfter time.Duration) bool {
	t.Helper()
	base := []string{envDB + "=" + path, envThreads + "=" + strings.Join(threads, " ")}
	c, sc := startChild(t, "crash", append(base, env...)...)
	if killAfter > 0 {
		timer := time.AfterFunc(killAfter, func() { c.cmd.Process.Signal(syscall.SIGKILL) })
		defer timer.Stop()
	}
	killed := c.wait(t, sc)
	if !killed && !c.done {
		t.Fatalf("child neither finished nor was killed\n%s", c.stderr.String())
	}
	checkRecovered(t, path, c.acks)
	for i := 0; !c.done; i++ {
		if i == 3 {
			t.Fatal("threads not done after 3 resumes")
		}
		r, rsc := startChild(t, "crash", base...)
		if r.wait(t, rsc) {
			t.Fatal("resuming child was killed")
		}
		checkRecovered(t, path, append(c.acks, r.acks...))
		c.done = r.done
	}
	return killed
}

// TestCrashAtHookPoints (R02, R03): a child running a graph kills itself
// with SIGKILL inside the checkpoint transaction (after BEGIN, before
// COMMIT) and after COMMIT before the Put returns, for every Put of the
// run, and inside the pending-writes transaction. After each kill: the
// file passes integrity_check, every acknowledged checkpoint is there, no
// step is torn, the chain does not fork, and a new process resumes the
// thread to the same final state as a run without crashes.
func TestCrashAtHookPoints(t *testing.T) {
	threads := []string{"t"}
	want := referenceStates(t, threads)
	type kill struct {
		point string
		at    int
	}
	var kills []kill
	puts := 6 // the input and __start__ checkpoints together, then one per node's superstep (5)
	if raceEnabled {
		puts = 3
	}
	for _, p := range []string{"sqlite.put.beforeCommit", "sqlite.put.afterCommit", "sqlite.put.begin"} {
		for k := 1; k <= puts; k++ {
			kills = append(kills, kill{p, k})
		}
	}
	kills = append(kills, kill{"sqlite.writes.beforeCommit", 1}, kill{"sqlite.writes.afterCommit", 1}, kill{"sqlite.writes.begin", 1})
	killed := 0
	for _, k := range kills {
		t.Run(fmt.Sprintf("%s#%d", k.point, k.at), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "crash.db")
			if crashCycle(t, path, threads, []string{envKillPoint + "=" + k.point, envKillAt + "=" + fmt.Sprint(k.at)}, 0) {
				killed++
			}
			if d := cmp.Diff(want, finalStates(t, path, threads)); d != "" {
				t.Errorf("final state after the crash (-want +got):\n%s", d)
			}
		})
	}
	if killed != len(kills) {
		t.Errorf("only %d of %d children reached their kill point", killed, len(kills))
	}
}

// TestCrashAtStatements (R02): the sweep of SQLite's crash tests over the
// checkpoint transaction: the child is killed (SIGKILL, through the fault
// driver) just before the Nth execution of each statement of Put's
// transaction, and of its COMMIT. The same checks as above apply.
func TestCrashAtStatements(t *testing.T) {
	threads := []string{"t"}
	want := referenceStates(t, threads)
	// A run of the crash graph executes "INSERT INTO checkpoints" 7 times
	// (the input checkpoint's on the slow path, then one statement per
	// superstep), "INSERT INTO threads" once (the input checkpoint takes
	// the lease), "INSERT INTO writes" once (b's writes while c runs),
	// "UPDATE threads" for those writes and when the last Put drops the
	// lease, and COMMIT once per write.
	occurrences := map[string][]int{
		"INSERT INTO checkpoints": {1, 3, 6}, "COMMIT": {1, 3, 6},
		"INSERT INTO threads": {1}, "UPDATE threads": {1, 2}, "INSERT INTO writes": {1},
	}
	if raceEnabled {
		occurrences = map[string][]int{"INSERT INTO checkpoints": {2}, "COMMIT": {2}, "UPDATE threads": {1}}
	}
	for _, stmt := range sortedKeys(occurrences) {
		for _, n := range occurrences[stmt] {
			t.Run(fmt.Sprintf("%s#%d", stmt, n), func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "crash.db")
				if !crashCycle(t, path, threads, []string{envKillSQL + "=" + stmt, envKillAt + "=" + fmt.Sprint(n)}, 0) {
					t.Fatal("the child was not killed")
				}
				if d := cmp.Diff(want, finalStates(t, path, threads)); d != "" {
					t.Errorf("final state after the crash (-want +got):\n%s", d)
				}
			})
		}
	}
}

// TestCrashRandomKill (R04): the parent kills the child with SIGKILL at a
// uniformly random moment while it runs the graph over several threads,
// then restarts it; every cycle checks integrity, acknowledged
// checkpoints and forks, and the final states equal the reference. The
// seed is logged; LOCKSTEP_LONG=1 runs 200 cycles.
func TestCrashRandomKill(t *testing.T) {
	cycles := 40
	if raceEnabled {
		cycles = 6
	}
	if os.Getenv("LOCKSTEP_LONG") != "" {
		cycles = 200
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	var threads []string
	for i := 0; i < 16; i++ {
		threads = append(threads, fmt.Sprint("r", i))
	}
	want := referenceStates(t, threads)
	var path string
	killed := 0
	for i := 0; i < cycles; i++ {
		// A fresh file every other cycle: kills land in new and in
		// half-done runs.
		if i%2 == 0 {
			path = filepath.Join(t.TempDir(), fmt.Sprintf("random-%d.db", i))
		}
		delay := time.Duration(3+rng.IntN(40)) * time.Millisecond
		if crashCycle(t, path, threads, nil, delay) {
			killed++
		}
		if d := cmp.Diff(want, finalStates(t, path, threads)); d != "" {
			t.Fatalf("cycle %d (kill after %v): final state (-want +got):\n%s", i, delay, d)
		}
	}
	t.Logf("%d of %d children killed mid-run", killed, cycles)
	if killed < cycles/3 {
		t.Errorf("only %d of %d children were killed mid-run", killed, cycles)
	}
}
