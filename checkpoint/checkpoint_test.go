package checkpoint_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// TestMetadataMarshal: metadata is one flat JSON object with the fixed
// keys and the caller's keys side by side; run_id only when set, parents
// always an object.
func TestMetadataMarshal(t *testing.T) {
	tests := []struct {
		name string
		in   checkpoint.Metadata
		want string
	}{
		{"zero", checkpoint.Metadata{}, `{"source":"","step":0,"parents":{}}`},
		{"input", checkpoint.Metadata{Source: checkpoint.SourceInput, Step: -1}, `{"source":"input","step":-1,"parents":{}}`},
		{"everything", checkpoint.Metadata{
			Source: checkpoint.SourceLoop, Step: 3, RunID: "run-1",
			Parents: map[string]string{"": "p1", "outer:1": "p2"},
			Extra:   map[string]any{"user": "ada", "n": 2, "ratio": 0.5, "flag": true},
		}, `{"source":"loop","step":3,"run_id":"run-1","parents":{"":"p1","outer:1":"p2"},"user":"ada","n":2,"ratio":0.5,"flag":true}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			var got, want map[string]any
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatalf("Marshal produced %s: %v", b, err)
			}
			if err := json.Unmarshal([]byte(tc.want), &want); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Marshal(%+v) = %s (-want +got):\n%s", tc.in, b, diff)
			}
		})
	}
}

// TestMetadataRoundTrip: Unmarshal reads back what Marshal wrote; caller
// keys come back in Extra (numbers as json.Number).
func TestMetadataRoundTrip(t *testing.T) {
	in := checkpoint.Metadata{
		Source: checkpoint.SourceFork, Step: 7, RunID: "r",
		Parents: map[string]string{"": "p"},
		Extra:   map[string]any{"user": "ada", "n": 2, "flag": false, "s": ""},
	}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var got checkpoint.Metadata
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := in
	want.Extra = map[string]any{"user": "ada", "n": json.Number("2"), "flag": false, "s": ""}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("round trip of %s (-want +got):\n%s", b, diff)
	}
	// Unmarshal resets the receiver.
	got.Extra["stale"] = 1
	if err := json.Unmarshal([]byte(`{"source":"input","step":-1,"parents":{}}`), &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(checkpoint.Metadata{Source: checkpoint.SourceInput, Step: -1, Parents: map[string]string{}}, got); diff != "" {
		t.Errorf("Unmarshal into a used Metadata (-want +got):\n%s", diff)
	}
}

func TestMetadataUnmarshalErrors(t *testing.T) {
	for _, in := range []string{`not json`, `[]`, `{"step":"x"}`, `{"parents":[1]}`, `{"source":1}`, `{"run_id":false}`, `{"k":}`} {
		var m checkpoint.Metadata
		if err := json.Unmarshal([]byte(in), &m); err == nil {
			t.Errorf("Unmarshal(%s) = %+v, want an error", in, m)
		}
	}
}

func TestWriteIndexAndIsSpecial(t *testing.T) {
	tests := []struct {
		channel string
		pos     int
		index   int
		special bool
	}{
		{checkpoint.ChannelError, 0, -1, true},
		{checkpoint.ChannelInterrupt, 5, -3, true},
		{checkpoint.ChannelResume, 2, -4, true},
		{checkpoint.ChannelBreakpoint, 1, -5, true},
		{checkpoint.ChannelStepPrefix + "0", 3, -1000, true},
		{checkpoint.ChannelStepPrefix + "7", 0, -1007, true},
		{checkpoint.ChannelStepPrefix + "123", 0, -1123, true},
		{checkpoint.ChannelNoWrites, 4, 4, false},
		{checkpoint.ChannelStart, 0, 0, false},
		{checkpoint.ChannelSends, 1, 1, false},
		{checkpoint.BranchPrefix + "node", 2, 2, false},
		{"__scheduled__", 3, 3, false}, // LangGraph's -2; not ours
		{"Messages", 9, 9, false},
		{"__error__x", 1, 1, false},
	}
	for _, tc := range tests {
		if got := checkpoint.WriteIndex(tc.channel, tc.pos); got != tc.index {
			t.Errorf("WriteIndex(%q, %d) = %d, want %d", tc.channel, tc.pos, got, tc.index)
		}
		if got := checkpoint.IsSpecial(tc.channel); got != tc.special {
			t.Errorf("IsSpecial(%q) = %v, want %v", tc.channel, got, tc.special)
		}
	}
}

func TestCommandTaskID(t *testing.T) {
	if got, want := checkpoint.CommandTaskID(1), "00000000-0000-0000-0000-000000000001"; got != want {
		t.Errorf("CommandTaskID(1) = %q, want %q", got, want)
	}
	if got, want := checkpoint.CommandTaskID(255), "00000000-0000-0000-0000-0000000000ff"; got != want {
		t.Errorf("CommandTaskID(255) = %q, want %q", got, want)
	}
	for n := 1; n < 300; n++ {
		a, b := checkpoint.CommandTaskID(n), checkpoint.CommandTaskID(n+1)
		if a >= b {
			t.Fatalf("CommandTaskID(%d) = %s does not sort before CommandTaskID(%d) = %s", n, a, n+1, b)
		}
		if !checkpoint.IsCommandTask(a) {
			t.Fatalf("IsCommandTask(CommandTaskID(%d)) = false", n)
		}
		if a <= checkpoint.NullTaskID {
			t.Fatalf("CommandTaskID(%d) sorts before NullTaskID", n)
		}
	}
	tests := []struct {
		id   string
		want bool
	}{
		{checkpoint.NullTaskID, true},
		{"01972b5c-ee00-7e88-94af-a95c4171c69d", false},
		{"task-1", false},
		{"", false},
		{"00000000-0000-0000-0001-000000000000", false},
	}
	for _, tc := range tests {
		if got := checkpoint.IsCommandTask(tc.id); got != tc.want {
			t.Errorf("IsCommandTask(%q) = %v, want %v", tc.id, got, tc.want)
		}
	}
}

func TestValidFilterKey(t *testing.T) {
	tests := []struct {
		key  string
		want bool
	}{
		{"source", true},
		{"run_id", true},
		{"A_z_0_9", true},
		{"_", true},
		{strings.Repeat("k", 64), true},
		{strings.Repeat("k", 65), false},
		{"", false},
		{"a-b", false},
		{"a.b", false},
		{"$.source", false},
		{"a b", false},
		{"x'--", false},
		{"ü", false},
		{"key\x00", false},
	}
	for _, tc := range tests {
		if got := checkpoint.ValidFilterKey(tc.key); got != tc.want {
			t.Errorf("ValidFilterKey(%q) = %v, want %v", tc.key, got, tc.want)
		}
	}
}

func TestValidateExtra(t *testing.T) {
	tests := []struct {
		name  string
		extra map[string]any
		ok    bool
	}{
		{"nil", nil, true},
		{"scalars", map[string]any{
			"s": "x", "b": true, "i": 1, "i32": int32(1), "i64": int64(1), "u": uint(1), "u32": uint32(1),
			"u64": uint64(1), "f32": float32(1), "f64": 1.5, "num": json.Number("2"),
		}, true},
		{"reserved source", map[string]any{"source": "x"}, false},
		{"reserved step", map[string]any{"step": 1}, false},
		{"reserved parents", map[string]any{"parents": "x"}, false},
		{"reserved run_id", map[string]any{"run_id": "x"}, false},
		{"bad key", map[string]any{"a-b": 1}, false},
		{"empty key", map[string]any{"": 1}, false},
		{"nil value", map[string]any{"k": nil}, false},
		{"slice value", map[string]any{"k": []any{1}}, false},
		{"map value", map[string]any{"k": map[string]any{}}, false},
		{"time value", map[string]any{"k": time.Time{}}, false},
		{"int8 value", map[string]any{"k": int8(1)}, false},
		{"NaN", map[string]any{"k": math.NaN()}, false},
		{"infinite float32", map[string]any{"k": float32(math.Inf(-1))}, false},
		{"malformed json.Number", map[string]any{"k": json.Number("1.")}, false},
		{"empty json.Number", map[string]any{"k": json.Number("")}, false},
		{"big json.Number", map[string]any{"k": json.Number("-1.5e400")}, true},
	}
	for _, tc := range tests {
		err := checkpoint.ValidateExtra(tc.extra)
		if tc.ok && err != nil {
			t.Errorf("ValidateExtra(%s) = %v, want nil", tc.name, err)
		}
		if !tc.ok && !errors.Is(err, checkpoint.ErrInvalid) {
			t.Errorf("ValidateExtra(%s) = %v, want an error matching ErrInvalid", tc.name, err)
		}
	}
}

// TestPendingInterrupts pins the rule savers share: an interrupt waits
// while its task's __resume__ has no answer for its ID and the task has
// no regular write; command tasks are not nodes.
func TestPendingInterrupts(t *testing.T) {
	in := func(task, node, value string) checkpoint.PendingWrite {
		return checkpoint.PendingWrite{TaskID: task, Node: node, Channel: checkpoint.ChannelInterrupt, Value: json.RawMessage(value)}
	}
	w := func(task, channel, value string) checkpoint.PendingWrite {
		return checkpoint.PendingWrite{TaskID: task, Channel: channel, Value: json.RawMessage(value)}
	}
	pi := func(task, node, id, value string) checkpoint.PendingInterrupt {
		return checkpoint.PendingInterrupt{Thread: "th", CheckpointID: "cp", TaskID: task, Node: node, InterruptID: id, Value: json.RawMessage(value)}
	}
	tests := []struct {
		name   string
		writes []checkpoint.PendingWrite
		want   []checkpoint.PendingInterrupt
	}{
		{"no writes", nil, nil},
		{"one", []checkpoint.PendingWrite{in("t1", "ask", `[{"id":"a","value":{"q":1}}]`)}, []checkpoint.PendingInterrupt{pi("t1", "ask", "a", `{"q":1}`)}},
		{"raise order kept", []checkpoint.PendingWrite{in("t1", "ask", `[{"id":"b","value":1},{"id":"a","value":2}]`)},
			[]checkpoint.PendingInterrupt{pi("t1", "ask", "b", `1`), pi("t1", "ask", "a", `2`)}},
		{"task order", []checkpoint.PendingWrite{in("t1", "x", `[{"id":"a","value":1}]`), in("t2", "y", `[{"id":"b","value":2}]`)},
			[]checkpoint.PendingInterrupt{pi("t1", "x", "a", `1`), pi("t2", "y", "b", `2`)}},
		{"one of two answered, resume saved first", []checkpoint.PendingWrite{
			w("t1", checkpoint.ChannelResume, `{"a":"yes"}`), in("t1", "ask", `[{"id":"a","value":1},{"id":"b","value":2}]`),
		}, []checkpoint.PendingInterrupt{pi("t1", "ask", "b", `2`)}},
		{"all answered", []checkpoint.PendingWrite{
			w("t1", checkpoint.ChannelResume, `{"a":"yes","b":null}`), in("t1", "ask", `[{"id":"a","value":1},{"id":"b","value":2}]`),
		}, nil},
		{"answer of another task does not count", []checkpoint.PendingWrite{
			in("t1", "ask", `[{"id":"a","value":1}]`), w("t2", checkpoint.ChannelResume, `{"a":"yes"}`),
		}, []checkpoint.PendingInterrupt{pi("t1", "ask", "a", `1`)}},
		{"finished by a regular write", []checkpoint.PendingWrite{in("t1", "ask", `[{"id":"a","value":1}]`), w("t1", "Messages", `["done"]`)}, nil},
		{"finished by __no_writes__", []checkpoint.PendingWrite{in("t1", "ask", `[{"id":"a","value":1}]`), w("t1", checkpoint.ChannelNoWrites, `null`)}, nil},
		{"special writes do not finish", []checkpoint.PendingWrite{
			w("t1", checkpoint.ChannelStepPrefix+"0", `{"name":"s","result":1}`),
			w("t1", checkpoint.ChannelBreakpoint, `{"when":"before","nodes":["ask"]}`),
			in("t1", "ask", `[{"id":"a","value":1}]`),
			w("t1", checkpoint.ChannelError, `{"message":"x"}`),
		}, []checkpoint.PendingInterrupt{pi("t1", "ask", "a", `1`)}},
		{"command tasks ignored", []checkpoint.PendingWrite{
			in(checkpoint.NullTaskID, "", `[{"id":"n","value":1}]`),
			in(checkpoint.CommandTaskID(2), "", `[{"id":"c","value":1}]`),
		}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := checkpoint.PendingInterrupts("th", "cp", tc.writes)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("PendingInterrupts mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPendingInterruptsCorrupt (issue 16): an interrupt or resume write
// that json.Marshal could not have written, or an interrupt ID two tasks
// raised, is a *checkpoint.CorruptError naming the thread, the checkpoint
// and the write; it is never skipped (which would make a waiting thread
// silently stop waiting) nor read leniently (which would save an answer
// under an ID nobody asked).
func TestPendingInterruptsCorrupt(t *testing.T) {
	in := func(task, value string) checkpoint.PendingWrite {
		return checkpoint.PendingWrite{TaskID: task, Node: "ask", Channel: checkpoint.ChannelInterrupt, Value: json.RawMessage(value)}
	}
	res := func(task, value string) checkpoint.PendingWrite {
		return checkpoint.PendingWrite{TaskID: task, Channel: checkpoint.ChannelResume, Value: json.RawMessage(value)}
	}
	ok := in("t0", `[{"id":"z","value":1}]`)
	for _, tc := range []struct {
		name string
		w    []checkpoint.PendingWrite
		task string // the write named
	}{
		{"interrupt null", []checkpoint.PendingWrite{ok, in("t1", `null`)}, "t1"},
		{"interrupt an object", []checkpoint.PendingWrite{in("t1", `{"id":"a","value":1}`)}, "t1"},
		{"interrupt duplicate id key", []checkpoint.PendingWrite{in("t1", `[{"id":"a","id":"b","value":1}]`)}, "t1"},
		{"interrupt case-variant id key", []checkpoint.PendingWrite{in("t1", `[{"ID":"b","id":"a","value":1}]`)}, "t1"},
		{"interrupt only a case-variant id key", []checkpoint.PendingWrite{in("t1", `[{"ID":"a","value":1}]`)}, "t1"},
		{"interrupt unknown key", []checkpoint.PendingWrite{in("t1", `[{"id":"a","value":1,"answered":true}]`)}, "t1"},
		{"interrupt without a value", []checkpoint.PendingWrite{in("t1", `[{"id":"a"}]`)}, "t1"},
		{"interrupt empty ID", []checkpoint.PendingWrite{in("t1", `[{"id":"","value":1}]`)}, "t1"},
		{"interrupt invalid UTF-8", []checkpoint.PendingWrite{in("t1", "[{\"id\":\"a\xff\",\"value\":1}]")}, "t1"},
		{"interrupt lone surrogate", []checkpoint.PendingWrite{in("t1", `[{"id":"a","value":"\ud800"}]`)}, "t1"},
		{"interrupt duplicate key in the value", []checkpoint.PendingWrite{in("t1", `[{"id":"a","value":{"k":1,"k":2}}]`)}, "t1"},
		{"two interrupts with one ID", []checkpoint.PendingWrite{in("t1", `[{"id":"a","value":1},{"id":"a","value":2}]`)}, "t1"},
		{"one ID raised by two tasks", []checkpoint.PendingWrite{in("t1", `[{"id":"a","value":1}]`), in("t2", `[{"id":"a","value":2}]`)}, "t2"},
		{"interrupt not JSON", []checkpoint.PendingWrite{in("t1", `[{"id":"a","value":`)}, "t1"},
		{"resume null", []checkpoint.PendingWrite{in("t1", `[{"id":"a","value":1}]`), res("t1", `null`)}, "t1"},
		{"resume an array", []checkpoint.PendingWrite{in("t1", `[{"id":"a","value":1}]`), res("t1", `["a"]`)}, "t1"},
		{"resume duplicate key", []checkpoint.PendingWrite{in("t1", `[{"id":"a","value":1}]`), res("t1", `{"a":"no","a":"yes"}`)}, "t1"},
		{"resume escaped duplicate key", []checkpoint.PendingWrite{res("t1", `{"a":"no","\u0061":"yes"}`)}, "t1"},
		{"resume empty ID", []checkpoint.PendingWrite{res("t1", `{"":"yes"}`)}, "t1"},
		{"resume lone surrogate", []checkpoint.PendingWrite{res("t1", `{"a":"\udc00"}`)}, "t1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := checkpoint.PendingInterrupts("th", "cp", tc.w)
			var ce *checkpoint.CorruptError
			if !errors.As(err, &ce) || !errors.Is(err, checkpoint.ErrCorrupt) {
				t.Fatalf("PendingInterrupts = %v, %v; want a *checkpoint.CorruptError", got, err)
			}
			if ce.Thread != "th" || ce.Checkpoint != "cp" || !strings.Contains(ce.What, strconv.Quote(tc.task)) {
				t.Errorf("%+v: want thread th, checkpoint cp and task %s", ce, tc.task)
			}
			// The rule every reader shares (VerifyPending) agrees.
			if err := checkpoint.VerifyPending("th", "cp", tc.w); !errors.As(err, &ce) {
				t.Errorf("VerifyPending = %v, want a *checkpoint.CorruptError", err)
			}
		})
	}
}

// TestErrorTypes: the typed errors match their sentinels, and only them,
// through wrapping; CorruptError unwraps to its cause.
func TestErrorTypes(t *testing.T) {
	cause := errors.New("bad checksum")
	sentinels := []error{checkpoint.ErrNotFound, checkpoint.ErrConflict, checkpoint.ErrThreadBusy, checkpoint.ErrCorrupt, checkpoint.ErrInvalid, checkpoint.ErrClosed}
	tests := []struct {
		name string
		err  error
		is   error
	}{
		{"conflict", &checkpoint.ConflictError{Thread: "t", Expected: "a", Head: "b"}, checkpoint.ErrConflict},
		{"busy", &checkpoint.BusyError{Thread: "t", Owner: "o", Until: time.Unix(0, 0)}, checkpoint.ErrThreadBusy},
		{"corrupt", &checkpoint.CorruptError{Thread: "t", Checkpoint: "c", What: "channel x", Err: cause}, checkpoint.ErrCorrupt},
		{"corrupt without cause", &checkpoint.CorruptError{Thread: "t", Checkpoint: "c", What: "write"}, checkpoint.ErrCorrupt},
	}
	for _, tc := range tests {
		wrapped := fmt.Errorf("saving: %w", tc.err)
		for _, s := range sentinels {
			if got := errors.Is(wrapped, s); got != (s == tc.is) {
				t.Errorf("%s: errors.Is(%v) = %v", tc.name, s, got)
			}
		}
		if tc.err.Error() == "" {
			t.Errorf("%s: empty message", tc.name)
		}
	}
	var ce *checkpoint.CorruptError
	err := fmt.Errorf("load: %w", &checkpoint.CorruptError{Thread: "t", Checkpoint: "c", Err: cause})
	if !errors.As(err, &ce) || ce.Thread != "t" || ce.Checkpoint != "c" || !errors.Is(err, cause) {
		t.Errorf("CorruptError does not unwrap through wrapping: %v", err)
	}
}

// TestValidatePut covers the shared request checks directly (the
// conformance suite covers them through MemorySaver).
func TestValidatePut(t *testing.T) {
	valid := func() checkpoint.PutRequest {
		return checkpoint.PutRequest{
			Thread: "t",
			Checkpoint: checkpoint.Checkpoint{
				ID: "b", ParentID: "a",
				Versions: map[string]string{"x": "b", "y": "a"},
				Channels: map[string][]checkpoint.Blob{"x": {{Version: "b", Data: json.RawMessage(`1`)}}},
			},
			ParentWrites: []checkpoint.TaskWrites{{TaskID: "task", Writes: []checkpoint.Write{{Channel: "x", Value: json.RawMessage(`1`)}}}},
			Lease:        checkpoint.Lease{Owner: "o", TTL: time.Minute},
		}
	}
	req := valid()
	if err := checkpoint.ValidatePut(&req); err != nil {
		t.Fatalf("ValidatePut(valid) = %v", err)
	}
	tests := []struct {
		name   string
		mutate func(*checkpoint.PutRequest)
	}{
		{"empty thread", func(r *checkpoint.PutRequest) { r.Thread = "" }},
		{"empty ID", func(r *checkpoint.PutRequest) { r.Checkpoint.ID = "" }},
		{"ID not after parent", func(r *checkpoint.PutRequest) { r.Checkpoint.ParentID = "c" }},
		{"empty owner", func(r *checkpoint.PutRequest) { r.Lease.Owner = "" }},
		{"empty version", func(r *checkpoint.PutRequest) { r.Checkpoint.Versions["z"] = "" }},
		{"changed channel without blob", func(r *checkpoint.PutRequest) { r.Checkpoint.Versions["z"] = "b" }},
		{"blob of an unchanged channel", func(r *checkpoint.PutRequest) { r.Checkpoint.Versions["x"] = "a" }},
		{"invalid blob", func(r *checkpoint.PutRequest) { r.Checkpoint.Channels["x"][0].Data = json.RawMessage(`{`) }},
		{"invalid write", func(r *checkpoint.PutRequest) { r.ParentWrites[0].Writes[0].Value = nil }},
	}
	for _, tc := range tests {
		req := valid()
		tc.mutate(&req)
		if err := checkpoint.ValidatePut(&req); !errors.Is(err, checkpoint.ErrInvalid) {
			t.Errorf("ValidatePut(%s) = %v, want an error matching ErrInvalid", tc.name, err)
		}
	}
	wr := checkpoint.WritesRequest{Ref: checkpoint.Ref{Thread: "t", ID: "b"}, Lease: checkpoint.Lease{Owner: "o"}}
	if err := checkpoint.ValidateWrites(&wr); err != nil {
		t.Errorf("ValidateWrites(valid) = %v", err)
	}
	wr.Ref.ID = ""
	if err := checkpoint.ValidateWrites(&wr); !errors.Is(err, checkpoint.ErrInvalid) {
		t.Errorf("ValidateWrites(no ID) = %v, want ErrInvalid", err)
	}
}

// TestMessagesQuoteIDs: messages quote checkpoint IDs as they quote thread
// IDs, so that an ID with spaces or quotes reads unambiguously.
func TestMessagesQuoteIDs(t *testing.T) {
	const id = `cp 1"x`
	chain := func(parent string) []checkpoint.PutRequest {
		mk := func(id, parent string) checkpoint.PutRequest {
			return checkpoint.PutRequest{Thread: "t", Checkpoint: checkpoint.Checkpoint{ID: id, ParentID: parent}, Lease: checkpoint.Lease{Owner: "o"}}
		}
		return []checkpoint.PutRequest{mk("b", ""), mk("c", parent)}
	}
	tests := []struct {
		name string
		got  string
		want string
	}{
		{"Ref", checkpoint.Ref{Thread: "t", NS: "n", ID: id}.String(), `thread "t" ns "n" checkpoint "cp 1\"x"`},
		{"CorruptError", (&checkpoint.CorruptError{Thread: "t", Checkpoint: id, What: "write"}).Error(), `checkpoint: corrupt write in thread "t" checkpoint "cp 1\"x"`},
		{"ConflictError", (&checkpoint.ConflictError{Thread: "t", Expected: id, Head: "h"}).Error(),
			`checkpoint: conflict on thread "t": expected head "cp 1\"x", head is "h" (another runner advanced or deleted the thread)`},
		{"ValidatePut parent", checkpoint.ValidatePut(&checkpoint.PutRequest{Thread: "t", Checkpoint: checkpoint.Checkpoint{ID: "a", ParentID: id}}).Error(),
			`checkpoint: invalid request: checkpoint ID "a" does not sort after its parent "cp 1\"x"`},
		{"ValidateChain parent", checkpoint.ValidateChain(chain("a")).Error(),
			`checkpoint: invalid request: checkpoint "c": its parent must be "b", the checkpoint before it in the chain`},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, tc.got, tc.want)
		}
	}
}

// TestMetadataRunKeyOfAnOlderFile: metadata written before RunKey existed
// could hold "run_key" as a caller key (graph.WithMetadata accepted it)
// with any value. It reads back in Extra, as it did, whatever its value,
// and never as a RunKey (which is stored as "run-key", a name no caller key
// can have); before, a non-string value made the checkpoint unreadable (a
// *CorruptError for the whole thread's List in the SQLite saver) and a
// string one became a RunKey that graph.RunKey would act on.
func TestMetadataRunKeyOfAnOlderFile(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want any
	}{
		{`{"parents":{},"run_key":5,"source":"input","step":0}`, json.Number("5")},
		{`{"parents":{},"run_key":true,"source":"input","step":0}`, true},
		{`{"parents":{},"run_key":null,"source":"input","step":0}`, nil},
		{`{"parents":{},"run_key":"k","source":"input","step":0}`, "k"},
	} {
		var m checkpoint.Metadata
		if err := json.Unmarshal([]byte(tc.in), &m); err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		if got, ok := m.Extra["run_key"]; !ok || got != tc.want || m.RunKey != "" {
			t.Errorf("%s: RunKey %q, Extra %#v; want Extra run_key %#v", tc.in, m.RunKey, m.Extra, tc.want)
		}
	}
	var m checkpoint.Metadata
	if err := json.Unmarshal([]byte(`{"parents":{},"run-key":"k","source":"input","step":0}`), &m); err != nil || m.RunKey != "k" || m.Extra != nil {
		t.Errorf("run-key: RunKey %q Extra %v err %v", m.RunKey, m.Extra, err)
	}
	b, err := json.Marshal(checkpoint.Metadata{Source: checkpoint.SourceInput, RunKey: "k", Extra: map[string]any{"run_key": "mine"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"parents":{},"run-key":"k","run_key":"mine","source":"input","step":0}`; string(b) != want {
		t.Errorf("Marshal = %s, want %s", b, want)
	}
}
