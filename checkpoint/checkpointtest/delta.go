package checkpointtest

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint"
)

func deltaCases() []testCase {
	return []testCase{
		{name: "OnlyChangedChannels", run: testOnlyChangedChannels},
		{name: "DroppedChannel", run: testDroppedChannel},
		{name: "AppendChains", run: testAppendChains},
		{name: "HaveTrimming", run: testHaveTrimming},
		{name: "BrokenChainNeverSilent", run: testBrokenChain},
		{name: "LongChainsReadCold", run: testLongChainsCold},
	}
}

// testLongChainsCold: a long append chain written as a writer that keeps
// reads short writes it (every version an ordinary blob: most append one
// item to the previous version, some gather the items since an earlier
// version into one blob whose Base is that version, some store the whole
// value) reads back exactly, at the head and at every checkpoint, by Get
// and List, after a reopen when the saver has one (a reader that never saw
// the thread), and with Have naming versions the chain skips over.
func testLongChainsCold(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	var ids []string
	boundary := ""     // the version the next segment extends
	var since []string // items appended since boundary
	steps := 300
	if raceEnabled {
		steps = 120 // past the first whole value (i = 97) and a segment after it
	}
	for i := 0; i < steps; i++ {
		item := fmt.Sprintf(`{"i":%d,"pad":"%s"}`, i, strings.Repeat("x", i%13))
		var c change
		switch {
		case i == 0:
			c = fresh("msgs", "["+item+"]")
		case i%97 == 0: // the whole value
			all := make([]string, 0, i+1)
			for j := 0; j <= i; j++ {
				all = append(all, fmt.Sprintf(`{"i":%d,"pad":"%s"}`, j, strings.Repeat("x", j%13)))
			}
			c = set("msgs", "["+strings.Join(all, ",")+"]")
		case i%11 == 0 && boundary != "": // the items since the boundary
			c = segment("msgs", boundary, "["+strings.Join(append(since, item), ",")+"]")
		default:
			c = add("msgs", "["+item+"]")
		}
		cs := []change{c}
		if i%5 == 0 {
			cs = append(cs, set("n", fmt.Sprint(i)))
		}
		id := l.step(t, cs...)
		ids = append(ids, id)
		if c.kind == opAppend || c.kind == opFresh && i > 0 {
			since = append(since, item)
		} else {
			boundary, since = id, nil
		}
	}
	if f.opts.Reopen != nil {
		f.reopen(t)
	}
	l.checkGet(t, "")
	if f.opts.Reopen != nil {
		f.reopen(t)
	}
	for _, id := range ids {
		l.checkGet(t, id)
	}
	for _, tp := range f.list(t, "thread-1", checkpoint.ListOptions{}) {
		l.check(t, "List", tp, nil)
	}
	last := len(ids) - 1
	for _, from := range []int{last - 1, last - 5, 200, 195, 98, 1} {
		if from > last {
			continue // a shorter chain, under the race detector
		}
		have, held := l.held(t, ids[from])
		tp := f.get(t, l.ref(ids[last]), checkpoint.GetOptions{Have: have})
		l.check(t, fmt.Sprintf("Get(head, Have of #%d)", from), tp, held)
	}
}

// longHistory writes n checkpoints on l that mix long append chains,
// multi-item and empty appends, full replacements, an append to nothing,
// a channel set once, a channel that comes and goes, and a trigger channel,
// and returns their IDs oldest first.
func longHistory(t *testing.T, l *line, n int) []string {
	t.Helper()
	ids := make([]string, 0, n)
	for i := 0; i < n; i++ {
		var cs []change
		switch {
		case i == 0:
			cs = append(cs, fresh("msgs", `[{"i":0}]`), set("const", `"set once"`))
		case i%5 == 0:
			cs = append(cs, add("msgs", fmt.Sprintf(`[{"i":%d},"x%d","y%d"]`, i, i, i)))
		case i%17 == 0:
			cs = append(cs, add("msgs", `[]`))
		default:
			cs = append(cs, add("msgs", fmt.Sprintf(`[{"i":%d}]`, i)))
		}
		switch {
		case i%37 == 0:
			cs = append(cs, set("log", fmt.Sprintf(`["reset %d"]`, i)))
		case i == 101:
			cs = append(cs, fresh("log", `["appended to nothing"]`))
		default:
			cs = append(cs, add("log", fmt.Sprintf(`[%d]`, i)))
		}
		if i%3 == 0 {
			cs = append(cs, set("n", fmt.Sprint(i)))
		}
		switch {
		case i == n/4:
			cs = append(cs, set("tmp", `{"temporary":true}`))
		case i == n/2:
			cs = append(cs, drop("tmp"))
		}
		switch {
		case i%7 == 0:
			cs = append(cs, set(checkpoint.BranchPrefix+"node", `null`))
		case i%7 == 1 && i > 1:
			cs = append(cs, drop(checkpoint.BranchPrefix+"node"))
		}
		ids = append(ids, l.step(t, cs...))
	}
	return ids
}

// testOnlyChangedChannels: a Put carries blobs only for the channels it
// changed; the others still load from the checkpoints that wrote them,
// and a channel added later loads (LangGraph test_put: incremental blobs).
func testOnlyChangedChannels(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	c1 := l.step(t, set("a", `"a1"`), set("b", `{"b":1}`), set("c", `[1,2]`))
	c2 := l.step(t, set("a", `"a2"`))
	c3 := l.step(t, set("b", `{"b":3}`), set("d", `"added later"`))
	c4 := l.step(t) // no channel changed
	for _, id := range []string{c1, c2, c3, c4} {
		l.checkGet(t, id)
	}
	tp := l.checkGet(t, c4)
	want := map[string]string{"a": c2, "b": c3, "c": c1, "d": c3}
	if diff := cmp.Diff(want, tp.Checkpoint.Versions); diff != "" {
		t.Errorf("Versions of %s (-want +got):\n%s", c4, diff)
	}
}

// testDroppedChannel: a channel left out of Versions is gone from that
// checkpoint on (LangGraph test_put: dropped channel does not appear), but
// older checkpoints keep it, and it can come back.
func testDroppedChannel(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	c1 := l.step(t, set("a", `1`), set("b", `2`), fresh("log", `["x"]`))
	c2 := l.step(t, drop("b"), drop("log"))
	c3 := l.step(t, set("b", `"back"`), fresh("log", `["y"]`))
	tp := l.checkGet(t, c2)
	for _, ch := range []string{"b", "log"} {
		if _, ok := tp.Checkpoint.Versions[ch]; ok {
			t.Errorf("checkpoint %s: dropped channel %q is still in Versions", c2, ch)
		}
		if _, ok := tp.Checkpoint.Channels[ch]; ok {
			t.Errorf("checkpoint %s: dropped channel %q is still in Channels", c2, ch)
		}
	}
	l.checkGet(t, c1)
	l.checkGet(t, c3)
}

// testAppendChains: 200 versions of append channels interleaved with
// replacements and other channels; every checkpoint, read alone or listed,
// rebuilds exactly (D4: storage proportional to writes).
func testAppendChains(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	steps := 200
	if raceEnabled {
		steps = 80
	}
	ids := longHistory(t, l, steps)
	for _, id := range ids {
		l.checkGet(t, id)
	}
	tps := f.list(t, "thread-1", checkpoint.ListOptions{})
	if got, want := tupleIDs(tps), l.ids(); !cmp.Equal(got, want) {
		t.Fatalf("List returned %d checkpoints %v..., want %d newest first", len(got), got[:min(3, len(got))], len(want))
	}
	for _, tp := range tps {
		l.check(t, "List", tp, nil)
	}
}

// testHaveTrimming: with GetOptions.Have a saver may leave out channels
// the reader holds at their version, or return only the blobs after the
// held version of an append chain; either way what it returns, with what
// the reader holds, rebuilds the exact value. A held version that is not
// on the chain, or newer than the one read, must not be used.
func testHaveTrimming(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	ids := longHistory(t, l, 60)
	last := len(ids) - 1
	pairs := [][2]int{ // {read, held from}
		{0, 0}, {1, 0}, {5, 4}, {5, 0}, {17, 16}, {17, 12}, {36, 30}, {37, 36}, {38, 36},
		{40, 20}, {last, last}, {last, last - 1}, {last, 1}, {last, 37}, {3, last}, {30, 31},
	}
	for _, p := range pairs {
		have, held := l.held(t, ids[p[1]])
		tp := f.get(t, l.ref(ids[p[0]]), checkpoint.GetOptions{Have: have})
		l.check(t, fmt.Sprintf("Get(#%d, Have of #%d)", p[0], p[1]), tp, held)
	}
	// Versions the reader made up, or an empty map, give whole values.
	bogus := "00000000-0000-7000-8000-000000000000"
	for name, have := range map[string]map[string]string{
		"unknown versions": {"msgs": bogus, "log": bogus, "n": bogus},
		"empty map":        {},
	} {
		held := map[string]Held{}
		for ch, v := range have {
			held[ch] = Held{Version: v, Value: []byte(`["bogus"]`)}
		}
		tp := f.get(t, l.ref(ids[last]), checkpoint.GetOptions{Have: have})
		l.check(t, "Get with Have of "+name, tp, held)
	}
}

// testBrokenChain: data that cannot rebuild a channel is refused by Put
// (ErrInvalid, nothing written) or reported by Get and List as a
// *checkpoint.CorruptError naming thread and checkpoint; it never decodes
// silently to a partial or zero value (LangGraph #6970).
func testBrokenChain(t *testing.T, f *fixture) {
	tests := []struct {
		name   string
		mutate func(req *checkpoint.PutRequest, first string)
	}{
		{"append base missing", func(req *checkpoint.PutRequest, _ string) {
			req.Checkpoint.Channels["log"][0].Base = f.id()
		}},
		{"version with no blob", func(req *checkpoint.PutRequest, _ string) {
			req.Checkpoint.Versions["ghost"] = f.id()
		}},
		{"version of a checkpoint that did not write the channel", func(req *checkpoint.PutRequest, first string) {
			req.Checkpoint.Versions["ghost"] = first
		}},
		{"empty version", func(req *checkpoint.PutRequest, _ string) {
			req.Checkpoint.Versions["ghost"] = ""
		}},
	}
	for i, tc := range tests {
		thread := fmt.Sprintf("thread-%d", i)
		l := f.line(thread, "")
		first := l.step(t, fresh("log", `["a"]`), set("x", `1`))
		req := l.request(t, first, add("log", `["b"]`))
		tc.mutate(&req, first)
		refusedOrCorrupt(t, f, tc.name, req)
	}
}

// refusedOrCorrupt puts a checkpoint whose channels cannot be rebuilt from
// what the thread stores. Put must refuse it with ErrInvalid and write
// nothing, or Get and List must report a *checkpoint.CorruptError naming
// the thread and the checkpoint.
func refusedOrCorrupt(t *testing.T, f *fixture, name string, req checkpoint.PutRequest) {
	t.Helper()
	thread := req.Thread
	before := f.dump(t, thread)
	if err := f.s.Put(t.Context(), req); err != nil {
		if wantIs(t, name+": Put", err, checkpoint.ErrInvalid) {
			f.unchanged(t, name+": refused Put", thread, before)
		}
		return
	}
	ref := refOf(req)
	tp, err := f.s.Get(t.Context(), ref, checkpoint.GetOptions{})
	var ce *checkpoint.CorruptError
	switch {
	case errors.As(err, &ce):
		if !errors.Is(err, checkpoint.ErrCorrupt) {
			t.Errorf("%s: Get error %v does not match ErrCorrupt", name, err)
		}
		if ce.Thread != thread || ce.Checkpoint != req.Checkpoint.ID {
			t.Errorf("%s: CorruptError names thread %q checkpoint %q, want %q and %q", name, ce.Thread, ce.Checkpoint, thread, req.Checkpoint.ID)
		}
	case err != nil:
		t.Errorf("%s: Get(%s) error = %v, want a *checkpoint.CorruptError", name, ref, err)
	default:
		v, verr := viewOf(tp, nil)
		t.Errorf("%s: Put accepted a checkpoint that cannot be rebuilt and Get(%s) returned it without error (values %v, rebuild error %v); want ErrInvalid from Put or ErrCorrupt from Get", name, ref, v.Values, verr)
	}
	if _, err := f.s.List(t.Context(), thread, checkpoint.ListOptions{NS: req.NS}); !errors.Is(err, checkpoint.ErrCorrupt) {
		t.Errorf("%s: List of a thread with a broken checkpoint: error = %v, want ErrCorrupt", name, err)
	}
}
