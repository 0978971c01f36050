package graph_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
)

// countingSaver counts the saver's write transactions (a PutChain is one)
// and fails them while fail is set.
type countingSaver struct {
	checkpoint.Saver
	mu    sync.Mutex
	calls []int // checkpoints per Put or PutChain call
	fail  bool
}

func (c *countingSaver) setFail(fail bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fail = fail
}

var errInjected = errors.New("injected saver failure")

func (c *countingSaver) record(n int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fail {
		return errInjected
	}
	c.calls = append(c.calls, n)
	return nil
}

func (c *countingSaver) Put(ctx context.Context, req checkpoint.PutRequest) error {
	if err := c.record(1); err != nil {
		return err
	}
	return c.Saver.Put(ctx, req)
}

func (c *countingSaver) PutWrites(ctx context.Context, req checkpoint.WritesRequest) error {
	if err := c.record(0); err != nil {
		return err
	}
	return c.Saver.PutWrites(ctx, req)
}

// chainSaver is a countingSaver that also saves chains in one call.
type chainSaver struct{ *countingSaver }

func (c chainSaver) PutChain(ctx context.Context, reqs []checkpoint.PutRequest) error {
	if err := c.record(len(reqs)); err != nil {
		return err
	}
	return c.Saver.(checkpoint.ChainPutter).PutChain(ctx, reqs)
}

// historyOf returns (source, step) of every checkpoint of the thread, oldest
// first, checking that each is the parent of the next.
func historyOf(t *testing.T, r *graph.Runnable[State], thread string) []string {
	t.Helper()
	hist, err := r.History(context.Background(), thread, graph.HistoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i := len(hist) - 1; i >= 0; i-- {
		s := hist[i]
		if i < len(hist)-1 && (s.ParentConfig == nil || s.ParentConfig.CheckpointID != hist[i+1].Config.CheckpointID) {
			t.Errorf("checkpoint %s: parent %v, want %s", s.Config.CheckpointID, s.ParentConfig, hist[i+1].Config.CheckpointID)
		}
		got = append(got, string(s.Metadata.Source)+":"+string(rune('0'+s.Metadata.Step+1)))
	}
	return got
}

// TestInputSavedWithStart: a run's input checkpoint is committed in the
// same transaction as its __start__ step's when the saver can save a
// chain, and with its own Put when it cannot; the history is the same
// either way (LangGraph's: input at step -1, __start__ at step 0, then one
// per step), and a thread that already has history gets the same.
func TestInputSavedWithStart(t *testing.T) {
	g := graph.New[State]().AddNode("a", logNode(nil, "a")).AddNode("b", logNode(nil, "b")).
		AddEdge(graph.START, "a").AddEdge("a", "b")
	// Steps are shown +1: input is step -1.
	wantHistory := []string{"input:0", "loop:1", "loop:2", "loop:3"}
	tests := []struct {
		name      string
		wrap      func(*countingSaver) checkpoint.Saver
		wantCalls []int
	}{
		{"chain", func(c *countingSaver) checkpoint.Saver { return chainSaver{c} }, []int{2, 1, 1}},
		{"put only", func(c *countingSaver) checkpoint.Saver { return c }, []int{1, 1, 1, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cs := &countingSaver{Saver: checkpoint.NewMemorySaver(nil)}
			r := mustCompile(t, g, graph.WithSaver(tc.wrap(cs)))
			res, err := r.Invoke(context.Background(), "t", graph.Update[State]{})
			if err != nil || res.Status != graph.StatusDone {
				t.Fatalf("Invoke: %v %v", res.Status, err)
			}
			if diff := cmp.Diff(tc.wantCalls, cs.calls); diff != "" {
				t.Errorf("checkpoints per write transaction (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(wantHistory, historyOf(t, r, "t")); diff != "" {
				t.Errorf("history (-want +got):\n%s", diff)
			}
			// Again on the same thread: the new input's chain goes on from
			// the head.
			cs.calls = nil
			if _, err := r.Invoke(context.Background(), "t", graph.Update[State]{}); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantCalls, cs.calls); diff != "" {
				t.Errorf("second run: checkpoints per write transaction (-want +got):\n%s", diff)
			}
			more := []string{"input:4", "loop:5", "loop:6", "loop:7"}
			if diff := cmp.Diff(append(wantHistory, more...), historyOf(t, r, "t")); diff != "" {
				t.Errorf("history after the second run (-want +got):\n%s", diff)
			}
		})
	}
}

// TestInputHeldAndLost: when the transaction holding a run's input and
// __start__ checkpoints fails, the run fails with the saver's error and
// nothing of it is saved: a new thread does not exist, an existing one
// keeps its head. The next run on the thread is not misled by the lost
// input (it is not taken for the thread's head).
func TestInputHeldAndLost(t *testing.T) {
	g := graph.New[State]().AddNode("a", logNode(nil, "a")).AddEdge(graph.START, "a")
	cs := &countingSaver{Saver: checkpoint.NewMemorySaver(nil)}
	r := mustCompile(t, g, graph.WithSaver(chainSaver{cs}))
	ctx := context.Background()

	cs.setFail(true)
	if _, err := r.Invoke(ctx, "new", graph.Update[State]{}); !errors.Is(err, errInjected) {
		t.Fatalf("Invoke with a failing saver: %v, want the saver's error", err)
	}
	if _, err := r.GetState(ctx, "new"); !errors.Is(err, graph.ErrThreadNotFound) {
		t.Errorf("GetState after the lost input: %v, want ErrThreadNotFound", err)
	}
	cs.setFail(false)
	if _, err := r.Invoke(ctx, "new", graph.Update[State]{}); err != nil {
		t.Fatalf("Invoke after the failure: %v", err)
	}
	head, err := r.GetState(ctx, "new")
	if err != nil {
		t.Fatal(err)
	}

	cs.setFail(true)
	if _, err := r.Invoke(ctx, "new", graph.Update[State]{}); !errors.Is(err, errInjected) {
		t.Fatalf("second Invoke with a failing saver: %v, want the saver's error", err)
	}
	cs.setFail(false)
	after, err := r.GetState(ctx, "new")
	if err != nil || after.Config != head.Config {
		t.Errorf("head after the lost input = %+v, %v; want %+v", after.Config, err, head.Config)
	}
	res, err := r.Invoke(ctx, "new", graph.Update[State]{})
	if err != nil || !cmp.Equal(res.Values.Log, []string{"a", "a"}) {
		t.Errorf("third Invoke = %v, %v; want the log [a a]", res.Values.Log, err)
	}
	if diff := cmp.Diff([]string{"input:0", "loop:1", "loop:2", "input:3", "loop:4", "loop:5"}, historyOf(t, r, "new")); diff != "" {
		t.Errorf("history (-want +got):\n%s", diff)
	}
}

// TestStartStepFails: when the __start__ step fails (a router on START
// returns an error), the input checkpoint is saved on its own with the
// failure as its pending write, as before: the thread reads as failed,
// not as missing, and Continue runs the step again.
func TestStartStepFails(t *testing.T) {
	var mu sync.Mutex
	broken := true
	route := func(ctx context.Context, s State) ([]string, error) {
		mu.Lock()
		defer mu.Unlock()
		if broken {
			return nil, errors.New("router down")
		}
		return []string{"a"}, nil
	}
	g := graph.New[State]().AddNode("a", logNode(nil, "a")).AddConditionalEdges(graph.START, route, "a")
	cs := &countingSaver{Saver: checkpoint.NewMemorySaver(nil)}
	r := mustCompile(t, g, graph.WithSaver(chainSaver{cs}))
	ctx := context.Background()
	if _, err := r.Invoke(ctx, "t", graph.Update[State]{}); err == nil {
		t.Fatal("Invoke with a failing router succeeded")
	}
	st, err := r.GetState(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != graph.StatusFailed || st.Metadata.Source != checkpoint.SourceInput || !cmp.Equal(st.Next, []string{graph.START}) {
		t.Errorf("after the failed __start__ step: status %s, source %s, next %v; want failed, input, [%s]", st.Status, st.Metadata.Source, st.Next, graph.START)
	}
	if diff := cmp.Diff([]int{1, 0}, cs.calls); diff != "" {
		t.Errorf("write transactions (-want +got; 1 a checkpoint, 0 pending writes):\n%s", diff)
	}
	mu.Lock()
	broken = false
	mu.Unlock()
	res, err := r.Continue(ctx, "t")
	if err != nil || !cmp.Equal(res.Values.Log, []string{"a"}) {
		t.Errorf("Continue = %v, %v; want the log [a]", res.Values.Log, err)
	}
}
