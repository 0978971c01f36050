package approval

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/lockstepgo/lockstep/internal/canon"
	"github.com/lockstepgo/lockstep/internal/strictjson"
	"github.com/lockstepgo/lockstep/observe"
)

// Risk is the tier a tool declares when it is registered. Which calls need a
// human is decided from it (and optional argument rules), never by a model.
type Risk string

// Risk tiers, lowest first.
const (
	RiskNone     Risk = "none"     // reads and reversible actions: never gated
	RiskLow      Risk = "low"      // cheap to undo
	RiskMedium   Risk = "medium"   // undo is costly
	RiskHigh     Risk = "high"     // one-way doors: payments, deletions, messages sent
	RiskCritical Risk = "critical" // one-way doors with large blast radius
)

var riskRank = map[Risk]int{RiskNone: 0, RiskLow: 1, RiskMedium: 2, RiskHigh: 3, RiskCritical: 4}

// Valid reports whether r is one of the declared tiers.
func (r Risk) Valid() bool { _, ok := riskRank[r]; return ok }

// AtLeast reports whether r is o or a higher tier. Invalid tiers rank
// highest, so a typo fails closed.
func (r Risk) AtLeast(o Risk) bool {
	rr, ok := riskRank[r]
	if !ok {
		rr = len(riskRank)
	}
	return rr >= riskRank[o]
}

// RequestType is the Type of every Request. It tells an approval request
// apart from other interrupt values.
const RequestType = "approval_request"

// Request is what a gated tool call asks a human. It is the value of the
// interrupt that pauses the run, so it is saved in the same transaction as
// the pause, and its ID is that interrupt's ID.
type Request struct {
	Type      string          `json:"type"`              // RequestType
	Tool      string          `json:"tool"`              // the tool, by exact name
	Args      json.RawMessage `json:"args"`              // the exact arguments, canonical JSON
	ArgsHash  string          `json:"args_hash"`         // ArgsHash(Tool, Args)
	CallID    string          `json:"call_id"`           // the model's tool-call ID
	Rationale string          `json:"rationale"`         // the model's stated reason for the call
	Context   json.RawMessage `json:"context,omitempty"` // what the application shows the reviewer (customer, order, history)
	Risk      Risk            `json:"risk"`
	Rule      string          `json:"rule,omitempty"`   // the rule that gated the call
	Owner     string          `json:"owner,omitempty"`  // who should decide (a team or a person)
	Schema    json.RawMessage `json:"schema,omitempty"` // the tool's argument schema, to validate edits
	CreatedAt time.Time       `json:"created_at"`
	ExpiresAt time.Time       `json:"expires_at"` // expired when now >= ExpiresAt
	// Kind says what the reviewer is asked (see Kind; empty means
	// KindGate, as in requests written before kinds existed).
	Kind Kind `json:"kind,omitempty"`
	// FallbackFor names the tool whose failure led to this call when the
	// call is that tool's fallback (Kind is KindFallback, or
	// KindOutcomeUnknown for a fallback whose outcome is unknown).
	FallbackFor string `json:"fallback_for,omitempty"`
	// TraceParent is the W3C traceparent of the operation that raised
	// the request (the tool node's task), when the run was traced
	// (package observe): every store keeps it with the decision, and the
	// Worker's resume links to it, in whichever process it runs. Empty
	// when the run was not traced; otherwise a version-00 traceparent
	// (observe.ValidTraceParent), or the request is invalid.
	TraceParent string `json:"traceparent,omitempty"`
}

// Kind is what an approval request asks the reviewer.
type Kind string

// Request kinds.
const (
	// KindGate: the call the model made needs a human (its tool's risk or
	// an argument rule gates it). Approve to run it as shown.
	KindGate Kind = "gate"
	// KindFallback: the model's call to FallbackFor failed, and its
	// declared fallback Tool, which is gated itself, would run instead
	// with the same arguments. Approve to run the fallback.
	KindFallback Kind = "fallback"
	// KindOutcomeUnknown: an earlier attempt of this exact write may have
	// taken effect and its outcome is unknown (the process died between
	// the call and recording its result). Check downstream before
	// deciding: approving runs the call again with the same idempotency
	// key, which is right when it did not happen, or when the service
	// deduplicates by that key (the run then returns what the first
	// attempt made); otherwise reject, saying what happened. Such a
	// request cannot be edited. Its Rationale is the model's, written
	// before the earlier attempt: show OutcomeUnknownNote instead
	// (Request.Explanation).
	KindOutcomeUnknown Kind = "outcome_unknown"
)

// OutcomeUnknownNote is what the reviewer of a KindOutcomeUnknown request
// needs to know, in place of the model's rationale.
const OutcomeUnknownNote = "An earlier attempt of this call may already have taken effect: its run was stopped inside the call, so its outcome is unknown. " +
	"Check downstream whether it happened before deciding. Approving runs it again with the same idempotency key: right when it did not happen, " +
	"or when the service deduplicates by that key (it then returns what the first attempt made); otherwise reject, saying what happened."

// OutcomeUnknownShort is OutcomeUnknownNote in a few words, for a table
// cell.
const OutcomeUnknownShort = "may already have run: check downstream"

// Explanation returns what a reviewer should read as the reason for the
// request: the model's Rationale, or OutcomeUnknownNote for a
// KindOutcomeUnknown request, whose rationale the model wrote before the
// earlier attempt and which does not say that the write may have happened.
func (r Request) Explanation() string {
	if r.Kind == KindOutcomeUnknown {
		return OutcomeUnknownNote
	}
	return r.Rationale
}

// Valid reports whether k is a known kind or empty (KindGate).
func (k Kind) Valid() bool {
	switch k {
	case "", KindGate, KindFallback, KindOutcomeUnknown:
		return true
	}
	return false
}

// Expired reports whether the request has expired at now (now >= ExpiresAt).
func (r Request) Expired(now time.Time) bool { return !now.Before(r.ExpiresAt) }

// ArgsHash binds an approval to one exact call: the hash of the tool name and
// the canonical form of its arguments (see package canon: key order, number
// spelling and whitespace do not matter; anything else does). It returns an
// error for arguments that are not valid JSON or have duplicate keys.
func ArgsHash(tool string, args json.RawMessage) (string, error) {
	c, err := canon.JSON(args)
	if err != nil {
		return "", fmt.Errorf("approval: arguments of %q: %w", tool, err)
	}
	return canon.HashStrings("lockstep/approval/v1", tool, string(c)), nil
}

// ParseRequest decodes an interrupt value, or a request snapshot a Store
// kept. ok is false, with a nil error, when the value is not an approval
// request (not a JSON object whose "type" is RequestType). It returns ok
// true and an error when the value says it is a request (its "type" key,
// in any spelling encoding/json would read, is RequestType) but is not
// what json.Marshal writes for a Request: null, a duplicate, unknown or
// case-variant key, invalid UTF-8 or a lone surrogate escape anywhere,
// a value of the wrong kind. Such a request can never be decided (the
// expiry sweeper rejects it); it is never read leniently into another
// request. It does not validate the request (see Request.Validate).
func ParseRequest(value json.RawMessage) (req Request, ok bool, err error) {
	var probe struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(value, &probe) != nil || probe.Type != RequestType {
		return Request{}, false, nil
	}
	if err := decodeRequest(value, &req); err != nil {
		return Request{}, true, fmt.Errorf("approval: malformed request: %w", err)
	}
	return req, true, nil
}

// requestJSON is the strict form of a Request: what json.Marshal writes.
var requestJSON = strictjson.For(reflect.TypeFor[Request]())

// decodeRequest decodes b, refusing what json.Marshal never writes for a
// Request (strictjson's rules, and null for its times, which encoding/json
// would read as the zero time).
func decodeRequest(b []byte, req *Request) error {
	if err := requestJSON.Check(b); err != nil {
		return err
	}
	var times struct {
		CreatedAt json.RawMessage `json:"created_at"`
		ExpiresAt json.RawMessage `json:"expires_at"`
	}
	if err := json.Unmarshal(b, &times); err != nil {
		return err
	}
	if string(times.CreatedAt) == "null" || string(times.ExpiresAt) == "null" {
		return errors.New("null for a time, which json.Marshal never writes")
	}
	return json.Unmarshal(b, req)
}

// Outcome is what became of a request.
type Outcome string

// Outcomes. Only Approved and Edited let a call run.
const (
	Approved Outcome = "approved"
	Rejected Outcome = "rejected"
	Edited   Outcome = "edited"  // approved with the reviewer's arguments
	Expired  Outcome = "expired" // nobody decided in time: a rejection
)

// Valid reports whether o is a known outcome.
func (o Outcome) Valid() bool {
	switch o {
	case Approved, Rejected, Edited, Expired:
		return true
	}
	return false
}

// Decision is the answer to a request. It is the resume value the tool node
// receives, and it comes from a Store (Decide, or the Inbox in front of
// one) or from Wait, which set ID, Reviewer and DecidedAt. Do not build one
// by hand: package nodes' tool node refuses a decision that lacks any of
// the three, and the request keeps waiting.
type Decision struct {
	ID        string          `json:"id,omitempty"` // the approval (= interrupt) ID it answers
	Outcome   Outcome         `json:"outcome"`
	Reviewer  string          `json:"reviewer"` // who decided; "system:expiry" for expiry
	Note      string          `json:"note,omitempty"`
	Args      json.RawMessage `json:"args,omitempty"` // Edited only: the arguments to run instead
	ArgsHash  string          `json:"args_hash"`      // hash of the arguments this decision covers
	DecidedAt time.Time       `json:"decided_at"`
}

// Allows reports whether the decision lets the call run.
func (d Decision) Allows() bool { return d.Outcome == Approved || d.Outcome == Edited }

// ArgRule is an argument-aware rule: it returns a rule name when the call
// needs a human regardless of the tool's tier (say, a refund above a limit),
// and "" otherwise.
type ArgRule func(tool string, args json.RawMessage) string

// Rules decide deterministically which calls need a human: every call of a
// tool whose declared risk is at least MinRisk, plus calls that an ArgRule
// names. Keep the list short: gate one-way doors only, and express
// thresholds as ArgRules instead of raising a tool's tier, so reviewers see
// few requests and keep reading them (approval fatigue turns reviews into
// rubber stamps).
//
// The zero value of a field means its default; any other value outside
// its range is refused by Validate (which nodes.NewExecutor and the tool
// node call when the agent is built), never replaced by the default.
type Rules struct {
	// MinRisk is the lowest tier that needs a human ("" means RiskHigh;
	// a name that is not a tier is refused).
	MinRisk Risk
	// ArgRules gate calls by their arguments, in order; the first match
	// names the rule. A nil entry is refused.
	ArgRules []ArgRule
	// TTL is how long a request waits before it expires (0 means
	// DefaultTTL; a negative TTL, or one above MaxTTL, is refused).
	TTL time.Duration
	// Owners maps tool names to who decides; Owner is the default.
	Owners map[string]string
	Owner  string
}

// Requires says whether a call of tool (declared risk) with args needs a
// human, and which rule says so.
func (r Rules) Requires(tool string, risk Risk, args json.RawMessage) (bool, string) {
	for _, ar := range r.ArgRules {
		if name := ar(tool, args); name != "" {
			return true, name
		}
	}
	min := r.MinRisk
	if min == "" {
		min = RiskHigh
	}
	if risk.AtLeast(min) {
		return true, "risk:" + string(risk)
	}
	return false, ""
}

// DefaultTTL is the lifetime of a request under Rules whose TTL is zero.
const DefaultTTL = 24 * time.Hour

// TTLOrDefault returns the rules' request lifetime: TTL, or DefaultTTL
// when TTL is zero. A TTL that Validate refuses is returned as it is, so
// that a request raised with it fails Request.Validate rather than living
// for a day.
func (r Rules) TTLOrDefault() time.Duration {
	if r.TTL == 0 {
		return DefaultTTL
	}
	return r.TTL
}

// Validate checks the rules as they are configured, before any call is
// gated: TTL is zero (DefaultTTL) or positive and at most MaxTTL, MinRisk
// is empty or a declared tier, and no ArgRule is nil. It returns an
// *Error matching ErrInvalidConfig that names the field; a value out of
// range is never replaced by the default.
func (r Rules) Validate() error {
	switch {
	case r.TTL < 0:
		return newError("", ErrInvalidConfig, "Rules.TTL is %v; a request's lifetime must be positive (0 means %v)", r.TTL, DefaultTTL)
	case r.TTL > MaxTTL:
		return newError("", ErrInvalidConfig, "Rules.TTL is %v, more than MaxTTL (%v)", r.TTL, MaxTTL)
	case r.MinRisk != "" && !r.MinRisk.Valid():
		return newError("", ErrInvalidConfig, "Rules.MinRisk %s is not a risk tier (want none, low, medium, high or critical)", quoteShort(string(r.MinRisk)))
	}
	for i, ar := range r.ArgRules {
		if ar == nil {
			return newError("", ErrInvalidConfig, "Rules.ArgRules[%d] is nil", i)
		}
	}
	return nil
}

// OwnerOf returns who decides calls of tool.
func (r Rules) OwnerOf(tool string) string {
	if o, ok := r.Owners[tool]; ok {
		return o
	}
	return r.Owner
}

// Reviewer identities. Names starting with SystemPrefix are reserved for
// lockstep itself: a human decision under such a name is refused, so nobody
// can pass a decision off as the system's.
const (
	// SystemPrefix starts every reserved reviewer name.
	SystemPrefix = "system:"
	// ExpiryReviewer decides requests that expired: the sweeper, and Wait
	// when nobody replied in time.
	ExpiryReviewer = SystemPrefix + "expiry"
)

// Limits on what a request and a decision may carry.
const (
	// MaxTTL bounds ExpiresAt - CreatedAt. An approval that can wait for
	// more than a year is one nobody will read; Rules.TTL must stay below.
	MaxTTL = 366 * 24 * time.Hour
	// MaxNoteBytes caps a reviewer's note.
	MaxNoteBytes = 4 << 10
	// MaxReviewerBytes caps a reviewer's identity.
	MaxReviewerBytes = 256
	// MaxArgsBytes caps edited arguments.
	MaxArgsBytes = 1 << 20

	maxToolBytes = 256
)

// Validate checks that r can be decided: its type, a tool name, arguments
// that are JSON and match ArgsHash, a known risk tier, a known kind (a
// KindFallback request names the tool it stands in for, and only fallback
// and outcome-unknown requests do), and an expiry that is after CreatedAt
// by at most MaxTTL, and a TraceParent that is empty or a W3C
// traceparent. The tool node calls it before it
// pauses, so a request that nobody could decide is never raised. It returns
// an *Error matching ErrInvalidRequest or ErrInvalidExpiry.
func (r Request) Validate() error {
	if err := r.validate(""); err != nil {
		return err
	}
	return nil
}

func (r Request) validate(id string) *Error {
	switch {
	case r.Type != RequestType:
		return newError(id, ErrInvalidRequest, "type is %s, not %q", quoteShort(r.Type), RequestType)
	case r.Tool == "":
		return newError(id, ErrInvalidRequest, "no tool")
	case len(r.Tool) > maxToolBytes:
		return newError(id, ErrInvalidRequest, "tool name of %d bytes", len(r.Tool))
	case !r.Risk.Valid():
		return newError(id, ErrInvalidRequest, "unknown risk tier %s", quoteShort(string(r.Risk)))
	case !r.Kind.Valid():
		return newError(id, ErrInvalidRequest, "unknown kind %s", quoteShort(string(r.Kind)))
	case r.Kind == KindFallback && r.FallbackFor == "":
		return newError(id, ErrInvalidRequest, "a fallback request does not name the tool it stands in for")
	case r.FallbackFor != "" && r.Kind != KindFallback && r.Kind != KindOutcomeUnknown:
		return newError(id, ErrInvalidRequest, "fallback_for is set on a request of kind %s", quoteShort(string(r.Kind)))
	case len(r.FallbackFor) > maxToolBytes:
		return newError(id, ErrInvalidRequest, "fallback_for of %d bytes", len(r.FallbackFor))
	case r.TraceParent != "" && !observe.ValidTraceParent(r.TraceParent):
		return newError(id, ErrInvalidRequest, "traceparent %s is not a W3C traceparent", quoteShort(r.TraceParent))
	}
	h, err := ArgsHash(r.Tool, r.Args)
	if err != nil {
		return newError(id, ErrInvalidRequest, "arguments are not canonical JSON")
	}
	if h != r.ArgsHash {
		return newError(id, ErrInvalidRequest, "args_hash does not match the arguments")
	}
	switch {
	case !inRange(r.CreatedAt):
		return newError(id, ErrInvalidExpiry, "created_at is zero or out of range")
	case !inRange(r.ExpiresAt):
		return newError(id, ErrInvalidExpiry, "expires_at is zero or out of range")
	case !r.ExpiresAt.After(r.CreatedAt):
		return newError(id, ErrInvalidExpiry, "expires_at is not after created_at")
	case r.ExpiresAt.Sub(r.CreatedAt) > MaxTTL:
		return newError(id, ErrInvalidExpiry, "expires %v after creation, more than MaxTTL (%v)", r.ExpiresAt.Sub(r.CreatedAt), MaxTTL)
	}
	return nil
}

// inRange reports whether t is a usable timestamp: not zero, and within
// years 1970 to 9999 so that stored times sort as text.
func inRange(t time.Time) bool {
	y := t.UTC().Year()
	return !t.IsZero() && y >= 1970 && y <= 9999
}
