package interrupt_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/lockstepgo/lockstep/interrupt"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeResumer answers from a map keyed by interrupt ID and records raises.
type fakeResumer struct {
	task    string
	next    int
	answers map[string]json.RawMessage
	raised  []interrupt.Interrupt
}

func (f *fakeResumer) Answer(q json.RawMessage) (json.RawMessage, string, bool) {
	id := interrupt.ID(f.task, f.next)
	f.next++
	return f.lookup(id, q)
}

func (f *fakeResumer) AnswerKey(key string, q json.RawMessage) (json.RawMessage, string, bool) {
	return f.lookup(interrupt.KeyID(f.task, key), q)
}

func (f *fakeResumer) lookup(id string, q json.RawMessage) (json.RawMessage, string, bool) {
	if a, ok := f.answers[id]; ok {
		return a, id, true
	}
	f.raised = append(f.raised, interrupt.Interrupt{ID: id, Value: q})
	return nil, id, false
}

func TestAskOutsideRuntime(t *testing.T) {
	if _, err := interrupt.Ask[string](context.Background(), "q"); !errors.Is(err, interrupt.ErrNoRuntime) {
		t.Errorf("Ask error = %v, want ErrNoRuntime", err)
	}
	if _, err := interrupt.AskKey[string](context.Background(), "k", "q"); !errors.Is(err, interrupt.ErrNoRuntime) {
		t.Errorf("AskKey error = %v, want ErrNoRuntime", err)
	}
}

type panicky struct{}

func (panicky) MarshalJSON() ([]byte, error) { panic("no") }

type badJSON struct{}

func (badJSON) MarshalJSON() ([]byte, error) { return []byte("{not json"), nil }

type withBad struct {
	Name  string
	Items []item `json:"items"`
	hide  chan int
}

type item struct {
	Price float64
	Meta  map[string]any
}

type embedsBad struct {
	withBad
	P *panicky
}

func TestNonSerialisableValues(t *testing.T) {
	ctx := interrupt.NewContext(context.Background(), &fakeResumer{task: "t"})
	cyclic := map[string]any{}
	cyclic["self"] = cyclic
	for _, tc := range []struct {
		name     string
		v        any
		wantPath string
	}{
		{"NaN", math.NaN(), "$"},
		{"channel", make(chan int), "$"},
		{"func", func() {}, "$"},
		{"panicking marshal", panicky{}, "$"},
		{"invalid JSON", badJSON{}, "$"},
		{"nested infinity", map[string]any{"x": []float64{1, math.Inf(1)}}, `$["x"][1]`},
		{"invalid UTF-8", "\xff\xfe", "$"},
		{"nested bad UTF-8", map[string][]string{"k": {"ok", "a\x80b"}}, `$["k"][1]`},
		{"bad UTF-8 key", map[string]int{"a\xffb": 1}, `$["a\xffb"]`},
		{"unexported only", opaque{secret: "x"}, "$"},
		{"*unexported only", &opaque{secret: "x"}, "$"},
		{"struct field, json name", withBad{Name: "n", Items: []item{{Price: 1}, {Price: math.NaN()}}, hide: make(chan int)}, "$.items[1].Price"},
		{"deep in a map", withBad{Items: []item{{Meta: map[string]any{"a": 1, "b": []any{func() {}}}}}}, `$.items[0].Meta["b"][0]`},
		{"embedded and a marshaler field", embedsBad{P: &panicky{}}, "$.P"},
		{"cycle", cyclic, `$["self"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := interrupt.Ask[string](ctx, tc.v)
			var ve *interrupt.ValueError
			if !errors.Is(err, interrupt.ErrNotSerializable) || !errors.As(err, &ve) || interrupt.Is(err) {
				t.Fatalf("Ask error = %v, want a *ValueError that is not a pause", err)
			}
			if ve.Path != tc.wantPath {
				t.Errorf("Path = %q, want %q (error: %v)", ve.Path, tc.wantPath, err)
			}
		})
	}
}

type opaque struct{ secret string }

type withExported struct {
	Public string
	hidden string
}

type embedsOpaque struct{ opaque }

// TestMarshalKeepsWhatJSONCan: values JSON stores without a loss encode,
// including the ones next to the lossy cases above.
func TestMarshalKeepsWhatJSONCan(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    any
		want string
	}{
		{"valid U+FFFD", "a\ufffdb", "\"a\ufffdb\""},
		{"escaped backslash before ufffd", `\ufffd`, `"\\ufffd"`},
		{"empty struct", struct{}{}, `{}`},
		{"some exported", withExported{Public: "p", hidden: "h"}, `{"Public":"p"}`},
		{"embedded", embedsOpaque{opaque: opaque{secret: "s"}}, `{}`},
		{"time", time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), `"2026-11-30T00:00:00Z"`},
		{"nil", nil, `null`},
		{"nil pointer", (*opaque)(nil), `null`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := interrupt.Marshal(tc.v)
			if err != nil {
				t.Fatalf("Marshal: %v", err)
			}
			if string(got) != tc.want {
				t.Errorf("Marshal = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestIDs(t *testing.T) {
	seen := map[string]string{}
	add := func(label, id string) {
		if len(id) != 32 {
			t.Errorf("%s: ID %q is not 32 hex characters", label, id)
		}
		if prev, dup := seen[id]; dup {
			t.Errorf("%s and %s share ID %s", label, prev, id)
		}
		seen[id] = label
	}
	for _, task := range []string{"task-a", "task-b"} {
		for i := -1; i < 3; i++ {
			add(fmt.Sprintf("%s/%d", task, i), interrupt.ID(task, i))
		}
		for _, k := range []string{"0", "1", "call_1", ""} {
			add(fmt.Sprintf("%s/key %q", task, k), interrupt.KeyID(task, k))
		}
	}
	id1, id2 := interrupt.ID("task-a", 1), interrupt.ID("task-a", 1)
	key1, key2 := interrupt.KeyID("task-a", "k"), interrupt.KeyID("task-a", "k")
	if id1 != id2 || key1 != key2 {
		t.Error("IDs are not stable")
	}
}

func TestAskAnswersAndPauses(t *testing.T) {
	r := &fakeResumer{task: "t", answers: map[string]json.RawMessage{interrupt.ID("t", 0): json.RawMessage(`{"ok":true}`)}}
	ctx := interrupt.NewContext(context.Background(), r)
	type answer struct{ OK bool }
	got, err := interrupt.Ask[answer](ctx, "first?")
	if err != nil || !got.OK {
		t.Fatalf("first Ask = %+v, %v", got, err)
	}
	_, err = interrupt.Ask[answer](ctx, "second?")
	var ie *interrupt.Error
	if !errors.As(fmt.Errorf("wrapped twice: %w", fmt.Errorf("once: %w", err)), &ie) || !interrupt.Is(err) {
		t.Fatalf("second Ask error = %v, want an *interrupt.Error", err)
	}
	want := interrupt.Interrupt{ID: interrupt.ID("t", 1), Value: json.RawMessage(`"second?"`)}
	if diff := cmp.Diff(want, ie.Interrupt); diff != "" {
		t.Errorf("interrupt (-want +got):\n%s", diff)
	}
	// An answer of the wrong shape is an *AnswerError, not a pause.
	r.answers[interrupt.ID("t", 2)] = json.RawMessage(`"not an object"`)
	_, err = interrupt.Ask[answer](ctx, "third?")
	var ae *interrupt.AnswerError
	if !errors.As(err, &ae) || interrupt.Is(err) {
		t.Errorf("third Ask error = %v, want an *AnswerError", err)
	}
	var ni error = fmt.Errorf("ctx: %w", &interrupt.NodeInterrupt{Value: "x"})
	if !interrupt.Is(ni) {
		t.Error("Is does not see a wrapped NodeInterrupt")
	}
	if interrupt.Is(errors.New("plain")) || interrupt.Is(nil) {
		t.Error("Is reports a plain error as a pause")
	}
}

// Error messages name the interrupt, never its value.
func TestMessagesHideValues(t *testing.T) {
	e := &interrupt.Error{Interrupt: interrupt.Interrupt{ID: "abc", Value: json.RawMessage(`"card 4242"`)}}
	n := &interrupt.NodeInterrupt{Value: "card 4242"}
	for _, msg := range []string{e.Error(), n.Error()} {
		if json.Valid([]byte(msg)) || len(msg) == 0 || contains(msg, "4242") {
			t.Errorf("message %q leaks the value", msg)
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// FuzzInterruptValue: any value that Marshal accepts round-trips through
// an interrupt unchanged, and anything it refuses is a *ValueError.
func FuzzInterruptValue(f *testing.F) {
	for _, s := range []string{`"text"`, `{"a":[1,2,{"b":null}]}`, `1e308`, `"\u2028"`, `[]`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		var v any
		if json.Unmarshal([]byte(doc), &v) != nil {
			return
		}
		b, err := interrupt.Marshal(v)
		if err != nil {
			var ve *interrupt.ValueError
			if !errors.As(err, &ve) {
				t.Fatalf("Marshal error %v is not a *ValueError", err)
			}
			return
		}
		in := interrupt.Interrupt{ID: "x", Value: b}
		var back any
		if err := in.Decode(&back); err != nil {
			t.Fatalf("Decode: %v", err)
		}
		b2, _ := json.Marshal(back)
		if string(b) != string(b2) {
			t.Fatalf("round trip changed the value: %s -> %s", b, b2)
		}
	})
}

// A node asks for an answer; the runtime (here a fake) answers it on resume.
func ExampleAsk() {
	resumer := &fakeResumer{task: "task-1"}
	ctx := interrupt.NewContext(context.Background(), resumer)
	_, err := interrupt.Ask[bool](ctx, "ship order 7?")
	var pause *interrupt.Error
	fmt.Println(errors.As(err, &pause), string(pause.Interrupt.Value))

	// On resume the runtime has the answer for that interrupt ID.
	resumer.next, resumer.answers = 0, map[string]json.RawMessage{pause.Interrupt.ID: json.RawMessage("true")}
	ok, err := interrupt.Ask[bool](ctx, "ship order 7?")
	fmt.Println(ok, err)
	// Output:
	// true "ship order 7?"
	// true <nil>
}

// TestFilter: a question asked under WithFilter reaches the Resumer, and
// the *Error, as the filters left it, innermost filter first; the ID does
// not depend on the value, so the answer still reaches the call; a
// filter's result that is not JSON is refused and nothing is raised.
func TestFilter(t *testing.T) {
	replace := func(old, new string) interrupt.Filter {
		return func(v json.RawMessage) json.RawMessage {
			return json.RawMessage(strings.ReplaceAll(string(v), old, new))
		}
	}
	keyed := func(ctx context.Context, q any) (string, error) { return interrupt.AskKey[string](ctx, "k", q) }
	positional := func(ctx context.Context, q any) (string, error) { return interrupt.Ask[string](ctx, q) }
	for _, tc := range []struct {
		name    string
		ask     func(context.Context, any) (string, error)
		filters []interrupt.Filter // outermost first
		id      string
		want    string // the recorded question; "" when refused
	}{
		{"ask", positional, []interrupt.Filter{replace("hunter22", "[X]")}, interrupt.ID("t", 0), `"pw is [X]"`},
		{"ask key", keyed, []interrupt.Filter{replace("hunter22", "[X]")}, interrupt.KeyID("t", "k"), `"pw is [X]"`},
		{"none", positional, nil, interrupt.ID("t", 0), `"pw is hunter22"`},
		{"nil filter", keyed, []interrupt.Filter{nil}, interrupt.KeyID("t", "k"), `"pw is hunter22"`},
		// The inner filter runs first and cannot undo the outer one.
		{"chain", keyed, []interrupt.Filter{replace("[X]", "[Y]"), replace("hunter22", "[X]")}, interrupt.KeyID("t", "k"), `"pw is [Y]"`},
		{"inner undoes", keyed, []interrupt.Filter{replace("hunter22", "[X]"), replace("[X]", "hunter22")}, interrupt.KeyID("t", "k"), `"pw is [X]"`},
		{"not JSON", positional, []interrupt.Filter{replace(`"`, ``)}, interrupt.ID("t", 0), ""},
		{"not UTF-8", keyed, []interrupt.Filter{replace("hunter22", "\xff")}, interrupt.KeyID("t", "k"), ""},
		{"nil result", keyed, []interrupt.Filter{func(json.RawMessage) json.RawMessage { return nil }}, interrupt.KeyID("t", "k"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := &fakeResumer{task: "t", answers: map[string]json.RawMessage{}}
			ctx := interrupt.NewContext(context.Background(), res)
			for _, f := range tc.filters {
				ctx = interrupt.WithFilter(ctx, f)
			}
			_, err := tc.ask(ctx, "pw is hunter22")
			if tc.want == "" {
				var ve *interrupt.ValueError
				if !errors.As(err, &ve) || !errors.Is(err, interrupt.ErrNotSerializable) || len(res.raised) != 0 {
					t.Fatalf("error %v, raised %v; want a *ValueError and nothing raised", err, res.raised)
				}
				return
			}
			var ie *interrupt.Error
			if !errors.As(err, &ie) {
				t.Fatalf("error %v, want a pause", err)
			}
			want := []interrupt.Interrupt{{ID: tc.id, Value: json.RawMessage(tc.want)}}
			if diff := cmp.Diff(want, res.raised); diff != "" {
				t.Errorf("recorded (-want +got):\n%s", diff)
			}
			if ie.Interrupt.ID != tc.id || string(ie.Interrupt.Value) != tc.want {
				t.Errorf("*Error carries %s %s, want %s %s", ie.Interrupt.ID, ie.Interrupt.Value, tc.id, tc.want)
			}
			res.answers[tc.id], res.next = json.RawMessage(`"yes"`), 0
			if got, err := tc.ask(ctx, "pw is hunter22"); err != nil || got != "yes" {
				t.Errorf("after the answer: %q, %v; want yes", got, err)
			}
		})
	}
}
