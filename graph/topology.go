package graph

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/internal/strictjson"
)

// Topology is the shape of a graph as compiled: its name, its nodes, its
// edges, joins and routers (conditional and Send edges, with their
// declared destinations), and its compile-time breakpoints. It is what
// Mermaid draws, and what a run stores on a saver that keeps topologies
// (checkpoint.TopologyStore), so that a tool can draw the graph a thread
// ran under, and tell that it was saved under another version of the
// graph, from the database alone (the lockstep CLI's graph and state
// commands).
//
// What a node does, its retry policy, and the state's fields are not part
// of the topology: code that changes them leaves it, and its fingerprint,
// as they are. Neither are the breakpoints a single run adds
// (WithBreakpoints): they are stored with the checkpoint they stop at.
//
// Two topologies with the same content in another order (nodes, edges,
// joins, branches, destinations, breakpoints) are the same topology: its
// encoding, and so its fingerprint, sorts them.
type Topology struct {
	// Name is the graph's name (WithName): the topologies of one name are
	// versions of one graph.
	Name string `json:"name"`
	// Nodes are the graph's nodes; START and END are implied.
	Nodes []string `json:"nodes"`
	// Edges are the plain edges (AddEdge): From may be START, To END.
	Edges []Edge `json:"edges"`
	// Joins are the waiting edges (AddJoin).
	Joins []Join `json:"joins"`
	// Branches are the routers (AddConditionalEdges, AddSendEdges, and
	// AddRouteEdges, which is a conditional edge here).
	Branches []Branch `json:"branches"`
	// InterruptBefore and InterruptAfter are the compile-time breakpoints
	// (WithInterruptBefore, WithInterruptAfter); "*" stands for every node.
	InterruptBefore []string `json:"interrupt_before"`
	InterruptAfter  []string `json:"interrupt_after"`
	// Subgraphs are the topologies of the graphs its subgraph nodes run
	// (Graph.AddSubgraph), one per such node, at any depth. A graph
	// without subgraph nodes encodes as it did before they existed.
	Subgraphs []SubgraphTopology `json:"subgraphs,omitempty"`
}

// SubgraphTopology is a subgraph node of a Topology and the topology of
// the graph it runs.
type SubgraphTopology struct {
	Node     string   `json:"node"`
	Topology Topology `json:"topology"`
}

// Subgraph returns the topology of the graph node runs, and false when
// node is no subgraph node of t.
func (t Topology) Subgraph(node string) (Topology, bool) {
	for _, s := range t.Subgraphs {
		if s.Node == node {
			return s.Topology.clone(), true
		}
	}
	return Topology{}, false
}

// Edge is a plain edge of a Topology.
type Edge struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// Join is a waiting edge of a Topology: To runs once every source has.
type Join struct {
	Sources []string `json:"sources"`
	To      string   `json:"to"`
}

// Branch is a router of a Topology: a conditional edge, or a Send edge
// when Send is set, after From (which may be START).
type Branch struct {
	From string `json:"from"`
	Send bool   `json:"send"`
	// Destinations are the declared destinations (END allowed for a
	// conditional edge); none means the router may choose any node (and
	// END).
	Destinations []string `json:"destinations"`
}

// Arrow is an arrow of a topology's drawing (Topology.Arrows).
type Arrow struct {
	From, To string
	// Dashed marks a router's possible route (a conditional or Send
	// edge); plain and join edges are solid.
	Dashed bool
}

// topologyFormat is the version of the encoding Topology.Encode writes.
// An encoding change that changes what existing graphs encode to is a new
// version (and changes every fingerprint: the golden test fails first).
const topologyFormat = 1

// topologyJSON is the encoding: the format version, then the topology,
// every list sorted and written as an array (never null).
type topologyJSON struct {
	Format int `json:"format"`
	Topology
}

var topologySchema = strictjson.For(reflect.TypeFor[topologyJSON]())

// canonical returns t with every list sorted and without duplicates
// (except branches: two routers with the same destinations are two
// routers), empty lists nil. t is not changed.
func (t Topology) canonical() Topology {
	set := func(xs []string) []string {
		if len(xs) == 0 {
			return nil
		}
		out := slices.Clone(xs)
		slices.Sort(out)
		return slices.Compact(out)
	}
	c := Topology{Name: t.Name, Nodes: set(t.Nodes), InterruptBefore: set(t.InterruptBefore), InterruptAfter: set(t.InterruptAfter)}
	if len(t.Edges) > 0 {
		c.Edges = slices.Clone(t.Edges)
		slices.SortFunc(c.Edges, func(a, b Edge) int { return cmp.Or(strings.Compare(a.From, b.From), strings.Compare(a.To, b.To)) })
		c.Edges = slices.Compact(c.Edges)
	}
	for _, j := range t.Joins {
		c.Joins = append(c.Joins, Join{Sources: set(j.Sources), To: j.To})
	}
	slices.SortFunc(c.Joins, func(a, b Join) int { return cmp.Or(strings.Compare(a.To, b.To), slices.Compare(a.Sources, b.Sources)) })
	c.Joins = slices.CompactFunc(c.Joins, func(a, b Join) bool { return a.To == b.To && slices.Equal(a.Sources, b.Sources) })
	for _, b := range t.Branches {
		c.Branches = append(c.Branches, Branch{From: b.From, Send: b.Send, Destinations: set(b.Destinations)})
	}
	slices.SortFunc(c.Branches, func(a, b Branch) int {
		return cmp.Or(strings.Compare(a.From, b.From), cmpBool(a.Send, b.Send), slices.Compare(a.Destinations, b.Destinations))
	})
	for _, sg := range t.Subgraphs {
		c.Subgraphs = append(c.Subgraphs, SubgraphTopology{Node: sg.Node, Topology: sg.Topology.canonical()})
	}
	slices.SortFunc(c.Subgraphs, func(a, b SubgraphTopology) int { return strings.Compare(a.Node, b.Node) })
	return c
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// nonNil returns xs, or an empty slice for nil, so that the encoding
// writes [] rather than null.
func nonNil[T any](xs []T) []T {
	if xs == nil {
		return []T{}
	}
	return xs
}

// Encode returns the canonical encoding of t: a JSON object holding the
// encoding's version and t with every list sorted, duplicates dropped,
// empty lists as []. Equal topologies encode to the same bytes in every
// process, whatever the order they list things in; the encoding is what a
// saver stores and what Fingerprint hashes. It fails only for a name in t
// that is not valid UTF-8 (an error matching ErrInvalidGraph), which
// Compile never makes.
func (t Topology) Encode() ([]byte, error) {
	c := t.canonical()
	if !c.validUTF8() {
		return nil, fmt.Errorf("%w: graph %q: a name in the topology is not valid UTF-8", ErrInvalidGraph, strings.ToValidUTF8(c.Name, "\uFFFD"))
	}
	out := topologyJSON{Format: topologyFormat, Topology: c.encodable()}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		return nil, fmt.Errorf("graph: encode the topology of graph %q: %w", c.Name, err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// encodable returns canonical c with every list but Subgraphs non-nil, at
// every depth, as Encode writes it.
func (c Topology) encodable() Topology {
	out := Topology{Name: c.Name, Nodes: nonNil(c.Nodes), Edges: nonNil(c.Edges),
		Joins: nonNil(c.Joins), Branches: nonNil(c.Branches), InterruptBefore: nonNil(c.InterruptBefore), InterruptAfter: nonNil(c.InterruptAfter)}
	for i := range out.Joins {
		out.Joins[i].Sources = nonNil(out.Joins[i].Sources)
	}
	for i := range out.Branches {
		out.Branches[i].Destinations = nonNil(out.Branches[i].Destinations)
	}
	for _, sg := range c.Subgraphs {
		out.Subgraphs = append(out.Subgraphs, SubgraphTopology{Node: sg.Node, Topology: sg.Topology.encodable()})
	}
	return out
}

// validUTF8 reports whether every string of t is valid UTF-8 (JSON would
// replace the bytes of one that is not, so that it would not decode back
// to itself).
func (t Topology) validUTF8() bool {
	ok := utf8.ValidString(t.Name)
	each := func(xs ...string) {
		for _, x := range xs {
			ok = ok && utf8.ValidString(x)
		}
	}
	each(t.Nodes...)
	each(t.InterruptBefore...)
	each(t.InterruptAfter...)
	for _, e := range t.Edges {
		each(e.From, e.To)
	}
	for _, j := range t.Joins {
		each(j.To)
		each(j.Sources...)
	}
	for _, b := range t.Branches {
		each(b.From)
		each(b.Destinations...)
	}
	for _, sg := range t.Subgraphs {
		each(sg.Node)
		ok = ok && sg.Topology.validUTF8()
	}
	return ok
}

// Fingerprint returns the fingerprint of t: checkpoint.TopologyFingerprint
// of its canonical encoding (Encode), 32 hex digits. It is the same in
// every process for the same topology, and changes when the topology
// does. It returns Encode's error.
func (t Topology) Fingerprint() (string, error) {
	b, err := t.Encode()
	if err != nil {
		return "", err
	}
	return checkpoint.TopologyFingerprint(b), nil
}

// ErrBadTopology matches every error of DecodeTopology and LoadTopology
// about what is stored: an encoding this package does not read, or one
// that does not describe a graph Compile could make.
var ErrBadTopology = errors.New("graph: not a topology this version reads")

// DecodeTopology reads a topology a saver returned: its data must be the
// canonical encoding (Encode) of a topology named st.Name that Compile
// could have made (valid node names; edges, joins, branches and
// breakpoints between its nodes, START and END as Compile allows), and
// hash to st.Fingerprint. It returns an error matching ErrBadTopology
// otherwise (an encoding of a newer version says so), and a
// *checkpoint.CorruptError (checkpoint.ErrCorrupt) when the data does not
// hash to its fingerprint.
func DecodeTopology(st checkpoint.Topology) (Topology, error) {
	if err := checkpoint.CheckStoredTopology(st); err != nil {
		return Topology{}, err
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: topology %s of graph %q: %s", ErrBadTopology, st.Fingerprint, st.Name, fmt.Sprintf(format, args...))
	}
	var head struct {
		Format int `json:"format"`
	}
	if err := json.Unmarshal(st.Data, &head); err != nil {
		return Topology{}, bad("%v", err)
	}
	if head.Format != topologyFormat {
		return Topology{}, bad("encoding version %d (this lockstep reads version %d: a newer lockstep wrote it)", head.Format, topologyFormat)
	}
	if err := topologySchema.Check(st.Data); err != nil {
		return Topology{}, bad("%v", err)
	}
	var tj topologyJSON
	if err := json.Unmarshal(st.Data, &tj); err != nil {
		return Topology{}, bad("%v", err)
	}
	t := tj.Topology.canonical()
	if t.Name != st.Name {
		return Topology{}, bad("it names graph %q", t.Name)
	}
	if err := t.check(); err != nil {
		return Topology{}, bad("%v", err)
	}
	if b, err := t.Encode(); err != nil || !bytes.Equal(b, st.Data) {
		return Topology{}, bad("not in canonical form")
	}
	return t, nil
}

// check reports the first thing in t that Compile would not have made.
func (t Topology) check() error {
	if err := checkpoint.ValidTopologyName(t.Name); err != nil {
		return err
	}
	nodes := map[string]bool{}
	for _, n := range t.Nodes {
		if err := validName(n); err != nil {
			return fmt.Errorf("node %q: %v", quoteIfLong(n), err)
		}
		nodes[n] = true
	}
	node := func(n, what string, start, end bool) error {
		if nodes[n] || start && n == START || end && n == END {
			return nil
		}
		return fmt.Errorf("%s %q is not a node", what, quoteIfLong(n))
	}
	for _, e := range t.Edges {
		if err := cmp.Or(node(e.From, "an edge's source", true, false), node(e.To, "an edge's target", false, true)); err != nil {
			return err
		}
	}
	for _, j := range t.Joins {
		if len(j.Sources) == 0 {
			return fmt.Errorf("a join into %q has no sources", quoteIfLong(j.To))
		}
		if err := node(j.To, "a join's target", false, false); err != nil {
			return err
		}
		for _, s := range j.Sources {
			if err := node(s, "a join's source", false, false); err != nil {
				return err
			}
		}
	}
	for _, b := range t.Branches {
		if err := node(b.From, "a branch's source", true, false); err != nil {
			return err
		}
		for _, d := range b.Destinations {
			if err := node(d, "a branch's destination", false, !b.Send); err != nil {
				return err
			}
		}
	}
	for _, bp := range append(slices.Clone(t.InterruptBefore), t.InterruptAfter...) {
		if bp != "*" {
			if err := node(bp, "a breakpoint", false, false); err != nil {
				return err
			}
		}
	}
	for i, sg := range t.Subgraphs {
		if err := node(sg.Node, "a subgraph node", false, false); err != nil {
			return err
		}
		if i > 0 && t.Subgraphs[i-1].Node == sg.Node {
			return fmt.Errorf("subgraph node %q is listed twice", quoteIfLong(sg.Node))
		}
		if err := sg.Topology.check(); err != nil {
			return fmt.Errorf("subgraph of node %q: %w", quoteIfLong(sg.Node), err)
		}
	}
	return nil
}

// LoadTopology reads the topology stored under fingerprint on s and
// decodes it (DecodeTopology). ok is false, with no error, when s keeps no
// topologies (it does not implement checkpoint.TopologyStore) or none
// under fingerprint (also for a database that predates them). It returns
// an error wrapping ErrInvalid for a string that is not a fingerprint, and
// otherwise the saver's error or DecodeTopology's.
func LoadTopology(ctx context.Context, s checkpoint.Saver, fingerprint string) (t Topology, ok bool, err error) {
	ts, isStore := s.(checkpoint.TopologyStore)
	if !isStore {
		return Topology{}, false, nil
	}
	if !checkpoint.ValidFingerprint(fingerprint) {
		return Topology{}, false, fmt.Errorf("%w: %q is not a topology fingerprint", ErrInvalidInput, fingerprint)
	}
	st, err := ts.Topology(ctx, fingerprint)
	switch {
	case errors.Is(err, checkpoint.ErrNotFound):
		return Topology{}, false, nil
	case err != nil:
		return Topology{}, false, fmt.Errorf("graph: read topology %s: %w", fingerprint, err)
	}
	t, err = DecodeTopology(st)
	if err != nil {
		return Topology{}, false, err
	}
	return t, true, nil
}

// Arrows returns the arrows of t's drawing, as Mermaid draws them, sorted
// by source, then target, solid before dashed: plain edges, an edge from
// every source of a join to its target, an edge to END from every node
// without an outgoing edge, join or router (LangGraph draws those so), and
// a dashed arrow from a router to each declared destination, or to every
// node and END (but END for a Send edge) when it declares none.
func (t Topology) Arrows() []Arrow {
	c := t.canonical()
	var out []Arrow
	seen := map[Arrow]bool{}
	add := func(a Arrow) {
		if !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	leaves := map[string]bool{}
	for _, e := range c.Edges {
		add(Arrow{From: e.From, To: e.To})
		leaves[e.From] = true
	}
	for _, j := range c.Joins {
		for _, s := range j.Sources {
			add(Arrow{From: s, To: j.To})
			leaves[s] = true
		}
	}
	for _, b := range c.Branches {
		leaves[b.From] = true
	}
	for _, n := range c.Nodes {
		if !leaves[n] {
			add(Arrow{From: n, To: END})
		}
	}
	for _, b := range c.Branches {
		dests := b.Destinations
		if len(dests) == 0 {
			dests = slices.Clone(c.Nodes)
			if !b.Send {
				dests = append(dests, END)
			}
		}
		for _, d := range dests {
			add(Arrow{From: b.From, To: d, Dashed: true})
		}
	}
	slices.SortFunc(out, func(a, b Arrow) int {
		return cmp.Or(strings.Compare(a.From, b.From), strings.Compare(a.To, b.To), cmpBool(a.Dashed, b.Dashed))
	})
	return out
}

// clone returns a deep copy of t.
func (t Topology) clone() Topology {
	c := Topology{Name: t.Name, Nodes: slices.Clone(t.Nodes), Edges: slices.Clone(t.Edges),
		InterruptBefore: slices.Clone(t.InterruptBefore), InterruptAfter: slices.Clone(t.InterruptAfter)}
	for _, j := range t.Joins {
		c.Joins = append(c.Joins, Join{Sources: slices.Clone(j.Sources), To: j.To})
	}
	for _, b := range t.Branches {
		c.Branches = append(c.Branches, Branch{From: b.From, Send: b.Send, Destinations: slices.Clone(b.Destinations)})
	}
	for _, sg := range t.Subgraphs {
		c.Subgraphs = append(c.Subgraphs, SubgraphTopology{Node: sg.Node, Topology: sg.Topology.clone()})
	}
	return c
}
