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

// unfencedCount counts the requests that reach the saver without
// Lease.Held (a run taking a lease rather than working under one).
type unfencedCount struct {
	*checkpoint.MemorySaver
	mu       sync.Mutex
	unfenced []string
}

func (s *unfencedCount) note(what string, l checkpoint.Lease) {
	if !l.Held {
		s.mu.Lock()
		s.unfenced = append(s.unfenced, what+" by "+l.Owner)
		s.mu.Unlock()
	}
}

func (s *unfencedCount) Put(ctx context.Context, req checkpoint.PutRequest) error {
	s.note("put", req.Lease)
	return s.MemorySaver.Put(ctx, req)
}

func (s *unfencedCount) PutChain(ctx context.Context, reqs []checkpoint.PutRequest) error {
	for _, r := range reqs {
		s.note("put", r.Lease)
	}
	return s.MemorySaver.PutChain(ctx, reqs)
}

func (s *unfencedCount) PutWrites(ctx context.Context, req checkpoint.WritesRequest) error {
	s.note("writes", req.Lease)
	return s.MemorySaver.PutWrites(ctx, req)
}

func (s *unfencedCount) Claim(ctx context.Context, ref checkpoint.Ref, l checkpoint.Lease) error {
	s.note("claim", l)
	return s.MemorySaver.Claim(ctx, ref, l)
}

// TestClaimedBy: a run given ClaimedBy works under the caller's claim: its
// run ID is the claim's owner, every request it sends is fenced by the
// claim's lease (none takes a lease, so the epoch stays the claim's), and
// the lease is still the claim's when the run ends, for the caller to
// release. A claim lost before the run began lands nothing and runs no
// node. An empty owner, or no saver, is refused before anything runs.
func TestClaimedBy(t *testing.T) {
	type outcome struct {
		Err      string // "" or the sentinel matched
		Ran      int    // node executions
		Unfenced []string
		Owner    string // the lease's owner after the run
		Epoch    uint64
		Run      string // TaskInfo.Run the node saw
	}
	cases := []struct {
		name string
		// prepare holds the thread for the claim, or not, before the run.
		prepare func(t *testing.T, s *checkpoint.MemorySaver, r *graph.Runnable[State])
		owner   string
		saver   bool
		want    outcome
	}{
		{
			name: "new thread under a hold",
			prepare: func(t *testing.T, s *checkpoint.MemorySaver, r *graph.Runnable[State]) {
				holdFor(t, s, r, "c1")
			},
			owner: "c1", saver: true,
			want: outcome{Ran: 1, Owner: "c1", Epoch: 1, Run: "c1"},
		},
		{
			name: "existing thread under a hold",
			prepare: func(t *testing.T, s *checkpoint.MemorySaver, r *graph.Runnable[State]) {
				if _, err := r.Invoke(t.Context(), "t", graph.Set(State{}, "Count")); err != nil {
					t.Fatal(err)
				}
				holdFor(t, s, r, "c2")
			},
			owner: "c2", saver: true,
			want: outcome{Ran: 2, Owner: "c2", Epoch: 2, Run: "c2"},
		},
		{
			name: "claim lost before the run",
			prepare: func(t *testing.T, s *checkpoint.MemorySaver, r *graph.Runnable[State]) {
				holdFor(t, s, r, "c1")
				if err := s.Release(t.Context(), "t", "", "c1"); err != nil {
					t.Fatal(err)
				}
			},
			owner: "c1", saver: true,
			want: outcome{Err: "ErrThreadBusy", Epoch: 1},
		},
		{
			name:  "empty owner",
			owner: "", saver: true,
			want: outcome{Err: "ErrInvalidInput"},
		},
		{
			name:  "no saver",
			owner: "c1",
			want:  outcome{Err: "ErrNoSaver"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mem := checkpoint.NewMemorySaver(nil)
			s := &unfencedCount{MemorySaver: mem}
			var mu sync.Mutex
			ran, seen := 0, ""
			g := graph.New[State]()
			g.AddNode("a", func(ctx context.Context, st State) (graph.Update[State], error) {
				info, _ := graph.TaskFrom(ctx)
				mu.Lock()
				ran++
				seen = info.Run
				mu.Unlock()
				return graph.Set(State{Count: st.Count + 1}, "Count"), nil
			})
			g.AddEdge(graph.START, "a").AddEdge("a", graph.END)
			opts := []graph.Option{graph.WithRunner("pool")}
			if c.saver {
				opts = append(opts, graph.WithSaver(s))
			}
			r, err := g.Compile(opts...)
			if err != nil {
				t.Fatal(err)
			}
			if c.prepare != nil {
				c.prepare(t, mem, r)
				s.unfenced = nil
				seen = ""
			}
			_, err = r.Invoke(t.Context(), "t", graph.Set(State{}, "Count"), graph.ClaimedBy(c.owner))
			var got outcome
			for name, sentinel := range map[string]error{"ErrThreadBusy": checkpoint.ErrThreadBusy, "ErrInvalidInput": graph.ErrInvalidInput, "ErrNoSaver": graph.ErrNoSaver} {
				if errors.Is(err, sentinel) {
					got.Err = name
				}
			}
			if err != nil && got.Err == "" {
				t.Fatalf("Invoke: %v", err)
			}
			got.Ran, got.Unfenced, got.Run = ran, s.unfenced, seen
			if c.saver {
				if l, err := mem.Lease(t.Context(), "t", ""); err == nil {
					got.Owner, got.Epoch = l.Owner, l.Epoch
				}
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// holdFor claims thread "t" for owner as a pool's claim does.
func holdFor(t *testing.T, s *checkpoint.MemorySaver, r *graph.Runnable[State], owner string) {
	t.Helper()
	if _, err := s.Hold(t.Context(), "t", checkpoint.Lease{Owner: owner, Runner: r.Runner(), TTL: r.LeaseTTL()}); err != nil {
		t.Fatal(err)
	}
}
