package graph

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/internal/safe"
	"github.com/lockstepgo/lockstep/internal/strictjson"
	"github.com/lockstepgo/lockstep/interrupt"
)

// task is one scheduled execution of a node in one superstep.
type task[S any] struct {
	id       string
	name     string
	push     int // index of the Send for push tasks, -1 for pull tasks
	triggers []string
	input    S

	// outcome
	done       bool // has writes: finished now, or earlier (cached)
	cached     bool // writes came from a saved pending write
	saved      bool // writes are in the saver
	writes     []twrite
	encoded    []checkpoint.Write // writes as they are saved, encoded when the node finished
	update     Update[S]          // what the node returned (zero when cached)
	err        error
	interrupts []interrupt.Interrupt
	answers    map[string]json.RawMessage       // saved answers to its interrupts
	failure    *checkpoint.TaskError            // saved error of an earlier attempt
	steps      map[string]checkpoint.StepResult // durable step results by name
	stepSlots  int                              // next free "__step__:<n>" slot
	abandoned  bool                             // cancelled because a sibling failed
	toParent   parentCommand                    // the node sent an update to the parent graph (ToParent)
	breakpoint *checkpoint.Breakpoint           // the node's subgraph stopped at a breakpoint
	attempts   int                              // attempts of its last execution
}

func (t *task[S]) path() string {
	if t.push >= 0 {
		return "push:" + strconv.Itoa(t.push)
	}
	return "pull"
}

// before orders tasks for applying writes: pull tasks by node name, then
// push tasks by Send index, as LangGraph does.
func (t *task[S]) before(o *task[S]) bool {
	if (t.push < 0) != (o.push < 0) {
		return t.push < 0
	}
	if t.push < 0 {
		return t.name < o.name
	}
	return t.push < o.push
}

// twrite is one resolved write of a task.
type twrite struct {
	channel   string // field name, branch:to:<node>, join:..., __pregel_tasks
	field     int    // index into schema.fields, -1 for scheduling channels
	value     reflect.Value
	overwrite bool
	source    string // join writes: the source node
	send      any    // *Send[S]
}

// plan lists the tasks of the superstep that starts from f, in the order
// snapshots list them: push tasks by Send index first, then the start
// task, then pull tasks by node name. LangGraph plans pushes first too;
// it orders pull tasks by name while running and by registration in
// get_state, and the name is the order a reader of the stored data alone
// (checkpoint.Inspect, the CLI) can rebuild. Writes are applied in another
// fixed order (task.before).
func (r *Runnable[S]) plan(f *frame[S], ns string, step int) []*task[S] {
	var tasks []*task[S]
	for i, s := range f.sends {
		tasks = append(tasks, &task[S]{name: s.Node, push: i, triggers: []string{checkpoint.ChannelSends}, input: r.view(s.Arg)})
	}
	var input S
	haveInput := false
	pullInput := func() S {
		if !haveInput {
			input, haveInput = r.view(f.state), true
		}
		return input
	}
	if f.start != nil {
		trig := []string{checkpoint.ChannelStart}
		tasks = append(tasks, &task[S]{name: START, push: -1, triggers: trig, input: pullInput()})
	}
	for _, name := range r.nodeNames {
		var trig []string
		if f.triggers[name] {
			trig = r.branchTrig[name] // shared: appending below copies it (cap 1)
		}
		for _, j := range r.joinsTo[name] {
			if joinComplete(j, f.joins[j.channel]) {
				trig = append(trig, j.channel)
			}
		}
		// Sorted, so that task IDs depend only on what is stored, not on
		// the order joins were added: a reader without the graph's code
		// (the CLI) computes the same IDs.
		if len(trig) > 1 {
			slices.Sort(trig)
		}
		if len(trig) > 0 {
			tasks = append(tasks, &task[S]{name: name, push: -1, triggers: trig, input: pullInput()})
		}
	}
	for _, t := range tasks {
		t.id = checkpoint.TaskID(f.thread, f.id, ns, step, t.name, t.path(), t.triggers)
	}
	return tasks
}

// attach gives planned tasks the writes saved against their checkpoint:
// finished tasks get their writes back (and will not run again); paused
// tasks get their answers; every task gets its durable step results.
func (r *Runnable[S]) attach(ctx context.Context, thread, cpID string, tasks []*task[S], pending []checkpoint.PendingWrite) error {
	byID := make(map[string]*task[S], len(tasks))
	for _, t := range tasks {
		byID[t.id] = t
	}
	var regular map[*task[S]][]checkpoint.PendingWrite
	var raisedBy map[string]string // interrupt ID → task: unique within a checkpoint
	for _, w := range pending {
		t := byID[w.TaskID]
		if t == nil {
			continue
		}
		// Special writes are decoded as strictly as state: what
		// json.Marshal could not have written (null, a duplicate or
		// case-variant key, invalid UTF-8, a lone surrogate) is corrupt,
		// never read as a task that stopped waiting or an answer under
		// an ID nobody asked.
		switch {
		case w.Channel == checkpoint.ChannelResume:
			a, err := checkpoint.DecodeAnswers(w.Value)
			if err != nil {
				return &checkpoint.CorruptError{Thread: thread, Checkpoint: cpID, What: "resume write of task " + t.id, Err: err}
			}
			t.answers = a
		case w.Channel == checkpoint.ChannelInterrupt:
			list, err := checkpoint.DecodeInterrupts(w.Value)
			if raisedBy == nil {
				raisedBy = map[string]string{}
			}
			for _, in := range list {
				if other, dup := raisedBy[in.ID]; dup && other != t.id && err == nil {
					err = fmt.Errorf("tasks %s and %s both raised interrupt %s", other, t.id, in.ID)
				}
				raisedBy[in.ID] = t.id
			}
			if err != nil {
				return &checkpoint.CorruptError{Thread: thread, Checkpoint: cpID, What: "interrupt write of task " + t.id, Err: err}
			}
			t.interrupts = list
		case w.Channel == checkpoint.ChannelError:
			te, err := checkpoint.DecodeTaskError(w.Value)
			if err != nil {
				return &checkpoint.CorruptError{Thread: thread, Checkpoint: cpID, What: "error write of task " + t.id, Err: err}
			}
			t.failure = &te
		case strings.HasPrefix(w.Channel, checkpoint.ChannelStepPrefix):
			n, err := strconv.Atoi(strings.TrimPrefix(w.Channel, checkpoint.ChannelStepPrefix))
			if err == nil && (n < 0 || checkpoint.ChannelStepPrefix+strconv.Itoa(n) != w.Channel) {
				err = fmt.Errorf("channel %q is not a durable step slot", w.Channel)
			}
			var sr checkpoint.StepResult
			if err == nil {
				sr, err = checkpoint.DecodeStepResult(w.Value)
			}
			if err != nil {
				return &checkpoint.CorruptError{Thread: thread, Checkpoint: cpID, What: "step write of task " + t.id, Err: err}
			}
			if t.steps == nil {
				t.steps = map[string]checkpoint.StepResult{}
			}
			if _, dup := t.steps[sr.Name]; !dup {
				t.steps[sr.Name] = sr
			}
			t.stepSlots = max(t.stepSlots, n+1)
		case checkpoint.IsSpecial(w.Channel):
		default:
			if regular == nil {
				regular = map[*task[S]][]checkpoint.PendingWrite{}
			}
			regular[t] = append(regular[t], w)
		}
	}
	for t, ws := range regular {
		writes, err := r.decodeWrites(ctx, ws)
		if err != nil {
			return decodeFailure(thread, cpID, "writes of task "+t.id, err, func(err error) error {
				return &checkpoint.CorruptError{Thread: thread, Checkpoint: cpID, What: "writes of task " + t.id, Err: err}
			})
		}
		t.writes, t.done, t.cached, t.saved = writes, true, true, true
	}
	return nil
}

// scratch is the per-execution context of a task: it answers interrupt.Ask
// calls, backs Durable, and tells nodes where they run (TaskFrom).
type scratch struct {
	info     TaskInfo
	mu       sync.Mutex
	answers  map[string]json.RawMessage
	asked    int
	raised   []interrupt.Interrupt
	steps    map[string]checkpoint.StepResult
	inflight map[string]chan struct{}
	slots    int
	// saved saves durable step results and confirms the run still owns
	// the thread; nil outside a run with a saver.
	saved    stepSaver
	joinable bool          // the run's saver is a checkpoint.Joiner (JoinWrite)
	maxBytes int           // the cap on a result (WithMaxValueBytes)
	aband    *safe.Counter // the runnable's abandoned calls (nil outside a run)
	// stream sends an EventMessages or EventCustom event of the task;
	// nil when the run is not streamed.
	stream func(kind EventKind, data any) bool

	// outer is the run a subgraph node's subgraph runs inside (nil for
	// other nodes), and breakpoint where that subgraph stopped at one.
	outer      *outer
	breakpoint *checkpoint.Breakpoint
}

// raise records interrupts a subgraph of the task raised: the task pauses
// with them, as with its own Ask calls.
func (s *scratch) raise(list []interrupt.Interrupt) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, in := range list {
		if !slices.ContainsFunc(s.raised, func(r interrupt.Interrupt) bool { return r.ID == in.ID }) {
			s.raised = append(s.raised, in)
		}
	}
}

// Abandoned implements interrupt.Abandoner: an encoding or decoding of
// interrupt.Ask that the node's context ended before it returned is
// counted with the runnable's (Runnable.Abandoned).
func (s *scratch) Abandoned() (returned func()) {
	if s.aband == nil {
		return func() {}
	}
	s.aband.Add()
	return s.aband.Done
}

// Answer implements interrupt.Resumer.
func (s *scratch) Answer(q json.RawMessage) (json.RawMessage, string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := interrupt.ID(s.info.TaskID, s.asked)
	s.asked++
	if a, ok := s.answers[id]; ok {
		return a, id, true
	}
	if len(s.raised) == 0 {
		s.raised = append(s.raised, interrupt.Interrupt{ID: id, Value: q})
	}
	return nil, id, false
}

// AnswerKey implements interrupt.Resumer. Every unanswered keyed call is
// recorded, so a node can pause with several interrupts at once.
func (s *scratch) AnswerKey(key string, q json.RawMessage) (json.RawMessage, string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := interrupt.KeyID(s.info.TaskID, key)
	if a, ok := s.answers[id]; ok {
		return a, id, true
	}
	if !slices.ContainsFunc(s.raised, func(in interrupt.Interrupt) bool { return in.ID == id }) {
		s.raised = append(s.raised, interrupt.Interrupt{ID: id, Value: q})
	}
	return nil, id, false
}

func (s *scratch) reset() {
	s.mu.Lock()
	s.asked, s.raised, s.breakpoint = 0, nil, nil
	s.mu.Unlock()
}

// TaskInfo says where a node runs.
type TaskInfo struct {
	Thread string
	// NS is the namespace of the graph the node runs in: "" for a thread's
	// root graph, a subgraph's namespace (checkpoint.TaskNS) inside a
	// subgraph, where CheckpointID, Step and TaskID are the subgraph's. A
	// task ID is unique within a thread, whatever its namespace; work
	// keyed by the thread alone (package nodes' idempotency keys) adds
	// NS to stay apart from the same work in another subgraph task.
	NS           string
	CheckpointID string // the checkpoint the step started from
	Step         int
	Node         string
	TaskID       string
	// Run is the ID of the run executing the task (WithRunIDs): with a
	// saver, also the owner of the thread's lease.
	Run string
	// Leased reports that the run holds the thread's lease (the graph has
	// a saver): while it does, no other run of the thread runs nodes, and
	// every earlier run of the thread has ended or lost the thread (its
	// next write is refused). Work such a run left unfinished is the
	// current run's to resolve at once: package nodes treats a ledger
	// intent of an earlier run of the thread as of unknown outcome.
	Leased bool
}

// TaskFrom returns the TaskInfo of the node running with ctx, and false
// outside a run.
func TaskFrom(ctx context.Context) (TaskInfo, bool) {
	res, ok := interrupt.FromContext(ctx)
	if !ok {
		return TaskInfo{}, false
	}
	sp, ok := res.(*scratch)
	if !ok {
		return TaskInfo{}, false
	}
	return sp.info, true
}

// Durable runs fn once per task and name, and saves its result as a pending
// write of the task. When the node runs again (after an interrupt, a
// failure or a crash) a call with the same name returns the saved result
// without running fn. Names identify steps within a task, so calls may come
// in any order and from several goroutines; concurrent calls with the same
// name run fn once. A call made with fn's context under the name of a step
// that encloses it (which would wait for itself) returns an error matching
// ErrInvalidInput at once: nested steps need names of their own. A new
// task runs its steps again: after Replay or a fork, and after UpdateState
// and Continue, which plan a new step; resume with Command.Update to keep
// them.
//
// fn never starts under a done context: Durable then returns an error
// wrapping context.Cause(ctx), saves nothing, and the step runs when the
// thread is continued, on a first run and on a resume alike. A saved
// result is still returned, as that does no work.
//
// Before running fn, Durable confirms with a write that the run still owns
// the thread (it renews the run's lease). A run that has lost the thread,
// because its process was paused past the lease and another runner took
// over, gets an error matching checkpoint.ErrThreadBusy or
// checkpoint.ErrConflict, and fn does not run. That narrows, but cannot
// close, the window in which a paused process repeats an effect another
// runner made: a pause between the check and the effect still lets it
// through.
//
// The result must encode as JSON and read back into T (an *EncodeError
// otherwise: an error value, which encodes as {}, or invalid UTF-8), and
// fit WithMaxValueBytes (a *SizeError); such a result is not saved, and fn
// runs again next time. An error from
// fn is returned as is and not saved, so the next run tries again. Saving
// can fail after fn succeeded (the saver is unreachable, the lease was
// lost); Durable then returns the save error, and fn will run again on the
// next attempt. So effects that must happen once also need an idempotency
// key (package nodes' ledger), which is the real fence: a ledger fenced by
// the saver (ledger.Options.Fence) checks the run's lease again in the
// transaction that records the intent, and records the outcome with the
// step's result (JoinWrite). Outside a run (no runtime in ctx) Durable
// just calls fn.
func Durable[T any](ctx context.Context, name string, fn func(ctx context.Context) (T, error)) (T, error) {
	var zero T
	res, ok := interrupt.FromContext(ctx)
	sp, isScratch := res.(*scratch)
	if !ok || !isScratch {
		return fn(ctx)
	}
	for in := callOf(ctx); in != nil; in = in.outer {
		if in.sp == sp && in.name == name {
			return zero, fmt.Errorf("%w: %s: called inside itself (give the nested step another name)", ErrInvalidInput, sp.describe(name))
		}
	}
	for {
		sp.mu.Lock()
		if saved, have := sp.steps[name]; have {
			sp.mu.Unlock()
			v, err := unmarshalApp[T](ctx, sp.aband, saved.Result, "the saved result of durable step "+strconv.Quote(name))
			if err != nil {
				return zero, fmt.Errorf("graph: durable step %q: saved result does not decode: %w", name, err)
			}
			return v, nil
		}
		wait, busy := sp.inflight[name]
		if !busy {
			break // sp.mu stays locked
		}
		sp.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return zero, fmt.Errorf("graph: %s not run: %w", sp.describe(name), context.Cause(ctx))
		}
	}
	if ctx.Err() != nil {
		// Checked before the fence, whose write would succeed (a resume's
		// held answers are saved even when cancelled) and let fn start.
		sp.mu.Unlock()
		return zero, fmt.Errorf("graph: %s not run: %w", sp.describe(name), context.Cause(ctx))
	}
	if sp.inflight == nil {
		sp.inflight = map[string]chan struct{}{}
	}
	done := make(chan struct{})
	sp.inflight[name] = done
	slot := sp.slots
	sp.slots++
	sp.mu.Unlock()
	defer func() {
		sp.mu.Lock()
		delete(sp.inflight, name)
		sp.mu.Unlock()
		close(done)
	}()

	if sp.saved != nil {
		if err := sp.saved.fence(ctx); err != nil {
			return zero, fmt.Errorf("graph: durable step %q not run: %w", name, err)
		}
		if ctx.Err() != nil {
			// Cancelled while the fence wrote: fn still must not start.
			return zero, fmt.Errorf("graph: %s not run: %w", sp.describe(name), context.Cause(ctx))
		}
	}
	call := &durableCall{sp: sp, name: name, outer: callOf(ctx)}
	v, err := fn(context.WithValue(ctx, durableKey{}, call))
	joins := call.takeJoins() // they go with this step's write, or nowhere
	if err != nil {
		return zero, err
	}
	what := "durable step " + strconv.Quote(name)
	b, err := marshalApp(ctx, sp.aband, v, safe.Foreign(reflect.TypeFor[T]()), func() string { return "the result of " + what })
	if errors.Is(err, ErrAbandoned) {
		return zero, fmt.Errorf("graph: %s: %w", what, err)
	}
	if err == nil && hasReplacedUTF8(b) {
		err = errInvalidUTF8
	}
	if err == nil {
		// A result that encodes but does not read back (an error value
		// encodes as {}) would fail every later run of the node.
		if _, uerr := unmarshalApp[T](ctx, sp.aband, b, "the result of "+what); errors.Is(uerr, ErrAbandoned) {
			return zero, fmt.Errorf("graph: %s: %w", what, uerr)
		} else if uerr != nil {
			err = fmt.Errorf("its JSON does not decode back into %T: %w", v, uerr)
		}
	}
	if err != nil {
		return zero, &EncodeError{What: what, Err: err}
	}
	if sp.maxBytes > 0 && len(b) > sp.maxBytes {
		return zero, &SizeError{What: what, Size: len(b), Limit: sp.maxBytes}
	}
	sr := checkpoint.StepResult{Name: name, Result: b}
	if sp.saved != nil {
		if err := sp.saved.persist(ctx, slot, sr, joins); err != nil {
			return zero, fmt.Errorf("graph: durable step %q ran but its result was not saved: %w", name, err)
		}
	}
	sp.mu.Lock()
	if sp.steps == nil {
		sp.steps = map[string]checkpoint.StepResult{}
	}
	sp.steps[name] = sr
	sp.mu.Unlock()
	return v, nil
}

// durableKey marks the context Durable passes to fn with a *durableCall.
type durableKey struct{}

// durableCall is a durable step in progress, and the steps that enclose it.
type durableCall struct {
	sp    *scratch
	name  string
	outer *durableCall
	// joins are the JoinWrite work of the step, saved with its result.
	mu    sync.Mutex
	joins []checkpoint.Join
	done  bool // the step's fn returned: JoinWrite is too late
}

// takeJoins returns the step's joins and closes it to more.
func (c *durableCall) takeJoins() []checkpoint.Join {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done = true
	j := c.joins
	c.joins = nil
	return j
}

// OwnThread makes sure that the run executing the node of ctx holds its
// thread's lease in the saver, before the node writes to a store fenced
// by that lease (a ledger intent, D17): inside a durable step, whose
// start confirmed it, it does nothing; elsewhere in a node it confirms it
// with a write, as a durable step does before it runs (saving what the
// run holds back, such as a new thread's input checkpoint, and renewing
// the lease). It returns an error matching checkpoint.ErrThreadBusy or
// checkpoint.ErrConflict when the run has lost the thread, and nil
// outside a run or without a saver.
func OwnThread(ctx context.Context) error {
	if callOf(ctx) != nil {
		return nil
	}
	res, ok := interrupt.FromContext(ctx)
	sp, isScratch := res.(*scratch)
	if !ok || !isScratch || sp.saved == nil {
		return nil
	}
	if err := sp.saved.fence(ctx); err != nil {
		return fmt.Errorf("graph: thread %q node %q: %w", sp.info.Thread, sp.info.Node, err)
	}
	return nil
}

// JoinWrite makes j commit in the transaction of the write that saves the
// result of the durable step running with ctx (the innermost one, when
// steps nest), so that work of another store on the saver's database (a
// ledger outcome, D16) lands exactly when the result does: both, or
// neither after a crash, and neither when the run has lost the thread
// (the write is fenced, D17). It reports whether j was taken: false
// outside a durable step of a run (a node's own code, or no runtime in
// ctx), on a saver that is not a checkpoint.Joiner (MemorySaver), after
// the step's function returned, and for a nil j. A caller that gets false
// does its write on its own. When the step's result is not saved (fn
// fails, its result does not encode, the save is refused), j does not run;
// when it runs and fails, the step's result is not saved either, and
// Durable returns j's error.
func JoinWrite(ctx context.Context, j checkpoint.Join) bool {
	c := callOf(ctx)
	if c == nil || j == nil || c.sp.saved == nil || !c.sp.joinable {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return false
	}
	c.joins = append(c.joins, j)
	return true
}

func callOf(ctx context.Context) *durableCall {
	c, _ := ctx.Value(durableKey{}).(*durableCall)
	return c
}

// describe names a durable step of the task for errors.
func (s *scratch) describe(name string) string {
	return fmt.Sprintf("thread %q node %q: durable step %q", s.info.Thread, s.info.Node, name)
}

// callNode runs a node once, turning a panic into a *PanicError. The
// node's error is read once (containNodeError): what the runtime keeps.
func callNode[S any](ctx context.Context, spec *nodeSpec[S], in S) (u Update[S], err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &PanicError{Node: spec.name, Value: p, Stack: debug.Stack()}
		}
	}()
	u, err = spec.fn(ctx, in)
	if err != nil {
		err = containNodeError(spec.name, "the Error method of the error it returned", err)
	}
	return u, err
}

// checkInterruptSizes refuses interrupt values over the size cap: they
// are saved like any write.
func (r *Runnable[S]) checkInterruptSizes(node string, list []interrupt.Interrupt) error {
	for _, in := range list {
		if len(in.Value) > r.cfg.maxValueBytes {
			return &SizeError{What: fmt.Sprintf("value of interrupt %s of node %q", in.ID, node), Size: len(in.Value), Limit: r.cfg.maxValueBytes}
		}
		// A value the saver would refuse, and a reader read as corrupt
		// (a duplicate key or a lone surrogate from a MarshalJSON or a
		// json.RawMessage), fails the node that raised it instead.
		if err := strictjson.CheckJSON(in.Value); err != nil {
			return &interrupt.ValueError{Path: "$", Err: err}
		}
	}
	return nil
}

// safeExecute runs execute and turns a panic outside the node itself (in a
// router, say) into a *PanicError.
func (r *Runnable[S]) safeExecute(ctx context.Context, t *task[S], f *frame[S], sp *scratch, borrow bool) {
	defer func() {
		if p := recover(); p != nil {
			t.done, t.writes = false, nil
			t.err = &PanicError{Node: t.name, Value: p, Stack: debug.Stack()}
		}
	}()
	r.execute(ctx, t, f, sp, borrow)
}

// execute runs the task's node (with its retry policy) and resolves its
// update and edges into writes. It sets t.err, t.interrupts or t.writes.
func (r *Runnable[S]) execute(ctx context.Context, t *task[S], f *frame[S], sp *scratch, borrow bool) {
	asked := t.interrupts // as saved: the questions of earlier runs
	t.interrupts, t.encoded, t.toParent, t.breakpoint = nil, nil, nil, nil
	t.attempts = 1
	if t.name == START {
		t.update, t.writes, t.err = r.startWrites(ctx, t, f)
		t.done = t.err == nil
		return
	}
	spec := r.nodes[t.name]
	if spec == nil {
		t.err = &UnknownNodeError{Name: t.name, From: "a pending task of the checkpoint (the graph changed?)"}
		return
	}
	ctx = interrupt.NewContext(ctx, sp)
	attempt := 1
	for {
		u, err := callNode(ctx, spec, t.input)
		sp.mu.Lock()
		raised := slices.Clone(sp.raised)
		sp.mu.Unlock()
		var ni *interrupt.NodeInterrupt
		var pc parentCommand
		switch {
		case sp.breakpoint != nil && len(raised) == 0:
			// The node's subgraph stopped at one of its breakpoints.
			t.breakpoint = sp.breakpoint
			return
		case err != nil && len(raised) == 0 && errors.As(err, &pc):
			if sp.info.NS == "" {
				t.err = fmt.Errorf("%w: node %q returned graph.ToParent, but it runs in the root graph of thread %q (there is no parent graph)", ErrNoParent, t.name, sp.info.Thread)
				return
			}
			t.toParent = pc
			return
		case len(raised) > 0:
			// A node that swallowed the pause is still paused.
			if err == nil {
				r.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "node returned normally after interrupt.Ask paused it; treating the task as paused",
					strAttr("node", t.name), strAttr("task", t.id))
			}
			t.interrupts, t.err = withAnswered(asked, t.answers, raised), r.checkInterruptSizes(t.name, raised)
			if t.err != nil {
				t.interrupts = nil
			}
			return
		case errors.As(err, &ni):
			v, merr := marshalValue(ctx, r.abandoned, ni.Value, fmt.Sprintf("the NodeInterrupt value of node %q", t.name))
			if merr != nil {
				t.err = merr
				return
			}
			list := []interrupt.Interrupt{{ID: interrupt.ID(t.id, -1), Value: v}}
			if t.err = r.checkInterruptSizes(t.name, list); t.err == nil {
				t.interrupts = list
			}
			return
		case err == nil:
			t.update = u
			t.writes, t.err = r.resolve(ctx, t, u, f, borrow)
			if t.err == nil {
				// Encoded now, so that a write that cannot be stored (not
				// JSON, over the size cap) fails the node that wrote it,
				// and the thread reads as failed, rather than the save.
				t.encoded, t.err = r.encodeWrites(ctx, t)
			}
			t.done = t.err == nil
			return
		}
		p := spec.opts.retry
		if p == nil || attempt >= p.Attempts() || interrupt.Is(err) || ctx.Err() != nil ||
			errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			t.err = err
			return
		}
		if fn := spec.opts.retryOn; fn != nil {
			again, perr := r.retryOn(ctx, t.name, fn, err)
			if perr != nil || !again {
				t.err = cmp.Or(perr, err)
				return
			}
		}
		wait, werr := r.retryWait(ctx, t.name, *p, attempt)
		if werr != nil {
			t.err = werr
			return
		}
		r.cfg.logger.LogAttrs(ctx, slog.LevelDebug, "node failed; retrying", strAttr("node", t.name), intAttr("attempt", attempt), strAttr("error", err.Error()))
		r.noteRetry(ctx, t.name, attempt, wait, err)
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			t.err = err
			return
		case <-timer.C:
		}
		attempt++
		t.attempts = attempt
		sp.reset()
	}
}

// startWrites are the writes of the __start__ task: the input fields and
// START's edges.
func (r *Runnable[S]) startWrites(ctx context.Context, t *task[S], f *frame[S]) (Update[S], []twrite, error) {
	var u Update[S]
	if f.start == nil {
		return u, nil, nil
	}
	v := reflect.ValueOf(&u.value).Elem()
	names := make([]string, 0, len(f.start.fields))
	for name := range f.start.fields {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		i, ok := r.schema.byName[name]
		if !ok {
			return u, nil, &UnknownFieldError{Field: name}
		}
		fl := &r.schema.fields[i]
		x, err := decodeValue(ctx, r.abandoned, fl, f.start.fields[name])
		if err != nil {
			return u, nil, fmt.Errorf("graph: input field %s: %w", name, err)
		}
		v.Field(fl.index).Set(x)
		u.fields = append(u.fields, name)
	}
	writes, err := r.resolve(ctx, t, u, f, true)
	return u, writes, err
}

// resolve turns a node's update into writes and adds the writes of its
// edges: static edges, joins, routers (which see the state with this
// task's own writes applied) and Send routers.
func (r *Runnable[S]) resolve(ctx context.Context, t *task[S], u Update[S], f *frame[S], borrow bool) ([]twrite, error) {
	writes := make([]twrite, 0, len(u.fields)+len(u.overwrite)+len(r.edgesFrom[t.name])+len(u.gotos))
	v := reflect.ValueOf(&u.value).Elem()
	add := func(name string, over bool) error {
		i, ok := r.schema.lookup(name)
		if !ok {
			return &UnknownFieldError{Field: name, Node: t.name}
		}
		// Stored and shown by its Go name, whichever name the update used.
		name = r.schema.fields[i].name
		for k := range writes { // updates name a handful of fields: scan
			if writes[k].field == i {
				writes[k].overwrite = writes[k].overwrite || over
				return nil
			}
		}
		fl := &r.schema.fields[i]
		writes = append(writes, twrite{channel: name, field: i, value: v.Field(fl.index), overwrite: over})
		return nil
	}
	for _, name := range u.fields {
		if err := add(name, false); err != nil {
			return nil, err
		}
	}
	for _, name := range u.overwrite {
		if err := add(name, true); err != nil {
			return nil, err
		}
	}
	for _, n := range u.gotos {
		if n == END {
			continue
		}
		if _, ok := r.nodes[n]; !ok {
			return nil, &UnknownNodeError{Name: n, From: "Goto of node " + strconv.Quote(t.name)}
		}
		writes = append(writes, twrite{channel: r.branchOf(n), field: -1})
	}
	for i := range u.sends {
		s := u.sends[i]
		if _, ok := r.nodes[s.Node]; !ok {
			return nil, &UnknownNodeError{Name: s.Node, From: "Send of node " + strconv.Quote(t.name)}
		}
		writes = append(writes, twrite{channel: checkpoint.ChannelSends, field: -1, send: &s})
	}
	return r.edgeWrites(ctx, t.name, writes, f, borrow)
}

// edgeWrites appends the writes of node's outgoing edges to writes.
func (r *Runnable[S]) edgeWrites(ctx context.Context, node string, writes []twrite, f *frame[S], borrow bool) ([]twrite, error) {
	for _, to := range r.edgesFrom[node] {
		if to != END {
			writes = append(writes, twrite{channel: r.branchCh[to], field: -1})
		}
	}
	for _, j := range r.joinsFrom[node] {
		writes = append(writes, twrite{channel: j.channel, field: -1, source: node})
	}
	rs := r.routers[node]
	if len(rs) == 0 {
		return writes, nil
	}
	local, err := r.localState(ctx, f, writes, borrow)
	if err != nil {
		return nil, err
	}
	for _, rt := range rs {
		if rt.mixed != nil {
			if writes, err = r.routeWrites(ctx, node, rt, local, writes); err != nil {
				return nil, err
			}
			continue
		}
		if rt.route != nil {
			dests, err := callRouter(ctx, r.abandoned, node, "router", func() ([]string, error) { return rt.route(ctx, r.view(local)) })
			if err != nil {
				return nil, err
			}
			for _, d := range dests {
				if err := r.checkDest(node, rt, d); err != nil {
					return nil, err
				}
				if d != END {
					writes = append(writes, twrite{channel: checkpoint.BranchPrefix + d, field: -1})
				}
			}
			continue
		}
		sends, err := callRouter(ctx, r.abandoned, node, "send router", func() ([]Send[S], error) { return rt.send(ctx, r.view(local)) })
		if err != nil {
			return nil, err
		}
		for i := range sends {
			s := sends[i]
			if s.Node == END {
				return nil, &UnknownNodeError{Name: END, From: fmt.Sprintf("Send of the router after node %q", node)}
			}
			if err := r.checkDest(node, rt, s.Node); err != nil {
				return nil, err
			}
			writes = append(writes, twrite{channel: checkpoint.ChannelSends, field: -1, send: &s})
		}
	}
	return writes, nil
}

func (r *Runnable[S]) checkDest(node string, rt *routerSpec[S], d string) error {
	if d != END {
		if _, ok := r.nodes[d]; !ok {
			return &UnknownNodeError{Name: d, From: fmt.Sprintf("route after node %q", node)}
		}
	}
	if len(rt.dests) > 0 && !slices.Contains(rt.dests, d) {
		return &UnknownNodeError{Name: d, From: fmt.Sprintf("route after node %q (not among its declared destinations %v)", node, rt.dests)}
	}
	return nil
}

// localState is the frame's state with one task's field writes applied:
// what LangGraph calls a fresh read. With borrow set (a single-task step),
// append fields reuse the frame's spare capacity without taking it over,
// so routing does not copy long lists.
func (r *Runnable[S]) localState(ctx context.Context, f *frame[S], writes []twrite, borrow bool) (S, error) {
	st := f.state
	v := reflect.ValueOf(&st).Elem()
	for _, w := range writes {
		if w.field < 0 {
			continue
		}
		fl := &r.schema.fields[w.field]
		var spare reflect.Value
		if borrow {
			spare = f.spare[fl.index]
		}
		nv, _, err := fl.reduce(ctx, r.abandoned, v.Field(fl.index), spare, []fieldWrite{{value: w.value, overwrite: w.overwrite}}, f.meta.Step+1)
		if err != nil {
			return st, err
		}
		v.Field(fl.index).Set(capped(nv))
	}
	return st, nil
}

// encodeWrites is the stored form of a task's writes (see decodeWrites).
func (r *Runnable[S]) encodeWrites(ctx context.Context, t *task[S]) ([]checkpoint.Write, error) {
	if t.encoded != nil {
		return t.encoded, nil
	}
	if len(t.writes) == 0 {
		return []checkpoint.Write{{Channel: checkpoint.ChannelNoWrites, Value: jsonNull}}, nil
	}
	out := make([]checkpoint.Write, 0, len(t.writes))
	for _, w := range t.writes {
		var (
			b   json.RawMessage
			err error
			ch  = w.channel
		)
		switch {
		case w.field >= 0:
			if w.overwrite {
				ch = overwritePrefix + w.channel
			}
			b, err = encodeValue(ctx, r.abandoned, w.value, &r.schema.fields[w.field], where{prefix: "write of node", node: t.name, field: w.channel}, r.cfg.maxValueBytes)
		case w.send != nil:
			s := w.send.(*Send[S])
			var arg map[string]json.RawMessage
			arg, err = r.encodeFields(ctx, s.Arg, fmt.Sprintf("Send from node %q to %q", t.name, s.Node))
			if err == nil {
				b, err = json.Marshal(sendJSON{Node: s.Node, Arg: arg})
			}
		case w.source != "":
			b, err = json.Marshal(w.source)
		default:
			b = jsonNull
		}
		if err != nil {
			return nil, err
		}
		out = append(out, checkpoint.Write{Channel: ch, Value: b})
	}
	return out, nil
}

// overwritePrefix marks a stored field write that replaces the value.
const overwritePrefix = "__overwrite__:"

// decodeWrites turns stored writes back into resolved writes. Writes to
// channels the graph no longer has are dropped.
func (r *Runnable[S]) decodeWrites(ctx context.Context, ws []checkpoint.PendingWrite) ([]twrite, error) {
	var out []twrite
	for _, w := range ws {
		ch := w.Channel
		over := false
		if rest, ok := strings.CutPrefix(ch, overwritePrefix); ok {
			ch, over = rest, true
		}
		switch {
		case ch == checkpoint.ChannelNoWrites:
		case strings.HasPrefix(ch, checkpoint.BranchPrefix):
			if _, ok := r.nodes[strings.TrimPrefix(ch, checkpoint.BranchPrefix)]; ok {
				out = append(out, twrite{channel: ch, field: -1})
			}
		case strings.HasPrefix(ch, checkpoint.JoinPrefix):
			src, err := checkpoint.DecodeJoinSource(w.Value)
			if err != nil {
				return nil, err
			}
			if _, ok := r.joins[ch]; ok {
				out = append(out, twrite{channel: ch, field: -1, source: src})
			}
		case ch == checkpoint.ChannelSends:
			sj, err := checkpoint.DecodeSend(w.Value)
			if err != nil {
				return nil, err
			}
			arg, err := r.decodeFields(ctx, sj.Arg)
			if err != nil {
				return nil, err
			}
			s := Send[S]{Node: sj.Node, Arg: arg}
			out = append(out, twrite{channel: ch, field: -1, send: &s})
		default:
			i, ok := r.schema.byName[ch]
			if !ok {
				continue
			}
			fl := &r.schema.fields[i]
			x, err := decodeValue(ctx, r.abandoned, fl, w.Value)
			if err != nil {
				return nil, fmt.Errorf("field %s: %w", ch, err)
			}
			out = append(out, twrite{channel: ch, field: i, value: x, overwrite: over})
		}
	}
	return out, nil
}

// fieldWrites returns the task's field writes as JSON, keyed by field
// name, for snapshots.
func (r *Runnable[S]) fieldResult(ws []checkpoint.PendingWrite) map[string]json.RawMessage {
	out := map[string]json.RawMessage{}
	for _, w := range ws {
		ch := strings.TrimPrefix(w.Channel, overwritePrefix)
		if _, ok := r.schema.byName[ch]; ok {
			out[ch] = w.Value
		}
	}
	return out
}

// withAnswered is the interrupt list a task saves when it pauses again:
// the questions of earlier runs that were answered (so that Task.Interrupts
// keeps what was asked and answered), then the ones raised now.
func withAnswered(asked []interrupt.Interrupt, answers map[string]json.RawMessage, raised []interrupt.Interrupt) []interrupt.Interrupt {
	var out []interrupt.Interrupt
	for _, in := range asked {
		if _, ok := answers[in.ID]; ok && !slices.ContainsFunc(raised, func(r interrupt.Interrupt) bool { return r.ID == in.ID }) {
			out = append(out, in)
		}
	}
	if out == nil {
		return raised
	}
	return append(out, raised...)
}
