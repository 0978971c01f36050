package postgres

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/pgtest"
)

type restartState struct {
	Log []string `lockstep:"append"`
}

// TestDatabaseDownMidRun: the database goes down while a node runs. The
// run's next save fails with an error matching ErrUnavailable, nothing of
// it is half saved, and once the database is back the same process (the
// same DB, never reopened) continues the thread to its end, each node's
// write landing once, and runs new threads.
func TestDatabaseDownMidRun(t *testing.T) {
	url, ctl := pgtest.OwnCluster(t)
	ctx := context.Background()
	db, err := Open(ctx, url, Config{MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	entered, release := make(chan struct{}), make(chan struct{})
	var blocked bool
	node := func(name string) graph.NodeFunc[restartState] {
		return func(ctx context.Context, s restartState) (graph.Update[restartState], error) {
			if name == "b" && !blocked {
				blocked = true
				close(entered)
				<-release
			}
			return graph.Set(restartState{Log: []string{name}}, "Log"), nil
		}
	}
	r, err := graph.New[restartState]().AddNode("a", node("a")).AddNode("b", node("b")).AddNode("c", node("c")).
		AddEdge(graph.START, "a").AddEdge("a", "b").AddEdge("b", "c").Compile(graph.WithSaver(db.Saver()))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := r.Invoke(ctx, "thread-1", graph.Set(restartState{Log: []string{"input"}}, "Log"))
		done <- err
	}()
	<-entered
	ctl("down")
	close(release)
	err = <-done
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("the run with the database down: %v, want an error matching ErrUnavailable", err)
	}
	ctl("up")
	res, err := r.Continue(ctx, "thread-1")
	if err != nil || res.Status != graph.StatusDone {
		t.Fatalf("Continue once the database is back: %v, %v; want done", res.Status, err)
	}
	if want := []string{"input", "a", "b", "c"}; !slices.Equal(res.Values.Log, want) {
		t.Errorf("the thread's log = %v, want %v (each write once)", res.Values.Log, want)
	}
	hist, err := r.History(ctx, "thread-1", graph.HistoryOptions{})
	if err != nil {
		t.Fatalf("History: %v", err)
	}
	for _, h := range hist {
		if n := len(h.Values.Log); n > 4 {
			t.Errorf("a checkpoint holds %d log entries: %v", n, h.Values.Log)
		}
	}
	if res, err := r.Invoke(ctx, "thread-2", graph.Set(restartState{}, "Log")); err != nil || res.Status != graph.StatusDone {
		t.Errorf("a new thread after the restart: %v, %v; want done", res.Status, err)
	}
}
