package sqlite_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/interrupt"
)

// A run that pauses survives the process: a new Saver on the same file
// (as after a restart) resumes it where it stopped.
func ExampleOpen() {
	type S struct{ Status string }
	dir, err := os.MkdirTemp("", "lockstep-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "agent.db")

	g := graph.New[S]().
		AddNode("ship", func(ctx context.Context, s S) (graph.Update[S], error) {
			ok, err := interrupt.Ask[bool](ctx, "ship order 7?")
			if err != nil {
				return graph.Update[S]{}, err
			}
			return graph.Set(S{Status: fmt.Sprint("shipped: ", ok)}, "Status"), nil
		}).
		AddEdge(graph.START, "ship")
	ctx := context.Background()

	// First process: the run pauses and the pause is on disk.
	saver, err := sqlite.Open(path, sqlite.Config{}) // zero Config: WAL, synchronous=FULL, 5 s busy timeout
	if err != nil {
		fmt.Println(err)
		return
	}
	r, _ := g.Compile(graph.WithSaver(saver))
	res, err := r.Invoke(ctx, "order-7", graph.Update[S]{})
	fmt.Println(res.Status, res.Next, err)
	_ = saver.Close()

	// Second process: reopen the file and answer.
	saver, err = sqlite.Open(path, sqlite.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer saver.Close()
	r, _ = g.Compile(graph.WithSaver(saver))
	res, err = r.Resume(ctx, "order-7", graph.Command[S]{Resume: true})
	fmt.Println(res.Status, res.Values.Status, err)
	// Output:
	// waiting [ship] <nil>
	// done shipped: true <nil>
}
