package checkpointtest

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// cmpOpts compare times as instants and treat nil and empty alike.
var cmpOpts = []cmp.Option{
	cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) }),
	cmpopts.EquateEmpty(),
}

// tupleView is what a reader can observe of a checkpoint, with channel
// values materialised and JSON decoded, so that savers that re-encode or
// split data compare equal.
type tupleView struct {
	Thread, NS, ID, ParentID string
	CreatedAt                time.Time
	Metadata                 map[string]any // the flat JSON form
	Versions                 map[string]string
	Mark                     string
	Values                   map[string]any
}

// writeView is a pending write with its value decoded.
type writeView struct {
	TaskID, Node, Path, Channel string
	Value                       any
}

func decodeJSON(b []byte) (any, error) {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	return v, nil
}

func mustDecode(t *testing.T, s string) any {
	t.Helper()
	v, err := decodeJSON([]byte(s))
	if err != nil {
		t.Fatalf("test data %q is not JSON: %v", s, err)
	}
	return v
}

// flatMetadata returns the metadata as its flat JSON object, so that
// numbers compare by value whatever Go type a saver decodes them to.
func flatMetadata(m checkpoint.Metadata) (map[string]any, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	err = json.Unmarshal(b, &out)
	return out, err
}

func viewOf(tp *checkpoint.Tuple, held map[string]Held) (tupleView, error) {
	cp := tp.Checkpoint
	raw, err := Values(cp, held)
	if err != nil {
		return tupleView{}, fmt.Errorf("checkpoint %s: %w", cp.ID, err)
	}
	vals := make(map[string]any, len(raw))
	for ch, b := range raw {
		if vals[ch], err = decodeJSON(b); err != nil {
			return tupleView{}, fmt.Errorf("checkpoint %s channel %q: %w", cp.ID, ch, err)
		}
	}
	meta, err := flatMetadata(cp.Metadata)
	if err != nil {
		return tupleView{}, fmt.Errorf("checkpoint %s metadata: %w", cp.ID, err)
	}
	return tupleView{
		Thread: tp.Thread, NS: tp.NS, ID: cp.ID, ParentID: cp.ParentID,
		CreatedAt: cp.CreatedAt, Metadata: meta, Versions: maps.Clone(cp.Versions),
		Mark: cp.Mark, Values: vals,
	}, nil
}

func mustView(t *testing.T, tp *checkpoint.Tuple, held map[string]Held) tupleView {
	t.Helper()
	v, err := viewOf(tp, held)
	if err != nil {
		t.Fatalf("%s: %v", tp.Ref(), err)
	}
	return v
}

func mustPending(t *testing.T, tp *checkpoint.Tuple) []writeView {
	t.Helper()
	var out []writeView
	for _, w := range tp.Pending {
		v, err := decodeJSON(w.Value)
		if err != nil {
			t.Fatalf("%s: pending write %s/%s is not valid JSON (%q): %v", tp.Ref(), w.TaskID, w.Channel, w.Value, err)
		}
		out = append(out, writeView{TaskID: w.TaskID, Node: w.Node, Path: w.Path, Channel: w.Channel, Value: v})
	}
	return out
}

// change is one channel edit of a modelled checkpoint.
type change struct {
	kind changeKind
	ch   string
	data string // JSON: the value, or the appended items
	base string // opSegment: the earlier version the items extend
}

type changeKind int

const (
	opSet     changeKind = iota // replace the value
	opAppend                    // append items to the current value (Base = current version)
	opFresh                     // append items to nothing (Base "")
	opDrop                      // remove the channel from Versions
	opSegment                   // append to an earlier version of the channel the items since it (Base = that version)
)

func set(ch, value string) change   { return change{kind: opSet, ch: ch, data: value} }
func add(ch, items string) change   { return change{kind: opAppend, ch: ch, data: items} }
func fresh(ch, items string) change { return change{kind: opFresh, ch: ch, data: items} }
func drop(ch string) change         { return change{kind: opDrop, ch: ch} }

// segment appends items to the value channel ch had at version base, an
// earlier version on its chain: items must be what was appended since
// base plus the new items (a writer that gathers a chain's small appends
// into one blob, so that reads walk fewer links).
func segment(ch, base, items string) change {
	return change{kind: opSegment, ch: ch, data: items, base: base}
}
func wr(ch, value string) checkpoint.Write {
	return checkpoint.Write{Channel: ch, Value: json.RawMessage(value)}
}

// line models one (thread, namespace) history: the suite builds requests
// from it, puts them through the saver under test, and checks what the
// saver returns against the model.
type line struct {
	f          *fixture
	thread, ns string
	lease      checkpoint.Lease
	head       string
	states     map[string]modelState // committed checkpoints by ID
	planned    map[string]map[string]any
}

type modelState struct {
	cp     checkpoint.Checkpoint // as put, without Channels
	values map[string]any
}

func (f *fixture) line(thread, ns string) *line {
	return &line{
		f: f, thread: thread, ns: ns, lease: lease("runner-a"),
		states: map[string]modelState{}, planned: map[string]map[string]any{},
	}
}

func (l *line) ref(id string) checkpoint.Ref {
	return checkpoint.Ref{Thread: l.thread, NS: l.ns, ID: id}
}

// request builds the PutRequest of a new checkpoint whose parent is parent
// ("" for the first), applying changes to the parent's channels. Metadata
// defaults to source input / step -1 for a first checkpoint and source loop
// / parent step + 1 otherwise, with the lease owner as run ID; CreatedAt is
// the fake clock's time. Tests may edit the request before putting it.
func (l *line) request(t *testing.T, parent string, changes ...change) checkpoint.PutRequest {
	t.Helper()
	return l.requestID(t, l.f.id(), parent, changes...)
}

// requestID is request with a given checkpoint ID.
func (l *line) requestID(t *testing.T, id, parent string, changes ...change) checkpoint.PutRequest {
	t.Helper()
	var base modelState
	if parent != "" {
		var ok bool
		if base, ok = l.states[parent]; !ok {
			t.Fatalf("model: parent %s is not a committed checkpoint of %s", parent, l.ref(""))
		}
	}
	cp := checkpoint.Checkpoint{
		ID: id, ParentID: parent, CreatedAt: l.f.clock.Now(),
		Metadata: checkpoint.Metadata{Source: checkpoint.SourceInput, Step: -1, RunID: l.lease.Owner},
		Versions: maps.Clone(base.cp.Versions),
		Channels: map[string][]checkpoint.Blob{},
	}
	if parent != "" {
		cp.Metadata.Source, cp.Metadata.Step = checkpoint.SourceLoop, base.cp.Metadata.Step+1
	}
	if cp.Versions == nil {
		cp.Versions = map[string]string{}
	}
	values := maps.Clone(base.values)
	if values == nil {
		values = map[string]any{}
	}
	for _, c := range changes {
		if _, dup := cp.Channels[c.ch]; dup {
			t.Fatalf("model: channel %q changed twice in one checkpoint", c.ch)
		}
		b := checkpoint.Blob{Version: id, Data: json.RawMessage(c.data)}
		switch c.kind {
		case opSet:
			values[c.ch] = mustDecode(t, c.data)
		case opAppend, opFresh:
			b.Append = true
			var cur []any
			if c.kind == opAppend {
				b.Base = cp.Versions[c.ch]
				if v, ok := values[c.ch]; ok && v != nil {
					if cur, ok = v.([]any); !ok {
						t.Fatalf("model: append to channel %q whose value is not an array", c.ch)
					}
				}
			}
			items, ok := mustDecode(t, c.data).([]any)
			if !ok && mustDecode(t, c.data) != nil {
				t.Fatalf("model: appended items %s are not an array", c.data)
			}
			values[c.ch] = append(append([]any{}, cur...), items...)
		case opSegment:
			b.Append, b.Base = true, c.base
			at, ok := l.states[c.base]
			if !ok {
				t.Fatalf("model: segment of channel %q on %s, which is not a committed checkpoint", c.ch, c.base)
			}
			var cur []any
			if v, ok := at.values[c.ch]; ok && v != nil {
				if cur, ok = v.([]any); !ok {
					t.Fatalf("model: segment of channel %q whose value is not an array", c.ch)
				}
			}
			items, ok := mustDecode(t, c.data).([]any)
			if !ok {
				t.Fatalf("model: segment items %s are not an array", c.data)
			}
			values[c.ch] = append(append([]any{}, cur...), items...)
		case opDrop:
			delete(cp.Versions, c.ch)
			delete(values, c.ch)
			continue
		}
		cp.Versions[c.ch] = id
		cp.Channels[c.ch] = []checkpoint.Blob{b}
	}
	l.planned[id] = values
	return checkpoint.PutRequest{Thread: l.thread, NS: l.ns, Checkpoint: cp, Lease: l.lease}
}

// put puts req, which request built, and records it in the model.
func (l *line) put(t *testing.T, req checkpoint.PutRequest) string {
	t.Helper()
	l.f.put(t, req)
	l.commit(t, req)
	return req.Checkpoint.ID
}

// commit records a request the saver accepted.
func (l *line) commit(t *testing.T, req checkpoint.PutRequest) {
	t.Helper()
	values, ok := l.planned[req.Checkpoint.ID]
	if !ok {
		t.Fatalf("model: checkpoint %s was not built by request", req.Checkpoint.ID)
	}
	cp := req.Checkpoint
	cp.Channels = nil
	cp.Versions = maps.Clone(cp.Versions)
	cp.Metadata.Extra = maps.Clone(cp.Metadata.Extra)
	cp.Metadata.Parents = maps.Clone(cp.Metadata.Parents)
	l.states[cp.ID] = modelState{cp: cp, values: values}
	l.head = cp.ID
}

// step puts a child of the head with changes and returns its ID.
func (l *line) step(t *testing.T, changes ...change) string {
	t.Helper()
	return l.put(t, l.request(t, l.head, changes...))
}

// expect returns the view the saver must return for a committed checkpoint.
func (l *line) expect(t *testing.T, id string) tupleView {
	t.Helper()
	st, ok := l.states[id]
	if !ok {
		t.Fatalf("model: %s is not a committed checkpoint of %s", id, l.ref(""))
	}
	meta, err := flatMetadata(st.cp.Metadata)
	if err != nil {
		t.Fatalf("model: metadata of %s: %v", id, err)
	}
	return tupleView{
		Thread: l.thread, NS: l.ns, ID: id, ParentID: st.cp.ParentID,
		CreatedAt: st.cp.CreatedAt, Metadata: meta, Versions: st.cp.Versions,
		Mark: st.cp.Mark, Values: st.values,
	}
}

// held returns what a reader holds after reading checkpoint id: its
// versions and values, for GetOptions.Have.
func (l *line) held(t *testing.T, id string) (map[string]string, map[string]Held) {
	t.Helper()
	st, ok := l.states[id]
	if !ok {
		t.Fatalf("model: %s is not a committed checkpoint", id)
	}
	have := maps.Clone(st.cp.Versions)
	held := make(map[string]Held, len(have))
	for ch, v := range have {
		b, err := json.Marshal(st.values[ch])
		if err != nil {
			t.Fatal(err)
		}
		held[ch] = Held{Version: v, Value: b}
	}
	return have, held
}

// check compares a tuple the saver returned with the model.
func (l *line) check(t *testing.T, what string, tp *checkpoint.Tuple, held map[string]Held) {
	t.Helper()
	got, err := viewOf(tp, held)
	if err != nil {
		t.Errorf("%s: %v", what, err)
		return
	}
	if diff := cmp.Diff(l.expect(t, tp.Checkpoint.ID), got, cmpOpts...); diff != "" {
		t.Errorf("%s: checkpoint %s mismatch (-want +got):\n%s", what, tp.Checkpoint.ID, diff)
	}
}

// checkGet reads checkpoint id (the head when id is "") and compares it
// with the model.
func (l *line) checkGet(t *testing.T, id string) *checkpoint.Tuple {
	t.Helper()
	tp := l.f.get(t, l.ref(id), checkpoint.GetOptions{})
	want := id
	if want == "" {
		want = l.head
	}
	if tp.Checkpoint.ID != want {
		t.Errorf("Get(%s) returned checkpoint %s, want %s", l.ref(id), tp.Checkpoint.ID, want)
		return tp
	}
	l.check(t, fmt.Sprintf("Get(%s)", l.ref(id)), tp, nil)
	return tp
}

// ids returns the committed IDs, newest first.
func (l *line) ids() []string {
	out := make([]string, 0, len(l.states))
	for id := range l.states {
		out = append(out, id)
	}
	sortDesc(out)
	return out
}

func sortDesc(ids []string) {
	slices.Sort(ids)
	slices.Reverse(ids)
}

func tupleIDs(tps []*checkpoint.Tuple) []string {
	out := make([]string, len(tps))
	for i, tp := range tps {
		out[i] = tp.Checkpoint.ID
	}
	return out
}
