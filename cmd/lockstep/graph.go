package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/graph"
)

// graphInfo is what the database tells of the graph a checkpoint was
// saved under (its metadata names the fingerprint; the topologies table
// holds the topology), and of the newest version of that graph stored.
type graphInfo struct {
	// Fingerprint is the fingerprint the checkpoint names.
	Fingerprint string `json:"fingerprint"`
	// Stored says the database holds the topology; Name is then its
	// graph's name.
	Stored bool   `json:"stored"`
	Name   string `json:"name,omitempty"`
	// Newest is the newest topology stored under Name: the one a
	// Runnable of that name stored last (every Runnable stores its
	// topology before its first write).
	Newest *newestJSON `json:"newest"`
	// Changed says Newest is another topology; Changes says how it
	// differs from this one.
	Changed bool          `json:"changed"`
	Changes *graphChanges `json:"changes"`

	topo    graph.Topology
	data    json.RawMessage
	noTable bool // the database predates stored topologies
}

type newestJSON struct {
	Fingerprint string    `json:"fingerprint"`
	StoredAt    time.Time `json:"stored_at"`
}

// graphChanges is how the newest version of a graph differs from the one
// a checkpoint was saved under. Edges are written as Mermaid writes them:
// "a --> b" (plain or join edge) and "a -.-> b" (a router's route).
type graphChanges struct {
	NodesAdded         []string `json:"nodes_added"`
	NodesRemoved       []string `json:"nodes_removed"`
	EdgesAdded         []string `json:"edges_added"`
	EdgesRemoved       []string `json:"edges_removed"`
	BreakpointsAdded   []string `json:"breakpoints_added"` // "before NODE", "after NODE"
	BreakpointsRemoved []string `json:"breakpoints_removed"`
	// SharesNoNode says the two have no node in common: probably two
	// graphs over one state type that share its default name.
	SharesNoNode bool `json:"shares_no_node"`
}

// readGraph reads the graph cp was saved under. It returns nil when cp
// names no topology (a checkpoint written before lockstep recorded
// them), and an error for a stored topology that cannot be read.
func (e *env) readGraph(ctx context.Context, s database, cp checkpoint.Checkpoint) (*graphInfo, error) {
	fp := cp.Metadata.Topology
	if fp == "" {
		return nil, nil
	}
	gi := &graphInfo{Fingerprint: fp}
	if sq, ok := s.(*sqlite.Saver); ok {
		// A SQLite file of schema 4 has no topologies table (a PostgreSQL
		// schema OpenExisting opens always has one).
		var n int
		if err := sq.DB().QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'topologies'`).Scan(&n); err != nil {
			return nil, fmt.Errorf("read the topologies of %s: %w", e.dbName(), err)
		}
		if n == 0 {
			gi.noTable = true
			return gi, nil
		}
	}
	t, ok, err := graph.LoadTopology(ctx, s, fp)
	if err != nil {
		return nil, fmt.Errorf("read the topology %s of checkpoint %s: %w", fp, cp.ID, err)
	}
	if !ok {
		return gi, nil
	}
	gi.Stored, gi.Name, gi.topo = true, t.Name, t
	gi.data, err = t.Encode()
	if err != nil {
		return nil, err
	}
	st, err := s.LatestTopology(ctx, t.Name)
	if err != nil {
		return nil, fmt.Errorf("read the newest topology of graph %s: %w", quote(t.Name), err)
	}
	gi.Newest = &newestJSON{Fingerprint: st.Fingerprint, StoredAt: st.StoredAt.UTC()}
	if st.Fingerprint == fp {
		return gi, nil
	}
	newest, err := graph.DecodeTopology(st)
	if err != nil {
		return nil, fmt.Errorf("read the newest topology of graph %s: %w", quote(t.Name), err)
	}
	gi.Changed, gi.Changes = true, diffTopologies(t, newest)
	return gi, nil
}

// diffTopologies says what newer adds to and removes from older.
func diffTopologies(older, newer graph.Topology) *graphChanges {
	c := &graphChanges{}
	c.NodesAdded, c.NodesRemoved = setDiff(older.Nodes, newer.Nodes)
	c.EdgesAdded, c.EdgesRemoved = setDiff(arrowTexts(older), arrowTexts(newer))
	c.BreakpointsAdded, c.BreakpointsRemoved = setDiff(breakpointTexts(older), breakpointTexts(newer))
	c.SharesNoNode = len(older.Nodes) > 0 && len(newer.Nodes) > 0 && !slices.ContainsFunc(older.Nodes, func(n string) bool { return slices.Contains(newer.Nodes, n) })
	return c
}

// setDiff returns what b has that a has not, and what a has that b has
// not, sorted (never nil, for JSON).
func setDiff(a, b []string) (added, removed []string) {
	added, removed = []string{}, []string{}
	for _, x := range b {
		if !slices.Contains(a, x) {
			added = append(added, x)
		}
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			removed = append(removed, x)
		}
	}
	slices.Sort(added)
	slices.Sort(removed)
	return added, removed
}

func arrowTexts(t graph.Topology) []string {
	var out []string
	for _, a := range t.Arrows() {
		arrow := " --> "
		if a.Dashed {
			arrow = " -.-> "
		}
		out = append(out, a.From+arrow+a.To)
	}
	return out
}

func breakpointTexts(t graph.Topology) []string {
	var out []string
	for _, n := range t.InterruptBefore {
		out = append(out, "before "+n)
	}
	for _, n := range t.InterruptAfter {
		out = append(out, "after "+n)
	}
	return out
}

// waitingNodes are the nodes the thread waits in at a checkpoint: those
// of its tasks that wait for an answer, or, at a breakpoint, its next
// tasks.
func waitingNodes(in *checkpoint.Inspection) []string {
	var out []string
	for i := range in.Tasks {
		if t := &in.Tasks[i]; t.Status() == "waiting" && !slices.Contains(out, t.Name) {
			out = append(out, t.Name)
		}
	}
	if len(out) == 0 && in.Status == "waiting" {
		for _, n := range in.Next {
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	slices.Sort(out)
	return out
}

// graphJSON is the output of graph THREAD --json.
type graphJSON struct {
	Thread      string          `json:"thread"`
	Checkpoint  string          `json:"checkpoint"`
	Head        bool            `json:"head"`
	Graph       string          `json:"graph"` // the graph's name
	Fingerprint string          `json:"fingerprint"`
	Status      string          `json:"status"`
	Waiting     []string        `json:"waiting"` // the nodes marked
	Mermaid     string          `json:"mermaid"`
	Topology    json.RawMessage `json:"topology"` // as stored (graph.Topology's encoding)
	Newest      *newestJSON     `json:"newest"`
	Changed     bool            `json:"changed"`
}

func graphCommand(fs *flag.FlagSet) runner {
	at := fs.String("checkpoint", "", "draw the graph checkpoint `ID` was saved under instead of the head's")
	return func(ctx context.Context, e *env, args []string) error {
		thread := args[0]
		s, err := e.openSaver(false)
		if err != nil {
			return err
		}
		defer s.Close()
		head, err := e.readHead(ctx, s, thread)
		if err != nil {
			return err
		}
		tp := head
		if *at != "" && *at != head.Checkpoint.ID {
			tp, err = s.Get(ctx, checkpoint.Ref{Thread: thread, ID: *at}, checkpoint.GetOptions{})
			if errors.Is(err, checkpoint.ErrNotFound) {
				return notFound(fmt.Sprintf("thread %s has no checkpoint %s", quote(thread), quote(*at)),
					"run `lockstep history "+shellArg(thread)+"` to list its checkpoints", err)
			}
			if err != nil {
				return fmt.Errorf("read thread %s at %s: %w", quote(thread), quote(*at), err)
			}
		}
		latest := tp.Checkpoint.ID == head.Checkpoint.ID
		in, err := checkpoint.Inspect(tp, latest)
		if err != nil {
			return err
		}
		gi, err := e.readGraph(ctx, s, tp.Checkpoint)
		if err != nil {
			return err
		}
		where := fmt.Sprintf("thread %s checkpoint %s", quote(thread), tp.Checkpoint.ID)
		switch {
		case gi == nil:
			return notFound(where+" names no graph: it was written before lockstep recorded the graph of each checkpoint",
				"run the thread with a current lockstep (its next checkpoint names its graph), or draw the graph in the application with Runnable.Mermaid", nil)
		case gi.noTable:
			return notFound(fmt.Sprintf("%s was saved under graph %s, but %s stores no graph topologies (an older lockstep wrote it)", where, gi.Fingerprint, e.dbName()),
				"open the database once with the program that uses it, which upgrades it and stores its graph on its next run", nil)
		case !gi.Stored:
			return notFound(fmt.Sprintf("%s was saved under graph %s, whose topology %s does not hold", where, gi.Fingerprint, e.dbName()),
				"the saver that wrote it keeps no topologies, or the topologies table lost the row: draw the graph in the application with Runnable.Mermaid", nil)
		}
		waiting := waitingNodes(in)
		m := gi.topo.Mermaid(waiting...)
		if e.opts.json {
			return e.writeJSON(graphJSON{Thread: thread, Checkpoint: tp.Checkpoint.ID, Head: latest, Graph: gi.Name, Fingerprint: gi.Fingerprint,
				Status: in.Status, Waiting: nonNil(waiting), Mermaid: m, Topology: gi.data, Newest: gi.Newest, Changed: gi.Changed})
		}
		_, err = fmt.Fprint(e.stdout, m)
		return err
	}
}

// graphRow is the state command's line about the graph a checkpoint was
// saved under.
func graphRow(gi *graphInfo) string {
	switch {
	case gi == nil:
		return "not recorded (the checkpoint was written before lockstep recorded graphs)"
	case gi.noTable:
		return gi.Fingerprint + " (this database stores no graph topologies: an older lockstep wrote it)"
	case !gi.Stored:
		return gi.Fingerprint + " (its topology is not stored in this database)"
	case gi.Changed:
		return fmt.Sprintf("%s %s, not the newest version stored (%s, stored %s)", quote(gi.Name), gi.Fingerprint, gi.Newest.Fingerprint, formatTime(gi.Newest.StoredAt))
	}
	return fmt.Sprintf("%s %s (the newest version stored)", quote(gi.Name), gi.Fingerprint)
}

// graphWarning is what the state command says of a thread that will run
// again (not done) and was saved under another version of its graph than
// the newest one stored: what changed, and whether the nodes it waits in
// are still there. It is "" when there is nothing to say.
func graphWarning(gi *graphInfo, waiting []string) string {
	if gi == nil || !gi.Changed {
		return ""
	}
	c := gi.Changes
	var b strings.Builder
	fmt.Fprintf(&b, "warning: this thread was saved under another version of graph %s than the newest one stored\n", quote(gi.Name))
	fmt.Fprintf(&b, "  (%s, stored %s): the process that runs it next runs that version. What changed:\n", gi.Newest.Fingerprint, formatTime(gi.Newest.StoredAt))
	lines := [][2]string{
		{"nodes added", strings.Join(c.NodesAdded, ", ")}, {"nodes removed", strings.Join(c.NodesRemoved, ", ")},
		{"edges added", strings.Join(c.EdgesAdded, "; ")}, {"edges removed", strings.Join(c.EdgesRemoved, "; ")},
		{"breakpoints added", strings.Join(c.BreakpointsAdded, ", ")}, {"breakpoints removed", strings.Join(c.BreakpointsRemoved, ", ")},
	}
	t := newTable(&b)
	any := false
	for _, l := range lines {
		if l[1] != "" {
			t.row("  "+l[0], l[1])
			any = true
		}
	}
	if !any {
		t.row("  ", "nothing a drawing shows (the encoding of the graph differs)")
	}
	t.flush()
	var gone []string
	for _, n := range waiting {
		if slices.Contains(c.NodesRemoved, n) {
			gone = append(gone, n)
		}
	}
	if len(gone) > 0 {
		fmt.Fprintf(&b, "  the thread waits in %s, which the newest version does not have: resuming it there fails (graph.UnknownNodeError)\n", strings.Join(gone, ", "))
	}
	if c.SharesNoNode {
		b.WriteString("  the two versions share no node: if they are two graphs over one state type, give each its own name (graph.WithName)\n")
	}
	return b.String()
}
