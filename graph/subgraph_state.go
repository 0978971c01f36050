package graph

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/interrupt"
)

// subgraphHost is what a graph needs of a compiled graph that one of its
// nodes runs (Graph.AddSubgraph), whatever its state type: every
// *Runnable implements it.
type subgraphHost interface {
	// answerable reports whether interrupt id, raised in namespace ns,
	// takes an answer (a NodeInterrupt does not), at any depth.
	answerable(ctx context.Context, saver checkpoint.Saver, thread, ns, id string) (bool, error)
	// snapshotAny returns the latest snapshot of namespace ns, with its
	// subgraphs, as a Snapshot of the graph's state type, or nil when
	// ns has no checkpoint.
	snapshotAny(ctx context.Context, saver checkpoint.Saver, thread, ns string) (any, error)
	// subgraph returns the graph node runs, when it runs one.
	subgraph(node string) (subgraphHost, bool)
	// stateType is the graph's state type.
	stateType() reflect.Type
	// topology is the graph's topology; storedTopologies are the
	// topologies a run of the graph stores (SaveTopology): its
	// subgraphs', at every depth, then its own.
	topology() Topology
	storedTopologies() []checkpoint.Topology
}

func (r *Runnable[S]) topology() Topology { return r.topo.clone() }

func (r *Runnable[S]) storedTopologies() []checkpoint.Topology {
	var out []checkpoint.Topology
	seen := map[string]bool{}
	for _, n := range r.nodeNames {
		if spec := r.nodes[n]; spec != nil && spec.sub != nil {
			for _, st := range spec.sub.storedTopologies() {
				if !seen[st.Fingerprint] {
					seen[st.Fingerprint] = true
					out = append(out, st)
				}
			}
		}
	}
	return append(out, checkpoint.Topology{Fingerprint: r.topoFP, Name: r.topo.Name, Data: r.topoData})
}

func (r *Runnable[S]) answerable(ctx context.Context, saver checkpoint.Saver, thread, ns, id string) (bool, error) {
	f, tp, err := r.loadAt(ctx, saver, thread, ns, "")
	if errors.Is(err, ErrThreadNotFound) {
		return true, nil // the subgraph has not saved it (yet): nothing says otherwise
	}
	if err != nil {
		return false, err
	}
	tasks := r.plan(f, ns, f.meta.Step+1)
	if err := r.attach(ctx, thread, f.id, tasks, tp.Pending); err != nil {
		return false, err
	}
	for _, t := range tasks {
		raised := false
		for _, in := range t.interrupts {
			raised = raised || in.ID == id
		}
		switch {
		case !raised:
			continue
		case id == interrupt.ID(t.id, -1):
			return false, nil
		}
		if spec := r.nodes[t.name]; spec != nil && spec.sub != nil {
			return spec.sub.answerable(ctx, saver, thread, checkpoint.TaskNS(ns, t.name, t.id), id)
		}
		return true, nil
	}
	return true, nil
}

func (r *Runnable[S]) snapshotAny(ctx context.Context, saver checkpoint.Saver, thread, ns string) (any, error) {
	s, err := r.stateOf(ctx, place{saver: saver, thread: thread, ns: ns}, stateOptions{subgraphs: true})
	if errors.Is(err, ErrThreadNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (r *Runnable[S]) subgraph(node string) (subgraphHost, bool) {
	spec := r.nodes[node]
	if spec == nil || spec.sub == nil {
		return nil, false
	}
	return spec.sub, true
}

func (r *Runnable[S]) stateType() reflect.Type { return reflect.TypeFor[S]() }

// subgraphAt returns the graph that runs in namespace ns of a thread of
// r, as a *Runnable[C]. It returns an error matching ErrInvalidInput for a
// malformed namespace, an *UnknownNodeError for a level whose node is no
// subgraph of the graph above it, and an error matching ErrInvalidInput
// naming both types when the graph there is not over C.
func subgraphAt[C, P any](r *Runnable[P], ns string) (*Runnable[C], error) {
	levels, err := checkpoint.SplitNS(ns)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	if len(levels) == 0 {
		return nil, fmt.Errorf("%w: an empty namespace names the root graph, not a subgraph", ErrInvalidInput)
	}
	var host subgraphHost = r
	for i, l := range levels {
		next, ok := host.subgraph(l.Node)
		if !ok {
			return nil, &UnknownNodeError{Name: l.Node, From: fmt.Sprintf("level %d of namespace %s (no subgraph node of that name)", i+1, strconv.Quote(ns))}
		}
		host = next
	}
	c, ok := host.(*Runnable[C])
	if !ok {
		return nil, fmt.Errorf("%w: namespace %s runs a graph over %s, not %s", ErrInvalidInput, strconv.Quote(ns), host.stateType(), reflect.TypeFor[C]())
	}
	return c, nil
}

// GetSubgraphState returns the latest state of the subgraph that ran in
// namespace ns of thread (a Task.NS, or an Event.NS), a graph over C run
// by r or by one of its subgraphs, as GetState returns r's. It returns
// ErrThreadNotFound when the subgraph has no checkpoint there, an error
// matching ErrInvalidInput for a malformed namespace or one whose graph
// is not over C, an *UnknownNodeError for a namespace whose nodes are not
// subgraphs, and otherwise what GetState returns.
func GetSubgraphState[C, P any](ctx context.Context, r *Runnable[P], thread, ns string, opts ...StateOption) (Snapshot[C], error) {
	c, pl, err := subgraphPlace[C](r, thread, ns)
	if err != nil {
		return Snapshot[C]{}, err
	}
	return c.stateOf(ctx, pl, stateOptionsOf(opts))
}

// SubgraphHistory returns the snapshots of the subgraph that ran in
// namespace ns of thread, newest first, as History returns r's. It fails
// as GetSubgraphState does (a namespace without checkpoints gives an
// empty list) and as History does.
func SubgraphHistory[C, P any](ctx context.Context, r *Runnable[P], thread, ns string, opts HistoryOptions) ([]Snapshot[C], error) {
	c, pl, err := subgraphPlace[C](r, thread, ns)
	if err != nil {
		return nil, err
	}
	return c.history(ctx, pl, opts)
}

// UpdateSubgraphState writes u into the state of the subgraph that runs in
// namespace ns of thread, as UpdateState does for r (LangGraph's
// update_state with a subgraph's checkpoint_ns): a new "update"
// checkpoint in the subgraph's namespace, under the thread's lease. The
// thread's root graph does not change: when it next runs the task (Resume
// or Continue), the subgraph goes on from the update. It fails as
// GetSubgraphState and UpdateState do.
func UpdateSubgraphState[C, P any](ctx context.Context, r *Runnable[P], thread, ns string, u Update[C], opts UpdateOptions) (Config, error) {
	c, pl, err := subgraphPlace[C](r, thread, ns)
	if err != nil {
		return Config{}, err
	}
	lease, leave := r.lease(r.cfg.runIDs())
	defer leave()
	return c.updateAt(ctx, pl, lease, &r.live, u, opts)
}

// subgraphPlace checks thread and ns and returns the subgraph over C and
// where its checkpoints are.
func subgraphPlace[C, P any](r *Runnable[P], thread, ns string) (*Runnable[C], place, error) {
	if r.cfg.saver == nil {
		return nil, place{}, noSaver(thread)
	}
	if err := checkThread(thread); err != nil {
		return nil, place{}, err
	}
	c, err := subgraphAt[C](r, ns)
	if err != nil {
		return nil, place{}, err
	}
	return c, place{saver: r.cfg.saver, thread: thread, ns: ns}, nil
}

// SubgraphStateOf returns the subgraph snapshot a task carries
// (Task.State), and false when it carries none or one of another state
// type than C.
func SubgraphStateOf[C any](t Task) (Snapshot[C], bool) {
	s, ok := t.State.(Snapshot[C])
	return s, ok
}

// nestedEvent is an event of a subgraph on its way to the root's stream,
// whatever the subgraph's state type.
type nestedEvent struct {
	ns             string
	kind           EventKind
	step           int
	node, taskID   string
	cached         bool
	err            error
	interrupts     []interrupt.Interrupt
	next           []string
	config         Config
	values, update any // the subgraph's S and Update[S]
	event          any // the subgraph's Event[S]
	data           any // EventMessages and EventCustom
}

func nestedOf[S any](ns string, e Event[S]) nestedEvent {
	ne := nestedEvent{ns: ns, kind: e.Kind, step: e.Step, node: e.Node, taskID: e.TaskID, cached: e.Cached, err: e.Err,
		interrupts: e.Interrupts, next: e.Next, config: e.Config, values: e.Values, update: e.Update, data: e.Data}
	e.NS = ns
	ne.event = e
	return ne
}

func eventOf[S any](ne nestedEvent) Event[S] {
	e := Event[S]{Kind: ne.kind, Step: ne.step, Node: ne.node, TaskID: ne.taskID, Cached: ne.cached, Err: ne.err,
		Interrupts: ne.interrupts, Next: ne.next, Config: ne.config, NS: ne.ns, Subgraph: ne.event, Data: ne.data}
	if v, ok := ne.values.(S); ok {
		e.Values = v
	}
	if u, ok := ne.update.(Update[S]); ok {
		e.Update = u
	}
	return e
}

// placeName names a thread, and a subgraph's namespace in it, for
// messages.
func placeName(thread, ns string) string {
	if ns == "" {
		return "thread " + strconv.Quote(thread)
	}
	return "thread " + strconv.Quote(thread) + " namespace " + strconv.Quote(ns)
}

// placeNameQ is placeName for the messages that quote a root thread bare.
func placeNameQ(thread, ns string) string {
	if ns == "" {
		return strconv.Quote(thread)
	}
	return placeName(thread, ns)
}
