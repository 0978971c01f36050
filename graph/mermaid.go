package graph

import (
	"fmt"
	"slices"
	"strings"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// Mermaid draws the compiled graph as a Mermaid flowchart in LangGraph's
// style: START and END as stadium shapes, plain and join edges solid,
// conditional and Send edges dashed. A router without declared
// destinations is drawn dashed to every node and END. The output is
// deterministic; it is r.Topology().Mermaid().
func (r *Runnable[S]) Mermaid() string { return r.topo.Mermaid() }

// Mermaid draws t as Runnable.Mermaid draws the graph it came from (see
// Arrows for the arrows), marking the nodes named in waiting (the ones a
// thread waits in) with the class "waiting"; names that are not nodes of
// t are ignored. Without waiting nodes the drawing is exactly
// Runnable.Mermaid's. The output is deterministic.
func (t Topology) Mermaid(waiting ...string) string {
	c := t.canonical()
	var b strings.Builder
	b.WriteString("---\nconfig:\n  flowchart:\n    curve: linear\n---\ngraph TD;\n")
	fmt.Fprintf(&b, "\t%s([<p>%s</p>]):::first\n", mermaidID(START), START)
	marked := false
	for _, n := range c.Nodes {
		class := ""
		if slices.Contains(waiting, n) {
			class, marked = ":::waiting", true
		}
		fmt.Fprintf(&b, "\t%s(%s)%s\n", mermaidID(n), mermaidLabel(n), class)
	}
	fmt.Fprintf(&b, "\t%s([<p>%s</p>]):::last\n", mermaidID(END), END)
	for _, a := range c.Arrows() {
		arrow := "-->"
		if a.Dashed {
			arrow = "-.->"
		}
		fmt.Fprintf(&b, "\t%s %s %s;\n", mermaidID(a.From), arrow, mermaidID(a.To))
	}
	b.WriteString("\tclassDef default fill:#f2f0ff,line-height:1.2\n")
	b.WriteString("\tclassDef first fill-opacity:0\n")
	b.WriteString("\tclassDef last fill:#bfb6fc\n")
	if marked {
		b.WriteString("\tclassDef waiting fill:#fde68a,stroke:#b45309,stroke-width:2px\n")
	}
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

// MermaidExpanded draws the compiled graph as Mermaid does, with each
// subgraph node expanded (LangGraph's draw_mermaid with xray): see
// Topology.MermaidExpanded. It is r.Topology().MermaidExpanded().
func (r *Runnable[S]) MermaidExpanded() string { return r.topo.MermaidExpanded() }

// MermaidExpanded draws t as Mermaid does, but each subgraph node
// (Topology.Subgraphs) is a Mermaid subgraph block holding the graph it
// runs, with that graph's own START and END, at every depth; the parent's
// arrows to and from the node meet the block. A graph without subgraph
// nodes is drawn exactly as Mermaid draws it. A name in waiting marks a
// node of t, or, as a path "<subgraph node>|<node>" (nested with "|", as
// namespaces are, without their task IDs), a node of a subgraph; a
// subgraph node's block is marked when the node is. Names that are no
// node are ignored. The output is deterministic.
func (t Topology) MermaidExpanded(waiting ...string) string {
	c := t.canonical()
	if len(c.Subgraphs) == 0 {
		return c.Mermaid(waiting...)
	}
	var b strings.Builder
	b.WriteString("---\nconfig:\n  flowchart:\n    curve: linear\n---\ngraph TD;\n")
	marked := drawExpanded(&b, c, "", "\t", waiting)
	b.WriteString("\tclassDef default fill:#f2f0ff,line-height:1.2\n")
	b.WriteString("\tclassDef first fill-opacity:0\n")
	b.WriteString("\tclassDef last fill:#bfb6fc\n")
	if marked {
		b.WriteString("\tclassDef waiting fill:#fde68a,stroke:#b45309,stroke-width:2px\n")
	}
	return b.String()
}

// drawExpanded writes the nodes and arrows of c, a canonical topology
// whose node IDs take prefix (the path of the subgraph nodes above it,
// each followed by "|"), indented by indent, and reports whether it
// marked a node as waiting.
func drawExpanded(b *strings.Builder, c Topology, prefix, indent string, waiting []string) bool {
	id := func(n string) string { return mermaidID(prefix + n) }
	marked := false
	fmt.Fprintf(b, "%s%s([<p>%s</p>]):::first\n", indent, id(START), START)
	for _, n := range c.Nodes {
		wait := slices.Contains(waiting, n)
		if sub, ok := c.Subgraph(n); ok {
			fmt.Fprintf(b, "%ssubgraph %s [\"%s\"]\n", indent, id(n), mermaidLabel(n))
			var inner []string
			for _, w := range waiting {
				if rest, ok := strings.CutPrefix(w, n+checkpoint.NSSeparator); ok {
					inner = append(inner, rest)
				}
			}
			if drawExpanded(b, sub.canonical(), prefix+n+checkpoint.NSSeparator, indent+"\t", inner) {
				marked = true
			}
			fmt.Fprintf(b, "%send\n", indent)
			if wait {
				fmt.Fprintf(b, "%sclass %s waiting\n", indent, id(n))
				marked = true
			}
			continue
		}
		class := ""
		if wait {
			class, marked = ":::waiting", true
		}
		fmt.Fprintf(b, "%s%s(%s)%s\n", indent, id(n), mermaidLabel(n), class)
	}
	fmt.Fprintf(b, "%s%s([<p>%s</p>]):::last\n", indent, id(END), END)
	for _, a := range c.Arrows() {
		arrow := "-->"
		if a.Dashed {
			arrow = "-.->"
		}
		fmt.Fprintf(b, "%s%s %s %s;\n", indent, id(a.From), arrow, id(a.To))
	}
	return marked
}
