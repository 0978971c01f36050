package scripted_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/lockstepgo/lockstep/nodes"
	"github.com/lockstepgo/lockstep/nodes/scripted"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func user(text string) nodes.Message { return nodes.Message{Role: nodes.RoleUser, Content: text} }

func assistant(text string) nodes.Message {
	return nodes.Message{Role: nodes.RoleAssistant, Content: text}
}

// TestTurns: the turn is chosen by the assistant messages in the
// conversation, so the same conversation always gets the same answer.
func TestTurns(t *testing.T) {
	m := scripted.New(
		scripted.CallTools("Looking.", scripted.Call("c1", "search", `{"q":"x"}`)),
		scripted.Say("Found it."),
	)
	ctx := context.Background()
	tests := []struct {
		name string
		msgs []nodes.Message
		want nodes.Message
	}{
		{"first", []nodes.Message{user("hi")}, nodes.Message{Role: nodes.RoleAssistant, Content: "Looking.", ToolCalls: []nodes.ToolCall{{ID: "c1", Name: "search", Arguments: `{"q":"x"}`}}}},
		{"second", []nodes.Message{user("hi"), assistant("Looking."), {Role: nodes.RoleTool, ToolCallID: "c1", Content: "[]"}}, assistant("Found it.")},
		{"first again (a restarted run)", []nodes.Message{{Role: nodes.RoleSystem, Content: "be brief"}, user("hi")}, nodes.Message{Role: nodes.RoleAssistant, Content: "Looking.", ToolCalls: []nodes.ToolCall{{ID: "c1", Name: "search", Arguments: `{"q":"x"}`}}}},
	}
	for _, tc := range tests {
		got, err := m.Generate(ctx, tc.msgs, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if d := cmp.Diff(tc.want, got); d != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, d)
		}
	}
	var turns []int
	for _, c := range m.Calls() {
		turns = append(turns, c.Turn)
	}
	if d := cmp.Diff([]int{1, 2, 1}, turns); d != "" {
		t.Errorf("recorded turns (-want +got):\n%s", d)
	}
	// An answer is the model's own copy: changing it does not change the script.
	got, _ := m.Generate(ctx, []nodes.Message{user("hi")}, nil)
	got.ToolCalls[0].Name = "changed"
	again, _ := m.Generate(ctx, []nodes.Message{user("hi")}, nil)
	if again.ToolCalls[0].Name != "search" {
		t.Error("the script was changed through an answer")
	}
}

// TestFailsLoudly: past the script's end, or when an expectation fails, a
// *TurnError names the turn; a turn's Err is returned as is.
func TestFailsLoudly(t *testing.T) {
	provider := errors.New("429 from the provider")
	m := scripted.New(
		scripted.Say("one").Expecting(scripted.ExpectTools("search")),
		scripted.Turn{Err: provider},
	)
	ctx := context.Background()
	search := []nodes.Definition{{Name: "search"}}

	if _, err := m.Generate(ctx, []nodes.Message{user("hi")}, search); err != nil {
		t.Fatalf("expected tools: %v", err)
	}
	_, err := m.Generate(ctx, []nodes.Message{user("hi")}, []nodes.Definition{{Name: "close"}})
	var te *scripted.TurnError
	if !errors.Is(err, scripted.ErrUnexpected) || !errors.As(err, &te) || te.Turn != 1 || !strings.Contains(err.Error(), "turn 1 of a script of 2") {
		t.Errorf("unexpected tools: %v", err)
	}
	if _, err := m.Generate(ctx, []nodes.Message{user("hi"), assistant("one")}, nil); err != provider {
		t.Errorf("turn 2: %v, want the provider's error", err)
	}
	_, err = m.Generate(ctx, []nodes.Message{user("hi"), assistant("one"), assistant("two")}, nil)
	if !errors.Is(err, scripted.ErrExhausted) || !errors.As(err, &te) || te.Turn != 3 || te.Turns != 2 {
		t.Errorf("past the end: %v", err)
	}
	if errors.Is(err, scripted.ErrUnexpected) {
		t.Error("an exhausted script matches ErrUnexpected")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := m.Generate(cctx, []nodes.Message{user("hi")}, search); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	if n := len(m.Calls()); n != 5 {
		t.Errorf("%d calls recorded, want 5", n)
	}
}

func TestExpectToolResult(t *testing.T) {
	msgs := []nodes.Message{user("hi"), {Role: nodes.RoleTool, ToolCallID: "c1", Content: `{"status":"executed"}`}}
	for _, tc := range []struct {
		id, substr string
		ok         bool
	}{{"c1", "executed", true}, {"c1", "failed", false}, {"c2", "executed", false}} {
		if err := scripted.ExpectToolResult(tc.id, tc.substr)(msgs, nil); (err == nil) != tc.ok {
			t.Errorf("ExpectToolResult(%q, %q) = %v", tc.id, tc.substr, err)
		}
	}
}

// TestConcurrent: one model answers many callers at once; every call is
// recorded, and the recording is a copy.
func TestConcurrent(t *testing.T) {
	m := scripted.New(scripted.Say("a"), scripted.Say("b"))
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			msgs := []nodes.Message{user(fmt.Sprint(i))}
			if i%2 == 1 {
				msgs = append(msgs, assistant("a"))
			}
			got, err := m.Generate(context.Background(), msgs, nil)
			if want := []string{"a", "b"}[i%2]; err != nil || got.Content != want {
				t.Errorf("caller %d: %q, %v; want %q", i, got.Content, err, want)
			}
		})
	}
	wg.Wait()
	calls := m.Calls()
	if len(calls) != 64 {
		t.Fatalf("%d calls", len(calls))
	}
	calls[0].Messages[0].Content = "changed"
	if m.Calls()[0].Messages[0].Content == "changed" {
		t.Error("Calls returned the model's own record")
	}
}
