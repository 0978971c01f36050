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
