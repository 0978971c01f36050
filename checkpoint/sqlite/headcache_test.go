package sqlite

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// rowView is what getQuery returns for a head, comparable.
type rowView struct {
	NS, ID, Parent, Source, Created, Mark string
	Step, CRC                             int64
	Pruned                                bool
	Metadata, Versions, Channels, Tasks   string
	Writes                                []string
}

func viewResult(res getResult) rowView {
	r := res.row
	v := rowView{NS: r.ns, ID: r.id, Parent: r.parent, Source: r.source, Created: r.created, Mark: r.mark,
		Step: r.step, CRC: r.crc, Pruned: r.pruned,
		Metadata: string(r.metadata), Versions: string(r.versions), Channels: string(r.channels), Tasks: string(r.taskWrite)}
	ws := slices.Clone(res.writes)
	slices.SortFunc(ws, func(a, b pendingRow) int {
		return cmp.Or(strings.Compare(a.w.TaskID, b.w.TaskID), cmp.Compare(a.idx, b.idx))
	})
	for _, w := range ws {
		j, _ := json.Marshal(struct {
			NS, CP string
			W      checkpoint.PendingWrite
			Idx    int
			CRC    int64
		}{w.ns, w.checkpoint, w.w, w.idx, w.crc})
		v.Writes = append(v.Writes, string(j))
	}
	return v
}

// checkHeadCache compares the cached head of thread, if any, with what
// getQuery reads from the file through the pool.
func checkHeadCache(t *testing.T, s *Saver, what, thread string) {
	t.Helper()
	s.wsem <- struct{}{}
	e := s.heads.entry(thread, "")
	var cached, served getResult
	if e != nil {
		cached = e.copy()
		served, _ = s.heads.get(thread, "") // decodes the entry
	}
	<-s.wsem
	if e == nil {
		return
	}
	stored, err := runGet(t.Context(), s.db, checkpoint.Ref{Thread: thread})
	if err != nil || stored.row == nil {
		t.Fatalf("%s: read %s: %v (row %v)", what, thread, err, stored.row)
	}
	if diff := gocmp.Diff(viewResult(stored), viewResult(cached)); diff != "" {
		t.Errorf("%s: cached head of %s differs from the file (-file +cache):\n%s", what, thread, diff)
	}
	// A read served from the decoded entry gives what decoding the file's
	// row gives.
	want, err := stored.row.checkpoint(thread)
	if err != nil {
		t.Fatalf("%s: decode %s: %v", what, thread, err)
	}
	if !served.decoded {
		t.Fatalf("%s: the entry of %s was not decoded", what, thread)
	}
	if diff := gocmp.Diff(want, served.cp); diff != "" {
		t.Errorf("%s: decoded head of %s differs from the file (-file +cache):\n%s", what, thread, diff)
	}
	if served.row.chanSrc != string(stored.row.channels) || served.row.twSrc != string(stored.row.taskWrite) {
		t.Errorf("%s: served row of %s has other channels or task writes than the file", what, thread)
	}
}

// TestHeadCacheIsExact: after every kind of write this Saver makes (a new
// thread, steady Puts, Puts with their own writes, a chain, regular and
// special pending writes that end a run, a repeated write, a claim), the
// head the cache holds is byte for byte what the file holds; pending
// writes in the middle of a step drop it until the next checkpoint.
func TestHeadCacheIsExact(t *testing.T) {
	s := openTemp(t, Config{Synchronous: SyncNormal})
	ctx := t.Context()
	l := newLine("t")
	get := func() {
		t.Helper()
		if _, err := s.Get(ctx, checkpoint.Ref{Thread: "t"}, checkpoint.GetOptions{}); err != nil && !errors.Is(err, checkpoint.ErrNotFound) {
			t.Fatal(err)
		}
	}
	lease := checkpoint.Lease{Owner: l.owner, TTL: 60e9}
	writes := func(release bool, tw checkpoint.TaskWrites) func() error {
		return func() error {
			return s.PutWrites(ctx, checkpoint.WritesRequest{Ref: checkpoint.Ref{Thread: "t", ID: l.head}, Lease: lease, Release: release,
				Tasks: []checkpoint.TaskWrites{tw}})
		}
	}
	raw := func(v string) json.RawMessage { return json.RawMessage(v) }
	steps := []struct {
		name   string
		do     func() error
		cached bool // the write leaves the thread's head in the cache
	}{
		{"first put", func() error { req := l.next(); err := s.Put(ctx, req); l.committed(req); return err }, true},
		{"steady put", func() error { req := l.next(); err := s.Put(ctx, req); l.committed(req); return err }, true},
		{"put with its own writes", func() error {
			req := l.next()
			req.Writes = []checkpoint.TaskWrites{{TaskID: checkpoint.NullTaskID, Writes: []checkpoint.Write{
				{Channel: checkpoint.ChannelBreakpoint, Value: raw(`{"when":"after","nodes":["n"]}`)}}}}
			err := s.Put(ctx, req)
			l.committed(req)
			return err
		}, true},
		{"regular writes that release", writes(true, checkpoint.TaskWrites{TaskID: "a", Node: "n", Path: "pull",
			Writes: []checkpoint.Write{{Channel: "x", Value: raw(`1`)}, {Channel: "y", Value: raw(`2`)}}}), true},
		{"the same regular write again, another value", writes(true, checkpoint.TaskWrites{TaskID: "a", Node: "n", Path: "pull",
			Writes: []checkpoint.Write{{Channel: "x", Value: raw(`99`)}}}), true},
		{"a special write", writes(true, checkpoint.TaskWrites{TaskID: "b", Node: "m", Path: "pull",
			Writes: []checkpoint.Write{{Channel: checkpoint.ChannelInterrupt, Value: raw(`[{"id":"i1","value":"q"}]`)}}}), true},
		{"the special write replaced", writes(true, checkpoint.TaskWrites{TaskID: "b", Node: "m", Path: "pull",
			Writes: []checkpoint.Write{{Channel: checkpoint.ChannelInterrupt, Value: raw(`[{"id":"i1","value":"q2"}]`)}}}), true},
		{"claim", func() error { return s.Claim(ctx, checkpoint.Ref{Thread: "t", ID: l.head}, lease) }, true},
		{"writes in the middle of a step", writes(false, checkpoint.TaskWrites{TaskID: "c",
			Writes: []checkpoint.Write{{Channel: checkpoint.ChannelResume, Value: raw(`{"i1":"yes"}`)}}}), false},
		{"writes that release after those", writes(true, checkpoint.TaskWrites{TaskID: "d",
			Writes: []checkpoint.Write{{Channel: "z", Value: raw(`3`)}}}), false},
		{"chain", func() error { return s.PutChain(ctx, l.chain(3)) }, true},
	}
	for _, st := range steps {
		get() // the cache holds the head before each write, when it can
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		s.wsem <- struct{}{}
		_, cached := s.heads.get("t", "")
		<-s.wsem
		if cached != st.cached {
			t.Errorf("%s: the head is cached after the write: %v, want %v", st.name, cached, st.cached)
		}
		checkHeadCache(t, s, st.name, "t")
	}
}

// TestHeadCacheSeesOtherWriters: a head this Saver cached is read again
// from the file once anybody else has committed: another Saver on the same
// file (a Put, pending writes), and a statement through DB() that changes
// the row behind the saver's back, which then reads as corrupt.
func TestHeadCacheSeesOtherWriters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shared.db")
	a := openAt(t, path, Config{Synchronous: SyncNormal})
	b := openAt(t, path, Config{Synchronous: SyncNormal})
	ctx := t.Context()
	l := putLine(t, a, "t", 2)
	// Reads pass the versions the reader holds, as the graph runtime does:
	// the row of the head is then all a read needs (without them a read
	// of this thread goes on to read older rows in a transaction, which
	// would hide a stale first statement).
	var have map[string]string
	headOf := func(s *Saver) *checkpoint.Tuple {
		t.Helper()
		tp, err := s.Get(ctx, checkpoint.Ref{Thread: "t"}, checkpoint.GetOptions{Have: have})
		if err != nil {
			t.Fatal(err)
		}
		have = tp.Checkpoint.Versions
		return tp
	}
	headOf(a)
	headOf(a) // cached

	req := l.next()
	if err := b.Put(ctx, req); err != nil {
		t.Fatal(err)
	}
	l.committed(req)
	if got := headOf(a).Checkpoint.ID; got != l.head {
		t.Fatalf("after another saver's Put, the head is %s, want %s", got, l.head)
	}

	lease := checkpoint.Lease{Owner: l.owner, TTL: 60e9}
	err := b.PutWrites(ctx, checkpoint.WritesRequest{Ref: checkpoint.Ref{Thread: "t", ID: l.head}, Lease: lease,
		Tasks: []checkpoint.TaskWrites{{TaskID: "z", Writes: []checkpoint.Write{{Channel: "x", Value: json.RawMessage(`1`)}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := headOf(a).Pending; len(got) != 1 || got[0].TaskID != "z" {
		t.Fatalf("after another saver's PutWrites, pending = %+v, want task z's write", got)
	}

	if _, err := a.DB().ExecContext(ctx, `UPDATE checkpoints SET channels = '{}' WHERE checkpoint_id = ?`, l.head); err != nil {
		t.Fatal(err)
	}
	// Twice: the second read is served from the entry the first recorded,
	// which is checked as the file is (only the saver's own writes are
	// trusted).
	for range 2 {
		_, err = a.Get(ctx, checkpoint.Ref{Thread: "t"}, checkpoint.GetOptions{Have: have})
		var ce *checkpoint.CorruptError
		if !errors.As(err, &ce) || ce.Checkpoint != l.head {
			t.Fatalf("after a change through DB(), Get = %v, want a *CorruptError naming %s", err, l.head)
		}
	}

	// The same for a pending write whose value changed behind the saver.
	l2 := putLine(t, a, "t2", 1)
	lease2 := checkpoint.Lease{Owner: l2.owner, TTL: 60e9}
	if err := a.PutWrites(ctx, checkpoint.WritesRequest{Ref: checkpoint.Ref{Thread: "t2", ID: l2.head}, Lease: lease2,
		Tasks: []checkpoint.TaskWrites{{TaskID: "y", Writes: []checkpoint.Write{{Channel: "x", Value: json.RawMessage(`2`)}}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Get(ctx, checkpoint.Ref{Thread: "t2"}, checkpoint.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.DB().ExecContext(ctx, `UPDATE writes SET value = '3' WHERE checkpoint_id = ?`, l2.head); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		_, err = a.Get(ctx, checkpoint.Ref{Thread: "t2"}, checkpoint.GetOptions{})
		var ce *checkpoint.CorruptError
		if !errors.As(err, &ce) || ce.Checkpoint != l2.head {
			t.Fatalf("after a pending write changed through DB(), Get = %v, want a *CorruptError naming %s", err, l2.head)
		}
	}
}

// TestHeadCacheFailedWrite: a write that fails, before or at its commit,
// leaves no entry for its thread: the next Get reads the file.
func TestHeadCacheFailedWrite(t *testing.T) {
	s := openTemp(t, Config{Synchronous: SyncNormal})
	ctx := t.Context()
	l := putLine(t, s, "t", 2)
	if _, err := s.Get(ctx, checkpoint.Ref{Thread: "t"}, checkpoint.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	stale := l.next()
	stale.Checkpoint.ParentID = "00000000-0000-7000-8000-000000000001" // not the head: a conflict
	if err := s.Put(ctx, stale); !errors.Is(err, checkpoint.ErrConflict) {
		t.Fatalf("Put on a stale parent: %v, want a conflict", err)
	}
	s.wsem <- struct{}{}
	_, cached := s.heads.get("t", "")
	<-s.wsem
	if cached {
		t.Error("a refused Put left its thread's head cached")
	}
	if got := listIDs(t, s, "t"); len(got) != 2 || got[0] != l.head {
		t.Errorf("history after the refused Put: %v", got)
	}
}

// TestHeadCacheBounds: the cache holds at most maxCachedHeads entries and
// no entry over maxCachedHeadBytes, dropping a thread drops it in every
// namespace, and the count of nested entries stays true through sets,
// replacements, evictions, drops and resets.
func TestHeadCacheBounds(t *testing.T) {
	c := newHeadCache()
	check := func(what string) {
		t.Helper()
		nested := map[string]int{}
		for k := range c.entries {
			if k.ns != "" {
				nested[k.thread]++
			}
		}
		if diff := gocmp.Diff(nested, c.nested); diff != "" {
			t.Errorf("%s: nested counts differ from the entries (-entries +nested):\n%s", what, diff)
		}
		if len(c.entries) > maxCachedHeads {
			t.Errorf("%s: %d entries, bound %d", what, len(c.entries), maxCachedHeads)
		}
	}
	head := func(id string, size int) *cachedHead { return &cachedHead{id: id, channels: strings.Repeat("x", size)} }
	for i := range maxCachedHeads + 100 {
		c.set(fmt.Sprintf("t%d", i), "", head("c", 10))
		c.set("shared", fmt.Sprintf("child:%d", i%3), head("c", 10))
	}
	check("after filling")
	c.set("big", "", head("c", maxCachedHeadBytes+1))
	if c.entry("big", "") != nil {
		t.Error("an entry over maxCachedHeadBytes was kept")
	}
	c.set("x", "", head("c1", 10))
	c.set("x", "", head("c2", 10))
	c.set("x", "child:a", head("c3", 10))
	c.set("x", "child:a", head("c4", 10))
	check("after replacing")
	if c.entry("x", "").id != "c2" || c.entry("x", "child:a").id != "c4" {
		t.Errorf("after replacing: heads %q, %q", c.entry("x", "").id, c.entry("x", "child:a").id)
	}
	c.dropThread("x")
	if c.entry("x", "") != nil || c.entry("x", "child:a") != nil {
		t.Error("dropThread left entries of the thread")
	}
	check("after dropThread")
	c.set("y", "child:b", head("c5", 10))
	c.set("y", "child:b", nil)
	check("after setting nil")
	c.reset(7)
	if len(c.entries) != 0 || len(c.nested) != 0 || c.version != 7 {
		t.Errorf("after reset: %d entries, %d nested, version %d", len(c.entries), len(c.nested), c.version)
	}
}

// TestHeadCacheReadsAreCopies: a read served from the head cache's
// decoded entry hands out maps of its own; a caller that changes them
// (and the pending writes' backing arrays by appending) changes nothing
// another read sees.
func TestHeadCacheReadsAreCopies(t *testing.T) {
	s := openTemp(t, Config{Synchronous: SyncNormal})
	ctx := t.Context()
	l := putLine(t, s, "t", 3)
	req := checkpoint.WritesRequest{Ref: checkpoint.Ref{Thread: "t", ID: l.head}, Lease: checkpoint.Lease{Owner: l.owner, TTL: time.Minute}, Release: true,
		Tasks: []checkpoint.TaskWrites{{TaskID: "a", Node: "n", Path: "pull", Writes: []checkpoint.Write{{Channel: "N", Value: json.RawMessage(`1`)}, {Channel: "Log", Value: json.RawMessage(`["x"]`)}}}}}
	if err := s.PutWrites(ctx, req); err != nil {
		t.Fatal(err)
	}
	// Holding Log, as a runner does, the read needs no row but the head's
	// and is served from the cache.
	have := map[string]string{"Log": l.head}
	read := func() *checkpoint.Tuple {
		t.Helper()
		tp, err := s.Get(ctx, checkpoint.Ref{Thread: "t"}, checkpoint.GetOptions{Have: have})
		if err != nil {
			t.Fatal(err)
		}
		return tp
	}
	want := read()
	for range 3 {
		tp := read()
		if diff := gocmp.Diff(want, tp); diff != "" {
			t.Fatalf("reads differ (-first +later):\n%s", diff)
		}
		delete(tp.Checkpoint.Versions, "N") // (a changed version would only make the next read fall back to the file)
		tp.Checkpoint.Metadata.Parents["p"] = "x"
		_ = append(tp.Pending[0].Value, "garbage"...)
		tp.Checkpoint.Channels["N"] = nil
	}
}
