package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"

	"github.com/lockstepgo/lockstep/examples/escalation/escalate"
	"github.com/lockstepgo/lockstep/examples/hotelbooking/booking"
	"github.com/lockstepgo/lockstep/examples/quickstart/order"
	"github.com/lockstepgo/lockstep/examples/refund/refunds"
	"github.com/lockstepgo/lockstep/examples/support/helpdesk"
	"github.com/lockstepgo/lockstep/graph"
)

// exampleGraph is an example graph that lockstep graph can draw.
type exampleGraph struct {
	Name        string
	Description string
	// Mermaid compiles the graph and draws it.
	Mermaid func() (string, error)
}

// exampleGraphs is the registry of example graphs, sorted by name. Each
// example exports a function that builds its graph; register it here with
// mermaidOf (or mermaidOfErr when building can fail).
func exampleGraphs() []exampleGraph {
	gs := []exampleGraph{
		{Name: "quickstart", Description: "price → approve (pauses for a human) → charge (examples/quickstart)",
			Mermaid: mermaidOf(func() *graph.Graph[order.Order] { return order.Graph(nil) })},
		{Name: "hotelbooking", Description: "compliance (holds requests that look like SQL injection) → agent (model ⇄ tools); bookings above 1000 EUR need approval (examples/hotelbooking)",
			Mermaid: mermaidOfErr(booking.Graph)},
		{Name: "support", Description: "agent (model ⇄ tools): find the login ticket and close it; the close needs approval (examples/support)",
			Mermaid: mermaidOfErr(helpdesk.Graph)},
		{Name: "refund", Description: "agent (model ⇄ tools): refunds need the payments team's approval; racing reviewers, expiry, crash (examples/refund)",
			Mermaid: mermaidOfErr(refunds.Graph)},
		{Name: "escalation", Description: "agent (model ⇄ tools): files an issue in a slow tracker once; an outage gets a degraded answer (examples/escalation)",
			Mermaid: mermaidOfErr(escalate.Graph)},
	}
	slices.SortFunc(gs, func(a, b exampleGraph) int { return strings.Compare(a.Name, b.Name) })
	return gs
}

// mermaidOf draws the graph that build returns. The graph is compiled
// without a saver; it is never run.
func mermaidOf[S any](build func() *graph.Graph[S]) func() (string, error) {
	return func() (string, error) {
		r, err := build().Compile()
		if err != nil {
			return "", err
		}
		return r.Mermaid(), nil
	}
}

// mermaidOfErr is mermaidOf for a build function that can fail (the
// examples whose graphs are agents: building one builds its tools).
func mermaidOfErr[S any](build func() (*graph.Graph[S], error)) func() (string, error) {
	return func() (string, error) {
		g, err := build()
		if err != nil {
			return "", err
		}
		return mermaidOf(func() *graph.Graph[S] { return g })()
	}
}

// graphJSON is the output of graph NAME --json.
type graphJSON struct {
	Name    string `json:"name"`
	Mermaid string `json:"mermaid"`
}

// graphsJSON is the output of graph --json without a name.
type graphsJSON struct {
	Graphs []graphInfoJSON `json:"graphs"`
}

type graphInfoJSON struct {
	Name        string `json:"name"`
	Description string `json:"description"`
}

func graphCommand(fs *flag.FlagSet) runner {
	return func(ctx context.Context, e *env, args []string) error {
		gs := exampleGraphs()
		if len(args) == 0 {
			return e.printGraphs(gs)
		}
		i := slices.IndexFunc(gs, func(g exampleGraph) bool { return g.Name == args[0] })
		if i < 0 {
			return notFound(fmt.Sprintf("no example graph %s", quote(args[0])), "run `lockstep graph` to list the example graphs", nil)
		}
		m, err := gs[i].Mermaid()
		if err != nil {
			return fmt.Errorf("compile example graph %s: %w", quote(gs[i].Name), err)
		}
		if e.opts.json {
			return e.writeJSON(graphJSON{Name: gs[i].Name, Mermaid: m})
		}
		_, err = fmt.Fprint(e.stdout, m)
		return err
	}
}

func (e *env) printGraphs(gs []exampleGraph) error {
	if e.opts.json {
		out := graphsJSON{Graphs: []graphInfoJSON{}}
		for _, g := range gs {
			out.Graphs = append(out.Graphs, graphInfoJSON{Name: g.Name, Description: g.Description})
		}
		return e.writeJSON(out)
	}
	t := newTable(e.stdout)
	t.row("NAME", "DESCRIPTION")
	for _, g := range gs {
		t.row(g.Name, g.Description)
	}
	if err := t.flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(e.stdout, "draw one with: lockstep graph NAME")
	return err
}
