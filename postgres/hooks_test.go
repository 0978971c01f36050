package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// pointRecorder records the hook points a saver passes.
type pointRecorder struct {
	mu  sync.Mutex
	got []string
}

func (r *pointRecorder) hit(p string) {
	r.mu.Lock()
	r.got = append(r.got, p)
	r.mu.Unlock()
}

func (r *pointRecorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	got := r.got
	r.got = nil
	return got
}

// TestHookPoints: each write calls Config.Hook at the points its doc
// names, in order, and a refused write calls no ".afterCommit" (the crash
// tests kill at these names: a point that moved or vanished would leave a
// commit untested without failing anything).
func TestHookPoints(t *testing.T) {
	rec := &pointRecorder{}
	db := openTest(t, Config{Hook: rec.hit})
	s := db.Saver()
	ctx := t.Context()
	l := checkpoint.Lease{Owner: "run-1", TTL: time.Minute}
	noop := func(context.Context, any) error { return nil }
	c1, c2, c3 := "01J00000000000000000000001", "01J00000000000000000000002", "01J00000000000000000000003"
	put := func(id, parent string, step int, joins ...checkpoint.Join) checkpoint.PutRequest {
		return checkpoint.PutRequest{Thread: "t-1", Lease: l, Joins: joins, Checkpoint: checkpoint.Checkpoint{ID: id, ParentID: parent,
			Metadata: checkpoint.Metadata{Source: checkpoint.SourceLoop, Step: step}, Versions: map[string]string{"x": id},
			Channels: map[string][]checkpoint.Blob{"x": {{Version: id, Data: json.RawMessage(`1`)}}}}}
	}
	writes := func(head string, joins ...checkpoint.Join) checkpoint.WritesRequest {
		return checkpoint.WritesRequest{Ref: checkpoint.Ref{Thread: "t-1", ID: head}, Lease: l, Joins: joins,
			Tasks: []checkpoint.TaskWrites{{TaskID: "task-" + head, Node: "n", Path: "pull", Writes: []checkpoint.Write{{Channel: "x", Value: json.RawMessage(`2`)}}}}}
	}
	steps := []struct {
		name string
		do   func() error
		want []string
	}{
		{"put, one round trip", func() error { return s.Put(ctx, put(c1, "", 0)) },
			[]string{"postgres.put.beforeCommit", "postgres.put.afterCommit"}},
		{"put refused", func() error { return s.Put(ctx, put(c3, c2, 2)) }, // c2 is not the head
			[]string{"postgres.put.beforeCommit"}},
		{"writes, one round trip", func() error { return s.PutWrites(ctx, writes(c1)) },
			[]string{"postgres.writes.beforeCommit", "postgres.writes.afterCommit"}},
		{"writes with a join", func() error { return s.PutWrites(ctx, writes(c1, noop)) },
			[]string{"postgres.writes.begin", "postgres.writes.beforeCommit", "postgres.join.beforeCommit", "postgres.writes.afterCommit", "postgres.join.afterCommit"}},
		{"put with a join", func() error { return s.Put(ctx, put(c2, c1, 1, noop)) },
			[]string{"postgres.put.begin", "postgres.put.beforeCommit", "postgres.join.beforeCommit", "postgres.put.afterCommit", "postgres.join.afterCommit"}},
		{"fenced", func() error { return s.Fenced(ctx, "t-1", "run-1", noop) },
			[]string{"postgres.fenced.begin", "postgres.fenced.beforeCommit", "postgres.fenced.afterCommit"}},
		{"fenced, another owner", func() error {
			if err := s.Fenced(ctx, "t-1", "run-2", noop); !errors.Is(err, checkpoint.ErrThreadBusy) {
				return err
			}
			return nil
		}, nil},
		{"lease renewed", func() error {
			return s.Claim(ctx, checkpoint.Ref{Thread: "t-1", ID: c2}, checkpoint.Lease{Owner: "run-1", TTL: time.Minute, Held: true})
		}, []string{"postgres.lease.beforeCommit", "postgres.lease.afterCommit"}},
		{"lease in a subgraph's namespace", func() error {
			return s.Claim(ctx, checkpoint.Ref{Thread: "t-1", NS: "sub:1"}, checkpoint.Lease{Owner: "run-1", TTL: time.Minute})
		}, []string{"postgres.lease.begin", "postgres.lease.beforeCommit", "postgres.lease.afterCommit"}},
	}
	for _, st := range steps {
		if err := st.do(); err != nil && !(st.name == "put refused" && errors.Is(err, checkpoint.ErrConflict)) {
			t.Fatalf("%s: %v", st.name, err)
		}
		if diff := cmp.Diff(st.want, rec.take()); diff != "" {
			t.Errorf("%s: hook points (-want +got):\n%s", st.name, diff)
		}
	}
}
