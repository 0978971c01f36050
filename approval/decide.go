package approval

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/lockstepgo/lockstep/internal/canon"
	"github.com/lockstepgo/lockstep/internal/jsonschema"
)

// Verdict is what a reviewer answers: the input of a decision. The store
// turns it into a Decision, adding the time and the hash of the arguments
// the decision covers.
type Verdict struct {
	// Outcome is Approved, Rejected or Edited, spelled exactly. Expired is
	// reserved for ExpiryReviewer.
	Outcome Outcome `json:"outcome"`
	// Reviewer identifies the human who decides: required, at most
	// MaxReviewerBytes of printable UTF-8, and not starting with
	// SystemPrefix.
	Reviewer string `json:"reviewer"`
	// Note is the reviewer's reason, shown to the model on a rejection; at
	// most MaxNoteBytes.
	Note string `json:"note,omitempty"`
	// Tool may name the request's tool on an edit; any other tool is
	// refused (an edit cannot switch tools).
	Tool string `json:"tool,omitempty"`
	// Args are the arguments to run instead, for Edited only. They must
	// match the schema stored in the request.
	Args json.RawMessage `json:"args,omitempty"`
}

// Item is a pending approval: a request waiting in a paused thread, as the
// inbox lists it. Its ID is the interrupt's ID.
type Item struct {
	ID         string    `json:"id"`
	Thread     string    `json:"thread"`
	Checkpoint string    `json:"checkpoint"` // the checkpoint the thread waits at
	TaskID     string    `json:"task_id"`
	Node       string    `json:"node"`
	PausedAt   time.Time `json:"paused_at"` // when the saver stored the pause
	Request    Request   `json:"request"`
}

// Record is a decided approval: the decision, the request as the reviewer
// saw it, and where the worker is with resuming its thread.
type Record struct {
	ID         string   `json:"id"`
	Thread     string   `json:"thread"`
	Checkpoint string   `json:"checkpoint"`
	Request    Request  `json:"request"` // the snapshot that was shown
	Decision   Decision `json:"decision"`
	Resume     Resume   `json:"resume"`
}

// Resume is the worker's progress on a decided approval.
type Resume struct {
	// At is when the thread was resumed with the decision, or found no
	// longer waiting for it; zero until then.
	At time.Time `json:"at,omitzero"`
	// Note says how it ended ("resumed", or why the thread no longer
	// waits).
	Note string `json:"note,omitempty"`
	// Attempts counts failed resume attempts.
	Attempts int `json:"attempts,omitempty"`
	// LastError is the error of the last failed attempt.
	LastError string `json:"last_error,omitempty"`
	// NotBefore is when the next attempt may start (a worker's claim, or
	// a backoff after a failure); zero means now.
	NotBefore time.Time `json:"not_before,omitzero"`
	// Claimant and Claim name the worker (WorkerOptions.Name) and the
	// claim that hold the resume until NotBefore, as a ResumeClaimer
	// records them; both are empty otherwise (no claim, a backoff, or a
	// claim of ClaimResume, which names no holder).
	Claimant string `json:"claimant,omitempty"`
	Claim    string `json:"claim,omitempty"`
}

// checkVerdict checks what a verdict says on its own: the outcome, the
// reviewer and the note. Expired is accepted only from ExpiryReviewer.
func checkVerdict(id string, v Verdict) error {
	switch {
	case !v.Outcome.Valid():
		return newError(id, ErrInvalidDecision, "unknown outcome %s (want %q, %q or %q)", quoteShort(string(v.Outcome)), Approved, Rejected, Edited)
	case len(v.Note) > MaxNoteBytes:
		return newError(id, ErrInvalidDecision, "note of %d bytes (max %d)", len(v.Note), MaxNoteBytes)
	case !utf8.ValidString(v.Note):
		return newError(id, ErrInvalidDecision, "note is not valid UTF-8")
	}
	if v.Outcome == Expired {
		if v.Reviewer != ExpiryReviewer {
			return newError(id, ErrInvalidDecision, "only %s records an expiry", ExpiryReviewer)
		}
	} else if err := checkReviewer(v.Reviewer); err != "" {
		return newError(id, ErrInvalidDecision, "%s", err)
	}
	if v.Outcome != Edited && (len(v.Args) > 0 || v.Tool != "") {
		return newError(id, ErrInvalidDecision, "only an edit carries a tool or arguments")
	}
	return nil
}

// checkItem checks what a Store needs of an item besides its request: an
// ID to key the decision, and the thread the worker will resume.
func checkItem(item Item) error {
	switch {
	case item.ID == "":
		return newError("", ErrNotFound, "empty approval ID")
	case item.Thread == "":
		return newError(item.ID, ErrInvalidRequest, "no thread")
	}
	return nil
}

// checkReviewer returns why name cannot identify a human reviewer, or "".
func checkReviewer(name string) string {
	t := strings.TrimSpace(name)
	switch {
	case t == "":
		return "no reviewer: a decision needs the identity of who made it"
	case len(name) > MaxReviewerBytes:
		return "reviewer identity too long"
	case !utf8.ValidString(name):
		return "reviewer identity is not valid UTF-8"
	}
	for _, r := range name {
		switch {
		case unicode.IsControl(r): // C0, DEL and C1 (NEL, ...)
			return "reviewer identity contains a control character"
		case unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp):
			// Zero-width and direction marks: a name that reads like
			// another one.
			return "reviewer identity contains an invisible or format character"
		}
	}
	if strings.HasPrefix(foldWidth(strings.ToLower(t)), SystemPrefix) {
		return "reviewer names starting with " + SystemPrefix + " are reserved"
	}
	return ""
}

// foldWidth maps full-width ASCII (U+FF01 to U+FF5E, "ＳＹＳＴＥＭ") to ASCII,
// so that the reserved prefix cannot be spelled around.
func foldWidth(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 0xFF01 && r <= 0xFF5E {
			return r - 0xFF01 + '!'
		}
		return r
	}, s)
}

// decide turns a verdict on item into the decision to record at now. It is
// the one place where the rules live, shared by every Store and by Wait:
// human outcomes need a valid request that has not expired; an expiry
// needs one that has (or that can never be decided); an edit keeps the
// tool and must match the stored schema.
//
// A human verdict that arrives when the request has expired is refused,
// and its arrival is an observation of the expiry, which must be recorded
// so that no later verdict can approve the request (a clock stepped back
// would otherwise let one through). decide then returns the Expired
// decision to record as d and the refusal as late (an *Error matching
// ErrExpired): the store records d, first-wins, and returns late, or the
// *AlreadyDecidedError of whatever won.
func decide(item Item, v Verdict, now time.Time) (d Decision, late *Error, err error) {
	id := item.ID
	if id == "" {
		return Decision{}, nil, newError(id, ErrNotFound, "empty approval ID")
	}
	if err := checkVerdict(id, v); err != nil {
		return Decision{}, nil, err
	}
	req := item.Request
	d = Decision{ID: id, Outcome: v.Outcome, Reviewer: v.Reviewer, Note: v.Note, ArgsHash: req.ArgsHash, DecidedAt: now.UTC()}
	if v.Outcome == Expired {
		if req.validate(id) == nil && !req.Expired(now) {
			return Decision{}, nil, newError(id, ErrInvalidDecision, "cannot expire before %s", req.ExpiresAt.UTC().Format(time.RFC3339Nano))
		}
		return d, nil, nil
	}
	if err := req.validate(id); err != nil {
		return Decision{}, nil, err
	}
	if req.Expired(now) {
		exp := Decision{ID: id, Outcome: Expired, Reviewer: ExpiryReviewer, Note: expiryNote(req), ArgsHash: req.ArgsHash, DecidedAt: now.UTC()}
		return exp, newError(id, ErrExpired, "expired at %s, before this %s verdict, and the expiry is recorded (no decision can approve it any more)",
			req.ExpiresAt.UTC().Format(time.RFC3339Nano), v.Outcome), nil
	}
	if v.Outcome == Edited {
		args, err := checkEdit(id, req, v)
		if err != nil {
			return Decision{}, nil, err
		}
		h, herr := ArgsHash(req.Tool, args)
		if herr != nil {
			return Decision{}, nil, newError(id, ErrInvalidArgs, "arguments are not canonical JSON")
		}
		d.Args, d.ArgsHash = args, h
	}
	return d, nil, nil
}

// expiryNote is the note of an Expired decision on a valid request: it
// tells the model (and the audit) why the call was not approved, and what
// to do instead.
func expiryNote(r Request) string {
	owner := r.Owner
	if owner == "" {
		owner = "the tool's owner"
	}
	return fmt.Sprintf("nobody decided before %s; expired requests are rejected; escalate to %s instead of retrying",
		r.ExpiresAt.UTC().Format(time.RFC3339), owner)
}

// schemaError is the refusal of edited arguments with the schema
// problems vs (in path order): every one in Problems, the first few in the
// reason.
func schemaError(id string, vs []*jsonschema.ValidationError) *Error {
	vs = vs[:min(len(vs), MaxArgsProblems)]
	e := &Error{ID: id, Kind: ErrInvalidArgs, Problems: make([]ArgsProblem, len(vs))}
	var b strings.Builder
	for i, v := range vs {
		e.Problems[i] = ArgsProblem{Path: v.Path, Reason: v.Reason}
		switch {
		case i < reasonProblems:
			if i > 0 {
				b.WriteString("; ")
			}
			b.WriteString(v.Error())
		case i == reasonProblems:
			fmt.Fprintf(&b, "; and %d more", len(vs)-reasonProblems)
		}
	}
	e.Reason = b.String()
	return e
}

// CheckEdit checks edited arguments for approval id against the request
// by the rules every Store applies when it records an edit (Decide with
// Edited), without recording anything, and returns their canonical form.
// It is how a reviewing front end tells an edit it would be refused
// before it asks the store. It returns an *Error matching ErrInvalidArgs
// when r cannot be edited (a KindOutcomeUnknown request: approving it
// runs the very call again, or rejecting it says what happened; no other
// call can stand in for it), carries no schema (or one that does not
// decode), or when args are missing, exceed MaxArgsBytes, are not JSON,
// or fail the schema (every problem at its path, Error.Problems).
func (r Request) CheckEdit(id string, args json.RawMessage) (json.RawMessage, error) {
	return checkEdit(id, r, Verdict{Outcome: Edited, Args: args})
}

// Editable reports whether r can be edited at all (CheckEdit then checks
// the arguments): it is not of KindOutcomeUnknown and carries a schema.
func (r Request) Editable() bool { return r.Kind != KindOutcomeUnknown && len(r.Schema) > 0 }

// checkEdit validates edited arguments and returns their canonical form.
func checkEdit(id string, req Request, v Verdict) (json.RawMessage, error) {
	switch {
	case req.Kind == KindOutcomeUnknown:
		return nil, newError(id, ErrInvalidArgs, "a request of kind %s cannot be edited: approve it only after checking that the earlier attempt did not happen, or reject it", KindOutcomeUnknown)
	case v.Tool != "" && v.Tool != req.Tool:
		return nil, newError(id, ErrInvalidArgs, "an edit cannot switch from tool %s to %s", quoteShort(req.Tool), quoteShort(v.Tool))
	case len(v.Args) == 0:
		return nil, newError(id, ErrInvalidArgs, "an edit needs arguments")
	case len(v.Args) > MaxArgsBytes:
		return nil, newError(id, ErrInvalidArgs, "edited arguments of %d bytes (max %d)", len(v.Args), MaxArgsBytes)
	case len(req.Schema) == 0:
		return nil, newError(id, ErrInvalidArgs, "the request carries no schema to check an edit against")
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(req.Schema, &s); err != nil {
		return nil, newError(id, ErrInvalidArgs, "the request's schema does not decode")
	}
	if vs := jsonschema.ValidateAll(&s, v.Args); len(vs) > 0 {
		return nil, schemaError(id, vs)
	}
	c, err := canon.JSON(v.Args)
	if err != nil {
		return nil, newError(id, ErrInvalidArgs, "arguments are not canonical JSON")
	}
	return c, nil
}
