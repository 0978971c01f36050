package graph_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/interrupt"
)

// storedValue names one stored value of a tuple: a blob of a channel's
// chain or a pending write.
type storedValue struct {
	channel string // the blob's channel; "" for a pending write
	blob    int    // index in the chain, or in Tuple.Pending
}

// storedValues lists the values of tp in a fixed order: the blobs of every
// channel (sorted by name, oldest first), then the pending writes.
func storedValues(tp *checkpoint.Tuple) []storedValue {
	var out []storedValue
	chans := make([]string, 0, len(tp.Checkpoint.Channels))
	for ch := range tp.Checkpoint.Channels {
		chans = append(chans, ch)
	}
	slices.Sort(chans)
	for _, ch := range chans {
		for i := range tp.Checkpoint.Channels[ch] {
			out = append(out, storedValue{channel: ch, blob: i})
		}
	}
	for i := range tp.Pending {
		out = append(out, storedValue{blob: i})
	}
	return out
}

// corruptSaver serves the threads of a real saver with one stored value of
// every tuple replaced: what a reader finds after a disk, a bug or a hand
// edit changed a row whose checksum still matches. It always reads whole
// chains (a saver may ignore GetOptions.Have).
type corruptSaver struct {
	checkpoint.Saver
	pick       int    // which value (modulo their number)
	data       []byte // its new bytes
	flipAppend bool   // also flip a blob's Append flag
}

func (s *corruptSaver) corrupt(tp *checkpoint.Tuple) {
	vals := storedValues(tp)
	if len(vals) == 0 {
		return
	}
	v := vals[s.pick%len(vals)]
	if v.channel == "" {
		pending := slices.Clone(tp.Pending)
		pending[v.blob].Value = s.data
		tp.Pending = pending
		return
	}
	chans := make(map[string][]checkpoint.Blob, len(tp.Checkpoint.Channels))
	for ch, chain := range tp.Checkpoint.Channels {
		chans[ch] = chain
	}
	chain := slices.Clone(chans[v.channel])
	chain[v.blob].Data = s.data
	if s.flipAppend {
		chain[v.blob].Append = !chain[v.blob].Append
	}
	chans[v.channel] = chain
	tp.Checkpoint.Channels = chans
}

// trigger reports whether the value replaced is a node's trigger channel
// ("branch:to:<node>"), whose value carries nothing: the runtime reads only
// its version. (The savers still refuse a value that is not JSON.)
func (s *corruptSaver) trigger() bool {
	tp, err := s.Saver.Get(context.Background(), checkpoint.Ref{Thread: "t"}, checkpoint.GetOptions{})
	if err != nil {
		return false
	}
	vals := storedValues(tp)
	return strings.HasPrefix(vals[s.pick%len(vals)].channel, checkpoint.BranchPrefix)
}

func (s *corruptSaver) Get(ctx context.Context, ref checkpoint.Ref, _ checkpoint.GetOptions) (*checkpoint.Tuple, error) {
	tp, err := s.Saver.Get(ctx, ref, checkpoint.GetOptions{})
	if err != nil {
		return nil, err
	}
	s.corrupt(tp)
	return tp, nil
}

func (s *corruptSaver) List(ctx context.Context, thread string, opts checkpoint.ListOptions) ([]*checkpoint.Tuple, error) {
	tps, err := s.Saver.List(ctx, thread, opts)
	for _, tp := range tps {
		s.corrupt(tp)
	}
	return tps, err
}

// decodeGraph: plan sends two work items and goes on to ask; the work
// items append to Log and merge into Tags (one in a durable step); ask
// saves a durable step and waits on an interrupt. The thread it leaves has
// append chains, a merge map, sends, branch and join channels, and pending
// regular, step and interrupt writes on its head.
func decodeGraph() *graph.Graph[State] {
	return graph.New[State]().
		AddNode("plan", func(ctx context.Context, s State) (graph.Update[State], error) {
			return graph.Set(State{Count: s.Count + 1, X: "planned", Log: []string{"plan"}}, "Count", "X", "Log"), nil
		}).
		AddNode("work", func(ctx context.Context, s State) (graph.Update[State], error) {
			n, err := graph.Durable(ctx, "measure", func(ctx context.Context) (int, error) { return len(s.X), nil })
			if err != nil {
				return graph.Update[State]{}, err
			}
			return graph.Set(State{Log: []string{"work " + s.X}, Tags: map[string]string{s.X: "done"}, Count: n}, "Log", "Tags"), nil
		}).
		AddNode("ask", func(ctx context.Context, s State) (graph.Update[State], error) {
			if _, err := graph.Durable(ctx, "prepare", func(ctx context.Context) (string, error) { return "ready", nil }); err != nil {
				return graph.Update[State]{}, err
			}
			ans, err := interrupt.Ask[string](ctx, map[string]any{"question": "ship?", "count": s.Count})
			if err != nil {
				return graph.Update[State]{}, err
			}
			return graph.Set(State{Answer: ans}, "Answer"), nil
		}).
		AddNode("done", logNode(nil, "done")).
		AddEdge(graph.START, "plan").
		AddSendEdges("plan", func(ctx context.Context, s State) ([]graph.Send[State], error) {
			return []graph.Send[State]{{Node: "work", Arg: State{X: "a"}}, {Node: "work", Arg: State{X: "b"}}}, nil
		}, "work").
		AddEdge("plan", "ask").
		AddJoin([]string{"ask", "work"}, "done")
}

// checkCorrupt fails t unless err is nil or a *checkpoint.CorruptError
// naming thread and a checkpoint.
func checkCorrupt(t *testing.T, op, thread string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	var ce *checkpoint.CorruptError
	if !errors.As(err, &ce) || !errors.Is(err, checkpoint.ErrCorrupt) {
		t.Fatalf("%s: %v (%T), want nil or a *checkpoint.CorruptError", op, err, err)
	}
	if ce.Thread != thread || ce.Checkpoint == "" {
		t.Fatalf("%s: %+v does not name thread %q and a checkpoint", op, ce, thread)
	}
}

// FuzzDecodeCheckpoint (R21, R48): whatever bytes a stored blob or pending
// write holds, reading the thread (GetState, History, Continue, Resume,
// and checkpoint.Inspect as the CLI reads it) never panics: it decodes,
// or fails with a *checkpoint.CorruptError naming the thread and the
// checkpoint; bytes that are not JSON never decode into the state. Runs
// on the thread fail with a typed error (their writes go to a view that
// refuses them, so every input sees the same thread).
func FuzzDecodeCheckpoint(f *testing.F) {
	for i, s := range []string{``, `{`, `null`, `[]`, `{}`, `"x"`, `1`, `[1,2]`, `{"a":1,"a":2}`, `{"A":"x","a":"y"}`, `["x"]trailing`, "\"\xff\"",
		`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`,
		`{"__type":"os/exec.Cmd","Path":"/bin/sh"}`, `[{"id":"x","value":1}]`, `{"when":"before","nodes":["nosuch"]}`, `{"node":"nosuch","arg":{}}`, `1e999`, "\ufeff{}",
		// issue 16: what json.Marshal never writes, read as corrupt
		`[{"id":"x","value":1},{"id":"x","value":2}]`, `[{"ID":"x","value":1}]`, `[{"id":"x","id":"y","value":1}]`, `[{"id":"x"}]`,
		`"\ud800"`, `["\udc00"]`, `{"node":"","arg":{}}`, `[{"node":"","arg":null}]`, `9007199254740993`, `1e-400`, `{"when":"sometime","nodes":[]}`} {
		f.Add(uint16(i*7), []byte(s), i%3 == 0)
	}
	ctx := context.Background()
	base := checkpoint.NewMemorySaver(nil)
	setup, err := decodeGraph().Compile(graph.WithSaver(base))
	if err != nil {
		f.Fatal(err)
	}
	res, err := setup.Invoke(ctx, "t", graph.Set(State{Count: 1}, "Count"))
	if err != nil || res.Status != graph.StatusWaiting {
		f.Fatalf("setup: %s %v", res.Status, err)
	}
	f.Fuzz(func(t *testing.T, pick uint16, data []byte, flip bool) {
		// Every input reads the same base thread through a view that
		// refuses writes.
		cs := &corruptSaver{Saver: base, pick: int(pick), data: data, flipAppend: flip}
		r, err := decodeGraph().Compile(graph.WithSaver(readOnly{cs}))
		if err != nil {
			t.Fatal(err)
		}
		snap, err := r.GetState(ctx, "t")
		checkCorrupt(t, "GetState", "t", err)
		if err == nil && !json.Valid(data) && !cs.trigger() {
			t.Fatalf("GetState decoded %q, which is not JSON: %+v", data, snap)
		}
		_, err = r.History(ctx, "t", graph.HistoryOptions{})
		checkCorrupt(t, "History", "t", err)

		tp, err := cs.Get(ctx, checkpoint.Ref{Thread: "t"}, checkpoint.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = checkpoint.Inspect(tp, true)
		checkCorrupt(t, "Inspect", "t", err)

		// Runs on the corrupt thread fail with a typed error (the view
		// refuses every write, so the base thread stays as it is); they
		// never panic.
		if _, err := r.Resume(ctx, "t", graph.Command[State]{Resume: "yes"}); err != nil && !errors.Is(err, errReadOnly) {
			checkTyped(t, "Resume", err)
		}
		if _, err := r.Continue(ctx, "t"); err != nil && !errors.Is(err, errReadOnly) {
			checkTyped(t, "Continue", err)
		}
	})
}

var errReadOnly = errors.New("read-only view")

// readOnly refuses every write, so a fuzzed run never changes the shared
// base thread.
type readOnly struct{ *corruptSaver }

func (readOnly) Put(context.Context, checkpoint.PutRequest) error          { return errReadOnly }
func (readOnly) PutWrites(context.Context, checkpoint.WritesRequest) error { return errReadOnly }
func (readOnly) Claim(context.Context, checkpoint.Ref, checkpoint.Lease) error {
	return nil
}
func (readOnly) Release(context.Context, string, string, string) error { return nil }
func (readOnly) DeleteThread(context.Context, string) error            { return errReadOnly }

// checkTyped fails t unless err is one of the runtime's typed errors.
func checkTyped(t *testing.T, op string, err error) {
	t.Helper()
	for _, target := range []error{checkpoint.ErrCorrupt, graph.ErrUnknownNode, graph.ErrInvalidInput, graph.ErrNothingToResume,
		graph.ErrPendingInterrupt, graph.ErrNotSerializable, graph.ErrStateTooLarge, graph.ErrUnknownField} {
		if errors.Is(err, target) {
			return
		}
	}
	var ne *graph.NodeError
	if errors.As(err, &ne) {
		return
	}
	t.Fatalf("%s: untyped error %v (%T)", op, err, err)
}
