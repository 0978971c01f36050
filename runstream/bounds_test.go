package runstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/interrupt"
	"github.com/lockstepgo/lockstep/runstream"
)

// TestJoinWaitingThread: a client that joins a waiting thread without
// Last-Event-ID gets its state and its pending interrupt, once.
func TestJoinWaitingThread(t *testing.T) {
	ctx := context.Background()
	g := newGate()
	close(g.open)
	r, err := orderGraph(g).Compile(graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Invoke(ctx, "t", graph.Update[order]{}); err != nil {
		t.Fatal(err)
	}
	hub := newHub(t, r, runstream.Options{})
	srv := serve(t, hub)
	c := connect(t, srv, "t", "")
	es := c.until(named(runstream.EventInterrupt))
	if len(es) != 2 || es[0].Name != runstream.EventValues {
		t.Fatalf("events %v, want values then interrupt", es)
	}
	var d struct {
		Interrupts []interrupt.Interrupt
		Next       []string
	}
	if err := json.Unmarshal([]byte(es[1].Data), &d); err != nil || len(d.Interrupts) != 1 || d.Next[0] != "review" {
		t.Fatalf("interrupt data %s: %v", es[1].Data, err)
	}
	// The resume's events follow, and the interrupt is not sent again.
	if _, err := r.Resume(ctx, "t", graph.Command[order]{Resume: "no"}); err != nil {
		t.Fatal(err)
	}
	rest := c.until(named(runstream.EventDone))
	if n := count(rest, runstream.EventInterrupt); n != 0 {
		t.Errorf("%d more interrupt events after the resume", n)
	}
}

type big struct{ Blob string }

// TestHugeValueIsStub: a state above MaxEventBytes is sent as a stub
// with its ID, and the stream goes on.
func TestHugeValueIsStub(t *testing.T) {
	ctx := context.Background()
	r, err := graph.New[big]().AddNode("grow", func(ctx context.Context, s big) (graph.Update[big], error) {
		return graph.Set(big{Blob: strings.Repeat("x", 10000)}, "Blob"), nil
	}).AddEdge(graph.START, "grow").Compile(graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	if err != nil {
		t.Fatal(err)
	}
	hub := newHub(t, r, runstream.Options{MaxEventBytes: 1000})
	srv := serve(t, hub)
	c := connect(t, srv, "t", "")
	if err := hub.Run(ctx, "t", graph.StartWith(graph.Update[big]{})); err != nil {
		t.Fatal(err)
	}
	es := c.until(named(runstream.EventDone))
	stubs := 0
	for _, e := range es {
		if len(e.Data) > 1000 {
			t.Errorf("event %s %s: %d bytes of data", e.ID, e.Name, len(e.Data))
		}
		var d struct {
			Truncated bool
			Bytes     int
		}
		_ = json.Unmarshal([]byte(e.Data), &d)
		if d.Truncated {
			stubs++
			if d.Bytes <= 1000 || e.ID == "" {
				t.Errorf("stub %s: %s", e.ID, e.Data)
			}
		}
	}
	if stubs != 2 { // the update of grow and the values after it
		t.Errorf("%d stubs, want 2: %v", stubs, es)
	}
}

// stuckWriter is a ResponseWriter whose client does not read: a write
// blocks until its deadline passes (or release), as a full socket does.
type stuckWriter struct {
	header   http.Header
	mu       sync.Mutex
	deadline time.Time
	release  chan struct{}
	writes   int
}

func (w *stuckWriter) Header() http.Header { return w.header }
func (w *stuckWriter) WriteHeader(int)     {}
func (w *stuckWriter) Flush()              {}
func (w *stuckWriter) SetWriteDeadline(t time.Time) error {
	w.mu.Lock()
	w.deadline = t
	w.mu.Unlock()
	return nil
}

var errDeadline = errors.New("write deadline passed")

func (w *stuckWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	w.writes++
	d := time.Until(w.deadline)
	w.mu.Unlock()
	select {
	case <-w.release:
		return len(b), nil
	case <-time.After(d):
		return 0, errDeadline
	}
}

// TestClientThatNeverReads: a run is never held up by a client that does
// not read (its best-effort events are dropped), and the client's stream
// ends at its write deadline.
func TestClientThatNeverReads(t *testing.T) {
	ctx := context.Background()
	r, err := graph.New[counter]().AddNode("chatty", func(ctx context.Context, s counter) (graph.Update[counter], error) {
		for i := range 1000 {
			graph.Emit(ctx, i)
		}
		return graph.Set(counter{N: 1}, "N"), nil
	}).AddEdge(graph.START, "chatty").Compile(graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	if err != nil {
		t.Fatal(err)
	}
	hub := newHub(t, r, runstream.Options{Queue: 4, WriteTimeout: 50 * time.Millisecond})
	w := &stuckWriter{header: http.Header{}, release: make(chan struct{})}
	req := httptest.NewRequest(http.MethodGet, "/threads/t/events", nil)
	req.SetPathValue("thread", "t")
	served := make(chan struct{})
	go func() {
		defer close(served)
		hub.ServeHTTP(w, req)
	}()
	if err := hub.Run(ctx, "t", graph.StartWith(graph.Update[counter]{})); err != nil {
		t.Fatal(err)
	}
	select {
	case <-served:
	case <-time.After(wait):
		t.Fatal("the stream of a client that never reads did not end")
	}
}

type touchy struct{ V bomb }

// explode makes every bomb's MarshalJSON panic: the reading process's
// state encodes differently from the writing one's.
var explode atomic.Bool

type bomb struct{ Armed bool }

func (b bomb) MarshalJSON() ([]byte, error) {
	if b.Armed && explode.Load() {
		panic("bomb")
	}
	type plain bomb
	return json.Marshal(plain(b))
}

// TestMarshalPanics: a MarshalJSON that panics in the state ends the
// stream with an error event, and one in an emitted value loses that
// value; neither reaches the process.
func TestMarshalPanics(t *testing.T) {
	ctx := context.Background()
	r, err := graph.New[touchy]().AddNode("arm", func(ctx context.Context, s touchy) (graph.Update[touchy], error) {
		explode.Store(true)
		graph.Emit(ctx, bomb{Armed: true})
		graph.Emit(ctx, bomb{})
		explode.Store(false)
		return graph.Set(touchy{V: bomb{Armed: true}}, "V"), nil
	}).AddEdge(graph.START, "arm").Compile(graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { explode.Store(false) })
	hub := newHub(t, r, runstream.Options{})
	srv := serve(t, hub)
	c := connect(t, srv, "t", "")
	if err := hub.Run(ctx, "t", graph.StartWith(graph.Update[touchy]{})); err != nil {
		t.Fatal(err)
	}
	// The first custom event is the second emitted: the first did not
	// encode.
	es := c.until(named(runstream.EventCustom))
	if e := es[len(es)-1]; !strings.Contains(e.Data, `"data":{"Armed":false}`) {
		t.Errorf("custom event %s, want the unarmed bomb", e.Data)
	}
	c.close()
	explode.Store(true)
	c2 := connect(t, srv, "t", "")
	if e := c2.next(); e.Name != runstream.EventError {
		t.Errorf("first event %s %s, want an error event", e.Name, e.Data)
	}
	for range c2.events {
	} // the stream ends after its error event
}
