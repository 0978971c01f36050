package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint"
)

// stateJSON is the output of state --json.
type stateJSON struct {
	Thread     string `json:"thread"`
	Checkpoint string `json:"checkpoint"`
	Parent     string `json:"parent"`
	Head       bool   `json:"head"` // the checkpoint is the thread's head
	Step       int    `json:"step"`
	Source     string `json:"source"`
	// Durability is the durability mode of the run that wrote the
	// checkpoint (sync, async or exit), or unknown when the checkpoint
	// does not record it (written before lockstep did).
	Durability string    `json:"durability"`
	CreatedAt  time.Time `json:"created_at"`
	// Status is done, waiting (an interrupt or a breakpoint holds the
	// thread), failed (a task's error) or pending (next tasks, nothing
	// holding them: a crash or a stop between steps).
	Status     string                 `json:"status"`
	Next       []string               `json:"next"`
	Tasks      []taskJSON             `json:"tasks"`
	Breakpoint *checkpoint.Breakpoint `json:"breakpoint"`
	// Lease is the thread's lease at its head: the run that holds it, or
	// held it last if it lapsed, and until when; null when no run holds
	// it (and at an older checkpoint).
	Lease      *leaseJSON                 `json:"lease"`
	Interrupts []interruptJSON            `json:"interrupts"` // pending ones
	Values     map[string]json.RawMessage `json:"values"`
	// Graph is the graph the checkpoint was saved under and the newest
	// version of it stored (null when the checkpoint names none).
	Graph *graphInfo `json:"graph"`
	// Hint says what to do next, in one line.
	Hint string `json:"hint"`

	waiting []string // the nodes the thread waits in
}

// taskJSON is a task of the step that follows the checkpoint.
type taskJSON struct {
	ID         string                     `json:"id"`
	Node       string                     `json:"node"`
	Path       string                     `json:"path"`
	Status     string                     `json:"status"` // done, waiting, failed, pending
	Error      *checkpoint.TaskError      `json:"error"`
	Interrupts []interruptJSON            `json:"interrupts"`
	Result     map[string]json.RawMessage `json:"result"` // field writes once done
	// Subgraph is the state of the subgraph the task runs, at the head
	// (graph.AddSubgraph), for an unfinished task whose subgraph saved a
	// checkpoint; omitted otherwise.
	Subgraph *subgraphJSON `json:"subgraph,omitempty"`
}

// interruptJSON is an interrupt raised by a task.
type interruptJSON struct {
	ID       string          `json:"id"`
	TaskID   string          `json:"task_id"`
	Node     string          `json:"node"`
	Value    json.RawMessage `json:"value"`
	Answered bool            `json:"answered"`
	// Approval is set when the value is an approval request.
	Approval *approvalStatus `json:"approval,omitempty"`
}

// approvalStatus is where an approval request stands.
type approvalStatus struct {
	Tool  string `json:"tool"`
	Owner string `json:"owner"`
	// Kind is what the reviewer is asked: gate, fallback or
	// outcome_unknown (an earlier attempt may already have run).
	Kind approval.Kind `json:"kind"`
	// Rule is the rule that raised the request.
	Rule string `json:"rule"`
	// Rationale is what the reviewer should read as its reason: the
	// model's, or for outcome_unknown what that means and what to check
	// (approval.Request.Explanation).
	Rationale string             `json:"rationale"`
	ExpiresAt time.Time          `json:"expires_at"`
	Expired   bool               `json:"expired"`
	Decision  *approval.Decision `json:"decision"` // nil until decided
	// Resume is where the approval worker is with delivering the
	// decision; nil until decided.
	Resume *resumeJSON `json:"resume"`
}

// resumeJSON is the approval worker's progress on a decided approval.
type resumeJSON struct {
	// State is done (delivered), claimed (a worker took it and has not
	// finished: it is resuming the thread, or was stopped or killed, and
	// its claim lapses at NotBefore), retrying (the last attempt failed;
	// the next starts at NotBefore) or due (a worker resumes it on its
	// next pass).
	State     string    `json:"state"`
	At        time.Time `json:"at,omitzero"`
	Note      string    `json:"note,omitempty"`
	Attempts  int       `json:"attempts"`
	LastError string    `json:"last_error,omitempty"`
	NotBefore time.Time `json:"not_before,omitzero"`
}

// leaseJSON is a thread's lease as stored.
type leaseJSON struct {
	Owner  string    `json:"owner"`  // the run holding it
	Runner string    `json:"runner"` // the runner (process) of that run, if it named one
	Epoch  uint64    `json:"epoch"`  // counts the claims on the thread: the run holding epoch n succeeds every earlier one
	Until  time.Time `json:"until"`
	Live   bool      `json:"live"` // held now; false once it lapsed
}

func stateCommand(fs *flag.FlagSet) runner {
	at := fs.String("checkpoint", "", "show checkpoint `ID` instead of the thread's head")
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
		store, durable, err := e.readDecisions(ctx, s)
		if err != nil {
			return err
		}
		var observe *approval.Inbox
		if durable && latest {
			observe = approval.NewInbox(s, store)
		}
		out, err := buildState(ctx, tp, in, latest, store, observe, e.now())
		if err != nil {
			return err
		}
		if latest {
			if out.Lease, err = e.readLease(ctx, s, thread, e.now()); err != nil {
				return err
			}
			if err := readSubgraphs(ctx, s, thread, "", out.Tasks, store, e.now(), 0); err != nil {
				return err
			}
		}
		if out.Graph, err = e.readGraph(ctx, s, tp.Checkpoint); err != nil {
			return err
		}
		out.waiting = waitingNodes(in)
		out.Hint = stateHint(out, head.Checkpoint.ID)
		if e.opts.json {
			return e.writeJSON(out)
		}
		return e.printState(out)
	}
}

// buildState assembles the output of state from an inspection, looking up
// the decisions of pending approval requests in store. With observe (the
// head of a database whose approvals the user may write), a pending
// request seen expired has its expiry recorded first.
func buildState(ctx context.Context, tp *checkpoint.Tuple, in *checkpoint.Inspection, latest bool, store approval.Store, observe *approval.Inbox, now time.Time) (*stateJSON, error) {
	cp := tp.Checkpoint
	out := &stateJSON{Thread: tp.Thread, Checkpoint: cp.ID, Parent: cp.ParentID, Head: latest, Step: cp.Metadata.Step,
		Source: string(cp.Metadata.Source), Durability: durabilityOf(cp.Metadata), CreatedAt: cp.CreatedAt.UTC(), Status: in.Status, Next: nonNil(in.Next),
		Tasks: []taskJSON{}, Breakpoint: in.Breakpoint, Interrupts: []interruptJSON{}, Values: in.Values}
	pending := map[string]bool{}
	for _, p := range in.Interrupts {
		pending[p.ID] = true
	}
	for i := range in.Tasks {
		t := &in.Tasks[i]
		tj := taskJSON{ID: t.ID, Node: t.Name, Path: t.Path, Status: t.Status(), Error: t.Error,
			Interrupts: []interruptJSON{}, Result: t.Result}
		for _, it := range t.Interrupts {
			_, answered := t.Answered[it.ID]
			ij := interruptJSON{ID: it.ID, TaskID: t.ID, Node: t.Name, Value: it.Value, Answered: answered}
			if pending[it.ID] || latest {
				// An answered approval of the head's tasks shows too: its
				// resume may be claimed and not finished.
				var obs *approval.Inbox
				if pending[it.ID] {
					obs = observe
				}
				st, err := approvalOf(ctx, store, obs, it, now)
				if err != nil {
					return nil, err
				}
				ij.Approval = st
			}
			if pending[it.ID] {
				out.Interrupts = append(out.Interrupts, ij)
			}
			tj.Interrupts = append(tj.Interrupts, ij)
		}
		out.Tasks = append(out.Tasks, tj)
	}
	return out, nil
}

// approvalOf returns where the approval request in it stands, or nil when
// it is not an approval request. With observe, an undecided request that
// has expired has its expiry recorded (approval.Inbox.Get) before its
// decision is read.
func approvalOf(ctx context.Context, store approval.Store, observe *approval.Inbox, it checkpoint.Interrupt, now time.Time) (*approvalStatus, error) {
	req, ok, perr := approval.ParseRequest(it.Value)
	if !ok || perr != nil {
		return nil, nil
	}
	st := &approvalStatus{Tool: req.Tool, Owner: req.Owner, Kind: req.Kind, Rule: req.Rule, Rationale: req.Explanation(),
		ExpiresAt: req.ExpiresAt.UTC(), Expired: req.Expired(now)}
	if st.Kind == "" {
		st.Kind = approval.KindGate
	}
	if observe != nil && st.Expired {
		if _, err := observe.Get(ctx, it.ID); err != nil && !errors.Is(err, approval.ErrExpired) &&
			!errors.Is(err, approval.ErrAlreadyDecided) && !errors.Is(err, approval.ErrNotFound) {
			return nil, fmt.Errorf("record the expiry of approval %s: %w", it.ID, err)
		}
	}
	rec, err := store.Get(ctx, it.ID)
	switch {
	case err == nil:
		st.Decision = &rec.Decision
		st.Resume = resumeOf(rec.Resume, store.Now())
	case !errors.Is(err, approval.ErrNotFound):
		return nil, fmt.Errorf("read the decision of approval %s: %w", it.ID, err)
	}
	return st, nil
}

// resumeOf says where the worker is with a decided approval at now.
func resumeOf(r approval.Resume, now time.Time) *resumeJSON {
	out := &resumeJSON{Note: r.Note, Attempts: r.Attempts, LastError: r.LastError}
	if !r.At.IsZero() {
		out.At = r.At.UTC()
	}
	if !r.NotBefore.IsZero() {
		out.NotBefore = r.NotBefore.UTC()
	}
	switch {
	case !r.At.IsZero():
		out.State = "done"
	case r.LastError != "" && r.NotBefore.After(now):
		out.State = "retrying"
	case r.NotBefore.After(now):
		out.State = "claimed"
	default:
		out.State = "due"
	}
	return out
}

// stateHint says in one line what to do next about the thread.
func stateHint(st *stateJSON, head string) string {
	if !st.Head {
		return fmt.Sprintf("this is an older checkpoint; the head is %s: run `lockstep state %s` for the thread as it is now", head, shellArg(st.Thread))
	}
	switch st.Status {
	case "done":
		return "done: nothing to do"
	case "failed":
		for _, t := range st.Tasks {
			if t.Status == "failed" {
				return fmt.Sprintf("failed in node %s: fix the cause, then the application continues the thread with Runnable.Continue (only unfinished tasks run again)", t.Node)
			}
		}
	case "pending":
		if resumed := unfinishedResume(st); resumed != "" {
			return resumed
		}
		if l := st.Lease; l != nil && l.Live {
			return fmt.Sprintf("pending: run %s holds the thread's lease until %s: it is still running, or it was killed and the lease lapses then; after that the application continues the thread with Runnable.Continue",
				l.Owner, formatTime(l.Until))
		}
		return "pending: the run stopped between steps (a crash or a cancelled run); the application continues it with Runnable.Continue"
	case "waiting":
		return waitingHint(st)
	}
	return st.Status
}

func waitingHint(st *stateJSON) string {
	var open, decided, expired, other []interruptJSON
	for _, in := range st.Interrupts {
		a := in.Approval
		switch {
		case a == nil:
			other = append(other, in)
		case a.Decision != nil:
			decided = append(decided, in)
		case a.Expired:
			expired = append(expired, in)
		default:
			open = append(open, in)
		}
	}
	switch {
	case len(open) == 1 && open[0].Approval.Kind == approval.KindOutcomeUnknown:
		id, a := open[0].ID, open[0].Approval
		return fmt.Sprintf("waiting for approval %s: an earlier attempt of %s may already have taken effect (rule %s): check downstream whether it happened, "+
			"then run `lockstep approve %s --reviewer NAME` to run it again with the same idempotency key, or `lockstep reject %s --reviewer NAME --note WHAT-HAPPENED`",
			id, a.Tool, a.Rule, id, id)
	case len(open) == 1:
		id := open[0].ID
		return fmt.Sprintf("waiting for approval %s: run `lockstep approve %s --reviewer NAME` or `lockstep reject %s --reviewer NAME`", id, id, id)
	case len(open) > 1:
		return fmt.Sprintf("waiting for %d approvals: run `lockstep approve ID --reviewer NAME` or `lockstep reject ID --reviewer NAME` for each ID above", len(open))
	case len(decided) > 0:
		if s := unfinishedResume(st); s != "" {
			return s
		}
		d := decided[0].Approval.Decision
		return fmt.Sprintf("approval %s was %s by %s: a process running approval.Worker resumes the thread with the decision", decided[0].ID, d.Outcome, quote(d.Reviewer))
	case len(expired) > 0:
		return fmt.Sprintf("approval %s expired at %s: the expiry sweeper (approval.Inbox.Sweep) rejects it, then approval.Worker resumes the thread",
			expired[0].ID, formatTime(expired[0].Approval.ExpiresAt))
	case len(other) > 0:
		return fmt.Sprintf("waiting on interrupt %s in node %s: the application answers it with Runnable.Resume (Command.ResumeByID for several)", other[0].ID, other[0].Node)
	case st.Breakpoint != nil:
		return fmt.Sprintf("stopped at the breakpoint %s %s: review the state, then the application continues the thread with Runnable.Continue (after Runnable.UpdateState to change it)",
			st.Breakpoint.When, strings.Join(st.Breakpoint.Nodes, ","))
	}
	return "waiting"
}

// unfinishedResume says why a decided approval of the head's tasks has not
// been delivered, when a worker claimed it or failed: "" otherwise.
func unfinishedResume(st *stateJSON) string {
	for _, t := range st.Tasks {
		for _, in := range t.Interrupts {
			a := in.Approval
			if a == nil || a.Decision == nil || a.Resume == nil {
				continue
			}
			what := fmt.Sprintf("approval %s was %s by %s", in.ID, a.Decision.Outcome, quote(a.Decision.Reviewer))
			switch a.Resume.State {
			case "claimed":
				return fmt.Sprintf("%s; a worker claimed its resume and has not finished: it is resuming the thread now, or it was stopped or killed, and then a process running approval.Worker resumes the thread after %s",
					what, formatTime(a.Resume.NotBefore))
			case "retrying":
				return fmt.Sprintf("%s; resuming the thread failed %d time(s), last: %s; a process running approval.Worker tries again after %s",
					what, a.Resume.Attempts, truncate(clean(a.Resume.LastError), previewError), formatTime(a.Resume.NotBefore))
			}
		}
	}
	return ""
}

func (e *env) printState(st *stateJSON) error {
	now := e.now()
	w := e.stdout
	head := ""
	if st.Head {
		head = " (head)"
	}
	kv := newTable(w)
	kv.row("thread", st.Thread)
	if st.Head {
		kv.row("status", st.Status)
	} else {
		kv.row("status", st.Status+" at this checkpoint (not the head)")
	}
	kv.row("checkpoint", st.Checkpoint+head)
	kv.row("step", fmt.Sprintf("%d (%s), created %s, %s ago", st.Step, st.Source, formatTime(st.CreatedAt), formatAge(now.Sub(st.CreatedAt))))
	kv.row("durability", durabilityLine(st.Durability))
	kv.row("next", list(st.Next, 1<<10))
	if bp := st.Breakpoint; bp != nil {
		kv.row("breakpoint", bp.When+" "+strings.Join(bp.Nodes, ","))
	}
	if st.Head {
		kv.row("lease", leaseLine(st.Lease, now))
	}
	kv.row("graph", graphRow(st.Graph))
	if err := kv.flush(); err != nil {
		return err
	}
	if warn := graphWarning(st.Graph, st.waiting); warn != "" && st.Head && st.Status != "done" {
		if _, err := fmt.Fprintf(w, "\n%s", cleanLines(warn)); err != nil {
			return err
		}
	}
	if len(st.Tasks) > 0 {
		io.WriteString(w, "\n")
		t := newTable(w)
		t.row("TASK", "NODE", "STATUS", "DETAIL")
		for _, tk := range st.Tasks {
			for i, d := range taskDetails(tk, st.Breakpoint, now) {
				if i == 0 {
					t.row(truncate(tk.ID, shortTaskID+1), tk.Node, tk.Status, d)
				} else {
					t.row("", "", "", d)
				}
			}
		}
		if err := t.flush(); err != nil {
			return err
		}
		if err := printSubgraphs(w, st.Tasks, now, ""); err != nil {
			return err
		}
	}
	values, err := indentJSON(st.Values)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "\nvalues\n%s\n\nnext step: %s\n", cleanLines(values), clean(st.Hint))
	return err
}

// leaseLine describes a thread's lease for the state table.
func leaseLine(l *leaseJSON, now time.Time) string {
	switch {
	case l == nil:
		return "none (no run holds the thread)"
	case l.Live:
		return fmt.Sprintf("held by run %s%s until %s (for %s more): it is running, or was killed and its lease lapses then", l.Owner, leaseOf(l), formatTime(l.Until), formatAge(l.Until.Sub(now)))
	}
	return fmt.Sprintf("lapsed at %s (run %s%s held it; if it was killed it is gone, and the next run takes the thread at once)", formatTime(l.Until), l.Owner, leaseOf(l))
}

// leaseOf names a lease's runner and epoch, for leaseLine.
func leaseOf(l *leaseJSON) string {
	s := ""
	if l.Runner != "" {
		s = " of runner " + l.Runner
	}
	if l.Epoch > 0 {
		s += fmt.Sprintf(", claim %d", l.Epoch)
	}
	return s
}

// taskDetails are the lines of the DETAIL column of a task.
func taskDetails(t taskJSON, bp *checkpoint.Breakpoint, now time.Time) []string {
	var out []string
	if t.Error != nil {
		msg := t.Error.Message
		if informativeType(t.Error.Type) {
			msg += " (" + t.Error.Type + ")"
		}
		out = append(out, "error: "+truncate(clean(msg), previewError))
	}
	for _, in := range t.Interrupts {
		switch {
		case in.Answered:
			s := "answered interrupt " + in.ID
			if a := in.Approval; a != nil && a.Decision != nil {
				s += fmt.Sprintf(" (approval: %s by %s)", a.Decision.Outcome, a.Decision.Reviewer)
			}
			out = append(out, s)
			out = append(out, resumeLines(in.Approval)...)
		case in.Approval != nil:
			a := in.Approval
			req, _, _ := approval.ParseRequest(in.Value)
			s := fmt.Sprintf("approval %s: %s %s", in.ID, a.Tool, preview(req.Args, previewArgs))
			if a.Owner != "" {
				s += " for " + a.Owner
			}
			if a.Rule != "" {
				s += " (rule " + a.Rule + ")"
			}
			if a.Kind == approval.KindOutcomeUnknown {
				out = append(out, s)
				s = "  outcome unknown: an earlier attempt may already have run; check downstream before deciding"
			}
			switch {
			case a.Decision != nil:
				s += fmt.Sprintf(" (%s by %s)", a.Decision.Outcome, a.Decision.Reviewer)
			case a.Expired:
				s += " (expired)"
			default:
				s += " (expires in " + formatAge(a.ExpiresAt.Sub(now)) + ")"
			}
			out = append(out, s)
			out = append(out, resumeLines(a)...)
		default:
			out = append(out, fmt.Sprintf("interrupt %s: %s", in.ID, preview(in.Value, previewValue)))
		}
	}
	if t.Status == "done" {
		fields := make([]string, 0, len(t.Result))
		for f := range t.Result {
			fields = append(fields, f)
		}
		slices.Sort(fields)
		d := "done"
		if len(fields) > 0 {
			d = "wrote " + strings.Join(fields, ", ")
		}
		out = append(out, d)
	}
	if len(out) == 0 {
		if bp != nil && bp.When == "before" && slices.Contains(bp.Nodes, t.Node) {
			out = append(out, "held by the breakpoint before "+t.Node)
		} else {
			out = append(out, "not run yet")
		}
	}
	return out
}

// resumeLines are the DETAIL lines of a decided approval whose resume a
// worker claimed and did not finish, or that failed.
func resumeLines(a *approvalStatus) []string {
	if a == nil || a.Resume == nil {
		return nil
	}
	switch r := a.Resume; r.State {
	case "claimed":
		return []string{"  resume claimed by a worker until " + formatTime(r.NotBefore) + ", not finished"}
	case "retrying":
		return []string{fmt.Sprintf("  resume failed %d time(s): %s; next try after %s", r.Attempts, truncate(clean(r.LastError), previewError), formatTime(r.NotBefore))}
	}
	return nil
}

// informativeType reports whether a failed task's error type tells an
// operator more than its message: not for the standard library's plain
// and wrapping errors.
func informativeType(typ string) bool {
	switch typ {
	case "", "*errors.errorString", "*fmt.wrapError", "*fmt.wrapErrors", "*errors.joinError":
		return false
	}
	return true
}

// durabilityUnknown is what state and history show as the durability mode
// of a checkpoint that does not record one.
const durabilityUnknown = "unknown"

// durabilityOf returns the durability mode that wrote a checkpoint
// (checkpoint.Metadata.Durability), or durabilityUnknown.
func durabilityOf(m checkpoint.Metadata) string {
	if m.Durability == "" {
		return durabilityUnknown
	}
	return m.Durability
}

// durabilityLine is state's durability row: the mode and what it promised
// about the checkpoints of the run that wrote this one.
func durabilityLine(mode string) string {
	switch mode {
	case "sync":
		return "sync (each step's checkpoint committed before the next step ran)"
	case "async":
		return "async (each step's checkpoint written while the next step ran; the run returned after all were durable)"
	case "exit":
		return "exit (only the checkpoints the run ended or paused on were written)"
	case durabilityUnknown:
		return "unknown (the checkpoint does not record it: written before lockstep did)"
	}
	return quote(mode)
}
