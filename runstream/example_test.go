package runstream_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/interrupt"
	"github.com/lockstepgo/lockstep/runstream"
)

// A client follows a thread, leaves while it waits for a human, and
// rejoins with its last event ID: it gets what happened since, once.
func Example() {
	type S struct{ Shipped bool }
	ctx := context.Background()
	r, _ := graph.New[S]().
		AddNode("approve", func(ctx context.Context, s S) (graph.Update[S], error) {
			if _, err := interrupt.Ask[bool](ctx, "ship order 7?"); err != nil {
				return graph.Update[S]{}, err
			}
			return graph.Set(S{Shipped: true}, "Shipped"), nil
		}).
		AddEdge(graph.START, "approve").
		Compile(graph.WithSaver(checkpoint.NewMemorySaver(nil)))

	hub, _ := runstream.New(r, runstream.Options{
		Authorize: func(req *http.Request, thread string) error { return nil }, // check the caller here
	})
	defer hub.Close()
	mux := http.NewServeMux()
	mux.Handle("GET /threads/{thread}/events", hub)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	_ = hub.Run(ctx, "order-7", graph.StartWith(graph.Update[S]{}))

	// A client joins the waiting thread, reads until the interrupt, and
	// leaves.
	last := follow(srv.URL+"/threads/order-7/events", "", runstream.EventInterrupt)

	_ = hub.Run(ctx, "order-7", graph.ResumeWith(graph.Command[S]{Resume: true}))

	// It rejoins with the ID of the last event it got.
	follow(srv.URL+"/threads/order-7/events", last, runstream.EventDone)
	// Output:
	// values step 0 {"Shipped":false}
	// interrupt step 0 [{"id":"…","value":"ship order 7?"}]
	// -- rejoined
	// updates step 1 approve {"Shipped":true}
	// values step 1 {"Shipped":true}
	// done step 1
}

// follow prints a stream's events until one named until, and returns
// the ID of the last durable event.
func follow(url, lastID, until string) string {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
		fmt.Println("-- rejoined")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Println(err)
		return ""
	}
	defer resp.Body.Close()
	var id, name string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "id: "):
			id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var d struct {
				Step       int
				Node       string
				Values     json.RawMessage
				Update     json.RawMessage
				Interrupts []interrupt.Interrupt
			}
			_ = json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &d)
			switch name {
			case runstream.EventValues:
				fmt.Println(name, "step", d.Step, string(d.Values))
			case runstream.EventUpdates:
				fmt.Println(name, "step", d.Step, d.Node, string(d.Update))
			case runstream.EventInterrupt:
				var q string
				_ = d.Interrupts[0].Decode(&q)
				fmt.Printf("%s step %d [{\"id\":\"…\",\"value\":%q}]\n", name, d.Step, q)
			default:
				fmt.Println(name, "step", d.Step)
			}
			if name == until {
				return id
			}
		}
	}
	return id
}
