package runstream_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/runstream"
)

type counter struct{ N int }

func linear(t *testing.T, steps int) *graph.Runnable[counter] {
	t.Helper()
	g := graph.New[counter]()
	prev := graph.START
	for i := range steps {
		name := string(rune('a' + i))
		g.AddNode(name, func(ctx context.Context, s counter) (graph.Update[counter], error) {
			return graph.Set(counter{N: s.N + 1}, "N"), nil
		}).AddEdge(prev, name)
		prev = name
	}
	r, err := g.Compile(graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestNewRefuses(t *testing.T) {
	r := linear(t, 1)
	if _, err := runstream.New(r, runstream.Options{}); !errors.Is(err, runstream.ErrNoAuthorize) {
		t.Errorf("New without Authorize: %v, want ErrNoAuthorize", err)
	}
	bare, _ := graph.New[counter]().AddNode("a", func(ctx context.Context, s counter) (graph.Update[counter], error) {
		return graph.Update[counter]{}, nil
	}).AddEdge(graph.START, "a").Compile()
	if _, err := runstream.New(bare, runstream.Options{Authorize: allowAll}); !errors.Is(err, runstream.ErrNoSaver) {
		t.Errorf("New without a saver: %v, want ErrNoSaver", err)
	}
	if _, err := runstream.New(r, runstream.Options{Authorize: allowAll, MaxClients: -1}); err == nil {
		t.Error("New with a negative MaxClients: no error")
	}
}

// TestRefusedRequests: bad input gets a typed refusal before anything
// streams, and never a replay from the start.
func TestRefusedRequests(t *testing.T) {
	ctx := context.Background()
	r := linear(t, 3)
	if _, err := r.Invoke(ctx, "t1", graph.Update[counter]{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Invoke(ctx, "t2", graph.Update[counter]{}); err != nil {
		t.Fatal(err)
	}
	h1, _ := r.History(ctx, "t1", graph.HistoryOptions{})
	h2, _ := r.History(ctx, "t2", graph.HistoryOptions{})
	oldest := h1[len(h1)-1].Config.CheckpointID
	foreign := h2[0].Config.CheckpointID

	hub := newHub(t, r, runstream.Options{MaxReplay: 2, Authorize: func(req *http.Request, thread string) error {
		switch thread {
		case "secret":
			return errors.New("not yours")
		case "boom":
			panic("authorizer bug")
		}
		return nil
	}})
	srv := serve(t, hub)
	for _, tc := range []struct {
		name, thread, last string
		status             int
		body               string
	}{
		{"malformed", "t1", "not-an-id", http.StatusBadRequest, "no ordinal"},
		{"malformed digest", "t1", oldest + ".1", http.StatusBadRequest, "digest"},
		{"foreign checkpoint", "t1", foreign + ".0", http.StatusBadRequest, "no such checkpoint"},
		{"no such task", "t1", oldest + ".9", http.StatusBadRequest, "no such task"},
		{"too far behind", "t1", oldest + ".0", http.StatusGone, "too far behind"},
		{"refused", "secret", "", http.StatusForbidden, "forbidden"},
		{"authorizer panics", "boom", "", http.StatusInternalServerError, "internal error"},
		{"bad thread", "%7F", "", http.StatusBadRequest, "control character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := connect(t, srv, tc.thread, tc.last)
			if c.status != tc.status || !strings.Contains(c.body, tc.body) {
				t.Errorf("status %d body %q, want %d containing %q", c.status, c.body, tc.status, tc.body)
			}
		})
	}
}

func TestMaxClients(t *testing.T) {
	r := linear(t, 1)
	hub := newHub(t, r, runstream.Options{MaxClients: 1})
	srv := serve(t, hub)
	c := connect(t, srv, "t", "")
	if c.status != http.StatusOK {
		t.Fatalf("first client: %d", c.status)
	}
	if c2 := connect(t, srv, "t", ""); c2.status != http.StatusServiceUnavailable {
		t.Errorf("second client: %d %q, want 503", c2.status, c2.body)
	}
	c.close()
}

// TestCloseEndsStreams: Close ends every open stream and refuses new
// ones; goleak (TestMain) checks nothing is left running.
func TestCloseEndsStreams(t *testing.T) {
	r := linear(t, 1)
	hub := newHub(t, r, runstream.Options{})
	srv := serve(t, hub)
	c := connect(t, srv, "t", "")
	hub.Close()
	for range c.events {
	}
	if c2 := connect(t, srv, "t", ""); c2.status != http.StatusServiceUnavailable {
		t.Errorf("after Close: %d, want 503", c2.status)
	}
}
