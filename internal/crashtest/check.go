package crashtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// CheckName names a checked property (docs/reliability.md H5).
type CheckName string

// The properties the checkers verify.
const (
	// CheckIntegrity: PRAGMA integrity_check says "ok".
	CheckIntegrity CheckName = "integrity"
	// CheckReadable: every checkpoint of every thread reads back and
	// inspects without error (no torn or corrupt rows).
	CheckReadable CheckName = "readable"
	// CheckAcked: every acknowledged checkpoint is present and, where the
	// thread never forked, on its head's chain (nothing lost).
	CheckAcked CheckName = "acked-checkpoint"
	// CheckFork: no checkpoint has two children, unless every child after
	// the first was an explicit fork or an update of an old checkpoint.
	CheckFork CheckName = "no-fork"
	// CheckStatus: every thread is done, waiting or pending; never failed
	// because of a crash.
	CheckStatus CheckName = "status"
	// CheckConsistent: a head's Next, Tasks and Interrupts agree with each
	// other, with its status, with the savers' pending-interrupt rule and
	// (when given) with the runtime's own snapshot.
	CheckConsistent CheckName = "consistent"
	// CheckEffectOnce: every side effect happened at most once per key and
	// per logical operation.
	CheckEffectOnce CheckName = "effect-at-most-once"
	// CheckEffectAcked: every acknowledged effect happened exactly once.
	CheckEffectAcked CheckName = "effect-acked"
	// CheckDecision: every approval has at most one recorded decision, and
	// every acknowledged decision is stored as acknowledged.
	CheckDecision CheckName = "one-decision"
	// CheckRerun: a task whose finished writes were acknowledged never
	// runs again in a later process.
	CheckRerun CheckName = "no-rerun"
	// CheckCallOnce: a downstream service that dedupes by key was never
	// called again under a key whose effect it had applied. Its effect
	// witness cannot show such a call (the service dedupes it), so a
	// double execution by the engine is only seen here (H3: "the engine
	// called the tool twice" apart from "the effect happened twice").
	CheckCallOnce CheckName = "call-at-most-once"
)

// ErrViolation is matched by every *Violation and by Violations.
var ErrViolation = errors.New("crashtest: invariant violated")

// Violation is one broken invariant.
type Violation struct {
	Check  CheckName
	Thread string // "" when it concerns no thread
	Key    string // the checkpoint, task, effect key or approval concerned
	Detail string
}

// Error names the check, the thread and key, and what is wrong.
func (v *Violation) Error() string {
	var b strings.Builder
	b.WriteString(string(v.Check))
	if v.Thread != "" {
		fmt.Fprintf(&b, " thread=%s", v.Thread)
	}
	if v.Key != "" {
		fmt.Fprintf(&b, " key=%s", v.Key)
	}
	b.WriteString(": ")
	b.WriteString(v.Detail)
	return b.String()
}

// Is makes errors.Is(v, ErrViolation) true.
func (v *Violation) Is(target error) bool { return target == ErrViolation }

// Violations is what a checker found. Err returns nil for none.
type Violations []*Violation

// Error lists the violations, one per line.
func (vs Violations) Error() string {
	lines := make([]string, len(vs))
	for i, v := range vs {
		lines[i] = v.Error()
	}
	return fmt.Sprintf("%d invariant violation(s):\n  %s", len(vs), strings.Join(lines, "\n  "))
}

// Is makes errors.Is(vs, ErrViolation) true.
func (vs Violations) Is(target error) bool { return target == ErrViolation }

// Err returns vs as an error, or nil when it is empty.
func (vs Violations) Err() error {
	if len(vs) == 0 {
		return nil
	}
	return vs
}

// Of returns the violations of check c.
func (vs Violations) Of(c CheckName) Violations {
	var out Violations
	for _, v := range vs {
		if v.Check == c {
			out = append(out, v)
		}
	}
	return out
}

func violation(c CheckName, thread, key, format string, args ...any) *Violation {
	return &Violation{Check: c, Thread: thread, Key: key, Detail: fmt.Sprintf(format, args...)}
}

// VerifyIntegrity runs PRAGMA integrity_check on db.
func VerifyIntegrity(ctx context.Context, db *sql.DB) Violations {
	rows, err := db.QueryContext(ctx, "PRAGMA integrity_check")
	if err != nil {
		return Violations{violation(CheckIntegrity, "", "", "integrity_check failed: %v", err)}
	}
	defer rows.Close()
	var msgs []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return Violations{violation(CheckIntegrity, "", "", "integrity_check: %v", err)}
		}
		msgs = append(msgs, s)
	}
	if err := rows.Err(); err != nil {
		return Violations{violation(CheckIntegrity, "", "", "integrity_check: %v", err)}
	}
	if len(msgs) != 1 || msgs[0] != "ok" {
		return Violations{violation(CheckIntegrity, "", "", "integrity_check says %q", msgs)}
	}
	return nil
}

// SnapshotView is what the runtime says of a thread's head (graph's
// Runnable.GetState), for CheckpointOptions.Snapshot.
type SnapshotView struct {
	Status     string
	Next       []string
	Interrupts []string // IDs of the pending interrupts
}

// CheckpointOptions tune VerifyCheckpoints.
type CheckpointOptions struct {
	// AllowFailed accepts failed threads (a scenario whose nodes fail on
	// purpose). By default a failed thread is a violation: a crash must
	// never fail a thread.
	AllowFailed bool
	// AllowFork says whether a checkpoint that is not its parent's first
	// child was made on purpose. Default: its source is "fork" or
	// "update" (Replay, or UpdateState of an old checkpoint).
	AllowFork func(cp checkpoint.Checkpoint) bool
	// Snapshot, if set, returns the runtime's view of a thread's head, to
	// compare with what checkpoint.Inspect says.
	Snapshot func(ctx context.Context, thread string) (SnapshotView, error)
}

// ThreadState is what VerifyCheckpoints found of a thread.
type ThreadState struct {
	Thread      string
	Head        string
	Status      string // "done", "waiting", "failed" or "pending"; "" when the thread has no checkpoint
	Next        []string
	Interrupts  []string // pending interrupt IDs
	Checkpoints int
	// Answers maps every interrupt ID answered in any checkpoint of the
	// thread to its answer (JSON), as the thread received it.
	Answers map[string][]byte
}

// VerifyCheckpoints reads every thread of s (the given threads, the
// acknowledged ones and, when s is a checkpoint.ThreadLister, every thread
// it lists) and checks CheckReadable, CheckAcked, CheckFork, CheckStatus
// and CheckConsistent. It returns what it found per thread.
func VerifyCheckpoints(ctx context.Context, s checkpoint.Saver, threads []string, acked []CheckpointAck, opts CheckpointOptions) (map[string]*ThreadState, Violations) {
	allowFork := opts.AllowFork
	if allowFork == nil {
		allowFork = func(cp checkpoint.Checkpoint) bool {
			return cp.Metadata.Source == checkpoint.SourceFork || cp.Metadata.Source == checkpoint.SourceUpdate
		}
	}
	var vs Violations
	set := map[string]bool{}
	for _, t := range threads {
		set[t] = true
	}
	ackedBy := map[string][]CheckpointAck{}
	for _, a := range acked {
		set[a.Thread] = true
		ackedBy[a.Thread] = append(ackedBy[a.Thread], a)
	}
	if tl, ok := s.(checkpoint.ThreadLister); ok {
		infos, err := tl.Threads(ctx, 0, 0)
		if err != nil {
			vs = append(vs, violation(CheckReadable, "", "", "list threads: %v", err))
		}
		for _, ti := range infos {
			if ti.NS == "" {
				set[ti.Thread] = true
			}
		}
	}
	names := make([]string, 0, len(set))
	for t := range set {
		names = append(names, t)
	}
	sort.Strings(names)
	out := map[string]*ThreadState{}
	for _, t := range names {
		st, tv := checkThread(ctx, s, t, ackedBy[t], allowFork, opts)
		out[t] = st
		vs = append(vs, tv...)
	}
	return out, vs
}

func checkThread(ctx context.Context, s checkpoint.Saver, thread string, acked []CheckpointAck, allowFork func(checkpoint.Checkpoint) bool, opts CheckpointOptions) (*ThreadState, Violations) {
	st := &ThreadState{Thread: thread, Answers: map[string][]byte{}}
	var vs Violations
	add := func(c CheckName, key, format string, args ...any) {
		vs = append(vs, violation(c, thread, key, format, args...))
	}
	tps, err := s.List(ctx, thread, checkpoint.ListOptions{})
	if err != nil {
		add(CheckReadable, "", "list checkpoints: %v", err)
		return st, vs
	}
	st.Checkpoints = len(tps)
	byID := map[string]*checkpoint.Tuple{}
	kids := map[string][]checkpoint.Checkpoint{}
	forked := false
	for _, tp := range tps {
		cp := tp.Checkpoint
		byID[cp.ID] = tp
		if cp.ParentID != "" {
			kids[cp.ParentID] = append(kids[cp.ParentID], cp)
		}
		in, err := checkpoint.Inspect(tp, false)
		if err != nil {
			add(CheckReadable, cp.ID, "inspect: %v", err)
			continue
		}
		for _, task := range in.Tasks {
			for id, ans := range task.Answered {
				st.Answers[id] = ans
			}
		}
	}
	for parent, cs := range kids {
		if len(cs) < 2 {
			continue
		}
		slices.SortFunc(cs, func(a, b checkpoint.Checkpoint) int { return strings.Compare(a.ID, b.ID) })
		for _, c := range cs[1:] {
			if allowFork(c) {
				forked = true
				continue
			}
			ids := make([]string, len(cs))
			for i, c := range cs {
				ids[i] = fmt.Sprintf("%s (%s, step %d)", c.ID, c.Metadata.Source, c.Metadata.Step)
			}
			add(CheckFork, parent, "checkpoint has %d children: %s", len(cs), strings.Join(ids, ", "))
			break
		}
	}
	if len(tps) == 0 {
		for _, a := range acked {
			add(CheckAcked, a.ID, "acknowledged checkpoint (generation %d) lost: the thread has no checkpoint", a.Gen)
		}
		return st, vs
	}
	head, err := s.Get(ctx, checkpoint.Ref{Thread: thread}, checkpoint.GetOptions{})
	if err != nil {
		add(CheckReadable, "", "read head: %v", err)
		return st, vs
	}
	st.Head = head.Checkpoint.ID
	chain := map[string]bool{}
	for id := st.Head; id != ""; {
		if chain[id] {
			add(CheckReadable, id, "the parent chain loops")
			break
		}
		chain[id] = true
		tp, ok := byID[id]
		if !ok {
			add(CheckReadable, id, "checkpoint on the head's chain is missing from List")
			break
		}
		id = tp.Checkpoint.ParentID
	}
	for _, a := range acked {
		if _, err := s.Get(ctx, checkpoint.Ref{Thread: thread, ID: a.ID}, checkpoint.GetOptions{}); err != nil {
			add(CheckAcked, a.ID, "acknowledged checkpoint (generation %d) lost: %v", a.Gen, err)
			continue
		}
		if !forked && !chain[a.ID] {
			add(CheckAcked, a.ID, "acknowledged checkpoint (generation %d) is not on the head's chain (head %s)", a.Gen, st.Head)
		}
	}
	in, err := checkpoint.Inspect(head, true)
	if err != nil {
		add(CheckReadable, st.Head, "inspect head: %v", err)
		return st, vs
	}
	st.Status, st.Next = in.Status, in.Next
	for _, it := range in.Interrupts {
		st.Interrupts = append(st.Interrupts, it.ID)
	}
	vs = append(vs, consistent(ctx, thread, head, in, st, opts)...)
	return st, vs
}

// consistent checks a head's inspection against itself, the savers' rule
// and the runtime's snapshot.
func consistent(ctx context.Context, thread string, head *checkpoint.Tuple, in *checkpoint.Inspection, st *ThreadState, opts CheckpointOptions) Violations {
	var vs Violations
	add := func(c CheckName, format string, args ...any) {
		vs = append(vs, violation(c, thread, st.Head, format, args...))
	}
	var next, pending, failedTasks []string
	for i := range in.Tasks {
		t := &in.Tasks[i]
		if t.Done() {
			continue
		}
		next = append(next, t.Name)
		for _, p := range t.Pending() {
			pending = append(pending, p.ID)
		}
		if t.Error != nil && len(t.Pending()) == 0 {
			failedTasks = append(failedTasks, t.Name)
		}
	}
	if !slices.Equal(next, in.Next) {
		add(CheckConsistent, "Next %q, but the unfinished tasks are %q", in.Next, next)
	}
	if !slices.Equal(pending, st.Interrupts) {
		add(CheckConsistent, "Interrupts %q, but the unfinished tasks' pending interrupts are %q", st.Interrupts, pending)
	}
	var rule []string
	pis, err := checkpoint.PendingInterrupts(head.Thread, head.Checkpoint.ID, head.Pending)
	if err != nil {
		add(CheckConsistent, "the savers' pending-interrupt rule: %v", err)
	}
	for _, pi := range pis {
		rule = append(rule, pi.InterruptID)
	}
	if !sameSet(rule, pending) {
		add(CheckConsistent, "the savers' pending-interrupt rule finds %q, Inspect %q", rule, pending)
	}
	switch in.Status {
	case "done":
		if len(in.Tasks) != 0 || len(pending) != 0 || in.Breakpoint != nil {
			add(CheckConsistent, "done with %d tasks, interrupts %q, breakpoint %v", len(in.Tasks), pending, in.Breakpoint != nil)
		}
	case "waiting":
		if len(pending) == 0 && in.Breakpoint == nil {
			add(CheckConsistent, "waiting with no pending interrupt and no breakpoint")
		}
	case "pending":
		// Tasks are due. All of them may have finished (their writes are
		// saved and the step's checkpoint is not): the runtime commits the
		// step when the thread continues.
		if len(in.Tasks) == 0 || len(pending) != 0 || in.Breakpoint != nil {
			add(CheckConsistent, "pending with %d tasks, interrupts %q, breakpoint %v", len(in.Tasks), pending, in.Breakpoint != nil)
		}
	case "failed":
		if len(failedTasks) == 0 {
			add(CheckConsistent, "failed with no failed task")
		}
		if !opts.AllowFailed {
			add(CheckStatus, "thread failed: tasks %q have errors", failedTasks)
		}
	default:
		add(CheckStatus, "unknown status %q", in.Status)
	}
	if opts.Snapshot != nil {
		sv, err := opts.Snapshot(ctx, thread)
		switch {
		case err != nil:
			add(CheckReadable, "runtime snapshot: %v", err)
		case sv.Status != in.Status:
			add(CheckConsistent, "the runtime says %s, Inspect says %s", sv.Status, in.Status)
		case !sameSet(sv.Next, in.Next):
			add(CheckConsistent, "the runtime's Next is %q, Inspect's %q", sv.Next, in.Next)
		case !sameSet(sv.Interrupts, pending):
			add(CheckConsistent, "the runtime's interrupts are %q, Inspect's %q", sv.Interrupts, pending)
		}
	}
	return vs
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// VerifyEffects checks the witness's effects against the acknowledged
// ones: at most one effect per (kind, key) and per (kind, subject), and
// exactly one for every acknowledged key.
func VerifyEffects(effects []Effect, acked []EffectAck) Violations {
	var vs Violations
	type kk struct{ kind, key string }
	byKey := map[kk][]Effect{}
	bySubject := map[kk][]Effect{}
	perKey := map[string]int{}
	var order []kk
	for _, e := range effects {
		k := kk{e.Kind, e.Key}
		if len(byKey[k]) == 0 {
			order = append(order, k)
		}
		byKey[k] = append(byKey[k], e)
		perKey[e.Key]++
		if e.Subject != "" {
			s := kk{e.Kind, e.Subject}
			bySubject[s] = append(bySubject[s], e)
		}
	}
	gens := func(es []Effect) []int {
		out := make([]int, len(es))
		for i, e := range es {
			out[i] = e.Gen
		}
		return out
	}
	for _, k := range order {
		if es := byKey[k]; len(es) > 1 {
			what := k.kind
			if es[0].Subject != "" {
				what += " of " + es[0].Subject
			}
			vs = append(vs, violation(CheckEffectOnce, "", k.key, "%s happened %d times (generations %v)", what, len(es), gens(es)))
		}
	}
	subjects := make([]kk, 0, len(bySubject))
	for s := range bySubject {
		subjects = append(subjects, s)
	}
	slices.SortFunc(subjects, func(a, b kk) int { return strings.Compare(a.kind+" "+a.key, b.kind+" "+b.key) })
	for _, s := range subjects {
		es := bySubject[s]
		keys := map[string]bool{}
		for _, e := range es {
			keys[e.Key] = true
		}
		if len(keys) > 1 {
			vs = append(vs, violation(CheckEffectOnce, "", s.key, "%s of %s happened under %d different keys (generations %v)", s.kind, s.key, len(keys), gens(es)))
		}
	}
	seen := map[string]bool{}
	for _, a := range acked {
		if seen[a.Key] {
			continue
		}
		seen[a.Key] = true
		if n := perKey[a.Key]; n != 1 {
			vs = append(vs, violation(CheckEffectAcked, "", a.Key, "acknowledged (generation %d) effect happened %d times, want exactly 1", a.Gen, n))
		}
	}
	return vs
}

// DecisionLookup reads the decision stored for an approval: its outcome,
// or found false when none is stored.
type DecisionLookup func(ctx context.Context, id string) (outcome string, found bool, err error)

// VerifyDecisions checks that no approval was decided twice (two
// acknowledged decisions: first-wins broken across processes) and that
// every acknowledged decision is stored with its outcome.
func VerifyDecisions(ctx context.Context, acked []DecisionAck, lookup DecisionLookup) Violations {
	var vs Violations
	byID := map[string][]DecisionAck{}
	var order []string
	for _, a := range acked {
		if len(byID[a.ID]) == 0 {
			order = append(order, a.ID)
		}
		byID[a.ID] = append(byID[a.ID], a)
	}
	for _, id := range order {
		as := byID[id]
		if len(as) > 1 {
			vs = append(vs, violation(CheckDecision, "", id, "decided %d times: %v", len(as), as))
		}
		outcome, found, err := lookup(ctx, id)
		switch {
		case err != nil:
			vs = append(vs, violation(CheckDecision, "", id, "read the decision: %v", err))
		case !found:
			vs = append(vs, violation(CheckDecision, "", id, "acknowledged decision (generation %d) lost", as[0].Gen))
		case outcome != as[0].Outcome:
			vs = append(vs, violation(CheckDecision, "", id, "acknowledged %s (generation %d), stored %s", as[0].Outcome, as[0].Gen, outcome))
		}
	}
	return vs
}

// VerifyReruns checks that no task whose finished writes were acknowledged
// ran again in a later generation. runs are the witness's records of task
// runs: Key the task ID, Subject the thread.
func VerifyReruns(acked []TaskAck, runs []Effect) Violations {
	type tk struct{ thread, task string }
	first := map[tk]int{}
	for _, a := range acked {
		k := tk{a.Thread, a.Task}
		if g, ok := first[k]; !ok || a.Gen < g {
			first[k] = a.Gen
		}
	}
	var vs Violations
	for _, r := range runs {
		if g, ok := first[tk{r.Subject, r.Key}]; ok && r.Gen > g {
			vs = append(vs, violation(CheckRerun, r.Subject, r.Key, "task finished and acknowledged in generation %d ran again in generation %d", g, r.Gen))
		}
	}
	return vs
}

// VerifyRepeats reports every repeat: a witness record that a service
// which dedupes by key received another call under a key whose effect it
// had already applied (Key the idempotency key, Subject the operation).
func VerifyRepeats(repeats []Effect) Violations {
	var vs Violations
	for _, r := range repeats {
		vs = append(vs, violation(CheckCallOnce, "", r.Key, "the service was called again (generation %d) for %q after the effect happened", r.Gen, r.Subject))
	}
	return vs
}
