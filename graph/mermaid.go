package graph

import (
	"fmt"
	"slices"
	"strings"
)

// Mermaid draws the compiled graph as a Mermaid flowchart in LangGraph's
// style: START and END as stadium shapes, plain and join edges solid,
// conditional and Send edges dashed. A router without declared
// destinations is drawn dashed to every node and END. The output is
// deterministic.
func (r *Runnable[S]) Mermaid() string {
	var b strings.Builder
	b.WriteString("---\nconfig:\n  flowchart:\n    curve: linear\n---\ngraph TD;\n")
	fmt.Fprintf(&b, "\t%s([<p>%s</p>]):::first\n", mermaidID(START), START)
	for _, n := range r.nodeNames {
		fmt.Fprintf(&b, "\t%s(%s)\n", mermaidID(n), mermaidLabel(n))
	}
	fmt.Fprintf(&b, "\t%s([<p>%s</p>]):::last\n", mermaidID(END), END)

	type edge struct {
		from, to string
		dashed   bool
	}
	var edges []edge
	add := func(e edge) {
		if !slices.Contains(edges, e) {
			edges = append(edges, e)
		}
	}
	for _, e := range r.edgesList {
		add(edge{e[0], e[1], false})
	}
	for _, j := range r.joins {
		for _, s := range j.sources {
			add(edge{s, j.to, false})
		}
	}
	// A node with no outgoing edge finishes its branch: LangGraph draws it
	// with an edge to END.
	for _, n := range r.nodeNames {
		if len(r.edgesFrom[n]) == 0 && len(r.joinsFrom[n]) == 0 && len(r.routers[n]) == 0 {
			add(edge{n, END, false})
		}
	}
	for from, rs := range r.routers {
		for _, rt := range rs {
			dests := rt.dests
			if len(dests) == 0 {
				dests = append(slices.Clone(r.nodeNames), END)
				if rt.send != nil {
					dests = dests[:len(dests)-1]
				}
			}
			for _, d := range dests {
				add(edge{from, d, true})
			}
		}
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if c := strings.Compare(a.from, b.from); c != 0 {
			return c
		}
		if c := strings.Compare(a.to, b.to); c != 0 {
			return c
		}
		if a.dashed == b.dashed {
			return 0
		}
		if a.dashed {
			return 1
		}
		return -1
	})
	for _, e := range edges {
		arrow := "-->"
		if e.dashed {
			arrow = "-.->"
		}
		fmt.Fprintf(&b, "\t%s %s %s;\n", mermaidID(e.from), arrow, mermaidID(e.to))
	}
	b.WriteString("\tclassDef default fill:#f2f0ff,line-height:1.2\n")
	b.WriteString("\tclassDef first fill-opacity:0\n")
	b.WriteString("\tclassDef last fill:#bfb6fc\n")
	return b.String()
}

// mermaidID makes a node name safe as a Mermaid identifier.
func mermaidID(name string) string {
	var b strings.Builder
	for _, r := range name {
		switch {
		case r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z':
			b.WriteRune(r)
		default:
			fmt.Fprintf(&b, "_%x_", r)
		}
	}
	return b.String()
}

func mermaidLabel(name string) string {
	r := strings.NewReplacer(`"`, "#quot;", "(", "#40;", ")", "#41;", "[", "#91;", "]", "#93;", "<", "#lt;", ">", "#gt;")
	return r.Replace(name)
}
