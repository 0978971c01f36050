package sqlite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/internal/faultdb"
)

// gate holds the first transaction that reaches a hook point, once armed, until the
// test opens it, so that the writes started meanwhile queue behind it and
// the next leader commits them as one group, whatever the scheduler does.
type gate struct {
	point  string
	armed  atomic.Bool
	held   chan struct{}
	open   chan struct{}
	opened sync.Once
}

func newGate(point string) *gate {
	return &gate{point: point, held: make(chan struct{}), open: make(chan struct{})}
}

func (g *gate) hook(point string) {
	if point == g.point && g.armed.CompareAndSwap(true, false) {
		close(g.held)
		<-g.open
	}
}

func (g *gate) release() { g.opened.Do(func() { close(g.open) }) }

// queued waits until n writes wait in s's group queue (bounded: a
// generous margin, never a timing assertion).
func queued(t *testing.T, s *Saver, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		s.group.mu.Lock()
		got := len(s.group.queue)
		s.group.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d writes queued after a minute, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// groupRun starts first (which the gate holds inside its transaction),
// then each of rest once the previous one queued, releases the gate and
// returns rest's errors, in order.
func groupRun(t *testing.T, s *Saver, g *gate, first func() error, rest []func() error) []error {
	t.Helper()
	defer g.release()
	firstErr := make(chan error, 1)
	g.armed.Store(true)
	go func() { firstErr <- first() }()
	select {
	case <-g.held:
	case err := <-firstErr:
		t.Fatalf("the first write returned (%v) before reaching %s", err, g.point)
	}
	errs := make([]error, len(rest))
	var wg sync.WaitGroup
	for i, fn := range rest {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn()
		}()
		queued(t, s, i+1) // in this order: the queue is first come, first served
	}
	g.release()
	wg.Wait()
	if err := <-firstErr; err != nil {
		t.Fatalf("the first write: %v", err)
	}
	return errs
}

// TestGroupCommitEachKeepsItsResult: writes that queue while a
// transaction is in flight commit together in the next one, each with its
// own compare-and-swap result: a Put on a parent that is not the head, a
// Put and a PutWrites under another owner's live lease, a fenced Held Put
// and a PutWrites on an old checkpoint fail alone and write nothing; the
// other Puts (with their own writes) and PutWrites all commit, in one
// transaction (GroupStats).
func TestGroupCommitEachKeepsItsResult(t *testing.T) {
	for _, sync := range []Synchronous{SyncNormal, SyncFull} {
		t.Run(string(sync), func(t *testing.T) {
			g := newGate("sqlite.put.beforeCommit")
			s := openTemp(t, Config{Synchronous: sync, Hook: g.hook})
			ctx := t.Context()
			const good = 6
			lines := make([]*line, good)
			for i := range lines {
				lines[i] = putLine(t, s, fmt.Sprintf("good-%d", i), 2)
			}
			stale := putLine(t, s, "stale", 3)
			staleReq := stale.next()
			staleReq.Checkpoint.ParentID = "" // set below: a parent that is not the head
			busy := putLine(t, s, "busy", 2)
			fenced := putLine(t, s, "fenced", 2)
			if err := s.Release(ctx, "fenced", "", fenced.owner); err != nil {
				t.Fatal(err)
			}
			if err := s.Claim(ctx, checkpoint.Ref{Thread: "fenced", ID: fenced.head}, checkpoint.Lease{Owner: "successor", TTL: time.Minute}); err != nil {
				t.Fatal(err)
			}
			if err := s.Release(ctx, "fenced", "", "successor"); err != nil {
				t.Fatal(err)
			}
			first := putLine(t, s, "first", 1)
			before := map[string][]string{}
			for _, th := range []string{"stale", "busy", "fenced"} {
				before[th] = listIDs(t, s, th)
			}
			parents := listIDs(t, s, "stale")
			staleReq.Checkpoint.ParentID = parents[1] // the head's parent

			var rest []func() error
			var want []error
			reqs := make([]checkpoint.PutRequest, good)
			for i, l := range lines {
				reqs[i] = l.next()
				req := reqs[i]
				req.Writes = []checkpoint.TaskWrites{{TaskID: "marker", Writes: []checkpoint.Write{{Channel: checkpoint.ChannelInterrupt, Value: json.RawMessage(`[{"id":"i-` + l.thread + `","value":"v"}]`)}}}}
				reqs[i] = req
				rest = append(rest, func() error { return s.Put(ctx, req) })
				want = append(want, nil)
				if i == 2 {
					rest = append(rest, func() error { return s.Put(ctx, staleReq) })
					want = append(want, checkpoint.ErrConflict)
				}
				if i == 3 {
					breq := busy.next()
					breq.Lease.Owner = "intruder"
					rest = append(rest,
						func() error { return s.Put(ctx, breq) },
						func() error {
							return s.PutWrites(ctx, checkpoint.WritesRequest{Ref: checkpoint.Ref{Thread: "busy", ID: busy.head}, Lease: checkpoint.Lease{Owner: "intruder", TTL: time.Minute},
								Tasks: []checkpoint.TaskWrites{{TaskID: "x", Writes: []checkpoint.Write{{Channel: "v", Value: json.RawMessage(`1`)}}}}})
						})
					want = append(want, checkpoint.ErrThreadBusy, checkpoint.ErrThreadBusy)
				}
				if i == 4 {
					freq := fenced.next()
					freq.Lease.Held = true
					rest = append(rest,
						func() error { return s.Put(ctx, freq) },
						func() error {
							return s.PutWrites(ctx, checkpoint.WritesRequest{Ref: checkpoint.Ref{Thread: "stale", ID: parents[1]}, Lease: checkpoint.Lease{Owner: stale.owner, TTL: time.Minute},
								Tasks: []checkpoint.TaskWrites{{TaskID: "x", Writes: []checkpoint.Write{{Channel: "v", Value: json.RawMessage(`1`)}}}}})
						})
					want = append(want, checkpoint.ErrThreadBusy, checkpoint.ErrConflict)
				}
			}
			pw := putLine(t, s, "writes", 1)
			rest = append(rest, func() error {
				return s.PutWrites(ctx, checkpoint.WritesRequest{Ref: checkpoint.Ref{Thread: "writes", ID: pw.head}, Lease: checkpoint.Lease{Owner: pw.owner, TTL: time.Minute},
					Tasks: []checkpoint.TaskWrites{{TaskID: "w", Writes: []checkpoint.Write{{Channel: "v", Value: json.RawMessage(`7`)}}}}})
			})
			want = append(want, nil)

			groups0, members0 := s.GroupStats()
			errs := groupRun(t, s, g, func() error { return s.Put(ctx, first.next()) }, rest)
			for i, err := range errs {
				if want[i] == nil && err != nil || want[i] != nil && !errors.Is(err, want[i]) {
					t.Errorf("write %d: %v, want %v", i, err, want[i])
				}
			}
			groups, members := s.GroupStats()
			if groups-groups0 != 1 || members-members0 != int64(len(rest)) {
				t.Errorf("GroupStats: %d groups of %d writes, want 1 of %d", groups-groups0, members-members0, len(rest))
			}
			for i, l := range lines {
				tp, err := s.Get(ctx, checkpoint.Ref{Thread: l.thread}, checkpoint.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if tp.Checkpoint.ID != reqs[i].Checkpoint.ID || len(tp.Pending) != 1 || tp.Pending[0].TaskID != "marker" {
					t.Errorf("%s: head %s with %d pending writes, want %s with its marker", l.thread, tp.Checkpoint.ID, len(tp.Pending), reqs[i].Checkpoint.ID)
				}
			}
			for th, ids := range before {
				if diff := cmp.Diff(ids, listIDs(t, s, th)); diff != "" {
					t.Errorf("%s: a refused write changed its checkpoints (-before +after):\n%s", th, diff)
				}
			}
			tp, err := s.Get(ctx, checkpoint.Ref{Thread: "writes"}, checkpoint.GetOptions{})
			if err != nil || len(tp.Pending) != 1 {
				t.Errorf("writes: %v, %d pending writes, want 1", err, len(tp.Pending))
			}
			for _, th := range []string{"busy", "stale"} {
				tp, err := s.Get(ctx, checkpoint.Ref{Thread: th}, checkpoint.GetOptions{})
				if err != nil || len(tp.Pending) != 0 {
					t.Errorf("%s: %v, %d pending writes, want none", th, err, len(tp.Pending))
				}
			}
		})
	}
}

// TestGroupCommitBounds: a group takes at most GroupCommitMax writes and
// GroupCommitBytes bytes (a write larger than that alone still commits);
// GroupCommitMax 1 turns group commit off. Every write commits either way.
func TestGroupCommitBounds(t *testing.T) {
	cases := []struct {
		name             string
		max, bytes       int
		groups, inGroups int64
	}{
		{name: "defaults", groups: 1, inGroups: 7},
		{name: "max 3", max: 3, groups: 2, inGroups: 6}, // 3 + 3 + 1 alone
		{name: "max 1 is off", max: 1},
		{name: "bytes below one write", bytes: 1}, // each alone
		{name: "bytes of two writes", bytes: 1200, groups: 3, inGroups: 6},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := newGate("sqlite.put.beforeCommit")
			s := openTemp(t, Config{Synchronous: SyncNormal, Hook: g.hook, GroupCommitMax: c.max, GroupCommitBytes: c.bytes})
			ctx := t.Context()
			var rest []func() error
			var reqs []checkpoint.PutRequest
			for i := 0; i < 7; i++ {
				l := putLine(t, s, fmt.Sprintf("t%d", i), 1)
				req := l.next()
				reqs = append(reqs, req)
				rest = append(rest, func() error { return s.Put(ctx, req) })
			}
			if c.bytes == 1200 {
				p, err := preparePut(&reqs[0], time.Now())
				if err != nil {
					t.Fatal(err)
				}
				if sz := p.size(); 2*sz > 1200 || 3*sz <= 1200 {
					t.Fatalf("a write is %d bytes: the case wants two of them in 1200", sz)
				}
			}
			first := putLine(t, s, "first", 1)
			if c.max == 1 {
				// No queue to wait in: the writes wait for the writer.
				done := make(chan error, 1)
				g.armed.Store(true)
				go func() { done <- s.Put(ctx, first.next()) }()
				<-g.held
				g.release()
				if err := <-done; err != nil {
					t.Fatal(err)
				}
				for i, fn := range rest {
					if err := fn(); err != nil {
						t.Errorf("write %d: %v", i, err)
					}
				}
			} else {
				for i, err := range groupRun(t, s, g, func() error { return s.Put(ctx, first.next()) }, rest) {
					if err != nil {
						t.Errorf("write %d: %v", i, err)
					}
				}
			}
			groups, members := s.GroupStats()
			if groups != c.groups || members != c.inGroups {
				t.Errorf("GroupStats: %d groups of %d writes in all, want %d of %d", groups, members, c.groups, c.inGroups)
			}
			for i, req := range reqs {
				if ids := listIDs(t, s, req.Thread); len(ids) != 2 || ids[0] != req.Checkpoint.ID {
					t.Errorf("write %d: thread %s has %v, want its checkpoint on top", i, req.Thread, ids)
				}
			}
		})
	}
}

// TestGroupCommitConfig: out-of-range group commit settings get a
// *ConfigError naming the field, and no file is created.
func TestGroupCommitConfig(t *testing.T) {
	cases := []struct {
		cfg   Config
		field string
	}{
		{Config{GroupCommitMax: -1}, "GroupCommitMax"},
		{Config{GroupCommitMax: 4097}, "GroupCommitMax"},
		{Config{GroupCommitBytes: -5}, "GroupCommitBytes"},
		{Config{GroupCommitBytes: 1<<30 + 1}, "GroupCommitBytes"},
	}
	for _, c := range cases {
		path := t.TempDir() + "/x.db"
		s, err := Open(path, c.cfg)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != c.field || !errors.Is(err, ErrInvalidConfig) {
			if s != nil {
				s.Close()
			}
			t.Errorf("Open(%+v): %v, want a *ConfigError for %s", c.cfg, err, c.field)
		}
		if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Open(%+v) created the file (%v)", c.cfg, err)
		}
	}
}

// TestGroupCommitCancelledWhileQueued: a write whose context ends while it
// waits in the queue fails with the context's error and writes nothing;
// the writes queued with it commit.
func TestGroupCommitCancelledWhileQueued(t *testing.T) {
	g := newGate("sqlite.put.beforeCommit")
	s := openTemp(t, Config{Synchronous: SyncNormal, Hook: g.hook})
	ctx := t.Context()
	a, b, c := putLine(t, s, "a", 1), putLine(t, s, "b", 1), putLine(t, s, "c", 1)
	cctx, cancel := context.WithCancel(ctx)
	ra, rb, rc := a.next(), b.next(), c.next()
	errs := make(chan error, 1)
	first := putLine(t, s, "first", 1)
	defer g.release()
	g.armed.Store(true)
	go func() { errs <- s.Put(ctx, first.next()) }()
	<-g.held
	var wg sync.WaitGroup
	results := make([]error, 3)
	for i, fn := range []func() error{
		func() error { return s.Put(ctx, ra) },
		func() error { return s.Put(cctx, rb) },
		func() error { return s.Put(ctx, rc) },
	} {
		wg.Add(1)
		go func() { defer wg.Done(); results[i] = fn() }()
		queued(t, s, i+1)
	}
	cancel()
	queued(t, s, 2) // b left the queue
	g.release()
	wg.Wait()
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if results[0] != nil || results[2] != nil || !errors.Is(results[1], context.Canceled) {
		t.Errorf("results %v, want nil, context.Canceled, nil", results)
	}
	if ids := listIDs(t, s, "b"); len(ids) != 1 {
		t.Errorf("b: %v, want its first checkpoint only", ids)
	}
	for _, l := range []*line{a, c} {
		if ids := listIDs(t, s, l.thread); len(ids) != 2 {
			t.Errorf("%s: %v, want two checkpoints", l.thread, ids)
		}
	}
}

// TestGroupCommitStoreErrorMidGroup: when SQLite fails a statement of one
// member in the middle of a group, nothing of the group is written and
// every member runs again alone: the one whose statement fails again gets
// the *StoreError, the others commit.
func TestGroupCommitStoreErrorMidGroup(t *testing.T) {
	drv := faults(t)
	g := newGate("sqlite.put.beforeCommit")
	s := openTemp(t, Config{Synchronous: SyncNormal, Hook: g.hook, DriverName: faultDriverName})
	ctx := t.Context()
	var rest []func() error
	for i := 0; i < 4; i++ {
		l := putLine(t, s, fmt.Sprintf("t%d", i), 1)
		req := l.next()
		if i == 2 {
			req.Writes = []checkpoint.TaskWrites{{TaskID: "boom", Writes: []checkpoint.Write{{Channel: "v", Value: json.RawMessage(`1`)}}}}
		}
		rest = append(rest, func() error { return s.Put(ctx, req) })
	}
	first := putLine(t, s, "first", 1)
	drv.Arm(faultdb.Fault{Op: faultdb.OpExec, Match: "INSERT INTO writes", Mode: faultdb.Persistent, Err: sqliteErr(sqlite3.ErrIoErr)})
	errs := groupRun(t, s, g, func() error { return s.Put(ctx, first.next()) }, rest)
	for i, err := range errs {
		var se *StoreError
		if i == 2 {
			if !errors.As(err, &se) {
				t.Errorf("write %d (its writes fail): %v, want a *StoreError", i, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("write %d: %v, want it committed", i, err)
		}
	}
	if n := len(drv.Events()); n != 2 {
		t.Errorf("the fault fired %d times, want 2 (in the group, then alone)", n)
	}
	drv.Reset()
	for i := 0; i < 4; i++ {
		want := 2
		if i == 2 {
			want = 1
		}
		if ids := listIDs(t, s, fmt.Sprintf("t%d", i)); len(ids) != want {
			t.Errorf("t%d: %v, want %d checkpoints", i, ids, want)
		}
	}
	if groups, _ := s.GroupStats(); groups != 0 {
		t.Errorf("%d groups committed, want 0 (the group was rolled back)", groups)
	}
}

// TestGroupCommitClose: writes queued when Close runs fail with
// checkpoint.ErrClosed or commit; none is left waiting.
func TestGroupCommitClose(t *testing.T) {
	g := newGate("sqlite.put.beforeCommit")
	s, err := Open(t.TempDir()+"/close.db", Config{Synchronous: SyncNormal, Hook: g.hook})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	first := putLine(t, s, "first", 1)
	results := make([]error, 4)
	reqs := make([]checkpoint.PutRequest, len(results))
	for i := range reqs {
		reqs[i] = newLine(fmt.Sprintf("t%d", i)).next()
	}
	done := make(chan error, 1)
	defer g.release()
	g.armed.Store(true)
	go func() { done <- s.Put(ctx, first.next()) }()
	<-g.held
	var wg sync.WaitGroup
	for i := range results {
		req := reqs[i]
		wg.Add(1)
		go func() { defer wg.Done(); results[i] = s.Put(ctx, req) }()
		queued(t, s, i+1)
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	for !s.closed.Load() {
		time.Sleep(time.Millisecond)
	}
	g.release()
	wg.Wait()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	<-done
	for i, err := range results {
		if err != nil && !errors.Is(err, checkpoint.ErrClosed) {
			t.Errorf("write %d: %v, want nil or ErrClosed", i, err)
		}
	}
}

// TestGroupCommitDueWork: a pool's due work (Enqueue, ClaimDue) commits
// in one group with the runs' Puts, in queue order: the claim sees the
// input queued before it in the same transaction, and each call keeps its
// own result.
func TestGroupCommitDueWork(t *testing.T) {
	g := newGate("sqlite.put.beforeCommit")
	s := openTemp(t, Config{Synchronous: SyncNormal, Hook: g.hook})
	ctx := t.Context()
	a := putLine(t, s, "a", 1)
	ra := a.next()
	first := putLine(t, s, "first", 1)
	var claimed checkpoint.DueBatch
	var added bool
	errs := groupRun(t, s, g, func() error { return s.Put(ctx, first.next()) }, []func() error{
		func() error { return s.Put(ctx, ra) },
		func() (err error) {
			_, added, err = s.Enqueue(ctx, checkpoint.QueuedInput{Thread: "b", Key: "k", Input: json.RawMessage(`{"n":1}`)})
			return err
		},
		func() (err error) {
			claimed, err = s.ClaimDue(ctx, checkpoint.DueQuery{Owners: []string{"w-1"}, Runner: "pool", TTL: time.Minute})
			return err
		},
	})
	for i, err := range errs {
		if err != nil {
			t.Errorf("write %d: %v", i, err)
		}
	}
	if groups, members := s.GroupStats(); groups != 1 || members != 3 {
		t.Errorf("GroupStats: %d groups of %d writes, want 1 of 3", groups, members)
	}
	if !added || len(claimed.Threads) != 1 || claimed.Threads[0].Thread != "b" {
		t.Errorf("Enqueue added %v; ClaimDue claimed %+v, want thread b", added, claimed.Threads)
	}
	if ids := listIDs(t, s, "a"); len(ids) != 2 || ids[0] != ra.Checkpoint.ID {
		t.Errorf("a: %v, want %s on top", ids, ra.Checkpoint.ID)
	}
}

// TestGroupCommitSavepoints: a group member takes its savepoint only
// when it may have to undo a write: not for a Put on its parent (its
// INSERT checks the parent and the lease and writes all or nothing), nor
// for one refused before it wrote; a Put that takes a lease first (the
// slow path) and a Put whose task writes raise an interrupt take one.
// Each keeps its result.
func TestGroupCommitSavepoints(t *testing.T) {
	drv := faults(t)
	g := newGate("sqlite.put.beforeCommit")
	s := openTemp(t, Config{Synchronous: SyncNormal, Hook: g.hook, DriverName: faultDriverName})
	ctx := t.Context()

	onParent := putLine(t, s, "on-parent", 2)
	released := putLine(t, s, "released", 2)
	if err := s.Release(ctx, "released", "", released.owner); err != nil {
		t.Fatal(err)
	}
	stale := putLine(t, s, "stale", 3)
	staleReq := stale.next()
	staleReq.Checkpoint.ParentID = listIDs(t, s, "stale")[1]
	asks := putLine(t, s, "asks", 2)
	asksReq := asks.next()
	asksReq.ParentWrites = append(asksReq.ParentWrites, checkpoint.TaskWrites{TaskID: "ask", Node: "n", Path: "pull",
		Writes: []checkpoint.Write{{Channel: checkpoint.ChannelInterrupt, Value: json.RawMessage(`[{"id":"i-asks","value":"v"}]`)}}})
	first := putLine(t, s, "first", 1)

	reqs := []checkpoint.PutRequest{onParent.next(), released.next(), staleReq, asksReq}
	want := []error{nil, nil, checkpoint.ErrConflict, nil}
	var rest []func() error
	for _, req := range reqs {
		rest = append(rest, func() error { return s.Put(ctx, req) })
	}
	drv.Arm(faultdb.Fault{Op: faultdb.OpExec, Match: "SAVEPOINT member", Mode: faultdb.Persistent})
	errs := groupRun(t, s, g, func() error { return s.Put(ctx, first.next()) }, rest)
	savepoints := len(drv.Events())
	drv.Reset()
	for i, err := range errs {
		if want[i] == nil && err != nil || want[i] != nil && !errors.Is(err, want[i]) {
			t.Errorf("write %d: %v, want %v", i, err, want[i])
		}
	}
	if savepoints != 2 {
		t.Errorf("%d savepoints taken, want 2 (the Put that takes its lease back, the one that asks)", savepoints)
	}
	if groups, members := s.GroupStats(); groups != 1 || members != int64(len(rest)) {
		t.Errorf("GroupStats: %d groups of %d writes, want 1 of %d", groups, members, len(rest))
	}
	for i, th := range []string{"on-parent", "released", "stale", "asks"} {
		tp, err := s.Get(ctx, checkpoint.Ref{Thread: th}, checkpoint.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		wantHead := reqs[i].Checkpoint.ID
		if i == 2 {
			wantHead = stale.head
		}
		if tp.Checkpoint.ID != wantHead {
			t.Errorf("%s: head %s, want %s", th, tp.Checkpoint.ID, wantHead)
		}
	}
}
