package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// twin drives MemorySaver and the SQLite saver with the same requests and
// requires the same outcome from both.
type twin struct {
	t     *testing.T
	ctx   context.Context
	clock *fakeClock
	ids   *checkpoint.IDGenerator
	mem   *checkpoint.MemorySaver
	sql   *Saver
}

func newTwin(t *testing.T) *twin {
	clock := newFakeClock()
	return &twin{t: t, ctx: t.Context(), clock: clock,
		ids: checkpoint.NewIDGenerator(clock.Now, rand.NewChaCha8([32]byte{'t', 'w', 'i', 'n'})),
		mem: checkpoint.NewMemorySaver(clock.Now),
		sql: openTemp(t, Config{Synchronous: SyncNormal, Now: clock.Now})}
}

// both runs f on each saver and requires the same error class.
func (w *twin) both(what string, want string, f func(checkpoint.Saver) error) {
	w.t.Helper()
	a, b := errClass(f(w.mem)), errClass(f(w.sql))
	if a != b {
		w.t.Fatalf("%s: memory %s, sqlite %s", what, a, b)
	}
	if want != "" && !strings.HasPrefix(a, want) {
		w.t.Fatalf("%s: %s, want %s", what, a, want)
	}
}

// same compares every read of the thread.
func (w *twin) same(thread string) {
	w.t.Helper()
	a, errA := w.mem.List(w.ctx, thread, checkpoint.ListOptions{AllNamespaces: true})
	b, errB := w.sql.List(w.ctx, thread, checkpoint.ListOptions{AllNamespaces: true})
	if errA != nil || errB != nil {
		w.t.Fatalf("list: %v, %v", errA, errB)
	}
	if d := cmp.Diff(a, b); d != "" {
		w.t.Fatalf("list %s (-memory +sqlite):\n%s", thread, d)
	}
	for _, tp := range a {
		for _, have := range []map[string]string{nil, tp.Checkpoint.Versions} {
			ga, errA := w.mem.Get(w.ctx, tp.Ref(), checkpoint.GetOptions{Have: have})
			gb, errB := w.sql.Get(w.ctx, tp.Ref(), checkpoint.GetOptions{Have: have})
			if errA != nil || errB != nil {
				w.t.Fatalf("get: %v, %v", errA, errB)
			}
			if d := cmp.Diff(ga, gb); d != "" {
				w.t.Fatalf("get %s (-memory +sqlite):\n%s", tp.Ref(), d)
			}
		}
	}
	ta, _ := w.mem.Threads(w.ctx, 0, 0)
	tb, err := w.sql.Threads(w.ctx, 0, 0)
	if err != nil {
		w.t.Fatal(err)
	}
	if d := cmp.Diff(ta, tb, cmpopts.EquateEmpty()); d != "" {
		w.t.Fatalf("threads (-memory +sqlite):\n%s", d)
	}
}

// put builds a child of parent appending to Log and setting N, with the
// task's writes as ParentWrites.
func (w *twin) put(thread, parent string, owner string, fork bool, versions map[string]string) (checkpoint.PutRequest, string) {
	id := w.ids.Next(parent)
	step := 1 // each checkpoint's step is its parent's plus one
	if parent != "" {
		if tp, err := w.mem.Get(w.ctx, checkpoint.Ref{Thread: thread, ID: parent}, checkpoint.GetOptions{}); err == nil {
			step = tp.Checkpoint.Metadata.Step + 1
		}
	}
	cp := checkpoint.Checkpoint{ID: id, ParentID: parent, CreatedAt: w.clock.Now(),
		Metadata: checkpoint.Metadata{Source: checkpoint.SourceLoop, Step: step, Parents: map[string]string{}, RunID: owner},
		Versions: map[string]string{}, Channels: map[string][]checkpoint.Blob{}}
	for ch, v := range versions {
		cp.Versions[ch] = v
	}
	item := json.RawMessage(fmt.Sprintf(`["%s"]`, id[len(id)-4:]))
	cp.Channels["Log"] = []checkpoint.Blob{{Version: id, Append: true, Base: versions["Log"], Data: item}}
	cp.Versions["Log"] = id
	cp.Channels["N"] = []checkpoint.Blob{{Version: id, Data: json.RawMessage(`1`)}}
	cp.Versions["N"] = id
	req := checkpoint.PutRequest{Thread: thread, Checkpoint: cp, Fork: fork, Lease: checkpoint.Lease{Owner: owner, TTL: 10 * time.Second}}
	if parent != "" {
		req.ParentWrites = []checkpoint.TaskWrites{{TaskID: "task-" + id, Node: "n", Path: "pull", Writes: []checkpoint.Write{{Channel: "Log", Value: item}}}}
	}
	return req, id
}

// TestScenarioLeaseExpiry: the lease rules at their edges, on both savers.
// A save keeps a live lease as it is and does not extend it; once it has
// expired and nobody took it over, the same owner's next Put and PutWrites
// are accepted (and take it anew, until now + TTL); after another owner
// took it over, the old owner is refused on every path, even with an
// expired lease of the new owner in between only when nobody else held it.
func TestScenarioLeaseExpiry(t *testing.T) {
	w := newTwin(t)
	versions := map[string]string{}
	head := ""
	step := func(owner string, want string) {
		t.Helper()
		req, id := w.put("t", head, owner, false, versions)
		w.both("put by "+owner, want, func(s checkpoint.Saver) error { return s.Put(w.ctx, req) })
		if want == "ok" {
			head, versions = id, req.Checkpoint.Versions
		}
	}
	step("a", "ok")
	w.clock.Advance(8 * time.Second)
	step("a", "ok") // the lease is kept, not renewed: it ends at 10 s
	w.clock.Advance(3 * time.Second)
	step("b", "ok") // expired at 10 s: b takes it over at 11 s
	w.same("t")
	step("a", "busy")
	w.both("put writes by a", "busy", func(s checkpoint.Saver) error {
		return s.PutWrites(w.ctx, checkpoint.WritesRequest{Ref: checkpoint.Ref{Thread: "t", ID: head}, Lease: checkpoint.Lease{Owner: "a", TTL: time.Second},
			Tasks: []checkpoint.TaskWrites{{TaskID: "x", Writes: []checkpoint.Write{{Channel: "N", Value: json.RawMessage(`2`)}}}}})
	})
	w.clock.Advance(11 * time.Second)
	// b's lease expired untaken: b goes on, first with PutWrites.
	w.both("put writes by b after expiry", "ok", func(s checkpoint.Saver) error {
		return s.PutWrites(w.ctx, checkpoint.WritesRequest{Ref: checkpoint.Ref{Thread: "t", ID: head}, Lease: checkpoint.Lease{Owner: "b", TTL: 10 * time.Second},
			Tasks: []checkpoint.TaskWrites{{TaskID: "y", Writes: []checkpoint.Write{{Channel: "N", Value: json.RawMessage(`3`)}}}}})
	})
	w.clock.Advance(9 * time.Second)
	step("a", "busy") // b's retaken lease lives until 20 s after the PutWrites
	step("b", "ok")
	w.clock.Advance(2 * time.Second)
	step("b", "ok") // expired, untaken: retaken by b's Put
	w.clock.Advance(5 * time.Second)
	step("a", "busy")
	w.both("claim renews", "ok", func(s checkpoint.Saver) error {
		return s.Claim(w.ctx, checkpoint.Ref{Thread: "t", ID: head}, checkpoint.Lease{Owner: "b", TTL: 10 * time.Second})
	})
	w.clock.Advance(9 * time.Second)
	step("a", "busy")
	w.clock.Advance(2 * time.Second)
	step("a", "ok") // expired: a takes over
	w.same("t")
}

// TestScenarioForks: forks from old checkpoints and from the head, chains
// across forks, a fork's task writes as pending writes of its old parent
// (after the writes it had while it was the head), and the old branch
// refused, on both savers.
func TestScenarioForks(t *testing.T) {
	w := newTwin(t)
	var ids []string
	var vs []map[string]string
	head, versions := "", map[string]string{}
	for i := 0; i < 4; i++ {
		req, id := w.put("t", head, "a", false, versions)
		w.both("put", "ok", func(s checkpoint.Saver) error { return s.Put(w.ctx, req) })
		if i == 1 {
			w.both("writes on c1", "ok", func(s checkpoint.Saver) error {
				return s.PutWrites(w.ctx, checkpoint.WritesRequest{Ref: checkpoint.Ref{Thread: "t", ID: id}, Lease: checkpoint.Lease{Owner: "a", TTL: time.Minute},
					Tasks: []checkpoint.TaskWrites{{TaskID: "task-" + id, Node: "n", Writes: []checkpoint.Write{{Channel: "Log", Value: json.RawMessage(`["own"]`)},
						{Channel: checkpoint.ChannelError, Value: json.RawMessage(`{"message":"first"}`)}}}}})
			})
		}
		head, versions = id, req.Checkpoint.Versions
		ids, vs = append(ids, id), append(vs, versions)
	}
	// A fork of the second checkpoint: its task writes join the writes the
	// second had (regular ones ignored when present, the error replaced).
	req, f1 := w.put("t", ids[1], "a", true, vs[1])
	req.ParentWrites = append(req.ParentWrites, checkpoint.TaskWrites{TaskID: req.ParentWrites[0].TaskID, Node: "n",
		Writes: []checkpoint.Write{{Channel: "Log", Value: json.RawMessage(`["fork"]`)}, {Channel: checkpoint.ChannelError, Value: json.RawMessage(`{"message":"second"}`)}}})
	req.ParentWrites[0].TaskID = "task-" + ids[2] // the same task as the second's first child
	w.both("fork of an old checkpoint", "ok", func(s checkpoint.Saver) error { return s.Put(w.ctx, req) })
	w.same("t")
	// The old branch is refused; the fork is the head.
	old, _ := w.put("t", ids[3], "a", false, vs[3])
	w.both("put on the old branch", "conflict", func(s checkpoint.Saver) error { return s.Put(w.ctx, old) })
	// A second fork of the same checkpoint, and a fork of the head.
	req2, f2 := w.put("t", ids[1], "a", true, vs[1])
	w.both("second fork", "ok", func(s checkpoint.Saver) error { return s.Put(w.ctx, req2) })
	req3, _ := w.put("t", f2, "a", true, req2.Checkpoint.Versions)
	w.both("fork of the head", "ok", func(s checkpoint.Saver) error { return s.Put(w.ctx, req3) })
	_ = f1
	w.same("t")
	// Pruned forks: the chains of the kept ones still read back.
	w.both("prune", "ok", func(s checkpoint.Saver) error { _, err := s.(checkpoint.Pruner).Prune(w.ctx, "t", "", 2); return err })
	w.same("t")
}

// TestForkIDBelowHead: a fork whose ID does not sort after the head could
// not become the head (the head is the largest ID), so it is a
// *checkpoint.ConflictError and nothing is written. (MemorySaver accepts
// it; the graph runtime gives every new checkpoint an ID above the head.)
func TestForkIDBelowHead(t *testing.T) {
	s := openTemp(t, Config{Synchronous: SyncNormal})
	ctx := t.Context()
	l := putLine(t, s, "t", 3)
	ids := listIDs(t, s, "t") // newest first
	req := l.next()
	req.Fork = true
	req.Checkpoint.ParentID = ids[2]
	// An ID between the first and second checkpoints.
	req.Checkpoint.ID = ids[2] + "-0"
	for ch, bs := range req.Checkpoint.Channels {
		bs[0].Version = req.Checkpoint.ID
		bs[0].Base = ""
		req.Checkpoint.Versions[ch] = req.Checkpoint.ID
	}
	err := s.Put(ctx, req)
	var ce *checkpoint.ConflictError
	if !asError(err, &ce) || ce.Head != ids[0] || ce.Expected != ids[2] {
		t.Fatalf("fork below the head: %v, want a *checkpoint.ConflictError naming head %s", err, ids[0])
	}
	if got := listIDs(t, s, "t"); len(got) != 3 {
		t.Fatalf("%d checkpoints after the refused fork, want 3", len(got))
	}
}

// TestPruneRetainsChains: pruning checkpoints whose rows hold items of a
// kept append chain keeps those rows (marked pruned, stripped to the
// channels still read, invisible to Get and List), the kept head reads
// its whole list, and a later Prune deletes them once no kept chain reads
// them (here: the list was replaced by a whole value).
func TestPruneRetainsChains(t *testing.T) {
	w := newTwin(t)
	head, versions := "", map[string]string{}
	for i := 0; i < 6; i++ {
		req, id := w.put("t", head, "a", false, versions)
		w.both("put", "ok", func(s checkpoint.Saver) error { return s.Put(w.ctx, req) })
		head, versions = id, req.Checkpoint.Versions
	}
	prune := func(keep, want int) {
		t.Helper()
		for _, s := range []checkpoint.Pruner{w.mem, w.sql} {
			if n, err := s.Prune(w.ctx, "t", "", keep); err != nil || n != want {
				t.Fatalf("%T: prune keep %d = %d, %v; want %d", s, keep, n, err, want)
			}
		}
	}
	prune(2, 4)
	w.same("t")
	count := func() (pruned int, stripped bool) {
		t.Helper()
		var n, withN int
		if err := w.sql.DB().QueryRow(`SELECT count(*), count(*) FILTER (WHERE json_extract(channels, '$.N') IS NOT NULL OR task_writes IS NOT NULL OR metadata <> '{}')
FROM checkpoints WHERE pruned = 1`).Scan(&n, &withN); err != nil {
			t.Fatal(err)
		}
		return n, withN == 0
	}
	if n, stripped := count(); n != 4 || !stripped {
		t.Fatalf("after the prune: %d pruned rows (stripped %v), want 4 holding only Log", n, stripped)
	}
	// A pruned checkpoint is no checkpoint: Get does not find it, and a
	// fork from it is refused, on both savers.
	pruned := listIDsAll(t, w.sql)[0]
	w.both("get of a pruned checkpoint", "notfound", func(s checkpoint.Saver) error {
		_, err := s.Get(w.ctx, checkpoint.Ref{Thread: "t", ID: pruned}, checkpoint.GetOptions{})
		return err
	})
	fork, _ := w.put("t", pruned, "a", true, map[string]string{})
	w.both("fork of a pruned checkpoint", "conflict", func(s checkpoint.Saver) error { return s.Put(w.ctx, fork) })
	// Replace Log with a whole value: the old items are no longer read.
	req, id := w.put("t", head, "a", false, versions)
	req.Checkpoint.Channels["Log"] = []checkpoint.Blob{{Version: id, Data: json.RawMessage(`["fresh"]`)}}
	w.both("put a whole list", "ok", func(s checkpoint.Saver) error { return s.Put(w.ctx, req) })
	prune(1, 2)
	w.same("t")
	if n, _ := count(); n != 0 {
		t.Fatalf("after the second prune: %d pruned rows, want 0", n)
	}
	integrityOK(t, w.sql.DB())
}

// listIDsAll returns every row's ID, pruned ones included, oldest first.
func listIDsAll(t *testing.T, s *Saver) []string {
	t.Helper()
	rows, err := s.DB().Query(`SELECT checkpoint_id FROM checkpoints ORDER BY checkpoint_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		rows.Scan(&id)
		ids = append(ids, id)
	}
	return ids
}

// TestChainChannelNames: append chains on channels whose names need
// escaping (quotes, backslashes, control characters, dots, non-ASCII) read
// back whole through the recursive query (a reader that holds nothing,
// and one that holds an early version), as on MemorySaver.
func TestChainChannelNames(t *testing.T) {
	w := newTwin(t)
	names := []string{`Log`, `a"b`, `back\slash`, "tab\there", `dotted.name[0]`, `$.x`, `ünï`}
	head, versions := "", map[string]string{}
	for i := 0; i < 5; i++ {
		id := w.ids.Next(head)
		cp := checkpoint.Checkpoint{ID: id, ParentID: head, CreatedAt: w.clock.Now(),
			Metadata: checkpoint.Metadata{Source: checkpoint.SourceLoop, Step: i, Parents: map[string]string{}},
			Versions: map[string]string{}, Channels: map[string][]checkpoint.Blob{}}
		for _, n := range names {
			cp.Channels[n] = []checkpoint.Blob{{Version: id, Append: true, Base: versions[n], Data: json.RawMessage(fmt.Sprintf(`[%d]`, i))}}
			cp.Versions[n] = id
		}
		req := checkpoint.PutRequest{Thread: "t", Checkpoint: cp, Lease: checkpoint.Lease{Owner: "a", TTL: time.Minute}}
		w.both("put", "ok", func(s checkpoint.Saver) error { return s.Put(w.ctx, req) })
		head, versions = id, cp.Versions
	}
	w.same("t")
	first, err := w.mem.List(w.ctx, "t", checkpoint.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	have := first[len(first)-1].Checkpoint.Versions
	a, errA := w.mem.Get(w.ctx, checkpoint.Ref{Thread: "t"}, checkpoint.GetOptions{Have: have})
	b, errB := w.sql.Get(w.ctx, checkpoint.Ref{Thread: "t"}, checkpoint.GetOptions{Have: have})
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	if d := cmp.Diff(a, b); d != "" {
		t.Fatalf("get with an early version held (-memory +sqlite):\n%s", d)
	}
	if got := len(b.Checkpoint.Channels[`a"b`]); got != 4 {
		t.Fatalf("chain of a\"b after the held version: %d blobs, want 4", got)
	}
}
