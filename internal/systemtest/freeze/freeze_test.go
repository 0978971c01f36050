package freeze_test

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/crashtest"
	"github.com/lockstepgo/lockstep/internal/systemtest"
	"github.com/lockstepgo/lockstep/nodes"
	"github.com/lockstepgo/lockstep/nodes/ledger"
)

// freezeRole is the LOCKSTEP_CHILD role of runner A (main_test.go's
// TestMain dispatches it).
const freezeRole = "freeze"

const (
	envFreezeDir = "LOCKSTEP_FREEZE_DIR"
	// envFreezeNoLedger set to 1 runs the charge without the executor's
	// idempotency ledger: only the durable step's ownership check stands
	// between a thawed runner and a second charge.
	envFreezeNoLedger = "LOCKSTEP_FREEZE_NO_LEDGER"
	freezeThread      = "order-1"
	// freezeTTL is the lease of both runners. A renews it every TTL/3
	// while it runs, which a stopped process cannot do.
	freezeTTL    = 500 * time.Millisecond
	freezeCallID = "call-1"
	freezeArgs   = `{"order":"order-1","amount":42}`
)

// The lines runner A writes to its standard output besides the crashtest
// protocol lines (ACK, TASK-ACK, EFFECT-ACK).
const (
	// freezeReady: A is in the pay node, just before the charge, and now
	// blocks reading a line from its standard input.
	freezeReady = "READY"
	// freezeExec: "EXEC <status> replayed=<bool>" or "EXEC error <err>":
	// what the executor returned for the charge.
	freezeExec = "EXEC"
	// freezeFinal: "FINAL <class> <quoted error>": how A's run ended, the
	// class being busy, conflict, none or other (by errors.Is in A).
	freezeFinal = "FINAL"
)

type freezeState struct {
	Log    []string `lockstep:"append"`
	Charge string
}

type freezeChargeArgs struct {
	Order  string `json:"order"`
	Amount int    `json:"amount"`
}

type freezeCharge struct {
	Charge string `json:"charge"`
}

// freezeDeps is what the graph's nodes use in one runner.
type freezeDeps struct {
	witness *crashtest.Witness
	ledger  ledger.Ledger
	// gate, when set, runs in the pay node right before the charge.
	gate func() error
	// note reports what the executor returned for the charge.
	note func(string)
}

// freezeGraph: prep → pay (a destructive, ledgered charge inside a durable
// step, as the tool node runs it) → ship. Every node run and every charge
// is a line of the witness.
func freezeGraph(d freezeDeps) (*graph.Graph[freezeState], error) {
	charge, err := nodes.NewTool("charge", "Charge an order.",
		func(ctx context.Context, a freezeChargeArgs, env nodes.Env) (freezeCharge, error) {
			key := env.IdempotencyKey()
			if key == "" { // no ledger: one logical charge per order
				key = "charge/" + a.Order
			}
			if err := d.witness.Record("charge", key, a.Order); err != nil {
				return freezeCharge{}, err
			}
			return freezeCharge{Charge: "ch_" + a.Order}, nil
		}, nodes.Destructive(approval.RiskHigh))
	if err != nil {
		return nil, err
	}
	opts := []nodes.ExecutorOption{nodes.WithPolicy(nodes.AlwaysApprove())}
	if d.ledger != nil {
		opts = append(opts, nodes.WithLedger(d.ledger))
	}
	ex, err := nodes.NewExecutor([]*nodes.Tool{charge}, opts...)
	if err != nil {
		return nil, err
	}
	logged := func(fn graph.NodeFunc[freezeState]) graph.NodeFunc[freezeState] {
		return func(ctx context.Context, s freezeState) (graph.Update[freezeState], error) {
			if info, ok := graph.TaskFrom(ctx); ok {
				if err := d.witness.Record("run", info.Node+"/"+info.TaskID, info.Thread); err != nil {
					return graph.Update[freezeState]{}, err
				}
			}
			return fn(ctx, s)
		}
	}
	step := func(name string) graph.NodeFunc[freezeState] {
		return func(ctx context.Context, s freezeState) (graph.Update[freezeState], error) {
			return graph.Set(freezeState{Log: []string{name}}, "Log"), nil
		}
	}
	pay := func(ctx context.Context, s freezeState) (graph.Update[freezeState], error) {
		if d.gate != nil {
			if err := d.gate(); err != nil {
				return graph.Update[freezeState]{}, err
			}
		}
		c, err := graph.Durable(ctx, "tool:"+freezeCallID, func(ctx context.Context) (freezeCharge, error) {
			res, err := ex.Execute(ctx, nodes.Call{ID: freezeCallID, Tool: "charge", Args: json.RawMessage(freezeArgs)})
			if err != nil {
				d.note(fmt.Sprintf("%s error %q", freezeExec, err.Error()))
				return freezeCharge{}, err
			}
			d.note(fmt.Sprintf("%s %s replayed=%t", freezeExec, res.Status, res.Replayed))
			var c freezeCharge
			return c, json.Unmarshal(res.Output, &c)
		})
		if err != nil {
			return graph.Update[freezeState]{}, err
		}
		return graph.Set(freezeState{Charge: c.Charge, Log: []string{"pay"}}, "Charge", "Log"), nil
	}
	return graph.New[freezeState]().
		AddNode("prep", logged(step("prep"))).
		AddNode("pay", logged(pay)).
		AddNode("ship", logged(step("ship"))).
		AddEdge(graph.START, "prep").AddEdge("prep", "pay").AddEdge("pay", "ship"), nil
}

func freezePaths(dir string) (db, witness string) {
	return filepath.Join(dir, "freeze.db"), filepath.Join(dir, "witness")
}

// runFreezeChild is runner A: it starts the thread with a short lease and,
// in the pay node, says READY and waits for a line on its standard input
// before the charge. It exits 0 once it has reported how its run ended.
func runFreezeChild() int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "freeze child:", err)
		return 3
	}
	ctx := context.Background()
	dbPath, wPath := freezePaths(os.Getenv(envFreezeDir))
	s, err := sqlite.Open(dbPath, sqlite.Config{})
	if err != nil {
		return fail(err)
	}
	defer s.Close()
	l, err := ledger.NewSQL(ctx, s.DB(), ledger.Options{})
	if err != nil {
		return fail(err)
	}
	w, err := crashtest.OpenWitness(wPath, 1)
	if err != nil {
		return fail(err)
	}
	defer w.Close()
	rep := crashtest.NewReporter(os.Stdout)
	in := bufio.NewReader(os.Stdin)
	say := func(line string) { fmt.Fprintln(os.Stdout, line) } // one write per line
	var led ledger.Ledger = crashtest.AckLedger(l, rep)
	if os.Getenv(envFreezeNoLedger) == "1" {
		led = nil
	}
	g, err := freezeGraph(freezeDeps{
		witness: w,
		ledger:  led,
		gate: func() error {
			say(freezeReady)
			if _, err := in.ReadString('\n'); err != nil {
				return fmt.Errorf("freeze child: read stdin: %w", err)
			}
			// Thawed: from here on, A runs after B took the thread over.
			return w.Record("thawed", freezeThread, "")
		},
		note: say,
	})
	if err != nil {
		return fail(err)
	}
	r, err := g.Compile(graph.WithSaver(crashtest.AckSaver(s, rep)), graph.WithLeaseTTL(freezeTTL))
	if err != nil {
		return fail(err)
	}
	_, err = r.Invoke(ctx, freezeThread, graph.Update[freezeState]{})
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	say(fmt.Sprintf("%s %s %s", freezeFinal, systemtest.EndClass(err), strconv.Quote(msg)))
	return 0
}

// freezeChild is runner A seen from the parent.
type freezeChild struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string // A's standard output, line by line; closed at EOF
	out    []string    // the lines read so far
	stderr *freezeStderr
	waited bool
}

// freezeStderr is A's standard error, safe to read while A writes it.
type freezeStderr struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (e *freezeStderr) Write(p []byte) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.b.Write(p)
}

func (e *freezeStderr) String() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.b.String()
}

func startFreezeChild(t *testing.T, dir string, noLedger bool) *freezeChild {
	t.Helper()
	cmd := systemtest.Command(context.Background(), freezeRole, envFreezeDir+"="+dir)
	if noLedger {
		cmd.Env = append(cmd.Env, envFreezeNoLedger+"=1")
	}
	c := &freezeChild{cmd: cmd, lines: make(chan string, 256), stderr: &freezeStderr{}}
	cmd.Stderr = c.stderr
	var err error
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		if !c.waited { // the test stopped early: never leave A stopped or running
			_ = cmd.Process.Signal(syscall.SIGKILL)
			for range c.lines {
			}
			_ = cmd.Wait()
		}
	})
	return c
}

// waitFor reads A's output until a line equal to want.
func (c *freezeChild) waitFor(t *testing.T, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		select {
		case line, ok := <-c.lines:
			if !ok {
				t.Fatalf("runner A ended before %s; output %q; stderr:\n%s", want, c.out, c.stderr)
			}
			c.out = append(c.out, line)
			if line == want {
				return
			}
		case <-deadline.C:
			t.Fatalf("runner A did not say %s within %v; output %q", want, timeout, c.out)
		}
	}
}

// state is A's scheduling state from /proc ('T' when stopped).
func (c *freezeChild) state() (byte, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, fmt.Errorf("malformed /proc stat %q", b)
	}
	return b[i+2], nil
}

// stop sends SIGSTOP and returns once the kernel says A is stopped.
func (c *freezeChild) stop(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		st, err := c.state()
		if err != nil {
			t.Fatal(err)
		}
		if st == 'T' {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("runner A not stopped 5s after SIGSTOP (state %c)", st)
		}
	}
}

// freeze stops A where it holds no SQLite write lock. A blocks on its
// standard input, but its lease heartbeat (every TTL/3) writes the lease
// row: a stop that lands inside that transaction would leave the file's
// write lock with a frozen process and stall B until its busy timeout. So
// after each stop the parent tries BEGIN IMMEDIATE without waiting; when
// the lock is taken, A is let go for a moment and stopped again. It
// returns how many stops it took.
func (c *freezeChild) freeze(t *testing.T, ctx context.Context, probe *sql.DB) int {
	t.Helper()
	for n := 1; n <= 50; n++ {
		c.stop(t)
		tx, err := probe.BeginTx(ctx, nil) // BEGIN IMMEDIATE, busy_timeout 0
		if err == nil {
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			return n
		}
		if se := (sqlite3.Error{}); !errors.As(err, &se) || se.Code != sqlite3.ErrBusy {
			t.Fatalf("probe the write lock: %v", err)
		}
		if err := c.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond) // let A's heartbeat commit
	}
	t.Fatal("runner A held the write lock at 50 stops in a row")
	return 0
}

// finish waits for A to exit after it was thawed, reading the rest of its
// output.
func (c *freezeChild) finish(t *testing.T, timeout time.Duration) error {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		select {
		case line, ok := <-c.lines:
			if !ok {
				c.waited = true
				return c.cmd.Wait()
			}
			c.out = append(c.out, line)
		case <-deadline.C:
			t.Fatalf("runner A did not exit within %v of SIGCONT; output %q; stderr:\n%s", timeout, c.out, c.stderr)
		}
	}
}

// freezeLease reads the thread's lease row.
func freezeLease(ctx context.Context, db *sql.DB) (owner string, until int64, err error) {
	var o sql.NullString
	var u sql.NullInt64
	err = db.QueryRowContext(ctx, `SELECT lease_owner, lease_until FROM threads WHERE thread_id = ? AND checkpoint_ns = ''`, freezeThread).Scan(&o, &u)
	return o.String, u.Int64, err
}

// TestFreezeAndThaw is docs/reliability.md R11 (two runners on one thread,
// Restate's pause nemesis): runner A, a child process with a short lease,
// is frozen with SIGSTOP just before a destructive tool call; while it is
// frozen its lease lapses, runner B takes the thread over and finishes it,
// charging once; then A is thawed and goes on from where it stopped. A
// must be refused with a typed error (checkpoint.ErrThreadBusy or
// checkpoint.ErrConflict), must not charge again, and must leave no trace
// in the checkpoint chain.
//
// Two ways: the charge goes through the executor's idempotency ledger, or
// runs without one. Either way A, thawed, does not reach the executor:
// graph.Durable confirms that the run still owns the thread before it runs
// the step, and A's claim is refused. (The ledger is the fence that also
// covers a pause between that check and the charge.) A learns it lost the
// thread there and ends with a conflict.
func TestFreezeAndThaw(t *testing.T) {
	if testing.Short() {
		t.Skip("child process frozen with SIGSTOP; skipped under -short")
	}
	for _, tc := range []struct {
		name     string
		noLedger bool
	}{
		{"through the ledger", false},
		{"durable step alone", true},
	} {
		t.Run(tc.name, func(t *testing.T) { testFreezeAndThaw(t, tc.noLedger) })
	}
}

func testFreezeAndThaw(t *testing.T, noLedger bool) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	dbPath, wPath := freezePaths(dir)

	// The parent's clock (runner B's and the checkers'): it runs ahead of
	// real time once A is frozen, past A's lease, so B need not wait the
	// TTL out (compressed time, crashtest's doc).
	var skew atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	s, err := sqlite.Open(dbPath, sqlite.Config{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, err := ledger.NewSQL(ctx, s.DB(), ledger.Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	probe, err := sql.Open("sqlite3", dbPath+"?_busy_timeout=0&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	probe.SetMaxOpenConns(1)

	// Runner A: up to the charge, then frozen; the line it waits for is
	// written while it is stopped, so it goes on only once thawed.
	a := startFreezeChild(t, dir, noLedger)
	a.waitFor(t, freezeReady, 15*time.Second)
	stops := a.freeze(t, ctx, probe)
	if _, err := io.WriteString(a.stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	if err := a.stdin.Close(); err != nil {
		t.Fatal(err)
	}
	aRun, aUntil, err := freezeLease(ctx, s.DB())
	if err != nil || aRun == "" {
		t.Fatalf("runner A, frozen in a node, holds no lease on the thread: owner %q (%v)", aRun, err)
	}
	// Past A's lease by one TTL on B's clock.
	skew.Store(int64(time.Until(time.Unix(0, aUntil)) + freezeTTL))

	// Runner B, in this process, takes the thread over and finishes it.
	wB, err := crashtest.OpenWitness(wPath, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer wB.Close()
	var bOut bytes.Buffer
	repB := crashtest.NewReporter(&bOut)
	var bNotes []string
	var ledB ledger.Ledger = crashtest.AckLedger(l, repB)
	if noLedger {
		ledB = nil
	}
	gB, err := freezeGraph(freezeDeps{witness: wB, ledger: ledB, note: func(s string) { bNotes = append(bNotes, s) }})
	if err != nil {
		t.Fatal(err)
	}
	rB, err := gB.Compile(graph.WithSaver(crashtest.AckSaver(s, repB)), graph.WithLeaseTTL(freezeTTL), graph.WithClock(now))
	if err != nil {
		t.Fatal(err)
	}
	res, err := rB.Continue(ctx, freezeThread)
	if err != nil || res.Status != graph.StatusDone {
		t.Fatalf("runner B, after A's lease lapsed, was refused: %v %v", res.Status, err)
	}
	if !slices.Equal(res.Values.Log, []string{"prep", "pay", "ship"}) || res.Values.Charge != "ch_order-1" {
		t.Errorf("runner B's final state %+v", res.Values)
	}
	bHead := res.Config.CheckpointID

	// Thaw A and let it run to its end.
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := a.finish(t, 15*time.Second); err != nil {
		t.Fatalf("runner A: %v; output %q; stderr:\n%s", err, a.out, a.stderr)
	}

	// What A said: before READY (its saves up to the pay node) and after
	// the thaw (must be no save and no recorded effect).
	ready := slices.Index(a.out, freezeReady)
	before, err := crashtest.ParseOutput([]byte(strings.Join(a.out[:ready], "\n") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	after, err := crashtest.ParseOutput([]byte(strings.Join(a.out[ready+1:], "\n") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	bAck, err := crashtest.ParseOutput(bOut.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	var final, aExec []string
	for _, n := range after.Notes {
		f := strings.Fields(n)
		switch {
		case len(f) >= 2 && f[0] == freezeFinal:
			final = f
		case len(f) >= 1 && f[0] == freezeExec:
			aExec = append(aExec, n)
		}
	}
	t.Logf("runner A: %d stop(s) to freeze outside a write; after SIGCONT it said %q", stops, a.out[ready+1:])
	t.Logf("runner B: %q; head %s", bNotes, bHead)

	if final == nil {
		t.Fatalf("runner A reported no end of its run; output %q", a.out)
	}
	if final[1] != "busy" && final[1] != "conflict" {
		t.Errorf("runner A after SIGCONT ended with class %s (%s), want checkpoint.ErrThreadBusy or checkpoint.ErrConflict", final[1], strings.Join(final[2:], " "))
	}
	if len(after.Checkpoints) != 0 || len(after.Tasks) != 0 || len(after.Effects) != 0 {
		t.Errorf("runner A saved after SIGCONT: checkpoints %v, tasks %v, effects %v", after.Checkpoints, after.Tasks, after.Effects)
	}
	if len(aExec) != 0 {
		t.Errorf("runner A reached the executor after it lost the thread: %q (the durable step's ownership check should refuse it)", aExec)
	}

	// The witness: one charge, by B; A went on after the thaw (the
	// scenario really had two runners) and charged nothing.
	effects, err := crashtest.ReadWitness(wPath)
	if err != nil {
		t.Fatal(err)
	}
	var charges []crashtest.Effect
	thawed := 0
	for _, e := range effects {
		switch e.Kind {
		case "charge":
			charges = append(charges, e)
		case "thawed":
			thawed++
		}
	}
	if thawed != 1 {
		t.Errorf("runner A passed the point where it was frozen %d times, want 1 (witness %+v)", thawed, effects)
	}
	if len(charges) != 1 || charges[0].Gen != 2 {
		t.Errorf("charges: %+v, want exactly one, by runner B (generation 2); A's executor said %q; witness %+v", charges, aExec, effects)
	}
	hist := &crashtest.History{}
	hist.Add(&crashtest.Result{Output: before, Gen: 1})
	hist.Add(&crashtest.Result{Output: after, Gen: 1})
	hist.Add(&crashtest.Result{Output: bAck, Gen: 2})
	vs := crashtest.VerifyEffects(charges, hist.Effects)

	// The chain: no fork, B's last checkpoint is the head, and every
	// checkpoint is one of A's before the freeze or one of B's.
	_, cv := crashtest.VerifyCheckpoints(ctx, s, []string{freezeThread}, hist.Checkpoints, crashtest.CheckpointOptions{
		Snapshot: systemtest.Snapshots(rB),
	})
	vs = append(vs, cv...)
	vs = append(vs, crashtest.VerifyIntegrity(ctx, s.DB())...)
	if err := vs.Err(); err != nil {
		t.Error(err)
	}
	tps, err := s.List(ctx, freezeThread, checkpoint.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]checkpoint.Checkpoint{}
	kids := map[string]int{}
	var all []string
	for _, tp := range tps {
		cp := tp.Checkpoint
		byID[cp.ID] = cp
		kids[cp.ParentID]++
		all = append(all, fmt.Sprintf("%s<-%s (%s step %d run %s)", cp.ID, cp.ParentID, cp.Metadata.Source, cp.Metadata.Step, cp.Metadata.RunID))
	}
	var chain []string
	for id := bHead; id != ""; id = byID[id].ParentID {
		if _, ok := byID[id]; !ok || len(chain) > len(tps) {
			t.Fatalf("the chain from B's head %s breaks at %s; checkpoints %q", bHead, id, all)
		}
		chain = append(chain, id)
	}
	if len(chain) != len(tps) {
		t.Errorf("%d checkpoints, %d on the chain of B's head: %q", len(tps), len(chain), all)
	}
	for parent, n := range kids {
		if n != 1 {
			t.Errorf("checkpoint %q has %d children: %q", parent, n, all)
		}
	}
	saved := map[string]bool{} // by A before the freeze, or by B
	for _, c := range slices.Concat(before.Checkpoints, bAck.Checkpoints) {
		saved[c.ID] = true
	}
	for _, tp := range tps {
		if cp := tp.Checkpoint; !saved[cp.ID] {
			t.Errorf("checkpoint %s (run %s) was saved by neither A before the freeze nor B (A's run is %s): %q", cp.ID, cp.Metadata.RunID, aRun, all)
		}
	}
	if last := bAck.Checkpoints; len(last) == 0 || last[len(last)-1].ID != bHead {
		t.Errorf("B's last acknowledged checkpoint %v is not its result's head %s", last, bHead)
	}
	head, err := s.Get(ctx, checkpoint.Ref{Thread: freezeThread}, checkpoint.GetOptions{})
	if err != nil || head.Checkpoint.ID != bHead {
		t.Errorf("the thread's head is not B's last checkpoint %s: %v (%v)", bHead, head, err)
	}
	if owner, _, err := freezeLease(ctx, s.DB()); err != nil || owner != "" {
		t.Errorf("after both runs the thread is leased by %q (A was %q), want no lease (%v)", owner, aRun, err)
	}
	if t.Failed() {
		t.Logf("checkpoints: %q\nrunner A output: %q\nrunner A stderr:\n%s", all, a.out, a.stderr)
	}
	t.Logf("%d checkpoints, no fork; took %v", len(tps), time.Since(start).Round(time.Millisecond))
}
