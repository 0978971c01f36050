package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/nodes/ledger"
)

// Exit codes (see the package documentation).
const (
	exitOK       = 0
	exitInternal = 1 // internal or database error
	exitUsage    = 2 // unknown command, bad flags or arguments
	exitNotFound = 3 // unknown thread, checkpoint, approval or graph
	exitRefused  = 4 // already decided, expired, invalid decision or arguments
)

// Kinds of failure, in the "kind" field of a --json error.
const (
	kindUsage           = "usage"
	kindNoDatabase      = "no_database"
	kindNotFound        = "not_found"
	kindAlreadyDecided  = "already_decided"
	kindExpired         = "expired"
	kindInvalidDecision = "invalid_decision"
	kindInvalidArgs     = "invalid_args"
	kindInvalidRequest  = "invalid_request"
	kindReadOnly        = "read_only"
	kindCorrupt         = "corrupt"
	kindInternal        = "internal"
)

// failure is an error as lockstep reports it: the exit code, a kind for
// scripts, what went wrong and what to do about it. It wraps its cause.
type failure struct {
	code   int
	kind   string
	msg    string
	hint   string
	winner *approval.Decision // an already decided approval's decision
	// problems are every problem of edited arguments, at its path.
	problems []approval.ArgsProblem
	err      error
	// written says the command already printed its JSON document, so
	// that a failure found afterwards does not print a second one.
	written bool
}

func (f *failure) Error() string {
	if f.hint == "" {
		return f.msg
	}
	return f.msg + ": " + f.hint
}

func (f *failure) Unwrap() error { return f.err }

func usageError(msg, hint string) *failure {
	return &failure{code: exitUsage, kind: kindUsage, msg: msg, hint: hint}
}

func notFound(msg, hint string, err error) *failure {
	return &failure{code: exitNotFound, kind: kindNotFound, msg: msg, hint: hint, err: err}
}

// explain turns any error of a command into a failure, classifying the
// library's errors with errors.Is and errors.As.
func explain(err error) *failure {
	var f *failure
	if errors.As(err, &f) {
		return f
	}
	var won *approval.AlreadyDecidedError
	if errors.As(err, &won) {
		d := won.Winner
		msg := fmt.Sprintf("approval %s was already %s by %s at %s; the first decision wins, and this one was not recorded",
			won.ID, d.Outcome, quote(d.Reviewer), d.DecidedAt.UTC().Format(time.RFC3339))
		return &failure{code: exitRefused, kind: kindAlreadyDecided, msg: msg,
			hint: "nothing to do: a process running approval.Worker resumes the thread with that decision", winner: &d, err: err}
	}
	// An *approval.Error names the approval and says what is wrong.
	id, reason := "", err.Error()
	var aerr *approval.Error
	if errors.As(err, &aerr) {
		id, reason = aerr.ID, aerr.Reason
	}
	refused := func(kind, what, hint string) *failure {
		return &failure{code: exitRefused, kind: kind, msg: fmt.Sprintf("%s approval %s: %s", what, id, reason), hint: hint, err: err}
	}
	switch {
	case errors.Is(err, approval.ErrExpired):
		return refused(kindExpired, "cannot decide",
			"your decision was not recorded: a process running approval.Worker gives the agent the rejection (expired, by "+approval.ExpiryReviewer+"), and the agent is told to escalate")
	case errors.Is(err, approval.ErrInvalidArgs):
		if aerr != nil && len(aerr.Problems) > 0 {
			// Every problem, each at its path, not only the first.
			var b strings.Builder
			fmt.Fprintf(&b, "%d problem(s) with the tool's schema: ", len(aerr.Problems))
			for i, p := range aerr.Problems {
				if i > 0 {
					b.WriteString("; ")
				}
				fmt.Fprintf(&b, "%s: %s", p.Path, p.Reason)
			}
			reason = b.String()
		}
		f := refused(kindInvalidArgs, "--args refused for",
			"nothing was recorded; pass --args a JSON object that matches the tool's schema (shown by `lockstep approvals --json`)")
		if aerr != nil {
			f.problems = aerr.Problems
		}
		return f
	case errors.Is(err, approval.ErrInvalidDecision):
		return refused(kindInvalidDecision, "decision refused for",
			"nothing was recorded; name a human reviewer with --reviewer (names starting with \"system:\" are reserved) and keep --note under 4 KiB")
	case errors.Is(err, approval.ErrInvalidRequest), errors.Is(err, approval.ErrInvalidExpiry):
		return refused(kindInvalidRequest, "cannot decide",
			"nothing was recorded; this request can never be decided, and the expiry sweeper (approval.Inbox.Sweep) records it as rejected")
	case errors.Is(err, approval.ErrNotFound):
		return notFound(fmt.Sprintf("no pending approval %s", quote(id)),
			"run `lockstep approvals` to list the pending approvals and pass the full ID", err)
	case errors.Is(err, approval.ErrInvalidFilter):
		f := usageError("approvals: invalid filter: "+reason, "pass the --cursor printed by the previous page, with the same filters")
		f.err = err
		return f
	case errors.Is(err, checkpoint.ErrInvalid):
		f := usageError(err.Error(), "pass a non-empty thread name and IDs as `lockstep threads` and `lockstep history` print them")
		f.err = err
		return f
	case errors.Is(err, checkpoint.ErrNotFound):
		return notFound(err.Error(), "run `lockstep threads` to list the threads", err)
	case isCorrupt(err):
		return &failure{code: exitInternal, kind: kindCorrupt, msg: err.Error(),
			hint: "the stored data does not verify (its checksum, or what it holds, is not what lockstep writes); nothing was written: inspect the row with the sqlite3 shell or restore the file from a backup", err: err}
	case errors.Is(err, approval.ErrSchemaVersion):
		return &failure{code: exitInternal, kind: kindInternal, msg: err.Error(), hint: "use a newer lockstep", err: err}
	case errors.Is(err, context.Canceled):
		return &failure{code: exitInternal, kind: kindInternal, msg: "interrupted", err: err}
	}
	return &failure{code: exitInternal, kind: kindInternal, msg: err.Error(), err: err}
}

// isCorrupt reports whether err says that a stored row of any of the
// stores in the file (the checkpoints, the approval decisions, the
// ledger) does not verify.
func isCorrupt(err error) bool {
	return errors.Is(err, checkpoint.ErrCorrupt) || errors.Is(err, approval.ErrCorrupt) || errors.Is(err, ledger.ErrCorrupt)
}

// jsonError is the document a failing command prints with --json.
type jsonError struct {
	Error jsonErrorBody `json:"error"`
}

type jsonErrorBody struct {
	ExitCode int                `json:"exit_code"`
	Kind     string             `json:"kind"`
	Message  string             `json:"message"`
	Hint     string             `json:"hint"`
	Winner   *approval.Decision `json:"winner,omitempty"`
	// Problems are, for kind invalid_args, every problem of the edited
	// arguments at its path.
	Problems []approval.ArgsProblem `json:"problems,omitempty"`
}

// fail reports err on stderr (and as a JSON document on stdout with
// --json) and returns its exit code.
func (e *env) fail(err error) int {
	f := explain(err)
	fmt.Fprintf(e.stderr, "lockstep: %s\n", clean(f.Error()))
	if e.opts.json && !f.written {
		e.writeJSON(jsonError{Error: jsonErrorBody{ExitCode: f.code, Kind: f.kind, Message: f.msg, Hint: f.hint, Winner: f.winner, Problems: f.problems}})
	}
	return f.code
}
