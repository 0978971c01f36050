package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	sqlite3 "github.com/mattn/go-sqlite3"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/faultdb"
)

// integrityOK runs PRAGMA integrity_check and checks that no checkpoint
// lacks the data of the channels it changed (its own versions) in its row
// (no torn step), that no pending write lost its checkpoint, and that
// every thread with checkpoints has its threads row (the lease).
func integrityOK(t testing.TB, db *sql.DB) {
	t.Helper()
	var res string
	if err := db.QueryRow("PRAGMA integrity_check").Scan(&res); err != nil || res != "ok" {
		t.Fatalf("integrity_check = %q, %v", res, err)
	}
	var torn int
	err := db.QueryRow(`SELECT count(*) FROM checkpoints c, json_each(c.versions) v
		WHERE v.value = c.checkpoint_id AND NOT EXISTS (SELECT 1 FROM json_each(c.channels) j WHERE j.key = v.key)`).Scan(&torn)
	if err != nil || torn != 0 {
		t.Fatalf("%d changed channels without their data (%v)", torn, err)
	}
	var orphans int
	err = db.QueryRow(`SELECT count(*) FROM writes w WHERE NOT EXISTS (SELECT 1 FROM checkpoints c
		WHERE c.thread_id = w.thread_id AND c.checkpoint_ns = w.checkpoint_ns AND c.checkpoint_id = w.checkpoint_id AND c.pruned = 0)`).Scan(&orphans)
	if err != nil || orphans != 0 {
		t.Fatalf("%d pending writes without their checkpoint (%v)", orphans, err)
	}
	var unleased int
	err = db.QueryRow(`SELECT count(*) FROM (SELECT DISTINCT thread_id, checkpoint_ns FROM checkpoints) c
		WHERE NOT EXISTS (SELECT 1 FROM threads t WHERE t.thread_id = c.thread_id AND t.checkpoint_ns = c.checkpoint_ns)`).Scan(&unleased)
	if err != nil || unleased != 0 {
		t.Fatalf("%d threads without their threads row (%v)", unleased, err)
	}
}

func sqliteErr(code sqlite3.ErrNo) error { return sqlite3.Error{Code: code} }

// TestFaultsOnPut (R07, R08): Begin, Exec and Commit of the checkpoint
// transaction fail before or after the real operation with real SQLite
// errors (IOERR, FULL, BUSY), once or persistently: on the one-statement
// path of a steady Put, on the statements of a Put that drops the lease or
// saves its own writes, and on the slow path of a Put that takes an
// expired lease. Put returns a typed error wrapping the driver's; it never
// reports a step saved that was not; after a failed COMMIT the error says
// the outcome is unknown and Get tells what happened (only a fault after a
// successful COMMIT leaves the checkpoint); the saver keeps working once
// the fault is gone; the file passes integrity_check with no torn step.
func TestFaultsOnPut(t *testing.T) {
	drv := faults(t)
	codes := []sqlite3.ErrNo{sqlite3.ErrIoErr, sqlite3.ErrFull, sqlite3.ErrBusy}
	type point struct {
		op    faultdb.Op
		match string
		req   string // "" a steady Put, "release", "writes" or "expired"
	}
	points := []point{{faultdb.OpBegin, "BEGIN IMMEDIATE", ""}, {faultdb.OpExec, "INSERT INTO checkpoints", ""}, {faultdb.OpCommit, "COMMIT", ""},
		{faultdb.OpExec, "UPDATE threads", "release"}, {faultdb.OpExec, "INSERT INTO writes", "writes"},
		{faultdb.OpQuery, "SELECT lease_owner", "expired"}, {faultdb.OpExec, "UPDATE threads", "expired"}, {faultdb.OpExec, "crc, links) VALUES", "expired"}}
	for _, p := range points {
		for _, when := range []faultdb.When{faultdb.Before, faultdb.After} {
			for _, mode := range []faultdb.Mode{faultdb.Transient, faultdb.Persistent} {
				for _, code := range codes {
					name := fmt.Sprintf("%s/%s/%s/when=%d/mode=%d/%v", p.req, p.op, p.match, when, mode, code)
					t.Run(name, func(t *testing.T) {
						drv.Reset()
						clock := newFakeClock()
						s := openTemp(t, Config{Synchronous: SyncNormal, DriverName: faultDriverName, Now: clock.Now})
						ctx := t.Context()
						l := putLine(t, s, "t", 3)
						before := l.head
						req := l.next()
						switch p.req {
						case "release":
							req.Release = true
						case "writes":
							req.Writes = []checkpoint.TaskWrites{{TaskID: checkpoint.NullTaskID, Writes: []checkpoint.Write{{Channel: "x", Value: []byte(`1`)}}}}
						case "expired":
							clock.Advance(2 * time.Minute)
						}
						drv.Arm(faultdb.Fault{Op: p.op, Match: p.match, When: when, Mode: mode, Err: sqliteErr(code)})
						err := s.Put(ctx, req)
						if err == nil {
							t.Fatal("Put succeeded through a fault")
						}
						var se *StoreError
						var drvErr sqlite3.Error
						if !errors.As(err, &se) || !errors.As(err, &drvErr) || drvErr.Code != code {
							t.Fatalf("Put: %v, want a *StoreError wrapping sqlite3 code %v", err, code)
						}
						commitFault := p.op == faultdb.OpCommit
						if got := errors.Is(err, ErrCommitIndeterminate); got != commitFault {
							t.Errorf("errors.Is(ErrCommitIndeterminate) = %v, want %v", got, commitFault)
						}
						if got, want := errors.Is(err, ErrStoreBusy), code == sqlite3.ErrBusy; got != want {
							t.Errorf("errors.Is(ErrStoreBusy) = %v, want %v", got, want)
						}
						if se.Retryable() != (code == sqlite3.ErrBusy && !commitFault) {
							t.Errorf("Retryable() = %v", se.Retryable())
						}
						drv.Reset()
						tp, err := s.Get(ctx, checkpoint.Ref{Thread: "t"}, checkpoint.GetOptions{})
						if err != nil {
							t.Fatal(err)
						}
						happened := commitFault && when == faultdb.After
						if happened != (tp.Checkpoint.ID == req.Checkpoint.ID) {
							t.Fatalf("head after the fault = %s; the checkpoint %s was saved: %v, want %v (before: %s)",
								tp.Checkpoint.ID, req.Checkpoint.ID, !happened, happened, before)
						}
						if happened {
							l.committed(req)
						}
						// The fault is gone: the saver goes on.
						for i := 0; i < 2; i++ {
							next := l.next()
							if err := s.Put(ctx, next); err != nil {
								t.Fatalf("Put after the fault: %v", err)
							}
							l.committed(next)
						}
						integrityOK(t, s.DB())
					})
				}
			}
		}
	}
}

// TestFaultsPersistent (R07): a persistent I/O error keeps failing every
// write with a typed error at once (one failed statement each: nothing
// retries or waits), the last good checkpoint still loads, and nothing is
// reported saved.
func TestFaultsPersistent(t *testing.T) {
	drv := faults(t)
	s := openTemp(t, Config{Synchronous: SyncNormal, DriverName: faultDriverName})
	ctx := t.Context()
	l := putLine(t, s, "t", 2)
	drv.Arm(faultdb.Fault{Op: faultdb.OpExec, Match: "INSERT INTO checkpoints", Mode: faultdb.Persistent, Err: sqliteErr(sqlite3.ErrIoErr)})
	for i := 0; i < 5; i++ {
		err := s.Put(ctx, l.next())
		var de sqlite3.Error
		if !errors.As(err, &de) || de.Code != sqlite3.ErrIoErr {
			t.Fatalf("attempt %d: %v, want IOERR", i, err)
		}
		if n := len(drv.Events()); n != i+1 {
			t.Fatalf("after attempt %d the fault fired %d times, want %d: the write was tried again", i, n, i+1)
		}
	}
	tp, err := s.Get(ctx, checkpoint.Ref{Thread: "t"}, checkpoint.GetOptions{})
	if err != nil || tp.Checkpoint.ID != l.head {
		t.Fatalf("head = %v, %v; want the last good checkpoint %s", tp, err, l.head)
	}
	if n := len(drv.Events()); n != 5 {
		t.Errorf("faults fired %d times, want 5", n)
	}
	integrityOK(t, s.DB())
}

// TestFaultsOnPutWrites (R07): the same for pending writes: a failed
// transaction writes none of them.
func TestFaultsOnPutWrites(t *testing.T) {
	drv := faults(t)
	for _, when := range []faultdb.When{faultdb.Before, faultdb.After} {
		for _, match := range []string{"INSERT INTO writes", "COMMIT"} {
			t.Run(fmt.Sprintf("%s/%d", match, when), func(t *testing.T) {
				drv.Reset()
				s := openTemp(t, Config{Synchronous: SyncNormal, DriverName: faultDriverName})
				ctx := t.Context()
				l := putLine(t, s, "t", 2)
				op := faultdb.OpExec
				if match == "COMMIT" {
					op = faultdb.OpCommit
				}
				drv.Arm(faultdb.Fault{Op: op, Match: match, When: when, Err: sqliteErr(sqlite3.ErrIoErr)})
				req := checkpoint.WritesRequest{Ref: checkpoint.Ref{Thread: "t", ID: l.head}, Lease: checkpoint.Lease{Owner: l.owner, TTL: time.Minute},
					Tasks: []checkpoint.TaskWrites{{TaskID: "a", Writes: []checkpoint.Write{{Channel: "x", Value: []byte("1")}, {Channel: "y", Value: []byte("2")}}}}}
				err := s.PutWrites(ctx, req)
				if err == nil {
					t.Fatal("PutWrites succeeded through a fault")
				}
				tp, gerr := s.Get(ctx, checkpoint.Ref{Thread: "t"}, checkpoint.GetOptions{})
				if gerr != nil {
					t.Fatal(gerr)
				}
				want := 0
				if op == faultdb.OpCommit && when == faultdb.After {
					want = 2
					if !errors.Is(err, ErrCommitIndeterminate) {
						t.Errorf("PutWrites: %v, want ErrCommitIndeterminate", err)
					}
				}
				if len(tp.Pending) != want {
					t.Fatalf("pending writes after the fault: %d, want %d (all or nothing)", len(tp.Pending), want)
				}
				// Saving again (as a retry does) stores each write once.
				if err := s.PutWrites(ctx, req); err != nil {
					t.Fatal(err)
				}
				tp, _ = s.Get(ctx, checkpoint.Ref{Thread: "t"}, checkpoint.GetOptions{})
				if len(tp.Pending) != 2 {
					t.Fatalf("pending writes after the retry: %d, want 2", len(tp.Pending))
				}
			})
		}
	}
}

// TestFaultsThroughTheRuntime (R07, R08): a graph run on the fault driver.
// A COMMIT that succeeded but reported an error is resolved by the
// runtime re-reading the head: the run completes with exactly one
// checkpoint per step. A COMMIT that really failed stops the run with a
// typed error; the head is the last saved step; Continue finishes with the
// same final state as a run without faults, and no step is duplicated.
func TestFaultsThroughTheRuntime(t *testing.T) {
	drv := faults(t)
	ctx := t.Context()
	// Reference run, no faults.
	ref := openTemp(t, Config{Synchronous: SyncNormal})
	want, err := w1Graph(t, ref).Invoke(ctx, "t", graph.Set(w1State{}, "Count"))
	if err != nil {
		t.Fatal(err)
	}
	wantCount := len(listIDs(t, ref, "t"))
	for _, when := range []faultdb.When{faultdb.After, faultdb.Before} {
		for n := 1; n <= 12; n += 3 {
			t.Run(fmt.Sprintf("when=%d/commit=%d", when, n), func(t *testing.T) {
				drv.Reset()
				s := openTemp(t, Config{Synchronous: SyncNormal, DriverName: faultDriverName})
				r := w1Graph(t, s)
				// The graph's topology is stored first (its own COMMIT,
				// TestFaultsStoringTheTopology), so that COMMIT n is the
				// run's n-th checkpoint save.
				if err := r.SaveTopology(ctx); err != nil {
					t.Fatal(err)
				}
				drv.Arm(faultdb.Fault{Op: faultdb.OpCommit, Match: "COMMIT", N: n, When: when, Err: sqliteErr(sqlite3.ErrIoErr)})
				got, err := r.Invoke(ctx, "t", graph.Set(w1State{}, "Count"))
				if when == faultdb.Before {
					if !errors.Is(err, ErrCommitIndeterminate) {
						t.Fatalf("Invoke: %v, want the commit error", err)
					}
					got, err = r.Continue(ctx, "t")
					if n == 1 {
						// The input checkpoint itself was not saved: the
						// thread does not exist, and the run must start
						// again (never "accepted but lost", R23).
						if !errors.Is(err, graph.ErrThreadNotFound) {
							t.Fatalf("Continue: %v, want ErrThreadNotFound", err)
						}
						got, err = r.Invoke(ctx, "t", graph.Set(w1State{}, "Count"))
					}
				}
				if err != nil {
					t.Fatal(err)
				}
				if len(drv.Events()) != 1 {
					t.Fatalf("fault fired %d times", len(drv.Events()))
				}
				if got.Values.Count != want.Values.Count || len(got.Values.Log) != len(want.Values.Log) {
					t.Fatalf("final state %+v, want %+v", got.Values, want.Values)
				}
				if n := len(listIDs(t, s, "t")); n != wantCount {
					t.Errorf("%d checkpoints, want %d (one per step)", n, wantCount)
				}
				integrityOK(t, s.DB())
			})
		}
	}
}

// TestFaultsStoringTheTopology: the first run of a graph stores its
// topology in a transaction of its own before anything else. A COMMIT of
// it that took effect but reported an error is resolved by reading the
// topology back: the run goes on. One that failed fails the run before it
// writes anything (the thread does not exist); the next run stores the
// topology and completes, with the fingerprint in every checkpoint.
func TestFaultsStoringTheTopology(t *testing.T) {
	drv := faults(t)
	ctx := t.Context()
	for _, when := range []faultdb.When{faultdb.After, faultdb.Before} {
		t.Run(map[faultdb.When]string{faultdb.Before: "before", faultdb.After: "after"}[when], func(t *testing.T) {
			drv.Reset()
			s := openTemp(t, Config{Synchronous: SyncNormal, DriverName: faultDriverName})
			r := w1Graph(t, s)
			drv.Arm(faultdb.Fault{Op: faultdb.OpCommit, Match: "COMMIT", N: 1, When: when, Err: sqliteErr(sqlite3.ErrIoErr)})
			got, err := r.Invoke(ctx, "t", graph.Set(w1State{}, "Count"))
			if when == faultdb.Before {
				if !errors.Is(err, ErrCommitIndeterminate) {
					t.Fatalf("Invoke: %v, want the commit error", err)
				}
				if _, err := s.Get(ctx, checkpoint.Ref{Thread: "t"}, checkpoint.GetOptions{}); !errors.Is(err, checkpoint.ErrNotFound) {
					t.Fatalf("after the failed store: Get = %v, want ErrNotFound (the run wrote nothing)", err)
				}
				got, err = r.Invoke(ctx, "t", graph.Set(w1State{}, "Count"))
			}
			if err != nil || got.Values.Count != 10 {
				t.Fatalf("Invoke: %+v, %v", got.Values, err)
			}
			if len(drv.Events()) != 1 {
				t.Fatalf("fault fired %d times", len(drv.Events()))
			}
			fp, err := r.Topology().Fingerprint()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Topology(ctx, fp); err != nil {
				t.Errorf("Topology(%s): %v", fp, err)
			}
			tps, err := s.List(ctx, "t", checkpoint.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, tp := range tps {
				if tp.Checkpoint.Metadata.Topology != fp {
					t.Errorf("checkpoint %s: Metadata.Topology = %q, want %q", tp.Checkpoint.ID, tp.Checkpoint.Metadata.Topology, fp)
				}
			}
			integrityOK(t, s.DB())
		})
	}
}

// TestStoreBusy (R10): another connection holds the write lock longer than
// BusyTimeout: Put fails after about BusyTimeout with a *StoreError matching
// ErrStoreBusy and Retryable, writes nothing, and succeeds once the lock is
// released.
func TestStoreBusy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "busy.db")
	s := openAt(t, path, Config{Synchronous: SyncNormal, BusyTimeout: 150 * time.Millisecond})
	ctx := t.Context()
	l := putLine(t, s, "t", 2)
	other, err := sql.Open("sqlite3", path+"?_busy_timeout=100")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	hold, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hold.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	req := l.next()
	start := time.Now()
	err = s.Put(ctx, req)
	el := time.Since(start)
	var se *StoreError
	if !errors.Is(err, ErrStoreBusy) || !errors.As(err, &se) || !se.Retryable() {
		t.Fatalf("Put while locked: %v, want ErrStoreBusy", err)
	}
	if el < 100*time.Millisecond || el > 2*time.Second {
		t.Errorf("Put gave up after %v, want about the 150ms busy timeout", el)
	}
	// A cancelled context cuts the wait short.
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	err = s.Put(cctx, req)
	cancel()
	if err == nil {
		t.Fatal("Put with a cancelled context succeeded while locked")
	}
	hold.ExecContext(ctx, "ROLLBACK")
	hold.Close()
	if err := s.Put(ctx, req); err != nil {
		t.Fatalf("retry after the lock was released: %v", err)
	}
	if ids := listIDs(t, s, "t"); len(ids) != 3 {
		t.Fatalf("%d checkpoints, want 3", len(ids))
	}
	integrityOK(t, s.DB())
}

// nodeRuns counts the executions of each node of a graph.
type nodeRuns struct {
	mu   sync.Mutex
	runs map[string]int
	last string // the node that ran last
}

func (c *nodeRuns) ran(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.runs[name]++
	c.last = name
}

// snapshot returns a copy of the counts and the node that ran last.
func (c *nodeRuns) snapshot() (map[string]int, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.runs), c.last
}

// countingW1Graph is w1Graph (a chain n1 -> ... -> n10) whose nodes count
// their executions in runs.
func countingW1Graph(t *testing.T, s checkpoint.Saver, runs *nodeRuns) *graph.Runnable[w1State] {
	t.Helper()
	g := graph.New[w1State]()
	for i := 1; i <= 10; i++ {
		name := fmt.Sprintf("n%d", i)
		g.AddNode(name, func(ctx context.Context, st w1State) (graph.Update[w1State], error) {
			runs.ran(name)
			return graph.Set(w1State{Count: st.Count + 1, Log: []string{"0123456789abcdef"}}, "Count", "Log"), nil
		})
	}
	g.AddEdge(graph.START, "n1")
	for i := 1; i < 10; i++ {
		g.AddEdge(fmt.Sprintf("n%d", i), fmt.Sprintf("n%d", i+1))
	}
	g.AddEdge("n10", graph.END)
	r, err := g.Compile(graph.WithSaver(s))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestFaultsRunEachNodeOnce (R08): the run of TestFaultsThroughTheRuntime,
// with a fault on every COMMIT of the run in turn, each node counting its
// executions over the whole run, the runtime's own recovery and the
// caller's Continue included. A fault after the COMMIT took effect (the
// runtime reads the head back and goes on) runs every node exactly once.
// A fault before it (the step is lost, Continue resumes from the last
// saved checkpoint) runs the node of the failed step at most twice and
// every other node exactly once.
func TestFaultsRunEachNodeOnce(t *testing.T) {
	drv := faults(t)
	ctx := t.Context()
	// Reference run on the fault driver, nothing armed: the final state and
	// the number of COMMITs a run makes.
	ref := openTemp(t, Config{Synchronous: SyncNormal, DriverName: faultDriverName})
	refRuns := &nodeRuns{runs: map[string]int{}}
	refRun := countingW1Graph(t, ref, refRuns)
	if err := refRun.SaveTopology(ctx); err != nil { // its own COMMIT: not counted
		t.Fatal(err)
	}
	drv.Reset()
	want, err := refRun.Invoke(ctx, "t", graph.Set(w1State{}, "Count"))
	if err != nil {
		t.Fatal(err)
	}
	commits := drv.Count(faultdb.OpCommit)
	wantCount := len(listIDs(t, ref, "t"))
	once := map[string]int{}
	for i := 1; i <= 10; i++ {
		once[fmt.Sprintf("n%d", i)] = 1
	}
	if got, _ := refRuns.snapshot(); !cmp.Equal(once, got) {
		t.Fatalf("reference run without faults: node runs (-want +got):\n%s", cmp.Diff(once, got))
	}
	if commits < 11 {
		t.Fatalf("reference run made %d COMMITs, want at least 11 (input + 10 steps)", commits)
	}
	for _, when := range []faultdb.When{faultdb.After, faultdb.Before} {
		for n := 1; n <= commits; n++ {
			name := fmt.Sprintf("when=%s/commit=%d", map[faultdb.When]string{faultdb.Before: "before", faultdb.After: "after"}[when], n)
			t.Run(name, func(t *testing.T) {
				drv.Reset()
				s := openTemp(t, Config{Synchronous: SyncNormal, DriverName: faultDriverName})
				runs := &nodeRuns{runs: map[string]int{}}
				r := countingW1Graph(t, s, runs)
				if err := r.SaveTopology(ctx); err != nil {
					t.Fatal(err)
				}
				var atFault map[string]int // node runs when the fault fired
				var failedNode string      // the node whose step the failed COMMIT saved
				drv.Arm(faultdb.Fault{Op: faultdb.OpCommit, Match: "COMMIT", N: n, When: when, Err: sqliteErr(sqlite3.ErrIoErr),
					Action: func() { atFault, failedNode = runs.snapshot() }})
				got, err := r.Invoke(ctx, "t", graph.Set(w1State{}, "Count"))
				if when == faultdb.Before {
					if !errors.Is(err, ErrCommitIndeterminate) {
						t.Fatalf("%s: Invoke: %v, want the commit error", name, err)
					}
					got, err = r.Continue(ctx, "t")
					if n == 1 {
						if !errors.Is(err, graph.ErrThreadNotFound) {
							t.Fatalf("%s: Continue: %v, want ErrThreadNotFound", name, err)
						}
						got, err = r.Invoke(ctx, "t", graph.Set(w1State{}, "Count"))
					}
				}
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if len(drv.Events()) != 1 {
					t.Fatalf("%s: fault fired %d times, want 1", name, len(drv.Events()))
				}
				if d := cmp.Diff(want.Values, got.Values); d != "" {
					t.Errorf("%s: final state (-want +got):\n%s", name, d)
				}
				if c := len(listIDs(t, s, "t")); c != wantCount {
					t.Errorf("%s: %d checkpoints, want %d (one per step)", name, c, wantCount)
				}
				gotRuns, _ := runs.snapshot()
				t.Logf("%s: the failed COMMIT followed node %q; node runs over the whole run: %v", name, failedNode, gotRuns)
				wantRuns := maps.Clone(once)
				if when == faultdb.Before && failedNode != "" {
					// The failed step's node may run again after the
					// resume; every other node runs exactly once.
					if c := gotRuns[failedNode]; c == 2 {
						wantRuns[failedNode] = 2
					}
				}
				if d := cmp.Diff(wantRuns, gotRuns); d != "" {
					t.Errorf("%s: node runs (-want +got); the failed COMMIT saved the step of %q (node runs then: %v):\n%s",
						name, failedNode, atFault, d)
				}
				integrityOK(t, s.DB())
			})
		}
	}
}
