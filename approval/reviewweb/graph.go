package reviewweb

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/lockstepgo/lockstep/graph"
)

// Topology is a graph's shape, to draw: its nodes and edges. Edges may
// name graph.START and graph.END, which are not listed in Nodes.
type Topology struct {
	Nodes []string
	Edges []Edge
}

// Edge is an edge of a Topology. A conditional edge is one of a router's
// declared destinations (drawn dashed).
type Edge struct {
	From, To    string
	Conditional bool
}

// GraphSource returns the topology of the graph that runs thread. ok is
// false when it does not know that graph: the page then draws what the
// thread's stored checkpoints show. An error is shown in place of the
// drawing; the rest of the page is served.
type GraphSource func(ctx context.Context, thread string) (t Topology, ok bool, err error)

// StaticGraph returns a GraphSource that gives t for every thread: an
// application whose threads all run one graph.
//
//	top, err := reviewweb.ParseMermaid(runnable.Mermaid())
//	...
//	reviewweb.Options{Graph: reviewweb.StaticGraph(top), ...}
func StaticGraph(t Topology) GraphSource {
	return func(context.Context, string) (Topology, bool, error) { return t, true, nil }
}

// Limits of ParseMermaid.
const (
	maxMermaidBytes = 1 << 20
	maxGraphNodes   = 500
	maxGraphEdges   = 5000
)

// ErrMermaid matches every error of ParseMermaid.
var ErrMermaid = errors.New("reviewweb: not a Mermaid flowchart this package reads")

// ParseMermaid reads the topology of a Mermaid flowchart as
// graph.Runnable.Mermaid writes it: node declarations (ID(label),
// ID([label]), ID[label], ID{label}, with an optional :::class), edges
// "A --> B" and "A -.-> B" (conditional), an optional front matter block,
// classDef and comment lines. A node is named by its label when it has
// one. It returns an error matching ErrMermaid for anything else, for
// more than 1 MiB of input, 500 nodes or 5000 edges.
func ParseMermaid(src string) (Topology, error) {
	bad := func(line int, format string, args ...any) error {
		return fmt.Errorf("%w: line %d: %s", ErrMermaid, line, fmt.Sprintf(format, args...))
	}
	if len(src) > maxMermaidBytes {
		return Topology{}, fmt.Errorf("%w: %d bytes (at most %d)", ErrMermaid, len(src), maxMermaidBytes)
	}
	lines := strings.Split(src, "\n")
	i := 0
	skipBlank := func() {
		for i < len(lines) && strings.TrimSpace(lines[i]) == "" {
			i++
		}
	}
	skipBlank()
	if i < len(lines) && strings.TrimSpace(lines[i]) == "---" {
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "---"; i++ {
		}
		if i == len(lines) {
			return Topology{}, bad(i, "the front matter does not end")
		}
		i++
		skipBlank()
	}
	if i == len(lines) {
		return Topology{}, fmt.Errorf("%w: no flowchart header", ErrMermaid)
	}
	head := strings.Fields(strings.TrimSuffix(strings.TrimSpace(lines[i]), ";"))
	if len(head) != 2 || head[0] != "graph" && head[0] != "flowchart" {
		return Topology{}, bad(i+1, "want a header like \"graph TD;\"")
	}
	i++
	labels := map[string]string{} // ID -> label
	var order []string            // declared IDs
	type rawEdge struct {
		from, to string
		cond     bool
	}
	var edges []rawEdge
	for ; i < len(lines); i++ {
		l := strings.TrimSuffix(strings.TrimSpace(lines[i]), ";")
		switch {
		case l == "", strings.HasPrefix(l, "%%"), strings.HasPrefix(l, "classDef "), strings.HasPrefix(l, "class "),
			strings.HasPrefix(l, "style "), strings.HasPrefix(l, "linkStyle "):
			continue
		}
		if from, to, cond, ok := parseEdge(l); ok {
			if !validID(from) || !validID(to) {
				return Topology{}, bad(i+1, "an edge between nodes that are not identifiers")
			}
			if len(edges) == maxGraphEdges {
				return Topology{}, bad(i+1, "more than %d edges", maxGraphEdges)
			}
			edges = append(edges, rawEdge{from, to, cond})
			continue
		}
		id, label, ok := parseNode(l)
		if !ok {
			return Topology{}, bad(i+1, "neither a node nor an edge")
		}
		if _, dup := labels[id]; dup {
			return Topology{}, bad(i+1, "node %s declared twice", quote(id))
		}
		if len(order) == maxGraphNodes {
			return Topology{}, bad(i+1, "more than %d nodes", maxGraphNodes)
		}
		labels[id] = label
		order = append(order, id)
	}
	nameOf := func(id string) string {
		if l, ok := labels[id]; ok && l != "" {
			return l
		}
		return id
	}
	var t Topology
	seen := map[string]bool{}
	addNode := func(n string) {
		if !seen[n] && n != graph.START && n != graph.END {
			seen[n] = true
			t.Nodes = append(t.Nodes, n)
		}
	}
	for _, id := range order {
		addNode(nameOf(id))
	}
	for _, e := range edges {
		from, to := nameOf(e.from), nameOf(e.to)
		addNode(from)
		addNode(to)
		if len(t.Nodes) > maxGraphNodes {
			return Topology{}, fmt.Errorf("%w: more than %d nodes", ErrMermaid, maxGraphNodes)
		}
		t.Edges = append(t.Edges, Edge{From: from, To: to, Conditional: e.cond})
	}
	return t, nil
}

// parseEdge reads "A --> B" or "A -.-> B" (an optional |label| after the
// arrow is dropped).
func parseEdge(l string) (from, to string, cond, ok bool) {
	for _, arrow := range []string{" -.-> ", " --> ", " ==> "} {
		a, b, found := strings.Cut(l, arrow)
		if !found {
			continue
		}
		b = strings.TrimSpace(b)
		if strings.HasPrefix(b, "|") {
			end := strings.Index(b[1:], "|")
			if end < 0 {
				return "", "", false, false
			}
			b = strings.TrimSpace(b[end+2:])
		}
		return strings.TrimSpace(a), b, arrow == " -.-> ", true
	}
	return "", "", false, false
}

// parseNode reads a node declaration: an identifier, a shape holding the
// label, and an optional :::class.
func parseNode(l string) (id, label string, ok bool) {
	if c := strings.Index(l, ":::"); c >= 0 {
		if !validID(l[c+3:]) {
			return "", "", false
		}
		l = l[:c]
	}
	n := strings.IndexAny(l, "([{")
	if n < 0 {
		return l, "", validID(l)
	}
	id = l[:n]
	if !validID(id) {
		return "", "", false
	}
	body := l[n:]
	for _, sh := range [][2]string{{"([", "])"}, {"((", "))"}, {"[[", "]]"}, {"(", ")"}, {"[", "]"}, {"{", "}"}} {
		if strings.HasPrefix(body, sh[0]) && strings.HasSuffix(body, sh[1]) && len(body) >= len(sh[0])+len(sh[1]) {
			label = body[len(sh[0]) : len(body)-len(sh[1])]
			label = strings.TrimSuffix(strings.TrimPrefix(label, "<p>"), "</p>")
			label = strings.Trim(label, `"`)
			return id, unescapeMermaid(label), true
		}
	}
	return "", "", false
}

// validID reports whether s is a Mermaid node identifier as graph writes
// them (letters, digits, '_' and '-').
func validID(s string) bool {
	if s == "" || len(s) > 1024 {
		return false
	}
	for _, r := range s {
		if !(r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}

// unescapeMermaid decodes Mermaid's entity codes: #quot;, #lt;, #gt;,
// #amp; and numeric ones like #40;.
func unescapeMermaid(s string) string {
	if !strings.Contains(s, "#") {
		return s
	}
	var b strings.Builder
	for len(s) > 0 {
		i := strings.IndexByte(s, '#')
		if i < 0 {
			b.WriteString(s)
			break
		}
		b.WriteString(s[:i])
		s = s[i:]
		end := strings.IndexByte(s, ';')
		if end < 0 {
			b.WriteString(s)
			break
		}
		code := s[1:end]
		switch code {
		case "quot":
			b.WriteByte('"')
		case "lt":
			b.WriteByte('<')
		case "gt":
			b.WriteByte('>')
		case "amp":
			b.WriteByte('&')
		default:
			n, err := strconv.ParseUint(code, 10, 21)
			if err != nil || n > 0x10FFFF {
				b.WriteByte('#')
				s = s[1:]
				continue
			}
			b.WriteRune(rune(n))
		}
		s = s[end+1:]
	}
	return b.String()
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
func layout(t Topology, waiting string, visited map[string]bool) svgGraph {
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
