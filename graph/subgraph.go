package graph

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/internal/testhook"
	"github.com/lockstepgo/lockstep/interrupt"
)

// SubgraphNode is a compiled graph made ready to run as a node of a graph
// over P (Graph.AddSubgraph): Subgraph for a graph over P itself,
// SubgraphMap for a graph over another state type. The zero SubgraphNode
// is refused by AddSubgraph.
type SubgraphNode[P any] struct {
	child subgraphHost
	run   NodeFunc[P]
}

// Subgraph makes child, a compiled graph over the same state type, a node
// of another graph (add it with Graph.AddSubgraph). The subgraph starts
// from the parent's state at the step (every field is its input) and
// writes back what its own nodes changed: the items its append fields
// gained, the keys its merge fields gained or changed, the final value of
// each other field whose value changed (an append field whose items were
// replaced is overwritten). A field with a
// custom reducer receives that final value as one write. LangGraph writes
// every field of the subgraph's final state back instead, so that an
// append field shared by both would hold its items twice.
//
// See Graph.AddSubgraph for how a subgraph runs, pauses and resumes.
func Subgraph[S any](child *Runnable[S]) SubgraphNode[S] {
	if child == nil {
		return SubgraphNode[S]{}
	}
	all := child.schema.names()
	in := func(p S) Update[S] { return Set(p, all...) }
	return subgraphOf(child, in, child.changes)
}

// SubgraphMap makes child, a compiled graph over the state type C, a node
// of a graph over P (add it with Graph.AddSubgraph): in maps the parent's
// state at the step to the subgraph's input (the fields it sets, as
// Invoke's input), and out maps the subgraph's final state to the node's
// update in the parent, with its fields, Goto and Send (the node's edges
// apply too, as for any node). Both run each time the node runs, resumes
// included, and must not have side effects; a nil in or out makes
// AddSubgraph fail.
//
// See Graph.AddSubgraph for how a subgraph runs, pauses and resumes.
func SubgraphMap[P, C any](child *Runnable[C], in func(P) Update[C], out func(C) Update[P]) SubgraphNode[P] {
	if child == nil || in == nil || out == nil {
		return SubgraphNode[P]{}
	}
	return subgraphOf(child, in, func(_ P, c C) Update[P] { return out(c) })
}

// AddSubgraph adds a node that runs a compiled graph as a subgraph
// (LangGraph's compiled graph used as a node), to any depth. A subgraph
// runs in the thread of the graph that runs it, with its saver and under
// its lease, and saves its checkpoints in the namespace of the task that
// runs it (checkpoint.TaskNS: "<node>:<task ID>", nested with "|", as
// LangGraph's checkpoint_ns); its metadata's Parents name the checkpoints
// of the enclosing graphs the step started from. Each task runs the
// subgraph afresh, from its input; the same task, run again after a pause,
// a failure or a crash, goes on from the subgraph's latest checkpoint, so
// that the subgraph's finished steps never run again.
//
// Give the subgraph its own name (WithName): a run stores the subgraph's
// topology with its parent's, and a tool that compares a thread's graph
// with the newest version of its name stored (the lockstep CLI's state)
// would take a subgraph sharing its parent's name (the state type, by
// default) for a version of the parent.
//
// The subgraph's own compile options choose its recursion limit (unless
// the run sets RecursionLimit, which then applies at every depth),
// concurrency, breakpoints, retry policies, value cap and logger. Its
// saver, clock, IDs and lease are those of the run that runs it: a saver
// given to the subgraph's Compile serves only its runs on its own.
//
// Pausing anywhere pauses the thread. An interrupt.Ask or a
// NodeInterrupt in a subgraph, at any depth, pauses the task that runs it
// with the same interrupts (same IDs), saved as that task's interrupts at
// every level up to the root: Snapshot.Interrupts and the cross-thread
// inbox list them, and Resume answers them by ID from the root. On
// resume, the task runs again (SubgraphMap's in and out with it) and the
// subgraph goes on from its latest checkpoint with the answers: only its
// interrupted nodes run again. Parallel subgraphs that pause in one step
// are answered one at a time or together, as parallel nodes are; a
// subgraph without an answer pauses again. A static breakpoint inside a
// subgraph stops the thread too (Snapshot.Breakpoint names the node that
// runs the subgraph) and Continue passes it once.
//
// A node of the subgraph may return ToParent to end the subgraph's run and
// route in the graph that runs it. An error of the subgraph fails the
// task with it (a *NodeError around the subgraph's *NodeError); Continue
// runs the failed subgraph node again. GetState with Subgraphs, History
// with Subgraphs, GetSubgraphState, SubgraphHistory and
// UpdateSubgraphState read and update a subgraph's state; Stream with
// StreamSubgraphs yields its events.
//
// Names, options and problems are those of AddNode, and a subgraph node's
// name may not contain "|" (checkpoint.NSSeparator); a zero SubgraphNode
// (a nil graph, a nil in or out) is reported by Compile.
func (g *Graph[S]) AddSubgraph(name string, sub SubgraphNode[S], opts ...NodeOption) *Graph[S] {
	if sub.child == nil || sub.run == nil {
		return g.fail(&CompileError{Problem: "nil subgraph (Subgraph or SubgraphMap was given a nil graph or function)", Node: quoteIfLong(name)})
	}
	if _, dup := g.nodes[name]; dup || validName(name) != nil {
		return g.AddNode(name, sub.run, opts...) // reports the problem
	}
	if strings.Contains(name, checkpoint.NSSeparator) {
		// It would split the namespaces of the subgraph's checkpoints.
		return g.fail(&CompileError{Problem: "subgraph node name contains '" + checkpoint.NSSeparator + "'", Node: quoteIfLong(name)})
	}
	g.AddNode(name, sub.run, opts...)
	if spec := g.nodes[name]; spec != nil {
		spec.sub = sub.child
	}
	return g
}

// subgraphOf builds the node that runs child with in and out.
func subgraphOf[P, C any](child *Runnable[C], in func(P) Update[C], out func(P, C) Update[P]) SubgraphNode[P] {
	run := func(ctx context.Context, st P) (Update[P], error) {
		var zero Update[P]
		sp, _ := scratchOf(ctx)
		if sp == nil || sp.outer == nil {
			return zero, fmt.Errorf("%w: a subgraph node runs only as a node of a graph run (Graph.AddSubgraph)", ErrInvalidInput)
		}
		res, bp, err := child.runNested(ctx, sp, in(st))
		var tp *toParentError
		switch {
		case errors.As(err, &tp):
			u, ok := tp.cmd.parentUpdate().(Update[P])
			if !ok {
				return zero, fmt.Errorf("%w: node %q of the subgraph run by node %q returned ToParent with an Update[%s], and the parent graph's state type is %s",
					ErrInvalidInput, tp.node, sp.info.Node, tp.cmd.stateType(), reflect.TypeFor[P]())
			}
			return u, nil
		case err != nil:
			return zero, err
		case res.Status == StatusWaiting:
			if len(res.Interrupts) > 0 {
				sp.raise(res.Interrupts)
			} else if bp != nil {
				sp.mu.Lock()
				sp.breakpoint = bp
				sp.mu.Unlock()
			}
			return zero, errSubgraphWaiting
		}
		return out(st, res.Values), nil
	}
	return SubgraphNode[P]{child: child, run: run}
}

// errSubgraphWaiting is what a subgraph node returns when its subgraph
// waits: the task pauses with what the subgraph raised (scratch.raise) or
// at its breakpoint.
var errSubgraphWaiting = errors.New("graph: the subgraph waits")

// scratchOf returns the task scratchpad ctx carries.
func scratchOf(ctx context.Context) (*scratch, bool) {
	res, ok := interrupt.FromContext(ctx)
	if !ok {
		return nil, false
	}
	sp, ok := res.(*scratch)
	return sp, ok
}

// changes is the update a same-type subgraph writes back: what its run
// changed from in to out (see Subgraph).
func (r *Runnable[S]) changes(in, out S) Update[S] {
	u := Update[S]{value: out}
	iv, ov := reflect.ValueOf(&in).Elem(), reflect.ValueOf(&u.value).Elem()
	for i := range r.schema.fields {
		fl := &r.schema.fields[i]
		a, b := iv.Field(fl.index), ov.Field(fl.index)
		if fl.reducer.kind == kindAppend && prefixOf(a, b) {
			if b.Len() > a.Len() {
				b.Set(b.Slice(a.Len(), b.Len()))
				u.fields = append(u.fields, fl.name)
			}
			continue
		}
		if fl.reducer.kind == kindMerge {
			// The keys the subgraph added or changed: a merge never
			// removes one.
			d := reflect.MakeMap(b.Type())
			for it := b.MapRange(); it.Next(); {
				if old := a.MapIndex(it.Key()); !old.IsValid() || !reflect.DeepEqual(old.Interface(), it.Value().Interface()) {
					d.SetMapIndex(it.Key(), it.Value())
				}
			}
			if d.Len() > 0 {
				b.Set(d)
				u.fields = append(u.fields, fl.name)
			}
			continue
		}
		if reflect.DeepEqual(a.Interface(), b.Interface()) {
			continue
		}
		if fl.reducer.kind == kindAppend {
			u.overwrite = append(u.overwrite, fl.name) // the items were replaced
		} else {
			u.fields = append(u.fields, fl.name)
		}
	}
	return u
}

// prefixOf reports whether slice a is a prefix of slice b, item by item.
func prefixOf(a, b reflect.Value) bool {
	if a.Len() > b.Len() {
		return false
	}
	for i := 0; i < a.Len(); i++ {
		if !reflect.DeepEqual(a.Index(i).Interface(), b.Index(i).Interface()) {
			return false
		}
	}
	return true
}

// ToParent returns the error a node of a subgraph returns to end the
// subgraph's run and apply u in the graph that runs it, as the update of
// the node that runs the subgraph there (LangGraph's
// Command(graph=Command.PARENT)): u's fields go through the parent's
// reducers, its Goto and Send route in the parent, and that node's edges
// apply as for any update it returns; SubgraphMap's out is not called. P
// is the parent graph's state type; another is an error of the parent's
// node (matching ErrInvalidInput). The subgraph's other tasks of the step
// finish, and their writes stay pending in its namespace. Returned by a
// node of a thread's root graph, which has no parent, it fails the node
// with an error matching ErrNoParent.
func ToParent[P any](u Update[P]) error { return &ParentCommand[P]{Update: u} }

// ParentCommand is the error ToParent returns. It is not a failure: the
// runtime reads it, and it never reaches a caller.
type ParentCommand[P any] struct {
	Update Update[P]
}

// Error says what the command is for.
func (c *ParentCommand[P]) Error() string {
	return "graph: an update for the parent graph (ToParent), returned outside a subgraph"
}

func (c *ParentCommand[P]) parentUpdate() any { return c.Update }

func (c *ParentCommand[P]) stateType() reflect.Type { return reflect.TypeFor[P]() }

// parentCommand is a *ParentCommand of any state type.
type parentCommand interface {
	error
	parentUpdate() any
	stateType() reflect.Type
}

// ErrNoParent: a node of a thread's root graph returned ToParent.
var ErrNoParent = errors.New("graph: there is no parent graph")

// toParentError ends a subgraph's run whose node returned ToParent; the
// node that runs the subgraph applies the command.
type toParentError struct {
	cmd  parentCommand
	node string
}

func (e *toParentError) Error() string {
	return "graph: node " + strconv.Quote(e.node) + " sent an update to the parent graph"
}

// outer is what a subgraph's run takes from the run of the task that runs
// it (run.outer).
type outer struct {
	saver      checkpoint.Saver
	thread, ns string
	lease      checkpoint.Lease
	request    func(do func(checkpoint.Lease) error) error
	live       *liveRuns
	parents    map[string]string // Metadata.Parents of the running graph's checkpoints
	flush      func(ctx context.Context) error
	emit       func(nestedEvent) bool // nil unless the root streams its subgraphs
	metadata   map[string]any
	limit      int
	limitSet   bool
	ids        func(after string) string
	now        checkpoint.Clock
	saveTopo   func(ctx context.Context) error
}

// nestLink is what a subgraph's run keeps of the run of the task that runs
// it.
type nestLink struct {
	request func(do func(checkpoint.Lease) error) error
	flush   func(ctx context.Context) error
	parents map[string]string
	ids     func(after string) string
	now     checkpoint.Clock
	// saveTopology stores the root graph's topology, its subgraphs' with
	// it, on the root's saver.
	saveTopology func(ctx context.Context) error
}

// outer returns what a subgraph run by one of ru's tasks takes from ru.
func (ru *run[S]) outer() *outer {
	return &outer{
		saver: ru.saver, thread: ru.thread, ns: ru.ns, lease: ru.lease, request: ru.request, live: ru.live,
		parents: ru.parents(), emit: ru.emitNested, metadata: ru.opts.metadata, limit: ru.opts.limit, limitSet: ru.opts.limitSet,
		ids: ru.nextID, now: ru.now, saveTopo: ru.saveTopology,
		flush: func(ctx context.Context) error {
			if err := ru.beforeWrite(ctx); err != nil {
				return err
			}
			_, err := ru.flushHeld(ctx)
			return err
		},
	}
}

// beforeWrite saves what the runs enclosing a subgraph's run hold (a
// resume's answers, outermost first) before the subgraph writes: what
// the subgraph does with an answer is never saved without the answer.
func (ru *run[S]) beforeWrite(ctx context.Context) error {
	if ru.nest == nil {
		return nil
	}
	return ru.nest.flush(ctx)
}

// parents is the Metadata.Parents of the run's checkpoints: namespace →
// the checkpoint of each enclosing graph its step started from; empty at
// the root.
func (ru *run[S]) parents() map[string]string {
	if ru.nest == nil {
		return map[string]string{}
	}
	return ru.nest.parents
}

// nextID returns a new checkpoint ID sorting after after: from the
// root's generator for a subgraph's run.
func (ru *run[S]) nextID(after string) string {
	if ru.nest != nil {
		return ru.nest.ids(after)
	}
	return ru.r.cfg.ids(after)
}

// now reads the run's clock: the root's for a subgraph's run.
func (ru *run[S]) now() time.Time {
	if ru.nest != nil {
		return ru.nest.now()
	}
	return ru.r.cfg.now()
}

// runNested runs r as the subgraph of the task sp describes, with input
// when the task's namespace has no checkpoint yet, and otherwise on from
// its head with the task's answers. It returns the subgraph's result, the
// breakpoint it stopped at (nil unless it waits at one), or its error.
func (r *Runnable[S]) runNested(ctx context.Context, sp *scratch, input Update[S]) (Result[S], *checkpoint.Breakpoint, error) {
	var zero Result[S]
	o := sp.outer
	ns := checkpoint.TaskNS(o.ns, sp.info.Node, sp.info.TaskID)
	parents := maps.Clone(o.parents)
	if parents == nil {
		parents = map[string]string{}
	}
	parents[o.ns] = sp.info.CheckpointID
	ro := resolvedRun{before: r.before, after: r.after, limit: r.cfg.recursionLimit, limitSet: o.limitSet, metadata: o.metadata}
	if o.limitSet {
		ro.limit = o.limit
	}
	ru := &run[S]{
		r: r, thread: o.thread, ns: ns, opts: ro, saver: o.saver, lease: o.lease, hook: testhook.From(ctx), live: o.live,
		nest: &nestLink{request: o.request, flush: o.flush, parents: parents, ids: o.ids, now: o.now, saveTopology: o.saveTopo},
	}
	if up := o.emit; up != nil {
		ru.emitNested = up
		ru.emit = func(e Event[S]) bool { return up(nestedOf(ns, e)) }
	}
	defer ru.finish(ctx)
	var err error
	if o.saver == nil {
		err = ru.startInput(ctx, input)
	} else {
		switch f, tp, lerr := r.loadAt(ctx, o.saver, o.thread, ns, ""); {
		case errors.Is(lerr, ErrThreadNotFound):
			err = ru.startInput(ctx, input)
		case lerr != nil:
			err = lerr
		default:
			err = ru.resumeNested(ctx, f, tp, sp.answers)
		}
	}
	if err != nil {
		return zero, nil, err
	}
	res, err := ru.loop(ctx)
	if _, ferr := ru.flushHeld(ctx); ferr != nil {
		res, err = zero, errors.Join(ferr, err)
	}
	if ru.saver != nil && ru.fr != nil && len(ru.fr.dirty) == 0 && !ru.heldLost {
		r.cache.put(ru.thread, ns, ru.fr)
	}
	return res, ru.stoppedAt, err
}

// resumeNested sets a subgraph's run up to go on from f, its head: the
// answers the task that runs it was given that answer its pending
// interrupts are delivered as a resume's; without any, it continues.
func (ru *run[S]) resumeNested(ctx context.Context, f *frame[S], tp *checkpoint.Tuple, answers map[string]json.RawMessage) error {
	r := ru.r
	if err := r.checkNext(ru.thread, f); err != nil {
		return err
	}
	tasks := r.plan(f, ru.ns, f.meta.Step+1)
	if err := r.attach(ctx, ru.thread, f.id, tasks, tp.Pending); err != nil {
		return err
	}
	byID := map[string]any{}
	for _, t := range tasks {
		if t.done {
			continue
		}
		for _, in := range t.interrupts {
			a, ok := answers[in.ID]
			if _, answered := t.answers[in.ID]; ok && !answered && in.ID != interrupt.ID(t.id, -1) {
				byID[in.ID] = a
			}
		}
	}
	if len(byID) == 0 {
		return ru.resumeFrom(ctx, f, tp.Pending)
	}
	return ru.resumeAt(ctx, f, tp, Command[S]{ResumeByID: byID})
}

// saveTopology stores the graph's topology before the run's first write
// (Runnable.SaveTopology): the root's, which holds its subgraphs', for a
// subgraph's run.
func (ru *run[S]) saveTopology(ctx context.Context) error {
	if ru.nest != nil {
		return ru.nest.saveTopology(detached(ctx))
	}
	return ru.r.SaveTopology(detached(ctx))
}
