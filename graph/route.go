package graph

import (
	"context"
	"fmt"
	"slices"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// Route is what a RouteFunc chooses: nodes to run in the next superstep
// (END allowed, meaning nothing) and push tasks, together, as a LangGraph
// router returning [Send(...), "z"] does. The zero Route goes nowhere.
type Route[S any] struct {
	Nodes []string
	Sends []Send[S]
}

// RouteFunc routes after a node to nodes and Sends at once, from the
// state with that node's own writes applied (but not its siblings').
type RouteFunc[S any] func(ctx context.Context, state S) (Route[S], error)

// AddRouteEdges routes after from with route, which may return node names
// and Sends together (AddConditionalEdges returns names only,
// AddSendEdges Sends only). destinations lists the nodes route may name
// or Send to (END included, for names only); it validates routes at run
// time and draws the edges. With no destinations, route may choose any
// node. A Send to END, or to a node outside destinations, fails the task
// with an *UnknownNodeError. In a Topology it is a conditional edge
// (Branch.Send false).
func (g *Graph[S]) AddRouteEdges(from string, route RouteFunc[S], destinations ...string) *Graph[S] {
	if route == nil {
		return g.fail(&CompileError{Problem: "nil route function", Node: from})
	}
	g.routers[from] = append(g.routers[from], &routerSpec[S]{mixed: route, dests: slices.Clone(destinations)})
	return g
}

// routeWrites calls a RouteFunc and appends its trigger and Send writes:
// the names first, then the Sends, in the order route returned them.
func (r *Runnable[S]) routeWrites(ctx context.Context, node string, rt *routerSpec[S], local S, writes []twrite) ([]twrite, error) {
	rte, err := callRouter(ctx, r.abandoned, node, "route function", func() (Route[S], error) { return rt.mixed(ctx, r.view(local)) })
	if err != nil {
		return nil, err
	}
	for _, d := range rte.Nodes {
		if err := r.checkDest(node, rt, d); err != nil {
			return nil, err
		}
		if d != END {
			writes = append(writes, twrite{channel: checkpoint.BranchPrefix + d, field: -1})
		}
	}
	for i := range rte.Sends {
		s := rte.Sends[i]
		if s.Node == END {
			return nil, &UnknownNodeError{Name: END, From: fmt.Sprintf("Send of the route function after node %q", node)}
		}
		if err := r.checkDest(node, rt, s.Node); err != nil {
			return nil, err
		}
		writes = append(writes, twrite{channel: checkpoint.ChannelSends, field: -1, send: &s})
	}
	return writes, nil
}
