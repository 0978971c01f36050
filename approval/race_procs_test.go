package approval_test

import (
	"bufio"
	"context"
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
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/graph"
)

// The multi-process half of R35. The parent pauses raceProcApprovals
// threads in one SQLite file (checkpoints and decisions share it) and
// re-executes the test binary raceProcs times as resolver processes (the
// crash-child mechanism of worker_test.go: helperEnv set, -test.run naming
// the child). Each child lists the pending approvals through its own saver
// and Inbox on the file, and runs raceProcResolvers goroutines that decide
// every approval, all released by one start gate.
const (
	raceProcs          = 4
	raceProcResolvers  = 16
	raceProcApprovals  = 50
	raceProcRole       = "resolve-race"          // the value of helperEnv in a resolver child
	raceProcEnvDB      = "APPROVAL_DB"           // the SQLite file
	raceProcEnvProc    = "APPROVAL_PROC"         // the child's number, 0..raceProcs-1
	raceProcEnvWorkers = "APPROVAL_RESOLVERS"    // resolver goroutines in the child
	raceProcChildTest  = "TestHelperResolveRace" // the child's test
)

// raceProcDecidedAt is the children's store clock: after the requests were
// created (epoch) and long before they expire (epoch + ttl).
var raceProcDecidedAt = epoch.Add(time.Minute)

// raceProcVerdict is the verdict resolver g of process proc gives to the
// i-th approval: half the resolvers of each process approve each approval
// and half reject it, alternating as in resolveRace. Reviewer names carry
// the process and the goroutine, so every reviewer is unique.
func raceProcVerdict(proc, g, i int) approval.Verdict {
	if (g+i)%2 == 1 {
		return approval.Verdict{Outcome: approval.Rejected, Reviewer: fmt.Sprintf("rejecter-p%d-%02d", proc, g), Note: "no"}
	}
	return approval.Verdict{Outcome: approval.Approved, Reviewer: fmt.Sprintf("approver-p%d-%02d", proc, g), Note: "fine"}
}

// raceLine is one protocol line of a resolver child:
//
//	READY <proc> <pending>               the child listed <pending> approvals and waits at the gate
//	WIN <id> <outcome> <reviewer>        Decide recorded this resolver's verdict
//	LOST <id> <outcome> <reviewer>       Decide failed with an *AlreadyDecidedError naming this winner
type raceLine struct {
	proc              int
	kind, id          string
	outcome, reviewer string
	raw               string
}

func parseRaceLine(proc int, s string) (raceLine, bool) {
	f := strings.Fields(s)
	if len(f) != 4 || (f[0] != "WIN" && f[0] != "LOST") {
		return raceLine{}, false
	}
	return raceLine{proc: proc, kind: f[0], id: f[1], outcome: f[2], reviewer: f[3], raw: s}, true
}

// winList names up to 4 winners (process, outcome, reviewer) for a message.
func winList(wins []raceLine) string {
	var b strings.Builder
	for i, w := range wins {
		if i == 4 {
			fmt.Fprintf(&b, " and %d more", len(wins)-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "process %d: %s by %s", w.proc, w.outcome, w.reviewer)
	}
	return b.String()
}

// raceChild is one running resolver process, seen from the parent.
type raceChild struct {
	proc    int
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	stdout  io.ReadCloser
	stderr  strings.Builder
	ready   chan int      // the pending count of the READY line
	done    chan struct{} // stdout reached EOF
	other   []string      // stdout lines outside the protocol (the testing framework's)
	readyOK bool
}

// failure describes a failed child for the parent's message.
func (c *raceChild) failure(err error) string {
	return fmt.Sprintf("resolver process %d: %v\n--- stderr ---\n%s--- other stdout ---\n%s",
		c.proc, err, c.stderr.String(), strings.Join(c.other, "\n"))
}

// TestResolveRaceProcesses (R35, multi-process): 4 processes x 16
// resolvers (half approve, half reject) race on each of 50 approvals
// stored in one SQLite file. Across all processes each approval gets
// exactly one WIN; every LOST names exactly the winner's outcome and
// reviewer; no other error (no SQLITE_BUSY) surfaces; the parent, reading
// through its own store right after each WIN or LOST line arrives, already
// sees the winning decision (a read after the winner committed is never
// stale); the store holds exactly one decision per approval, equal to the
// winner's; and the worker resumes every thread once, following its
// winner.
func TestResolveRaceProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	clock := newClock()
	path := filepath.Join(t.TempDir(), "lockstep.db")
	saver, err := sqlite.Open(path, sqlite.Config{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { saver.Close() })
	store := openSQLStore(t, saver.DB(), clock.Now)

	// The fixture's gated graph, checkpointed in the shared file.
	f := newFixture(t, clock, store)
	run, err := graph.New[refundState]().
		AddNode("refund", f.refundNode).
		AddEdge(graph.START, "refund").
		AddEdge("refund", graph.END).
		Compile(graph.WithSaver(saver))
	if err != nil {
		t.Fatal(err)
	}
	f.run = run
	for i := range raceProcApprovals {
		f.start(t, fmt.Sprintf("thread-%03d", i), fmt.Sprintf("order-%03d", i), 10+i)
	}
	in := approval.NewInbox(saver, store)
	items := allPending(t, in, approval.Filter{Limit: approval.MaxPageSize})
	if len(items) != raceProcApprovals {
		t.Fatalf("%d pending, want %d", len(items), raceProcApprovals)
	}
	byID := map[string]approval.Item{}
	for _, it := range items {
		byID[it.ID] = it
	}

	// Start the children; each stops at the gate after listing the
	// approvals and starting its resolvers.
	var (
		mu       sync.Mutex
		lines    = map[string][]raceLine{} // by approval
		badReads []string                  // the parent's reads that missed a decision
	)
	children := make([]*raceChild, raceProcs)
	for p := range children {
		c := &raceChild{proc: p, ready: make(chan int, 1), done: make(chan struct{})}
		c.cmd = exec.CommandContext(ctx, os.Args[0], "-test.run=^"+raceProcChildTest+"$", "-test.count=1")
		c.cmd.Env = append(os.Environ(), helperEnv+"="+raceProcRole, raceProcEnvDB+"="+path,
			raceProcEnvProc+"="+strconv.Itoa(p), raceProcEnvWorkers+"="+strconv.Itoa(raceProcResolvers))
		c.cmd.Stderr = &c.stderr
		if c.stdin, err = c.cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		if c.stdout, err = c.cmd.StdoutPipe(); err != nil {
			t.Fatal(err)
		}
		if err := c.cmd.Start(); err != nil {
			t.Fatalf("start resolver process %d: %v", p, err)
		}
		children[p] = c
		go func() {
			defer close(c.done)
			sc := bufio.NewScanner(c.stdout)
			for sc.Scan() {
				s := sc.Text()
				if rest, ok := strings.CutPrefix(s, "READY "); ok && !c.readyOK {
					var proc, n int
					if _, err := fmt.Sscanf(rest, "%d %d", &proc, &n); err == nil && proc == c.proc {
						c.readyOK = true
						c.ready <- n
						continue
					}
				}
				l, ok := parseRaceLine(c.proc, s)
				if !ok {
					c.other = append(c.other, s)
					continue
				}
				// The line was written after Decide returned, so the
				// decision it reports (won or lost to) is committed: a
				// read now, from another process and connection, must
				// see it.
				rec, err := store.Get(ctx, l.id)
				var bad string
				switch {
				case err != nil:
					bad = fmt.Sprintf("approval %s: resolver process %d printed %q, then the parent's Get failed: %v", l.id, c.proc, s, err)
				case string(rec.Decision.Outcome) != l.outcome || rec.Decision.Reviewer != l.reviewer:
					bad = fmt.Sprintf("approval %s: resolver process %d printed %q, then the parent's Get read %s by %s",
						l.id, c.proc, s, rec.Decision.Outcome, rec.Decision.Reviewer)
				}
				mu.Lock()
				lines[l.id] = append(lines[l.id], l)
				if bad != "" {
					badReads = append(badReads, bad)
				}
				mu.Unlock()
			}
			if err := sc.Err(); err != nil {
				c.other = append(c.other, "reading stdout: "+err.Error())
			}
		}()
	}
	// waitAll waits for every child's stdout to end and for it to exit,
	// and fails with the stderr of the first that did not exit cleanly.
	waitAll := func() {
		t.Helper()
		var failed []string
		for _, c := range children {
			<-c.done
			if err := c.cmd.Wait(); err != nil {
				failed = append(failed, c.failure(err))
			}
		}
		if len(failed) > 0 {
			t.Fatalf("%d of %d resolver processes failed:\n%s", len(failed), raceProcs, strings.Join(failed, "\n"))
		}
	}
	// stopAll kills the children parked at the gate and reaps them all.
	stopAll := func() {
		cancel()
		for _, c := range children {
			<-c.done
			c.cmd.Wait()
		}
	}
	for _, c := range children {
		select {
		case n := <-c.ready:
			if n != raceProcApprovals {
				stopAll()
				t.Fatalf("resolver process %d lists %d pending approvals, want %d", c.proc, n, raceProcApprovals)
			}
		case <-c.done:
			stopAll()
			t.Fatalf("resolver process %d ended before it was ready:\n%s", c.proc, c.failure(errors.New("no READY line")))
		}
	}
	// The gate: every child has its resolvers parked; release them all.
	start := time.Now()
	for _, c := range children {
		if _, err := io.WriteString(c.stdin, "go\n"); err != nil {
			t.Errorf("open the gate of resolver process %d: %v", c.proc, err)
		}
		c.stdin.Close()
	}
	waitAll()
	t.Logf("%d processes x %d resolvers x %d approvals decided in %v", raceProcs, raceProcResolvers, raceProcApprovals, time.Since(start))

	for _, b := range badReads {
		t.Error(b)
	}
	approved := map[string]bool{}
	winsBy := make([]int, raceProcs) // how the wins spread over the processes, for the log
	for _, it := range items {
		ls := lines[it.ID]
		var wins []raceLine
		for _, l := range ls {
			if l.kind == "WIN" {
				wins = append(wins, l)
			}
		}
		if len(wins) != 1 {
			t.Errorf("approval %s has %d winners, want 1: %s", it.ID, len(wins), winList(wins))
			continue
		}
		win := wins[0]
		winsBy[win.proc]++
		if want := raceProcs * raceProcResolvers; len(ls) != want {
			t.Errorf("approval %s: %d resolvers reported (WIN or LOST), want %d", it.ID, len(ls), want)
		}
		for _, l := range ls {
			if l.kind == "LOST" && (l.outcome != win.outcome || l.reviewer != win.reviewer) {
				t.Errorf("approval %s: resolver process %d lost to %s by %s, but process %d won with %s by %s",
					it.ID, l.proc, l.outcome, l.reviewer, win.proc, win.outcome, win.reviewer)
			}
		}
		rec, err := store.Get(ctx, it.ID)
		if err != nil {
			t.Errorf("approval %s: Get after the race: %v", it.ID, err)
			continue
		}
		want := approval.Record{ID: it.ID, Thread: it.Thread, Checkpoint: it.Checkpoint, Decision: approval.Decision{
			ID: it.ID, Outcome: approval.Outcome(win.outcome), Reviewer: win.reviewer, Note: "fine",
			ArgsHash: it.Request.ArgsHash, DecidedAt: raceProcDecidedAt,
		}}
		if want.Decision.Outcome == approval.Rejected {
			want.Decision.Note = "no"
		}
		got := approval.Record{ID: rec.ID, Thread: rec.Thread, Checkpoint: rec.Checkpoint, Decision: rec.Decision}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("approval %s: the stored decision is not process %d's win (-want +stored):\n%s", it.ID, win.proc, diff)
		}
		approved[it.Thread] = rec.Decision.Outcome == approval.Approved
	}
	t.Logf("wins by process: %v", winsBy)
	if t.Failed() {
		t.FailNow()
	}
	for id := range lines {
		if _, ok := byID[id]; !ok {
			t.Errorf("resolver processes reported on approval %s, which the parent never paused", id)
		}
	}

	// Exactly one decision per approval: the store's listing of decided
	// approvals holds each approval once, and no other.
	recs, err := store.Unresumed(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	var gotIDs, wantIDs []string
	for _, r := range recs {
		gotIDs = append(gotIDs, r.ID)
	}
	for _, it := range items {
		wantIDs = append(wantIDs, it.ID)
	}
	slices.Sort(gotIDs)
	slices.Sort(wantIDs)
	if diff := cmp.Diff(wantIDs, gotIDs); diff != "" {
		t.Errorf("decided approvals in the store (-want +got):\n%s", diff)
	}
	if p, err := in.List(ctx, approval.Filter{}); err != nil || len(p.Items) != 0 {
		t.Errorf("inbox after the race: %d items, %v; decided approvals must leave it", len(p.Items), err)
	}

	// The resumed runs follow the winners.
	clock.Set(raceProcDecidedAt.Add(time.Minute))
	w := newWorker(t, store, approval.ResumeGraph(f.run), approval.WorkerOptions{})
	rep, err := w.RunOnce(ctx)
	if err != nil || rep.Resumed != raceProcApprovals {
		t.Fatalf("worker: %+v, %v; want %d resumed", rep, err, raceProcApprovals)
	}
	nApproved := 0
	for _, it := range items {
		want := 0
		if approved[it.Thread] {
			want = 1
			nApproved++
		}
		if got := f.witness.count(it.Thread); got != want {
			t.Errorf("approval %s: thread %s paid %d times, want %d", it.ID, it.Thread, got, want)
		}
		s := f.state(t, it.Thread)
		if s.Status != graph.StatusDone || (s.Values.Outcome == approval.Approved) != approved[it.Thread] {
			t.Errorf("approval %s: thread %s is %s with outcome %s; want done following its winner", it.ID, it.Thread, s.Status, s.Values.Outcome)
		}
	}
	t.Logf("%d approved and paid once, %d rejected and never paid", nApproved, raceProcApprovals-nApproved)
}

// TestHelperResolveRace is a resolver child of TestResolveRaceProcesses.
// It opens the shared file through its own saver and store, lists the
// pending approvals, parks its resolvers at a gate, prints READY, and
// opens the gate when the parent writes a line (or closes stdin). Each
// resolver decides every approval in the parent's order and prints a WIN
// or LOST line per approval; any other error goes to stderr and fails the
// child.
func TestHelperResolveRace(t *testing.T) {
	if os.Getenv(helperEnv) != raceProcRole {
		t.Skip("resolver child of TestResolveRaceProcesses only")
	}
	ctx := context.Background()
	proc, err := strconv.Atoi(os.Getenv(raceProcEnvProc))
	if err != nil {
		t.Fatalf("%s: %v", raceProcEnvProc, err)
	}
	resolvers, err := strconv.Atoi(os.Getenv(raceProcEnvWorkers))
	if err != nil {
		t.Fatalf("%s: %v", raceProcEnvWorkers, err)
	}
	now := func() time.Time { return raceProcDecidedAt }
	saver, err := sqlite.Open(os.Getenv(raceProcEnvDB), sqlite.Config{Now: now})
	if err != nil {
		t.Fatalf("process %d: open the saver: %v", proc, err)
	}
	defer saver.Close()
	store, err := approval.OpenSQLStore(ctx, saver.DB(), now)
	if err != nil {
		t.Fatalf("process %d: open the store: %v", proc, err)
	}
	items := allPending(t, approval.NewInbox(saver, store), approval.Filter{Limit: approval.MaxPageSize})

	var (
		out  sync.Mutex // one whole line per write
		wg   sync.WaitGroup
		gate = make(chan struct{})
	)
	fail := func(format string, args ...any) {
		msg := fmt.Sprintf("process %d: "+format, append([]any{proc}, args...)...)
		fmt.Fprintln(os.Stderr, msg) // the parent shows stderr
		t.Fail()
	}
	for g := range resolvers {
		wg.Go(func() {
			<-gate
			for i, it := range items {
				v := raceProcVerdict(proc, g, i)
				_, err := store.Decide(ctx, it, v)
				var lost *approval.AlreadyDecidedError
				switch {
				case err == nil:
					out.Lock()
					fmt.Printf("WIN %s %s %s\n", it.ID, v.Outcome, v.Reviewer)
					out.Unlock()
				case errors.As(err, &lost):
					if lost.ID != it.ID || lost.Winner.ID != it.ID || !errors.Is(err, approval.ErrAlreadyDecided) {
						fail("approval %s, resolver %s: lost to a decision on another approval: %v (winner %+v)", it.ID, v.Reviewer, err, lost.Winner)
					}
					out.Lock()
					fmt.Printf("LOST %s %s %s\n", it.ID, lost.Winner.Outcome, lost.Winner.Reviewer)
					out.Unlock()
				default:
					fail("approval %s, resolver %s: an error other than a lost race (BUSY?): %v", it.ID, v.Reviewer, err)
				}
			}
		})
	}
	fmt.Printf("READY %d %d\n", proc, len(items))
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil && !errors.Is(err, io.EOF) {
		fail("reading the gate: %v", err)
	}
	close(gate)
	wg.Wait()
}
