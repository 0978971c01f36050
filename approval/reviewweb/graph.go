package reviewweb

import (
	"context"
	"fmt"
	"slices"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
)

// GraphSource returns the topology of the graph that runs thread (see
// graph.Topology). ok is false when it does not know that graph: the page
// then draws what the thread's stored checkpoints show. An error is shown
// in place of the drawing; the rest of the page is served.
type GraphSource func(ctx context.Context, thread string) (t graph.Topology, ok bool, err error)

// StaticGraph returns a GraphSource that gives t for every thread: an
// application whose threads all run one graph.
//
//	reviewweb.Options{Graph: reviewweb.StaticGraph(runnable.Topology()), ...}
func StaticGraph(t graph.Topology) GraphSource {
	return func(context.Context, string) (graph.Topology, bool, error) { return t, true, nil }
}

// StoredGraph returns a GraphSource that reads, from the saver alone, the
// topology of the graph a thread's head was saved under: every checkpoint
// names it (checkpoint.Metadata.Topology), and a saver that keeps
// topologies (checkpoint.TopologyStore: the SQLite and memory savers)
// holds it, stored there by the graph's first run. ok is false for a
// thread whose head names no topology or whose topology the saver does
// not hold. It is the default of Options.Graph.
func StoredGraph(s checkpoint.Saver) GraphSource {
	return func(ctx context.Context, thread string) (graph.Topology, bool, error) {
		if _, ok := s.(checkpoint.TopologyStore); !ok {
			return graph.Topology{}, false, nil
		}
		tps, err := s.List(ctx, thread, checkpoint.ListOptions{Limit: 1, MetadataOnly: true})
		if err != nil || len(tps) == 0 {
			return graph.Topology{}, false, err
		}
		fp := tps[0].Checkpoint.Metadata.Topology
		if fp == "" {
			return graph.Topology{}, false, nil
		}
		return graph.LoadTopology(ctx, s, fp)
	}
}

// drawing is what the page draws of a graph: its nodes and arrows (a
// graph.Topology's Arrows, or the steps the checkpoints show). Arrows
// may name graph.START and graph.END, which are not listed in Nodes.
type drawing struct {
	Nodes []string `json:"nodes"`
	Edges []arrow  `json:"edges"`
}

// arrow is an arrow of a drawing; a conditional one is a router's
// possible route (drawn dashed).
type arrow struct {
	From        string `json:"from"`
	To          string `json:"to"`
	Conditional bool   `json:"conditional"`
}

// drawingOf is the drawing of t: its nodes and the arrows Mermaid draws.
func drawingOf(t graph.Topology) drawing {
	d := drawing{Nodes: append([]string{}, t.Nodes...), Edges: []arrow{}}
	for _, a := range t.Arrows() {
		d.Edges = append(d.Edges, arrow{From: a.From, To: a.To, Conditional: a.Dashed})
	}
	return d
}

// Drawing.

const (
	nodeH     = 34
	layerGap  = 64
	nodeGap   = 24
	charW     = 8 // the stylesheet draws labels in a monospace font this wide
	maxLabel  = 28
	marginX   = 16
	marginY   = 12
	loopSpace = 28
)

// svgGraph is a laid-out drawing for the page's template.
type svgGraph struct {
	Width, Height int
	Nodes         []svgNode
	Edges         []svgEdge
}

type svgNode struct {
	X, Y, W, H int // the box
	TX, TY     int // the label's anchor
	RX         int // corner radius
	Label      shown
	Class      string
	Name       string // for the title
}

type svgEdge struct {
	D     string
	Class string
}

// layout draws t with waiting marked (and visited, the nodes the thread
// ran, shaded). It places nodes in layers by their longest path from
// START over the graph without its back edges (found by a depth-first
// walk from START), orders each layer by the mean position of its
// neighbours, and routes back edges around the right side.
func layout(t drawing, waiting string, visited map[string]bool) svgGraph {
	names := []string{graph.START}
	idx := map[string]int{graph.START: 0}
	add := func(n string) {
		if _, ok := idx[n]; !ok && n != graph.END {
			idx[n] = len(names)
			names = append(names, n)
		}
	}
	for _, n := range t.Nodes {
		add(n)
	}
	hasEnd := false
	for _, e := range t.Edges {
		add(e.From)
		add(e.To)
		hasEnd = hasEnd || e.To == graph.END || e.From == graph.END
	}
	if hasEnd {
		idx[graph.END] = len(names)
		names = append(names, graph.END)
	}
	n := len(names)
	type edge struct {
		from, to int
		cond     bool
	}
	var edges []edge
	seenEdge := map[[2]int]int{}
	out := make([][]int, n)
	for _, e := range t.Edges {
		f, to := idx[e.From], idx[e.To]
		if k, dup := seenEdge[[2]int{f, to}]; dup {
			edges[k].cond = edges[k].cond && e.Conditional
			continue
		}
		seenEdge[[2]int{f, to}] = len(edges)
		edges = append(edges, edge{f, to, e.Conditional})
		out[f] = append(out[f], to)
	}
	// Back edges: those closing a cycle on a depth-first walk.
	back := map[[2]int]bool{}
	state := make([]int, n) // 0 new, 1 on the stack, 2 done
	var walk func(v int)
	walk = func(v int) {
		state[v] = 1
		for _, w := range out[v] {
			switch state[w] {
			case 0:
				walk(w)
			case 1:
				back[[2]int{v, w}] = true
			}
		}
		state[v] = 2
	}
	for v := range n {
		if state[v] == 0 {
			walk(v)
		}
	}
	// Layers: longest path over forward edges, in topological order.
	layer := make([]int, n)
	indeg := make([]int, n)
	for _, e := range edges {
		if !back[[2]int{e.from, e.to}] && e.from != e.to {
			indeg[e.to]++
		}
	}
	var queue []int
	for v := range n {
		if indeg[v] == 0 {
			queue = append(queue, v)
		}
	}
	for len(queue) > 0 {
		v := queue[0]
		queue = queue[1:]
		for _, w := range out[v] {
			if back[[2]int{v, w}] || v == w {
				continue
			}
			layer[w] = max(layer[w], layer[v]+1)
			if indeg[w]--; indeg[w] == 0 {
				queue = append(queue, w)
			}
		}
	}
	if hasEnd {
		e := idx[graph.END]
		last := 0
		for v := range n {
			if v != e {
				last = max(last, layer[v])
			}
		}
		layer[e] = last + 1
	}
	depth := 0
	for _, l := range layer {
		depth = max(depth, l)
	}
	rows := make([][]int, depth+1)
	for v := range n {
		rows[layer[v]] = append(rows[layer[v]], v)
	}
	// Order within layers: a few sweeps of the barycentre heuristic.
	pos := make([]float64, n)
	for _, row := range rows {
		for i, v := range row {
			pos[v] = float64(i)
		}
	}
	preds := make([][]int, n)
	for _, e := range edges {
		if !back[[2]int{e.from, e.to}] && e.from != e.to {
			preds[e.to] = append(preds[e.to], e.from)
		}
	}
	bary := func(v int, nbrs []int) float64 {
		if len(nbrs) == 0 {
			return pos[v]
		}
		s := 0.0
		for _, u := range nbrs {
			s += pos[u]
		}
		return s / float64(len(nbrs))
	}
	for sweep := 0; sweep < 4; sweep++ {
		for l := 1; l < len(rows); l++ {
			row := rows[l]
			key := make(map[int]float64, len(row))
			for _, v := range row {
				key[v] = bary(v, preds[v])
			}
			slices.SortStableFunc(row, func(a, b int) int {
				switch {
				case key[a] < key[b]:
					return -1
				case key[a] > key[b]:
					return 1
				}
				return 0
			})
			for i, v := range row {
				pos[v] = float64(i)
			}
		}
	}
	// Coordinates.
	width := make([]int, n)
	labels := make([]shown, n)
	for v, nm := range names {
		labels[v] = display(nm, maxLabel*4, false)
		runes := len([]rune(labels[v].String()))
		if runes > maxLabel {
			labels[v] = display(string([]rune(labels[v].String())[:maxLabel-1])+"…", maxLabel*4, false)
			runes = maxLabel
		}
		width[v] = max(72, runes*charW+28)
	}
	rowW := make([]int, len(rows))
	maxW := 0
	for l, row := range rows {
		for i, v := range row {
			if i > 0 {
				rowW[l] += nodeGap
			}
			rowW[l] += width[v]
		}
		maxW = max(maxW, rowW[l])
	}
	nBack := 0
	for _, e := range edges {
		if back[[2]int{e.from, e.to}] || e.from == e.to {
			nBack++
		}
	}
	nSkip := 0 // forward edges that skip a layer go around the left
	for _, e := range edges {
		if !back[[2]int{e.from, e.to}] && e.from != e.to && layer[e.to]-layer[e.from] > 1 {
			nSkip++
		}
	}
	left := nSkip * loopSpace
	g := svgGraph{Width: left + maxW + 2*marginX + nBack*loopSpace + loopSpace, Height: len(rows)*nodeH + (len(rows)-1)*layerGap + 2*marginY}
	cx := make([]int, n)
	cy := make([]int, n)
	for l, row := range rows {
		x := left + marginX + (maxW-rowW[l])/2
		y := marginY + l*(nodeH+layerGap)
		for _, v := range row {
			cx[v], cy[v] = x+width[v]/2, y+nodeH/2
			class := "node"
			rx := 6
			switch {
			case names[v] == graph.START || names[v] == graph.END:
				class, rx = "node terminal", nodeH/2
			case names[v] == waiting:
				class = "node waiting"
			case visited[names[v]]:
				class = "node visited"
			}
			g.Nodes = append(g.Nodes, svgNode{X: x, Y: y, W: width[v], H: nodeH, TX: cx[v], TY: cy[v] + 5, RX: rx,
				Label: labels[v], Class: class, Name: names[v]})
			x += width[v] + nodeGap
		}
	}
	k, sk := 0, 0
	for _, e := range edges {
		class := "edge"
		if e.cond {
			class = "edge cond"
		}
		f, to := e.from, e.to
		var d string
		switch {
		case f == to:
			x, y := cx[f]+width[f]/2, cy[f]
			d = fmt.Sprintf("M %d %d C %d %d %d %d %d %d", x, y-8, x+loopSpace, y-20, x+loopSpace, y+20, x, y+8)
		case back[[2]int{f, to}] || layer[f] >= layer[to]:
			k++
			x1, x2 := cx[f]+width[f]/2, cx[to]+width[to]/2
			right := left + marginX + maxW + k*loopSpace
			d = fmt.Sprintf("M %d %d C %d %d %d %d %d %d", x1, cy[f], right, cy[f], right, cy[to], x2, cy[to])
		case layer[to]-layer[f] > 1:
			sk++
			x1, x2 := cx[f]-width[f]/2, cx[to]-width[to]/2
			l := left + marginX - sk*loopSpace + loopSpace/2
			d = fmt.Sprintf("M %d %d C %d %d %d %d %d %d", x1, cy[f], l, cy[f], l, cy[to], x2, cy[to])
		default:
			y1, y2 := cy[f]+nodeH/2, cy[to]-nodeH/2
			mid := (y2 - y1) / 2
			d = fmt.Sprintf("M %d %d C %d %d %d %d %d %d", cx[f], y1, cx[f], y1+mid, cx[to], y2-mid, cx[to], y2)
		}
		g.Edges = append(g.Edges, svgEdge{D: d, Class: class})
	}
	return g
}
