package graph_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
)

// putRecorder keeps every PutRequest it passes on (PutChain falls back to
// Put: the embedded interface hides the memory saver's).
type putRecorder struct {
	checkpoint.Saver
	mu   sync.Mutex
	reqs []checkpoint.PutRequest
}

func (p *putRecorder) Put(ctx context.Context, req checkpoint.PutRequest) error {
	p.mu.Lock()
	p.reqs = append(p.reqs, req)
	p.mu.Unlock()
	return p.Saver.Put(ctx, req)
}

// shared reports, for the last request with channel ch and a parent write
// to it, whether the two values are one array, and whether such a request
// was seen.
func (p *putRecorder) shared(ch string) (shared, seen bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := len(p.reqs) - 1; i >= 0; i-- {
		bs := p.reqs[i].Checkpoint.Channels[ch]
		if len(bs) == 0 {
			continue
		}
		for _, tw := range p.reqs[i].ParentWrites {
			for _, w := range tw.Writes {
				if strings.TrimPrefix(w.Channel, "__overwrite__:") == ch {
					d := bs[0].Data
					return len(d) == len(w.Value) && unsafe.SliceData(d) == unsafe.SliceData(w.Value), true
				}
			}
		}
	}
	return false, false
}

// TestWrittenValueEncodedOnce (R22): a field that takes the value a node
// or an update wrote as it is (a last-value field, an overwrite) stores
// the bytes of the write: the checkpoint's channel and the task's write
// share one array, so a big value is encoded once. A field whose value
// a reducer made is encoded on its own.
func TestWrittenValueEncodedOnce(t *testing.T) {
	big := strings.Repeat("x", 1<<16)
	cases := []struct {
		name    string
		channel string
		write   func(ctx context.Context, r *graph.Runnable[State]) error
		shared  bool
	}{
		{"node writes a last-value field", "X", func(ctx context.Context, r *graph.Runnable[State]) error {
			_, err := r.Invoke(ctx, "t", graph.Update[State]{})
			return err
		}, true},
		{"UpdateState of a last-value field", "X", func(ctx context.Context, r *graph.Runnable[State]) error {
			_, err := r.UpdateState(ctx, "t", graph.Set(State{X: big}, "X"), graph.UpdateOptions{AsNode: "w"})
			return err
		}, true},
		{"UpdateState of a merge field", "Tags", func(ctx context.Context, r *graph.Runnable[State]) error {
			_, err := r.UpdateState(ctx, "t", graph.Set(State{Tags: map[string]string{"k": big}}, "Tags"), graph.UpdateOptions{AsNode: "w"})
			return err
		}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			rec := &putRecorder{Saver: checkpoint.NewMemorySaver(nil)}
			r, err := graph.New[State]().
				AddNode("w", func(ctx context.Context, s State) (graph.Update[State], error) {
					return graph.Set(State{X: big}, "X"), nil
				}).
				AddEdge(graph.START, "w").AddEdge("w", graph.END).
				Compile(graph.WithSaver(rec))
			if err != nil {
				t.Fatal(err)
			}
			if err := c.write(ctx, r); err != nil {
				t.Fatal(err)
			}
			shared, seen := rec.shared(c.channel)
			if !seen {
				t.Fatalf("no checkpoint stored channel %s with a task's write to it", c.channel)
			}
			if shared != c.shared {
				t.Errorf("the channel and the write share one array: %v, want %v", shared, c.shared)
			}
		})
	}
}
