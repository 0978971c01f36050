package runstream_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/interrupt"
	"github.com/lockstepgo/lockstep/postgres"
	"github.com/lockstepgo/lockstep/runstream"
)

type order struct {
	Log    []string `lockstep:"append"`
	Answer string
}

// orderGraph drafts (streaming two chunks and a custom event), waits at
// review's gate the first time, asks a human, and ships.
func orderGraph(g *gate) *graph.Graph[order] {
	return graph.New[order]().
		AddNode("draft", func(ctx context.Context, s order) (graph.Update[order], error) {
			graph.EmitMessage(ctx, "hel")
			graph.EmitMessage(ctx, "lo")
			graph.Emit(ctx, map[string]int{"progress": 100})
			return graph.Set(order{Log: []string{"draft"}}, "Log"), nil
		}).
		AddNode("review", func(ctx context.Context, s order) (graph.Update[order], error) {
			if err := g.pass(ctx); err != nil {
				return graph.Update[order]{}, err
			}
			a, err := interrupt.Ask[string](ctx, "ship it?")
			if err != nil {
				return graph.Update[order]{}, err
			}
			return graph.Set(order{Log: []string{"review"}, Answer: a}, "Log", "Answer"), nil
		}).
		AddNode("ship", func(ctx context.Context, s order) (graph.Update[order], error) {
			return graph.Set(order{Log: []string{"ship"}}, "Log"), nil
		}).
		AddEdge(graph.START, "draft").AddEdge("draft", "review").AddEdge("review", "ship")
}

// sharedDatabase returns a function that opens one more process's saver
// on one database of backend name: the same SQLite file, or the same
// Postgres schema through a pool of its own.
func sharedDatabase(t *testing.T, name string) func() checkpoint.Saver {
	t.Helper()
	switch name {
	case "sqlite":
		path := filepath.Join(t.TempDir(), "lockstep.db")
		return func() checkpoint.Saver { return sqliteAt(t, path) }
	case "postgres":
		url := os.Getenv("LOCKSTEP_POSTGRES_URL")
		if url == "" {
			if os.Getenv("CI") == "true" {
				t.Fatal("LOCKSTEP_POSTGRES_URL is not set and CI=true: .ci/run starts a cluster and sets it")
			}
			t.Skip("LOCKSTEP_POSTGRES_URL not set: the Postgres case skips (eval \"$(.ci/postgres.sh start /tmp/lockstep-pg)\" starts a cluster)")
		}
		var b [6]byte
		_, _ = rand.Read(b[:])
		schema := "runstream_" + hex.EncodeToString(b[:])
		t.Cleanup(func() { dropSchema(t, url, schema) })
		return func() checkpoint.Saver {
			db, err := postgres.Open(context.Background(), url, postgres.Config{Schema: schema, MaxConns: 4})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			return db.Saver()
		}
	}
	t.Fatalf("no backend %q", name)
	return nil
}

// sqliteAt opens a saver on the SQLite file at path, closed at the
// test's end.
func sqliteAt(t *testing.T, path string) checkpoint.Saver {
	t.Helper()
	s, err := sqlite.Open(path, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// dropSchema removes a test's Postgres schema with everything in it.
func dropSchema(t *testing.T, url, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Errorf("drop schema %s: %v", schema, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
		t.Errorf("drop schema %s: %v", schema, err)
	}
}

// openProcess returns what one process on the shared database has: a
// Runnable on saver s and its Hub.
func openProcess(t *testing.T, s checkpoint.Saver, g *gate) (*graph.Runnable[order], *runstream.Hub[order]) {
	t.Helper()
	r, err := orderGraph(g).Compile(graph.WithSaver(s))
	if err != nil {
		t.Fatal(err)
	}
	return r, newHub(t, r, runstream.Options{})
}

// TestRejoin: a client that disconnects mid-run and reconnects with its
// last event ID, to the same handler or to a handler of a second process
// on the same database, gets no event twice and misses no durable one:
// together its two connections got exactly the durable events of a
// client that never left. The interrupt raised while it was away arrives
// once, and does not come again to a client that rejoins after it.
func TestRejoin(t *testing.T) {
	type rejoin struct {
		backend string
		second  bool
		leave   string // the client leaves after draft's update, or after the values of its step
	}
	var cases []rejoin
	for _, backend := range []string{"sqlite", "postgres"} {
		for _, second := range []bool{false, true} {
			for _, leave := range []string{runstream.EventUpdates, runstream.EventValues} {
				cases = append(cases, rejoin{backend, second, leave})
			}
		}
	}
	for _, tc := range cases {
		second := tc.second
		t.Run(fmt.Sprintf("db=%s/second_process=%v/leave_after=%s", tc.backend, second, tc.leave), func(t *testing.T) {
			ctx := context.Background()
			open := sharedDatabase(t, tc.backend)
			g := newGate()
			ra, hubA := openProcess(t, open(), g)
			srvA := serve(t, hubA)
			srvB := srvA
			if second {
				_, hubB := openProcess(t, open(), g)
				srvB = serve(t, hubB)
			}
			const thread = "order-7"

			// watcher never leaves; away disconnects mid-run.
			watcher := connect(t, srvA, thread, "")
			away := connect(t, srvA, thread, "")
			runErr := make(chan error, 1)
			go func() { runErr <- hubA.Run(ctx, thread, graph.StartWith(graph.Update[order]{})) }()
			g.waitEntered(t)
			first := away.until(func(e sseEvent) bool { return e.Name == runstream.EventUpdates && nodeOf(t, e) == "draft" })
			if tc.leave == runstream.EventValues {
				first = append(first, away.until(named(runstream.EventValues))...)
			}
			away.close()
			close(g.open)
			if err := <-runErr; err != nil {
				t.Fatalf("run: %v", err)
			}
			if s, _ := ra.GetState(ctx, thread); s.Status != graph.StatusWaiting {
				t.Fatalf("thread status %s, want waiting", s.Status)
			}

			last := durable(first)[len(durable(first))-1].ID
			back := connect(t, srvB, thread, last)
			second1 := back.until(named(runstream.EventInterrupt))
			in := second1[len(second1)-1]

			// Rejoining after the interrupt does not bring it again: the
			// next event is the resumed step's.
			back.close()
			again := connect(t, srvB, thread, in.ID)
			if err := hubA.Run(ctx, thread, graph.ResumeWith(graph.Command[order]{Resume: "yes"})); err != nil {
				t.Fatalf("resume: %v", err)
			}
			rest := again.until(named(runstream.EventDone))
			if e := rest[0]; e.Name != runstream.EventUpdates || nodeOf(t, e) != "review" {
				t.Errorf("first event after rejoining at the interrupt: %s %s, want the update of review", e.Name, e.Data)
			}
			all := watcher.until(named(runstream.EventDone))

			got := append(append(durable(first), durable(second1)...), durable(rest)...)
			want := durable(all)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("durable events of the rejoining client (-watcher +rejoined):\n%s", diff)
			}
			seen := map[string]bool{}
			interrupts := 0
			for _, e := range got {
				if seen[e.ID] {
					t.Errorf("event %s sent twice", e.ID)
				}
				seen[e.ID] = true
				if e.Name == runstream.EventInterrupt {
					interrupts++
				}
			}
			if interrupts != 1 {
				t.Errorf("the rejoining client got %d interrupt events, want 1", interrupts)
			}
			if n := count(durable(first), runstream.EventInterrupt); n != 0 {
				t.Errorf("the client got %d interrupt events before it left, want 0", n)
			}
			// The watcher, in the process that ran the draft, got its
			// model output live; the durable events carry every node.
			if n := count(all, runstream.EventMessages); n != 2 {
				t.Errorf("watcher got %d messages events, want 2: %v", n, all)
			}
			if n := count(all, runstream.EventCustom); n != 1 {
				t.Errorf("watcher got %d custom events, want 1", n)
			}
			var nodes []string
			for _, e := range want {
				if e.Name == runstream.EventUpdates {
					nodes = append(nodes, nodeOf(t, e))
				}
			}
			if diff := cmp.Diff([]string{"draft", "review", "ship"}, nodes); diff != "" {
				t.Errorf("updates (-want +got):\n%s", diff)
			}
		})
	}
}

func count(es []sseEvent, name string) int {
	n := 0
	for _, e := range es {
		if e.Name == name {
			n++
		}
	}
	return n
}

func nodeOf(t *testing.T, e sseEvent) string {
	t.Helper()
	var d struct{ Node string }
	if err := json.Unmarshal([]byte(e.Data), &d); err != nil {
		t.Fatalf("event %s data %q: %v", e.Name, e.Data, err)
	}
	return d.Node
}
