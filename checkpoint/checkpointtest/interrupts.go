package checkpointtest

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint"
)

func interruptListerCases() []testCase {
	return []testCase{
		{name: "PendingAcrossThreads", run: testInterruptsAll},
		{name: "Paging", run: testInterruptsPaging},
		{name: "PagingWhileNewArrive", run: testInterruptsPagingLive},
		{name: "PagingWhileSavedAgain", run: testInterruptsPagingResaved},
		{name: "Empty", run: testInterruptsEmpty},
	}
}

// interruptView is a PendingInterrupt with its value decoded.
type interruptView struct {
	Thread, NS, CheckpointID, TaskID, Node, InterruptID string
	Value                                               any
	CreatedAt                                           time.Time
}

// interruptWrite is an __interrupt__ write raising the given interrupts,
// as (ID, JSON value) pairs.
func interruptWrite(pairs ...string) checkpoint.Write {
	type item struct {
		ID    string          `json:"id"`
		Value json.RawMessage `json:"value"`
	}
	var items []item
	for i := 0; i+1 < len(pairs); i += 2 {
		items = append(items, item{pairs[i], json.RawMessage(pairs[i+1])})
	}
	b, err := json.Marshal(items)
	if err != nil {
		panic(err)
	}
	return checkpoint.Write{Channel: checkpoint.ChannelInterrupt, Value: b}
}

type interruptFixture struct {
	f    *fixture
	want []interruptView // oldest first
}

// save advances the clock and saves one task's writes on the head of l.
func (x *interruptFixture) save(t *testing.T, l *line, taskID, node string, writes ...checkpoint.Write) time.Time {
	t.Helper()
	at := x.f.clock.Advance(time.Second)
	x.f.putWrites(t, l.ref(l.head), l.lease, checkpoint.TaskWrites{TaskID: taskID, Node: node, Writes: writes})
	return at
}

func (x *interruptFixture) expect(t *testing.T, l *line, taskID, node, id, value string, at time.Time) {
	t.Helper()
	x.want = append(x.want, interruptView{Thread: l.thread, NS: l.ns, CheckpointID: l.head, TaskID: taskID, Node: node, InterruptID: id, Value: mustDecode(t, value), CreatedAt: at})
}

// newInterruptFixture writes threads whose head holds pending interrupts,
// and threads whose interrupts do not count: answered, finished tasks,
// interrupts of an older checkpoint, command tasks, child namespaces,
// deleted threads, replaced interrupt writes.
func newInterruptFixture(t *testing.T, f *fixture) *interruptFixture {
	t.Helper()
	x := &interruptFixture{f: f}
	thread := func(name string) *line {
		l := f.line(name, "")
		l.step(t, set("x", `0`))
		return l
	}
	// Two interrupts raised by one task.
	t1 := thread("thread-1")
	at := x.save(t, t1, "task-a", "approve", interruptWrite("i-a1", `{"q":"ok?"}`, "i-a2", `"second"`))
	x.expect(t, t1, "task-a", "approve", "i-a1", `{"q":"ok?"}`, at)
	x.expect(t, t1, "task-a", "approve", "i-a2", `"second"`, at)
	// Pending, answered, and finished tasks on one head.
	t2 := thread("thread-2")
	at = x.save(t, t2, "task-b", "review", interruptWrite("i-b", `1`))
	x.expect(t, t2, "task-b", "review", "i-b", `1`, at)
	x.save(t, t2, "task-c", "c", interruptWrite("i-c", `2`))
	x.save(t, t2, "task-c", "c", wr(checkpoint.ChannelResume, `{"i-c":true}`))
	x.save(t, t2, "task-d", "d", interruptWrite("i-d", `3`))
	x.save(t, t2, "task-d", "d", wr("result", `1`))
	// A new head hides the old head's interrupts.
	t3 := thread("thread-3")
	x.save(t, t3, "task-e", "e", interruptWrite("i-e-old", `"old"`))
	t3.step(t, set("x", `1`))
	at = x.save(t, t3, "task-f", "f", interruptWrite("i-f", `{"new":true}`))
	x.expect(t, t3, "task-f", "f", "i-f", `{"new":true}`, at)
	// Command tasks are not nodes.
	t4 := thread("thread-4")
	x.save(t, t4, checkpoint.CommandTaskID(1), "", interruptWrite("i-cmd", `0`))
	x.save(t, t4, checkpoint.NullTaskID, "", interruptWrite("i-null", `0`))
	// Child namespaces are not listed.
	thread("thread-5")
	t5c := f.line("thread-5", "child:abc")
	t5c.step(t, set("x", `0`))
	x.save(t, t5c, "task-x", "x", interruptWrite("i-child", `0`))
	// One of two interrupts answered.
	t6 := thread("thread-6")
	at = x.save(t, t6, "task-g", "g", interruptWrite("i-g1", `"one"`, "i-g2", `"two"`))
	x.save(t, t6, "task-g", "g", wr(checkpoint.ChannelResume, `{"i-g1":"yes"}`))
	x.expect(t, t6, "task-g", "g", "i-g2", `"two"`, at)
	// Interrupts saved by a Put: Writes on the new head count, ParentWrites
	// (on the parent, no longer the head) do not.
	t7 := thread("thread-7")
	at = f.clock.Advance(time.Second)
	req := t7.request(t, t7.head, set("x", `1`))
	req.ParentWrites = []checkpoint.TaskWrites{{TaskID: "task-p", Node: "p", Writes: []checkpoint.Write{interruptWrite("i-p", `0`)}}}
	req.Writes = []checkpoint.TaskWrites{{TaskID: "task-h", Node: "h", Writes: []checkpoint.Write{interruptWrite("i-h", `"put"`)}}}
	t7.put(t, req)
	x.expect(t, t7, "task-h", "h", "i-h", `"put"`, at)
	// A deleted thread's interrupts are gone.
	t8 := thread("thread-8")
	x.save(t, t8, "task-z", "z", interruptWrite("i-del", `0`))
	if err := f.s.DeleteThread(t.Context(), "thread-8"); err != nil {
		t.Fatal(err)
	}
	// A replaced interrupt write counts once, with its new interrupts, at
	// the time and place of its first save.
	t9 := thread("thread-9")
	at = x.save(t, t9, "task-r", "r", interruptWrite("i-r1", `1`))
	x.save(t, t9, "task-r", "r", interruptWrite("i-r2", `2`))
	x.expect(t, t9, "task-r", "r", "i-r2", `2`, at)
	return x
}

func pendingInterrupts(t *testing.T, f *fixture, q checkpoint.InterruptQuery) ([]interruptView, string) {
	t.Helper()
	page, next, err := f.s.(checkpoint.InterruptLister).PendingInterrupts(t.Context(), q)
	if err != nil {
		t.Fatalf("PendingInterrupts(%+v): %v", q, err)
	}
	var out []interruptView
	for _, pi := range page {
		v, err := decodeJSON(pi.Value)
		if err != nil {
			t.Fatalf("interrupt %s value %q: %v", pi.InterruptID, pi.Value, err)
		}
		out = append(out, interruptView{pi.Thread, pi.NS, pi.CheckpointID, pi.TaskID, pi.Node, pi.InterruptID, v, pi.CreatedAt})
	}
	return out, next
}

// checkOldestFirst fails the test unless got is want in oldest-first order
// (interrupts saved at the same time may come in any order).
func checkOldestFirst(t *testing.T, what string, want, got []interruptView) {
	t.Helper()
	for i := 1; i < len(got); i++ {
		if got[i].CreatedAt.Before(got[i-1].CreatedAt) {
			t.Errorf("%s: not oldest first: %s (%s) after %s (%s)", what, got[i].InterruptID, got[i].CreatedAt, got[i-1].InterruptID, got[i-1].CreatedAt)
		}
	}
	order := func(a, b interruptView) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.Thread, b.Thread), cmp.Compare(a.InterruptID, b.InterruptID))
	}
	w, g := slices.Clone(want), slices.Clone(got)
	slices.SortFunc(w, order)
	slices.SortFunc(g, order)
	if diff := gocmp.Diff(w, g, cmpOpts...); diff != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", what, diff)
	}
}

// pageAll pages through PendingInterrupts with limit until the cursor is
// "", checking page sizes and that only the last page has an empty
// cursor.
func pageAll(t *testing.T, f *fixture, limit int, between func(page int)) []interruptView {
	t.Helper()
	pageCap := limit
	if pageCap == 0 {
		pageCap = 100
	}
	var all []interruptView
	cursor := ""
	for page := 0; ; page++ {
		if page > 1000 {
			t.Fatalf("limit %d: still paging after 1000 pages", limit)
		}
		got, next := pendingInterrupts(t, f, checkpoint.InterruptQuery{After: cursor, Limit: limit})
		if len(got) > pageCap {
			t.Errorf("limit %d: page %d has %d interrupts", limit, page, len(got))
		}
		if next != "" && len(got) == 0 {
			t.Fatalf("limit %d: page %d is empty but returns a cursor", limit, page)
		}
		all = append(all, got...)
		if next == "" {
			return all
		}
		if between != nil {
			between(page)
		}
		cursor = next
	}
}

// testInterruptsAll: one query returns every pending interrupt of every
// thread's root-namespace head, with thread, checkpoint, task, node, ID,
// value and save time, oldest first.
func testInterruptsAll(t *testing.T, f *fixture) {
	x := newInterruptFixture(t, f)
	got, next := pendingInterrupts(t, f, checkpoint.InterruptQuery{})
	if next != "" {
		t.Errorf("a page holding everything returned cursor %q, want \"\"", next)
	}
	checkOldestFirst(t, "PendingInterrupts", x.want, got)
}

// testInterruptsPaging: paging with any limit yields the same sequence
// as one large page, with no duplicates and no gaps; the page that holds
// the last interrupt returns an empty cursor.
func testInterruptsPaging(t *testing.T, f *fixture) {
	x := newInterruptFixture(t, f)
	full, _ := pendingInterrupts(t, f, checkpoint.InterruptQuery{Limit: 1000})
	checkOldestFirst(t, "PendingInterrupts(limit 1000)", x.want, full)
	for _, limit := range []int{0, 1, 2, 3, len(x.want) - 1, len(x.want), len(x.want) + 1} {
		got := pageAll(t, f, limit, nil)
		if diff := gocmp.Diff(full, got, cmpOpts...); diff != "" {
			t.Errorf("pages of %d differ from one page (-one page +pages):\n%s", limit, diff)
		}
	}
}

// testInterruptsPagingLive: interrupts raised while a reader pages appear
// on later pages; nothing listed before is repeated or skipped.
func testInterruptsPagingLive(t *testing.T, f *fixture) {
	x := newInterruptFixture(t, f)
	added := 0
	got := pageAll(t, f, 2, func(page int) {
		if page > 1 {
			return
		}
		l := f.line(fmt.Sprintf("thread-new-%d", page), "")
		l.step(t, set("x", `0`))
		id := fmt.Sprintf("i-new-%d", page)
		at := x.save(t, l, "task-n", "n", interruptWrite(id, `"late"`))
		x.expect(t, l, "task-n", "n", id, `"late"`, at)
		added++
	})
	if added != 2 {
		t.Fatalf("added %d interrupts while paging, want 2", added)
	}
	checkOldestFirst(t, "pages with interrupts added in between", x.want, got)
	seen := map[string]bool{}
	for _, v := range got {
		k := v.Thread + "/" + v.InterruptID
		if seen[k] {
			t.Errorf("interrupt %s listed twice", k)
		}
		seen[k] = true
	}
}

// testInterruptsPagingResaved: an interrupt write saved again between two
// pages (a retried PutWrites) keeps its time and place, so every pending
// interrupt is listed exactly once, oldest first by its first save.
func testInterruptsPagingResaved(t *testing.T, f *fixture) {
	x := &interruptFixture{f: f}
	type raised struct {
		l *line
		w checkpoint.Write
	}
	var all []raised
	for i := range 4 {
		l := f.line(fmt.Sprintf("thread-%d", i), "")
		l.step(t, set("x", `0`))
		id := fmt.Sprintf("i-%d", i)
		w := interruptWrite(id, `"ok?"`)
		at := x.save(t, l, "task", "n", w)
		x.expect(t, l, "task", "n", id, `"ok?"`, at)
		all = append(all, raised{l, w})
	}
	for _, limit := range []int{1, 2, 3} {
		got := pageAll(t, f, limit, func(int) {
			for _, r := range all {
				x.save(t, r.l, "task", "n", r.w)
			}
		})
		checkOldestFirst(t, fmt.Sprintf("pages of %d with every interrupt write saved again in between", limit), x.want, got)
	}
}

// testInterruptsEmpty: no pending interrupts is an empty page, an empty
// cursor and no error.
func testInterruptsEmpty(t *testing.T, f *fixture) {
	got, next := pendingInterrupts(t, f, checkpoint.InterruptQuery{})
	if len(got) != 0 || next != "" {
		t.Errorf("empty saver: PendingInterrupts = %v, %q; want none and \"\"", got, next)
	}
	l := f.line("thread-1", "")
	l.step(t, set("x", `0`))
	f.putWrites(t, l.ref(l.head), l.lease, task("task-1", wr("x", `1`)))
	got, next = pendingInterrupts(t, f, checkpoint.InterruptQuery{Limit: 5})
	if len(got) != 0 || next != "" {
		t.Errorf("no interrupts: PendingInterrupts = %v, %q; want none and \"\"", got, next)
	}
}
