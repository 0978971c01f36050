package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/lockstepgo/lockstep/approval"
)

// decisionJSON is the output of approve and reject --json.
type decisionJSON struct {
	ID         string            `json:"id"`
	Thread     string            `json:"thread"`
	Checkpoint string            `json:"checkpoint"`
	Tool       string            `json:"tool"`
	Decision   approval.Decision `json:"decision"`
	// Resumed is always false: lockstep records decisions, and a process
	// running approval.Worker resumes the thread (see Hint).
	Resumed bool   `json:"resumed"`
	Hint    string `json:"hint"`
}

func approveCommand(fs *flag.FlagSet) runner { return decideCommand(fs, approval.Approved) }

func rejectCommand(fs *flag.FlagSet) runner { return decideCommand(fs, approval.Rejected) }

// decideCommand records outcome (Approved, or Edited with --args; or
// Rejected) on a pending approval.
func decideCommand(fs *flag.FlagSet, outcome approval.Outcome) runner {
	name := "approve"
	if outcome == approval.Rejected {
		name = "reject"
	}
	reviewer := fs.String("reviewer", "", "who decides (required); `NAME` is recorded with the decision")
	note := fs.String("note", "", "`TEXT` giving the reason, recorded with the decision and shown to the model")
	var args string
	edit := false
	if outcome == approval.Approved {
		fs.Func("args", "approve running these arguments instead: a `JSON` object matching the tool's schema", func(s string) error {
			args, edit = s, true
			return nil
		})
	}
	return func(ctx context.Context, e *env, pos []string) error {
		id := pos[0]
		if id == "" {
			return usageError(name+" needs an approval ID", "run `lockstep approvals` to list the pending approvals")
		}
		if strings.TrimSpace(*reviewer) == "" {
			return usageError(name+" needs --reviewer NAME", "a decision records who made it")
		}
		v := approval.Verdict{Outcome: outcome, Reviewer: *reviewer, Note: *note}
		if edit {
			var probe any
			if err := json.Unmarshal([]byte(args), &probe); err != nil {
				return usageError(fmt.Sprintf("--args is not valid JSON: %v", err),
					`pass the arguments as one JSON object, quoted for the shell: --args '{"amount": 30}'`)
			}
			v.Outcome, v.Args = approval.Edited, json.RawMessage(args)
		}
		s, err := e.openSaver(true)
		if err != nil {
			return err
		}
		defer s.Close()
		read, durable, err := e.readDecisions(ctx, s)
		if err != nil {
			return err
		}
		item, err := approval.NewInbox(s, read).Get(ctx, id)
		if errors.Is(err, approval.ErrNotFound) {
			return notFound(fmt.Sprintf("no pending approval %s in %s", quote(id), e.dbName()),
				"run `lockstep approvals` to list the pending approvals and pass the full ID", err)
		}
		var lost *approval.AlreadyDecidedError
		if errors.Is(err, approval.ErrExpired) && !errors.As(err, &lost) && !durable {
			// Get saw the request expired and recorded that in memory:
			// record it in the file, so that no later decision (with a
			// clock stepped back) can approve it.
			store, werr := e.writeDecisions(ctx, s)
			if werr != nil {
				return werr
			}
			_, err = approval.NewInbox(s, store).Get(ctx, id)
		}
		if err != nil {
			return err
		}
		// Check the verdict by the same rules with nothing recorded, so
		// that a refused one writes nothing, not even the approval tables.
		// An expiry is the exception: the decision below records it.
		if _, err := approval.NewMemoryStore(e.now).Decide(ctx, item, v); err != nil && !errors.Is(err, approval.ErrExpired) {
			return err
		}
		store, err := e.writeDecisions(ctx, s)
		if err != nil {
			return err
		}
		d, err := approval.NewInbox(s, store).Decide(ctx, id, v)
		if err != nil {
			return err
		}
		out := decisionJSON{ID: id, Thread: item.Thread, Checkpoint: item.Checkpoint, Tool: item.Request.Tool, Decision: d,
			Hint: resumeHint(item.Thread, d)}
		if e.opts.json {
			return e.writeJSON(out)
		}
		return e.printDecision(out)
	}
}

// resumeHint says that the decision is recorded but the thread not yet
// resumed, and who resumes it.
func resumeHint(thread string, d approval.Decision) string {
	what := "runs the approved call"
	if !d.Allows() {
		what = "gives the model the rejection and its note"
	}
	return fmt.Sprintf("thread %s is not resumed by this command: a process running approval.Worker with the graph (approval.ResumeGraph) resumes it and %s", quote(thread), what)
}

func (e *env) printDecision(out decisionJSON) error {
	d := out.Decision
	verb := string(d.Outcome)
	if d.Outcome == approval.Edited {
		verb = "approved with edited arguments"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "approval %s %s by %s at %s (tool %s, thread %s)\n", out.ID, verb, clean(d.Reviewer), formatTime(d.DecidedAt), clean(out.Tool), clean(out.Thread))
	if d.Note != "" {
		fmt.Fprintf(&b, "note: %s\n", clean(d.Note))
	}
	if len(d.Args) > 0 {
		args, err := compactJSON(d.Args)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "arguments: %s\n", clean(unescapeHTML(args)))
	}
	fmt.Fprintf(&b, "next step: %s\n", clean(out.Hint))
	_, err := fmt.Fprint(e.stdout, b.String())
	return err
}
