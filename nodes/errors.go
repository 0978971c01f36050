package nodes

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lockstepgo/lockstep/approval"
)

// Sentinel errors. The typed errors below match them with errors.Is.
var (
	// ErrInvalidTool: NewTool was given a bad name, description, option
	// or argument type.
	ErrInvalidTool = errors.New("nodes: invalid tool")
	// ErrInvalidConfig: NewExecutor or a tool node was misconfigured.
	ErrInvalidConfig = errors.New("nodes: invalid configuration")
	// ErrUnknownTool: the call names a tool that is not bound to this
	// agent. Matches *ScopeError.
	ErrUnknownTool = errors.New("nodes: unknown tool")
	// ErrInvalidArgs: the arguments are not valid JSON for the tool's
	// schema. Matches *ArgsError.
	ErrInvalidArgs = errors.New("nodes: invalid tool arguments")
	// ErrSecretReference: in strict mode, the model's arguments try to
	// reference a secret. Matches *SecretReferenceError.
	ErrSecretReference = errors.New("nodes: arguments reference a secret")
	// ErrConfirmationRequired matches *ConfirmationRequired.
	ErrConfirmationRequired = errors.New("nodes: confirmation required")
	// ErrApprovalMismatch: the decision does not cover the call: it covers
	// other arguments (or another tool), or it answers another request.
	// Matches *ApprovalMismatchError and *DecisionIDError.
	ErrApprovalMismatch = errors.New("nodes: approval does not match the call")
	// ErrWrongDecision: the decision answers another approval request (its
	// ID is not the interrupt ID of the call's request). Matches
	// *DecisionIDError.
	ErrWrongDecision = errors.New("nodes: decision answers another approval request")
	// ErrUnrecordedDecision: the answer to an approval request lacks the
	// approval ID, the reviewer or the decision time that every decision
	// recorded by an approval.Store carries, so it was built by hand, not
	// recorded. The tool node refuses it and the request keeps waiting.
	// Matches *UnrecordedDecisionError.
	ErrUnrecordedDecision = errors.New("nodes: decision was not recorded by an approval store")
	// ErrDuplicateCallID: two tool calls of one model message share an ID;
	// the tool node runs neither (their answers, approvals and results
	// could not be told apart).
	ErrDuplicateCallID = errors.New("nodes: two tool calls of one message share an ID")
	// ErrRejected: a human rejected the call. Matches *DecisionError.
	ErrRejected = errors.New("nodes: call rejected by a human")
	// ErrExpired: nobody decided in time; an expiry is a rejection.
	// Matches *DecisionError.
	ErrExpired = errors.New("nodes: approval request expired")
	// ErrToolFailed matches every *ToolError and *ReplayedError.
	ErrToolFailed = errors.New("nodes: tool failed")
	// ErrRetriesExhausted matches a *ToolError whose transient failures
	// used up the retry policy.
	ErrRetriesExhausted = errors.New("nodes: retries exhausted")
	// ErrToolTimeout matches *TimeoutError.
	ErrToolTimeout = errors.New("nodes: tool timed out")
	// ErrToolPanic matches *PanicError.
	ErrToolPanic = errors.New("nodes: tool panicked")
	// ErrNoScope: a write through the ledger has neither a natural key nor
	// a thread (or Call.Scope) to derive its idempotency key from.
	ErrNoScope = errors.New("nodes: no scope for the idempotency key")
	// ErrLedger: the ledger could not be read or written (a storage
	// failure, not a refusal). Matches *LedgerError.
	ErrLedger = errors.New("nodes: ledger unavailable")
	// ErrSecret: a declared secret could not be provided, or a tool asked
	// Env for a secret it did not declare. Matches *SecretError.
	ErrSecret = errors.New("nodes: secret unavailable")
	// ErrCallInProgress: the tool node stopped at a write whose idempotency
	// key another run holds, alive as far as the ledger can tell
	// (ledger.ErrInProgress: a run of another thread with the same key,
	// or a concurrent execution in this run). It is not the call's
	// outcome: the node's step fails transiently, records nothing for the
	// call, and the call is decided when the thread is continued (or the
	// node retried) after the holder's lease. Matches *CallInProgressError.
	ErrCallInProgress = errors.New("nodes: tool call in progress in another run")
	// ErrRetryAfterTooLong: the service asked the executor to wait
	// longer than the tool's MaxRetryAfter before the next attempt, so
	// the retries ended. Matches *RetryAfterError.
	ErrRetryAfterTooLong = errors.New("nodes: the service asked to retry later than the tool waits")
	// ErrAbandonedLimit: the executor's cap on abandoned tool bodies
	// (WithMaxAbandoned) was reached, so the attempt was not started.
	// Matches *AbandonedLimitError.
	ErrAbandonedLimit = errors.New("nodes: too many abandoned tool bodies still running")
)

// ScopeError reports a call to a tool that is not bound to the agent:
// unknown, or a name that differs in any byte from a bound one. It
// matches ErrUnknownTool.
type ScopeError struct {
	Tool string // the name as the model sent it (quoted in the message)
}

// Error describes the failure, naming the tool or key and never a secret.
func (e *ScopeError) Error() string {
	return fmt.Sprintf("nodes: tool %s is not bound to this agent", quote(e.Tool))
}

// Is makes errors.Is(err, ErrUnknownTool) true.
func (e *ScopeError) Is(target error) bool { return target == ErrUnknownTool }

// RetryClass implements Classifier: ClassPermanent.
func (e *ScopeError) RetryClass() Class { return ClassPermanent }

// ArgsError reports arguments that do not fit the tool's schema. Path names
// the offending field ("$.ticket_id"). It matches ErrInvalidArgs.
type ArgsError struct {
	Tool   string
	Path   string
	Reason string
	Err    error
}

// Error describes the failure, naming the tool or key and never a secret.
func (e *ArgsError) Error() string {
	// The path names keys the model chose: a long one is cut, so that the
	// message (which the model and the logs see) stays short.
	return fmt.Sprintf("nodes: tool %s: invalid argument %s: %s", quote(e.Tool), cutLong(e.Path), e.Reason)
}

// Unwrap returns the schema or canonicalisation error.
func (e *ArgsError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrInvalidArgs) true.
func (e *ArgsError) Is(target error) bool { return target == ErrInvalidArgs }

// RetryClass implements Classifier: ClassPermanent.
func (e *ArgsError) RetryClass() Class { return ClassPermanent }

// SecretReferenceError reports an argument that looks like a reference to
// a secret ({{secrets.X}}, $X, ${X}, env:X) or holds a secret's value.
// Nothing is ever expanded; strict mode refuses the call. It matches
// ErrSecretReference.
type SecretReferenceError struct {
	Tool string
	Path string // the argument concerned
}

// Error describes the failure, naming the tool or key and never a secret.
func (e *SecretReferenceError) Error() string {
	return fmt.Sprintf("nodes: tool %q: argument %s references a secret; credentials are injected by the runtime, never passed as arguments", e.Tool, e.Path)
}

// Is makes errors.Is(err, ErrSecretReference) true.
func (e *SecretReferenceError) Is(target error) bool { return target == ErrSecretReference }

// RetryClass implements Classifier: ClassPermanent.
func (e *SecretReferenceError) RetryClass() Class { return ClassPermanent }

// ConfirmationRequired is the gate's answer for a call that needs a human:
// the tool's name and the exact (canonical) arguments on CallArgs, with
// their approval.ArgsHash. The tool node turns it into an approval request.
// It matches ErrConfirmationRequired and is never retried.
type ConfirmationRequired struct {
	Tool     string
	CallID   string
	CallArgs []byte // canonical JSON
	ArgsHash string
	Rule     string // the rule that gated the call
	Risk     approval.Risk
	// FallbackFor names the tool whose failure led to this call, when the
	// call is a fallback, and Cause is that failure (redacted).
	FallbackFor string
	Cause       string
}

// Error describes the failure, naming the tool or key and never a secret.
func (e *ConfirmationRequired) Error() string {
	s := fmt.Sprintf("nodes: tool %q needs a human's approval (rule %s)", e.Tool, e.Rule)
	if e.FallbackFor != "" {
		s += fmt.Sprintf(" as the fallback of %q", e.FallbackFor)
	}
	return s
}

// Is makes errors.Is(err, ErrConfirmationRequired) true.
func (e *ConfirmationRequired) Is(target error) bool { return target == ErrConfirmationRequired }

// RetryClass implements Classifier: ClassPause.
func (e *ConfirmationRequired) RetryClass() Class { return ClassPause }

// ApprovalMismatchError reports a decision that covers other arguments
// than the call it was presented with. The tool is not run. It matches
// ErrApprovalMismatch.
type ApprovalMismatchError struct {
	Tool             string
	Approved, Called string // the two argument hashes
}

// Error describes the failure, naming the tool or key and never a secret.
func (e *ApprovalMismatchError) Error() string {
	return fmt.Sprintf("nodes: tool %q: the approval covers arguments %.12s… but the call has %.12s…; not run", e.Tool, e.Approved, e.Called)
}

// Is makes errors.Is(err, ErrApprovalMismatch) true.
func (e *ApprovalMismatchError) Is(target error) bool { return target == ErrApprovalMismatch }

// RetryClass implements Classifier: ClassPermanent.
func (e *ApprovalMismatchError) RetryClass() Class { return ClassPermanent }

// DecisionIDError reports a decision whose ID (the approval ID it was
// recorded for) is not the interrupt ID of the request it answers, so it
// does not cover the call: the tool is not run and the model gets a
// blocked result. It matches ErrWrongDecision and ErrApprovalMismatch.
type DecisionIDError struct {
	Tool   string
	CallID string // the model's tool-call ID
	Want   string // the interrupt ID of the call's request
	Got    string // the decision's ID
}

// Error describes the failure, naming the tool and both IDs.
func (e *DecisionIDError) Error() string {
	return fmt.Sprintf("nodes: tool %q: call %s: the decision answers approval %s, not this call's %s; not run", e.Tool, quote(e.CallID), quote(e.Got), e.Want)
}

// Is makes errors.Is(err, ErrWrongDecision) and
// errors.Is(err, ErrApprovalMismatch) true.
func (e *DecisionIDError) Is(target error) bool {
	return target == ErrWrongDecision || target == ErrApprovalMismatch
}

// RetryClass implements Classifier: ClassPermanent.
func (e *DecisionIDError) RetryClass() Class { return ClassPermanent }

// UnrecordedDecisionError reports an answer to an approval request that
// lacks what every recorded decision carries (Missing: "approval ID",
// "reviewer", "decision time"). The tool node fails with it, inside an
// *interrupt.AnswerError, so that the runtime takes the answer back: the
// call is not run, nothing of it is recorded, and the request (interrupt
// InterruptID) waits for a decision recorded by an approval.Store. It
// matches ErrUnrecordedDecision.
type UnrecordedDecisionError struct {
	Tool        string
	CallID      string   // the model's tool-call ID
	InterruptID string   // the interrupt ID (= approval ID) of the call's request
	Missing     []string // what the decision lacks, in the order above
}

// Error names the tool, the call, the waiting request and what the
// decision lacks.
func (e *UnrecordedDecisionError) Error() string {
	return fmt.Sprintf("nodes: tool %q: call %s: the decision has no %s, so no approval store recorded it; not run, and approval %s still waits",
		e.Tool, quote(e.CallID), strings.Join(e.Missing, ", "), quote(e.InterruptID))
}

// Is makes errors.Is(err, ErrUnrecordedDecision) true.
func (e *UnrecordedDecisionError) Is(target error) bool { return target == ErrUnrecordedDecision }

// DecisionError reports a call a human rejected, or whose request expired.
// It matches ErrRejected or ErrExpired.
type DecisionError struct {
	Tool     string
	Outcome  approval.Outcome
	Reviewer string
	Note     string
}

// Error describes the failure, naming the tool or key and never a secret.
func (e *DecisionError) Error() string {
	if e.Outcome == approval.Expired {
		return fmt.Sprintf("nodes: tool %q: the approval request expired; the call was not run", e.Tool)
	}
	return fmt.Sprintf("nodes: tool %q: rejected by %s; the call was not run", e.Tool, e.Reviewer)
}

// Is matches ErrExpired for an expiry and ErrRejected otherwise.
func (e *DecisionError) Is(target error) bool {
	if e.Outcome == approval.Expired {
		return target == ErrExpired
	}
	return target == ErrRejected
}

// RetryClass implements Classifier: ClassPermanent.
func (e *DecisionError) RetryClass() Class { return ClassPermanent }

// ToolError reports a call that failed after its attempts. Its message is
// redacted: it never contains a declared secret. Err (the last attempt's
// error) keeps its types for errors.Is and errors.As, but its own text is
// not redacted: log the ToolError, not what it wraps. It matches
// ErrToolFailed, and ErrRetriesExhausted when Exhausted.
type ToolError struct {
	Tool      string
	Attempts  int
	Class     Class
	Exhausted bool // transient failures used up the retry policy
	Err       error
	msg       string // redacted text of Err
}

// Error describes the failure, naming the tool or key and never a secret.
func (e *ToolError) Error() string {
	s := fmt.Sprintf("nodes: tool %q failed", e.Tool)
	if e.Exhausted {
		s += fmt.Sprintf(" after %d attempts (retries exhausted)", e.Attempts)
	} else if e.Attempts > 1 {
		s += fmt.Sprintf(" after %d attempts", e.Attempts)
	}
	return s + " (" + e.Class.String() + "): " + e.msg
}

// Unwrap returns the last attempt's error.
func (e *ToolError) Unwrap() error { return e.Err }

// Is matches ErrToolFailed, and ErrRetriesExhausted when Exhausted.
func (e *ToolError) Is(target error) bool {
	return target == ErrToolFailed || (e.Exhausted && target == ErrRetriesExhausted)
}

// RetryClass implements Classifier: the class of the last error.
func (e *ToolError) RetryClass() Class { return e.Class }

// ReplayedError is a permanent failure stored by the ledger and returned
// again for a repeat of the same operation (as Stripe replays a stored
// error). It matches ErrToolFailed.
type ReplayedError struct {
	Tool    string
	Key     string
	Status  int    // the stored HTTP status, if any
	Message string // the stored (redacted) message
}

// Error describes the failure, naming the tool or key and never a secret.
func (e *ReplayedError) Error() string {
	return fmt.Sprintf("nodes: tool %q: this operation already ran and failed permanently (replayed from the ledger): %s", e.Tool, e.Message)
}

// Is makes errors.Is(err, ErrToolFailed) true.
func (e *ReplayedError) Is(target error) bool { return target == ErrToolFailed }

// RetryClass implements Classifier: ClassPermanent.
func (e *ReplayedError) RetryClass() Class { return ClassPermanent }

// TimeoutError reports an attempt that outlived the tool's timeout. The
// outcome is indeterminate (Indeterminate reports true): the call may have
// succeeded downstream (a late success). A read is retried; a write only
// when its service dedupes by key (DedupesByKey), with the same key, and
// otherwise its intent stays pending, as after a crash. It is
// ClassTransient and matches ErrToolTimeout.
type TimeoutError struct {
	Tool    string
	After   time.Duration // the tool's timeout
	Attempt int
}

// Indeterminate reports true: whether a timed-out attempt took effect is
// unknown. Check it with errors.As instead of reading the message.
func (e *TimeoutError) Indeterminate() bool { return true }

// Error describes the failure, naming the tool or key and never a secret.
func (e *TimeoutError) Error() string {
	return fmt.Sprintf("nodes: tool %q attempt %d timed out after %v; its outcome is unknown (it may have taken effect)", e.Tool, e.Attempt, e.After)
}

// Is makes errors.Is(err, ErrToolTimeout) true.
func (e *TimeoutError) Is(target error) bool { return target == ErrToolTimeout }

// Timeout reports true, like net.Error.
func (e *TimeoutError) Timeout() bool { return true }

// RetryClass implements Classifier: ClassTransient.
func (e *TimeoutError) RetryClass() Class { return ClassTransient }

// PanicError is a recovered panic in a tool's code: its body, or (In)
// another function or method of the tool's that the runtime called: the
// Error method of an error the body returned, its Reconcile or
// NaturalKey function, the reviewer-context function or the outcome
// recorder of the tool node for a call of the tool. Value and Stack are
// redacted. It is ClassPermanent and matches ErrToolPanic.
type PanicError struct {
	Tool string
	// In names what panicked when it was not the body itself ("" for the
	// body), for example "the Error method of the error its body
	// returned".
	In    string
	Value string
	Stack []byte
}

// Error describes the failure, naming the tool and what panicked, and
// never a secret.
func (e *PanicError) Error() string {
	if e.In != "" {
		return fmt.Sprintf("nodes: tool %q: %s panicked: %s", e.Tool, e.In, e.Value)
	}
	return fmt.Sprintf("nodes: tool %q panicked: %s", e.Tool, e.Value)
}

// Is makes errors.Is(err, ErrToolPanic) true.
func (e *PanicError) Is(target error) bool { return target == ErrToolPanic }

// RetryClass implements Classifier: ClassPermanent.
func (e *PanicError) RetryClass() Class { return ClassPermanent }

// RetryAfterError reports a transient failure whose service asked to be
// called again no sooner than RetryAfter later (an HTTP 429 or 503 with
// Retry-After, or RetryAfter), beyond the tool's MaxRetryAfter: the
// executor does not wait that long, so the retries end after Attempts
// attempts. At is when the service said to
// come back, by the executor's clock. Err is the last attempt's error. It
// is ClassTransient (a later call may succeed: after At) and matches
// ErrRetryAfterTooLong; the *ToolError around it matches ErrToolFailed.
type RetryAfterError struct {
	Tool       string
	Attempts   int
	RetryAfter time.Duration
	At         time.Time
	Max        time.Duration // the tool's MaxRetryAfter
	Err        error
}

// Error says when the service said to come back, and that the retries
// ended.
func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("nodes: tool %q: the service asked to be called again in %v, at %s, beyond the tool's MaxRetryAfter of %v, so the retries ended; call again after that time (last error: %v)",
		e.Tool, e.RetryAfter, e.At.UTC().Format(time.RFC3339), e.Max, e.Err)
}

// Unwrap returns the last attempt's error.
func (e *RetryAfterError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrRetryAfterTooLong) true.
func (e *RetryAfterError) Is(target error) bool { return target == ErrRetryAfterTooLong }

// RetryClass implements Classifier: ClassTransient.
func (e *RetryAfterError) RetryClass() Class { return ClassTransient }

// AbandonedLimitError reports an attempt of Tool that was not started
// because Limit tool bodies of the executor that outlived their timeout
// (they ignore their context) are still running (see WithMaxAbandoned).
// Nothing ran for this attempt. When a retry was refused, Attempts counts
// the attempts that ran before and Err is the last one's error (a
// *TimeoutError, say), so errors.Is(err, ErrToolTimeout) tells that the
// call may have taken effect. It is ClassNone (not retried, not stored by
// the ledger, and no fallback runs) and matches ErrAbandonedLimit.
type AbandonedLimitError struct {
	Tool     string
	Limit    int
	Attempts int
	Err      error
}

// Error describes the failure, naming the tool or key and never a secret.
func (e *AbandonedLimitError) Error() string {
	s := fmt.Sprintf("nodes: tool %q not started: %d abandoned tool bodies are still running (the limit)", e.Tool, e.Limit)
	if e.Attempts > 0 {
		s += fmt.Sprintf("; %d earlier attempts ran, the last one timed out or failed", e.Attempts)
	}
	return s
}

// Unwrap returns the last attempt's error before the refusal, or nil.
func (e *AbandonedLimitError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrAbandonedLimit) true.
func (e *AbandonedLimitError) Is(target error) bool { return target == ErrAbandonedLimit }

// RetryClass implements Classifier: ClassNone.
func (e *AbandonedLimitError) RetryClass() Class { return ClassNone }

// SecretError reports a secret that could not be provided to a tool, or a
// tool asking for one it did not declare. It names the secret, never its
// value, and matches ErrSecret.
type SecretError struct {
	Tool   string
	Name   string
	Reason string
}

// Error describes the failure, naming the tool or key and never a secret.
func (e *SecretError) Error() string {
	return fmt.Sprintf("nodes: tool %q: secret %q: %s", e.Tool, e.Name, e.Reason)
}

// Is makes errors.Is(err, ErrSecret) true.
func (e *SecretError) Is(target error) bool { return target == ErrSecret }

// RetryClass implements Classifier: ClassPermanent.
func (e *SecretError) RetryClass() Class { return ClassPermanent }

// CallInProgressError fails a tool node's step when a write it was to run
// is in progress in another live run (ledger.ErrInProgress): telling the
// model so would save a transient condition as the call's result, and the
// write would never be retried. It matches ErrCallInProgress, and wraps the
// *ledger.InProgressError (errors.Is(err, ledger.ErrInProgress) holds).
// Its class is ClassTransient: a node whose graph.WithRetryOn retries
// transient errors is retried, and Continue after RetryAfter runs the call
// again, which then replays the holder's result, or finds its intent
// abandoned.
type CallInProgressError struct {
	Tool   string
	CallID string
	// RetryAfter is when the holder's lease on the call ends.
	RetryAfter time.Time
	Err        error
}

// Error names the call and the tool and says when to try again.
func (e *CallInProgressError) Error() string {
	return fmt.Sprintf("nodes: tool node: call %s of %q was not run and nothing was recorded for it: %v", quote(e.CallID), e.Tool, e.Err)
}

// Unwrap returns the ledger's *InProgressError.
func (e *CallInProgressError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrCallInProgress) true.
func (e *CallInProgressError) Is(target error) bool { return target == ErrCallInProgress }

// RetryClass implements Classifier: ClassTransient.
func (e *CallInProgressError) RetryClass() Class { return ClassTransient }

// LedgerError reports a storage failure of the ledger during a call: the
// call did not run (or ran and its outcome was not recorded; see the
// log). The tool node fails the run on it instead of telling the model. It
// matches ErrLedger.
type LedgerError struct {
	Tool string
	Err  error
}

// Error describes the failure, naming the tool or key and never a secret.
func (e *LedgerError) Error() string {
	return fmt.Sprintf("nodes: tool %q: ledger: %v", e.Tool, e.Err)
}

// Unwrap returns the storage error.
func (e *LedgerError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrLedger) true.
func (e *LedgerError) Is(target error) bool { return target == ErrLedger }

const maxQuoted = 64

// quote quotes s, truncating it so that hostile names cannot flood a
// message.
func quote(s string) string {
	if len(s) > maxQuoted {
		return fmt.Sprintf("%q…(%d bytes)", s[:maxQuoted], len(s))
	}
	return fmt.Sprintf("%q", s)
}

// redactedError is an application error with its text redacted: Error
// returns msg; Unwrap returns the error (whose own text is not redacted)
// for errors.Is and errors.As.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }
