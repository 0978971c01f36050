package nodes_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/nodes"
)

func TestMemoKey(t *testing.T) {
	a := nodes.MemoKey("search", "1", []byte(`{"q":"x"}`))
	for _, other := range []string{
		nodes.MemoKey("search", "2", []byte(`{"q":"x"}`)),
		nodes.MemoKey("searc", "h1", []byte(`{"q":"x"}`)),
		nodes.MemoKey("search", "1", []byte(`{"q":"y"}`)),
		nodes.MemoKey("search1", "", []byte(`{"q":"x"}`)),
	} {
		if other == a {
			t.Errorf("memo keys collide: %s", a)
		}
	}
	if a != nodes.MemoKey("search", "1", []byte(`{"q":"x"}`)) {
		t.Error("memo key is not deterministic")
	}
}

// TestMemoRules (R29): only reads are memoised; errors are not; a new tool
// version misses; destructive and non-idempotent calls never touch the memo.
func TestMemoRules(t *testing.T) {
	ctx := context.Background()
	tr := &trace{}
	runs := &counter{}
	body := func(name string) func(context.Context, Path, nodes.Env) (string, error) {
		return func(ctx context.Context, p Path, env nodes.Env) (string, error) {
			if runs.inc(name) == 1 && p.Path == "fail-once" && name == "read" {
				return "", &nodes.HTTPError{Status: 404}
			}
			return name + ":" + p.Path, nil
		}
	}
	read := mustTool(t)(nodes.NewTool("read", "Read.", body("read"), nodes.Idempotent()))
	readV2 := mustTool(t)(nodes.NewTool("read", "Read.", body("read_v2"), nodes.Idempotent(), nodes.Version("2")))
	destructive := mustTool(t)(nodes.NewTool("wipe", "Wipe.", body("wipe"), nodes.Idempotent(), nodes.Destructive(approval.RiskHigh)))
	write := mustTool(t)(nodes.NewTool("append", "Append.", body("append")))
	memo := spyMemo{tr, nodes.NewMemo(nil)}
	exec := func(ex *nodes.Executor, tool, scope, path string) (nodes.Result, error) {
		return ex.Execute(ctx, nodes.Call{Tool: tool, Args: json.RawMessage(`{"path":"` + path + `"}`), Scope: scope, Memo: memo})
	}
	ex, _ := nodes.NewExecutor([]*nodes.Tool{read, destructive, write}, nodes.WithPolicy(nodes.AlwaysApprove()))
	// The same destructive call under two operations (threads) runs twice
	// and never reads or fills the memo; so does a plain write.
	for _, scope := range []string{"t1", "t2"} {
		if _, err := exec(ex, "wipe", scope, "/d"); err != nil {
			t.Fatal(err)
		}
		if _, err := exec(ex, "append", scope, "/d"); err != nil {
			t.Fatal(err)
		}
	}
	if got := tr.take(); len(got) != 0 || runs.get("wipe") != 2 || runs.get("append") != 2 {
		t.Errorf("destructive/write touched the memo %v, or ran %d/%d times", got, runs.get("wipe"), runs.get("append"))
	}
	// Errors are not cached.
	if _, err := exec(ex, "read", "t1", "fail-once"); !errors.Is(err, nodes.ErrToolFailed) {
		t.Fatal(err)
	}
	if res, err := exec(ex, "read", "t1", "fail-once"); err != nil || res.Status != nodes.StatusExecuted {
		t.Errorf("after an error: %+v, %v; want a fresh execution", res, err)
	}
	if d := cmp.Diff([]string{"memo.get:false", "memo.get:false", "memo.get:false", "memo.get:false", "memo.put:read"}, tr.take()); d != "" {
		t.Errorf("memo traffic (-want +got):\n%s", d)
	}
	// A hit, then a new version of the tool misses.
	if res, err := exec(ex, "read", "t1", "fail-once"); err != nil || res.Status != nodes.StatusCacheHit {
		t.Errorf("repeat: %+v, %v", res, err)
	}
	ex2, _ := nodes.NewExecutor([]*nodes.Tool{readV2})
	if res, err := exec(ex2, "read", "t1", "fail-once"); err != nil || res.Status != nodes.StatusExecuted || string(res.Output) != `"read_v2:fail-once"` {
		t.Errorf("new version: %+v, %v", res, err)
	}
}

// TestMemoSingleflight (R29): 32 goroutines make the same read at once; it
// runs once.
func TestMemoSingleflight(t *testing.T) {
	runs := &counter{}
	gate := make(chan struct{})
	read := mustTool(t)(nodes.NewTool("slow_read", "Read slowly.", func(ctx context.Context, p Path, env nodes.Env) (string, error) {
		runs.inc("read")
		<-gate
		return p.Path, nil
	}, nodes.Idempotent()))
	var logs logBuffer
	ex, _ := nodes.NewExecutor([]*nodes.Tool{read}, nodes.WithLogger(logs.Logger()))
	memo := nodes.NewMemo(nil)
	var wg sync.WaitGroup
	results := make([]nodes.Result, 32)
	for i := range 32 {
		wg.Go(func() {
			res, err := ex.Execute(context.Background(), nodes.Call{ID: string(rune('A' + i)), Tool: "slow_read", Args: json.RawMessage(`{"path":"p"}`), Scope: "t", Memo: memo})
			if err != nil {
				t.Error(err)
			}
			results[i] = res
		})
	}
	time.Sleep(20 * time.Millisecond)
	close(gate)
	wg.Wait()
	executed := 0
	for i, r := range results {
		if r.Status == nodes.StatusExecuted {
			executed++
		}
		if r.CallID != string(rune('A'+i)) || string(r.Output) != `"p"` {
			t.Errorf("result %d: %+v", i, r)
		}
	}
	if runs.get("read") != 1 || executed != 1 {
		t.Errorf("ran %d times, %d executed results; want 1 and 1", runs.get("read"), executed)
	}
}

// TestMemoPersistsWithThread: the memo is saved with the thread; a later
// turn, run by a new process (a new executor and graph over the same
// saver), still hits.
func TestMemoPersistsWithThread(t *testing.T) {
	ctx := context.Background()
	saver := checkpoint.NewMemorySaver(nil)
	d := &desk{}
	search := func(id string) nodes.Message {
		return nodes.Message{ToolCalls: []nodes.ToolCall{call(id, "search_tickets", `{"query":"vpn"}`)}}
	}
	script := turns(search("s1"), nodes.Message{Content: "found"}, search("s2"), nodes.Message{Content: "same"})
	build := func() *graph.Runnable[nodes.AgentState] {
		ex, _ := nodes.NewExecutor([]*nodes.Tool{d.searchTool(t)})
		tn, _ := nodes.ToolNode(ex)
		return agentGraph(t, scriptedModel(script), tn, saver)
	}
	if _, err := build().Invoke(ctx, "th", userSays("vpn?")); err != nil {
		t.Fatal(err)
	}
	res, err := build().Invoke(ctx, "th", userSays("vpn again?"))
	if err != nil {
		t.Fatal(err)
	}
	tm := toolMessages(res.Values.Messages)
	if d.calls.get("search_tickets") != 1 || observation(t, tm[1]).Status != nodes.StatusCacheHit {
		t.Errorf("searches %d, second result %s", d.calls.get("search_tickets"), tm[1].Content)
	}
}
