package nodes

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/canon"
	"github.com/lockstepgo/lockstep/internal/hookcall"
	"github.com/lockstepgo/lockstep/internal/jsonschema"
	"github.com/lockstepgo/lockstep/internal/safe"
	"github.com/lockstepgo/lockstep/interrupt"
	"github.com/lockstepgo/lockstep/nodes/ledger"
	"github.com/lockstepgo/lockstep/observe"
)

// maxFallbackDepth bounds chains of fallbacks.
const maxFallbackDepth = 4

// DefaultMaxAbandoned is the executor's default cap on abandoned tool
// bodies still running (see WithMaxAbandoned): enough for a burst of slow
// calls, small enough that a tool that never returns cannot pile up
// goroutines without bound.
const DefaultMaxAbandoned = 64

// Executor runs tool calls safely for one agent: it asks scope, gate,
// memo, ledger, run (with retries), fallback, in that order (see the
// package doc). Build one with NewExecutor; it is safe for concurrent use.
type Executor struct {
	tools     map[string]*Tool // bound to the agent
	fallbacks map[string]*Tool // reachable only as fallbacks
	policy    Policy
	ledger    ledger.Ledger
	secrets   SecretProvider
	log       *slog.Logger
	clock     Clock
	owners    func() string
	wait      time.Duration
	strict    bool
	names     map[string]bool // declared secret names, lower case
	declared  []string        // declared secret names, sorted
	red       *redactor
	learnMu   sync.Mutex
	learned   map[string]bool      // declared names whose value red knows
	learning  map[string]bool      // declared names a call is asking the provider for
	failedAt  map[string]time.Time // when the provider last failed for a name
	flight    singleflight.Group
	aband     safe.Counter // abandoned calls: bodies, and other application code
	maxAband  int64
	observer  observe.Hook
	obs       *hookcall.Caller // observer's caller; nil without one
	errs      []error          // options out of range, refused by NewExecutor
}

// ExecutorOption configures NewExecutor.
type ExecutorOption func(*Executor)

// WithPolicy sets the gate's policy (default DenyDestructive). nil keeps
// the default: with no policy the gate denies.
func WithPolicy(p Policy) ExecutorOption {
	return func(e *Executor) {
		if p != nil {
			e.policy = p
		}
	}
}

// WithLedger records writes in l so that each logical operation happens
// once. Without a ledger, writes get no idempotency key and are never
// retried.
func WithLedger(l ledger.Ledger) ExecutorOption { return func(e *Executor) { e.ledger = l } }

// WithSecrets sets the provider of the secrets tools declare. Besides the
// calls of the tools, the executor asks it once for each declared name
// before its first call runs (and the tool node before its first step),
// so that the redactor knows every value before any text is written. A
// name the provider fails for is asked again 30 s later at the earliest,
// and a slow provider delays only the call that asks it: other calls go
// on meanwhile (knowing the secrets learned so far).
func WithSecrets(p SecretProvider) ExecutorOption { return func(e *Executor) { e.secrets = p } }

// WithLogger sends decision events to l (default: discarded).
func WithLogger(l *slog.Logger) ExecutorOption {
	return func(e *Executor) {
		if l != nil {
			e.log = l
		}
	}
}

// WithClock sets the clock of backoff waits and polling (default
// SystemClock).
func WithClock(c Clock) ExecutorOption {
	return func(e *Executor) {
		if c != nil {
			e.clock = c
		}
	}
}

// WithOwnerIDs sets how ledger owner IDs (one per execution of a write) are
// made; they must be unique (default 128 random bits).
func WithOwnerIDs(next func() string) ExecutorOption {
	return func(e *Executor) {
		if next != nil {
			e.owners = next
		}
	}
}

// WithWaitInProgress makes a concurrent duplicate wait up to d for the
// first call's outcome (polling the ledger) instead of failing at once with
// ledger.ErrInProgress (0, the default, waits not). A negative d makes
// NewExecutor fail with ErrInvalidConfig.
func WithWaitInProgress(d time.Duration) ExecutorOption {
	return func(e *Executor) {
		if d < 0 {
			e.errs = append(e.errs, fmt.Errorf("WithWaitInProgress(%v) is negative (0 waits not)", d))
		}
		e.wait = d
	}
}

// WithStrictSecrets sets whether arguments that reference a secret
// ({{secrets.X}}, $X, ${X}, %X%, env:X for a declared name X) or hold a
// known secret value, or 8 bytes or more of one, are refused with
// *SecretReferenceError (default true). Nothing is ever expanded either way. With false, an argument that
// holds a secret value reaches the tool as is, and so does every record of
// the exact arguments, which redaction cannot change without breaking
// their hash: the approval request a gated call raises, above all. Leave
// it true unless the model is meant to pass such values.
func WithStrictSecrets(strict bool) ExecutorOption { return func(e *Executor) { e.strict = strict } }

// WithMaxAbandoned caps the abandoned tool bodies still running at n
// (default DefaultMaxAbandoned; n < 1 makes NewExecutor fail with
// ErrInvalidConfig). A body is
// abandoned when it ignores its context and is still running when its
// attempt's timeout fires; it counts until it returns. While n are
// running, no new attempt of any tool starts: it fails at once with
// *AbandonedLimitError (ErrAbandonedLimit). Attempts already running when
// the cap is reached may still be abandoned, so the count can pass n by
// as many; it cannot grow further.
func WithMaxAbandoned(n int) ExecutorOption {
	return func(e *Executor) {
		if n < 1 {
			e.errs = append(e.errs, fmt.Errorf("WithMaxAbandoned(%d) is below 1", n))
		}
		e.maxAband = int64(n)
	}
}

// NewExecutor binds tools to an agent. Their fallbacks are reachable as
// fallbacks only. It returns an error matching ErrInvalidConfig for an
// option out of range (WithMaxAbandoned below 1, a negative
// WithWaitInProgress), a nil
// tool, two tools of one name, a tool that declares secrets when no
// SecretProvider is set, or a RulesPolicy whose approval.Rules fail
// Validate (a negative TTL, an unknown MinRisk, a nil ArgRule; the
// approval.Error is wrapped too).
func NewExecutor(tools []*Tool, opts ...ExecutorOption) (*Executor, error) {
	e := &Executor{
		tools: map[string]*Tool{}, fallbacks: map[string]*Tool{},
		policy: DenyDestructive(), log: slog.New(slog.DiscardHandler), clock: SystemClock(),
		owners: randomID, strict: true, names: map[string]bool{}, red: newRedactor(),
		maxAband: DefaultMaxAbandoned,
	}
	for _, o := range opts {
		if o != nil {
			o(e)
		}
	}
	if len(e.errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, errors.Join(e.errs...))
	}
	if rp, ok := e.policy.(RulesPolicy); ok {
		if err := rp.Rules.Validate(); err != nil {
			return nil, fmt.Errorf("%w: the policy's approval rules: %w", ErrInvalidConfig, err)
		}
	}
	for _, t := range tools {
		if t == nil {
			return nil, fmt.Errorf("%w: nil tool", ErrInvalidConfig)
		}
		if _, dup := e.tools[t.name]; dup {
			return nil, fmt.Errorf("%w: two tools named %q", ErrInvalidConfig, t.name)
		}
		e.tools[t.name] = t
	}
	for _, t := range tools {
		for f := t.fallback; f != nil; f = f.fallback {
			if b, ok := e.tools[f.name]; ok && b != f {
				return nil, fmt.Errorf("%w: fallback %q of %q is another tool than the bound tool of that name", ErrInvalidConfig, f.name, t.name)
			}
			if o, ok := e.fallbacks[f.name]; ok && o != f {
				return nil, fmt.Errorf("%w: two fallback tools named %q", ErrInvalidConfig, f.name)
			}
			if _, bound := e.tools[f.name]; !bound {
				e.fallbacks[f.name] = f
			}
		}
	}
	for _, t := range e.all() {
		for _, s := range t.secrets {
			e.names[strings.ToLower(s)] = true
			e.declared = append(e.declared, s)
		}
		if len(t.secrets) > 0 && e.secrets == nil {
			return nil, fmt.Errorf("%w: tool %q declares secrets but the executor has no SecretProvider (WithSecrets)", ErrInvalidConfig, t.name)
		}
	}
	e.declared = slices.Compact(slices.Sorted(slices.Values(e.declared)))
	e.learned, e.learning, e.failedAt = map[string]bool{}, map[string]bool{}, map[string]time.Time{}
	e.obs = hookcall.New(e.observer, &e.aband, e.log)
	return e, nil
}

// learn teaches the redactor the value of every declared secret it does
// not know yet, so that what the executor and the tool node write before
// a tool has fetched one (approval requests, logs, the check of the
// arguments, after a restart above all) is redacted too. A provider error
// is not reported here: the tool that needs the secret fails when it
// fetches it, and the name is asked for again after learnRetry. The
// provider is called without holding the executor's lock, and a name
// another call is already asking for is skipped, so a slow or failing
// provider delays only the calls that reach it first, never every call.
func (e *Executor) learn(ctx context.Context) {
	if len(e.declared) == 0 {
		return
	}
	now := e.clock.Now()
	var ask []string
	e.learnMu.Lock()
	for _, name := range e.declared {
		if e.learned[name] || e.learning[name] {
			continue
		}
		if at, ok := e.failedAt[name]; ok && now.Sub(at) < learnRetry {
			continue
		}
		e.learning[name] = true
		ask = append(ask, name)
	}
	e.learnMu.Unlock()
	for _, name := range ask {
		v, err := e.secret(ctx, name)
		if err == nil {
			e.red.add(v)
		}
		e.learnMu.Lock()
		delete(e.learning, name)
		if err == nil {
			e.learned[name] = true
			delete(e.failedAt, name)
		} else {
			e.failedAt[name] = e.clock.Now()
		}
		e.learnMu.Unlock()
	}
}

// learnRetry is how long learn waits before it asks the provider again
// for a name it failed to provide.
const learnRetry = 30 * time.Second

func (e *Executor) all() []*Tool {
	out := make([]*Tool, 0, len(e.tools)+len(e.fallbacks))
	for _, t := range e.tools {
		out = append(out, t)
	}
	for _, t := range e.fallbacks {
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b *Tool) int { return strings.Compare(a.name, b.name) })
	return out
}

func randomID() string {
	var b [16]byte
	_, _ = crand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// Definitions returns the bound tools as the model sees them, by name.
func (e *Executor) Definitions() []Definition {
	var out []Definition
	for _, t := range e.all() {
		if _, bound := e.tools[t.name]; bound {
			out = append(out, Definition{Name: t.name, Description: t.description, Parameters: t.Schema()})
		}
	}
	return out
}

// Tool returns the bound tool named name (exact bytes), or nil.
func (e *Executor) Tool(name string) *Tool { return e.tools[name] }

// Abandoned returns how many attempts were left running when their timeout
// fired (tool bodies that ignore their context, or had not returned yet
// at that instant), since the executor was made: the
// abandoned_tool_goroutines counter. It also counts the calls into other
// application code that the executor and its tool nodes gave up on when
// the call's context ended before they returned: a Reconcile function
// past the tool's timeout, a NaturalKey function, the gate policy, the
// secret provider, the reviewer-context function, the outcome recorder.
// It never fails.
func (e *Executor) Abandoned() int64 { return e.aband.Total() }

// AbandonedRunning returns how many abandoned calls (see Abandoned) have
// not returned yet: what WithMaxAbandoned caps. It never fails.
func (e *Executor) AbandonedRunning() int64 { return e.aband.Running() }

// Redact replaces every secret value the executor has fetched (for a
// tool, or to learn it before its first call), and every run of 8 bytes or
// more of one, in the spellings the package doc lists, with [REDACTED]. It
// returns s itself when s holds none. Text is redacted one string at a
// time: redact each log record or message whole, and a secret split across
// two of them still loses each part of 8 bytes or more.
func (e *Executor) Redact(s string) string { return e.red.String(s) }

// Call is one tool call.
type Call struct {
	// ID is the model's tool-call ID (logged and handed to the body).
	ID string
	// Tool is the tool's name, as the model sent it: matched byte for
	// byte against the bound tools.
	Tool string
	// Args are the arguments as the model sent them (a JSON object).
	Args json.RawMessage
	// Scope is the thread (or user) the call belongs to: part of its
	// idempotency key. Empty means the thread of the graph run in ctx.
	// A call scoped by that thread inside a subgraph is keyed by the
	// subgraph's namespace too (IdempotencyKeyNS): unique per subgraph
	// task.
	Scope string
	// Approval is a human's decision for this exact call, if there is one.
	Approval *approval.Decision
	// Memo is where reads are memoised (nil: no memo).
	Memo MemoStore
	// FallbackFor names the tool whose fallback this call is; the call is
	// then in scope if Tool is that tool's fallback.
	FallbackFor string
	// Reconciled marks a call whose earlier attempt had an unknown outcome
	// and which a human has approved to run again: the ledger's pending
	// intent is taken over instead of refusing the call.
	Reconciled bool
}

// Result is a successful call.
type Result struct {
	// Tool is the tool that produced Output (the fallback, after one).
	Tool   string
	CallID string
	// Output is the tool's structured result (JSON), redacted.
	Output json.RawMessage
	// Status is StatusExecuted, StatusCacheHit, StatusReplayed or
	// StatusFallback.
	Status Status
	// Replayed is set when Output was stored by an earlier execution of
	// the same operation: it already existed; nothing was created now.
	Replayed bool
	// Key is the idempotency key of a write ("" for reads).
	Key string
	// Attempts counts the attempts of this execution (0 when nothing ran).
	Attempts int
	// FallbackFrom names the tool that failed, when a fallback produced
	// Output, and Cause is its (redacted) error.
	FallbackFrom string
	Cause        string
}

// prepared is a call that passed scope and argument checks.
type prepared struct {
	tool  *Tool
	args  []byte // canonical
	hash  string // approval.ArgsHash, computed on first use
	scope string
}

// argsHash returns the call's approval.ArgsHash. The arguments are
// canonical already, so it cannot fail.
func (p *prepared) argsHash() string {
	if p.hash == "" {
		p.hash, _ = approval.ArgsHash(p.tool.name, p.args)
	}
	return p.hash
}

// Execute runs one call. It returns the result, or:
//
//   - *ScopeError: the tool is not bound to this agent;
//   - *ArgsError or *SecretReferenceError: bad arguments;
//   - *ConfirmationRequired: the gate needs a human (never retried);
//   - *ApprovalMismatchError, *DecisionError: the approval does not cover
//     this call, or it was a rejection or an expiry;
//   - *ledger.KeyReuseError, *ledger.InProgressError (another live
//     holder: transient), *ledger.OutcomeUnknownError (wrapped): the
//     ledger refused the call. Inside a graph run that holds its thread's
//     lease, an intent an earlier run of the thread left is of unknown
//     outcome at once; a write of unknown outcome is reconciled first when
//     the tool has a Reconcile hook, and run again with the same key when
//     it DedupesByKey;
//   - *ToolError (with *TimeoutError, *PanicError or the tool's error
//     inside), *ReplayedError: the tool failed, and so did its fallback if
//     it has one (then both are joined);
//   - *AbandonedLimitError: WithMaxAbandoned's cap on abandoned tool
//     bodies is reached, so the tool was not started (or not retried);
//   - an interrupt from the tool body, unchanged; ctx's error.
//
// Error messages name the tool and never contain a secret.
func (e *Executor) Execute(ctx context.Context, c Call) (Result, error) {
	e.learn(ctx)
	if c.Scope == "" {
		if info, ok := graph.TaskFrom(ctx); ok {
			c.Scope = info.Thread
		}
	}
	return e.execute(ctx, c, 0)
}

func (e *Executor) execute(ctx context.Context, c Call, depth int) (res Result, err error) {
	if e.obs != nil {
		sp := e.obs.Start(ctx, e.toolEvent(&c))
		ctx = sp.Ctx
		defer func() { e.obs.End(sp, e.toolEnd(&c, res, err)) }()
	}
	// 1. Scope.
	t, err := e.scope(c)
	if err != nil {
		e.event(ctx, slog.LevelWarn, StatusFailed, &c, c.Args, slog.String("reason", "scope"), e.errAttr(err))
		return Result{}, err
	}
	p, err := e.prepare(t, c)
	if err != nil {
		e.event(ctx, slog.LevelWarn, StatusFailed, &c, c.Args, slog.String("reason", "arguments"), e.errAttr(err))
		return Result{}, err
	}
	// 2. Gate.
	if err := e.gate(ctx, &c, p); err != nil {
		return Result{}, err
	}
	// 3. Memo, or 4. ledger; then 5. run with retries.
	switch {
	case t.read():
		res, err = e.runRead(ctx, &c, p)
	case e.ledger != nil:
		res, err = e.runWrite(ctx, &c, p)
	default:
		res, err = e.runPlain(ctx, &c, p, "", nil)
	}
	// 6. Fallback, unless the write may have taken effect: another way of
	// doing it could do it twice.
	maybeDone := indeterminate(err) && !t.idempotent && !t.dedupes
	if err != nil && t.fallback != nil && depth < maxFallbackDepth && errors.Is(err, ErrToolFailed) && ctx.Err() == nil && !maybeDone {
		return e.fallback(ctx, &c, t, err, depth)
	}
	return res, err
}

// scope finds the tool: bound, or the declared fallback of FallbackFor.
func (e *Executor) scope(c Call) (*Tool, error) {
	if c.FallbackFor == "" {
		if t, ok := e.tools[c.Tool]; ok {
			return t, nil
		}
		return nil, &ScopeError{Tool: e.red.String(c.Tool)}
	}
	parent, ok := e.tools[c.FallbackFor]
	if !ok {
		parent, ok = e.fallbacks[c.FallbackFor]
	}
	if !ok || parent.fallback == nil || parent.fallback.name != c.Tool {
		return nil, &ScopeError{Tool: e.red.String(c.Tool)}
	}
	return parent.fallback, nil
}

// scopeTool returns the tool c would run, or nil.
func (e *Executor) scopeTool(c Call) *Tool {
	t, err := e.scope(c)
	if err != nil {
		return nil
	}
	return t
}

// unknownCall returns the call whose write u, an unknown outcome that
// executing c returned, is about: c itself when u names c's tool, or the
// fallback in c's chain that u names, as a call of that fallback (its
// FallbackFor the tool it stands in for; the arguments are c's, as a
// fallback runs with them). It reports false when u names no tool of the
// chain.
func (e *Executor) unknownCall(c Call, u *ledger.OutcomeUnknownError) (Call, *Tool, bool) {
	t := e.scopeTool(c)
	for depth := 0; t != nil && depth <= maxFallbackDepth; depth++ {
		if t.name == u.Tool {
			return c, t, true
		}
		c.FallbackFor, c.Tool = t.name, t.fallback.nameOrEmpty()
		t = t.fallback
	}
	return Call{}, nil, false
}

// nameOrEmpty is t's name, "" for a nil t.
func (t *Tool) nameOrEmpty() string {
	if t == nil {
		return ""
	}
	return t.name
}

// prepare canonicalises and validates the arguments.
func (e *Executor) prepare(t *Tool, c Call) (*prepared, error) {
	raw := bytes.TrimSpace(c.Args)
	if len(raw) == 0 {
		raw = []byte("{}") // a call with no arguments
	}
	args, err := canon.JSON(raw)
	if err != nil {
		ae := &ArgsError{Tool: t.name, Path: "$", Reason: e.red.String(err.Error()), Err: err}
		var ce *canon.Error
		if errors.As(err, &ce) {
			ae.Path, ae.Reason = e.red.String(ce.Path), e.red.String(ce.Reason)
		}
		return nil, ae
	}
	if err := jsonschema.Validate(t.schema, args); err != nil {
		ae := &ArgsError{Tool: t.name, Path: "$", Reason: e.red.String(err.Error()), Err: err}
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			ae.Path, ae.Reason = e.red.String(ve.Path), e.red.String(ve.Reason)
		}
		return nil, ae
	}
	if e.strict {
		dec := json.NewDecoder(bytes.NewReader(args))
		dec.UseNumber()
		var v any
		if dec.Decode(&v) == nil {
			if path, bad := findSecretRef(v, "$", e.names, e.red); bad {
				return nil, &SecretReferenceError{Tool: t.name, Path: path}
			}
		}
	}
	return &prepared{tool: t, args: args, scope: c.Scope}, nil
}

// Verdict returns the gate policy's verdict on a call of the bound tool
// name (or of the fallback of fallbackFor) with args. The tool node uses it
// to evaluate an edited call again. It returns what Execute returns for
// scope and argument errors.
func (e *Executor) Verdict(name, fallbackFor string, args json.RawMessage) (Verdict, []byte, string, error) {
	c := Call{Tool: name, Args: args, FallbackFor: fallbackFor}
	t, err := e.scope(c)
	if err != nil {
		return Verdict{}, nil, "", err
	}
	p, err := e.prepare(t, c)
	if err != nil {
		return Verdict{}, nil, "", err
	}
	v, _ := e.verdict(context.Background(), t, p.args) // cannot be given up on
	return v, p.args, p.argsHash(), nil
}

func (e *Executor) gate(ctx context.Context, c *Call, p *prepared) error {
	v, err := e.verdict(ctx, p.tool, p.args)
	if err != nil {
		e.event(ctx, slog.LevelWarn, StatusFailed, c, p.args, slog.String("reason", "gate policy"), e.errAttr(err))
		return err
	}
	if !v.Need {
		if e.obs != nil {
			e.note(ctx, "allowed", c, nil)
		}
		return nil
	}
	if v.Risk == "" {
		v.Risk = p.tool.risk
	}
	d := c.Approval
	rule := slog.String("rule", v.Rule)
	switch {
	case d == nil || !d.Outcome.Valid():
		e.event(ctx, slog.LevelInfo, StatusBlocked, c, p.args, rule, slog.String("risk", string(v.Risk)))
		return &ConfirmationRequired{Tool: p.tool.name, CallID: c.ID, CallArgs: slices.Clone(p.args), ArgsHash: p.argsHash(),
			Rule: v.Rule, Risk: v.Risk, FallbackFor: c.FallbackFor}
	case d.Outcome == approval.Rejected || d.Outcome == approval.Expired:
		st := StatusRejected
		if d.Outcome == approval.Expired {
			st = StatusExpired
		}
		e.event(ctx, slog.LevelInfo, st, c, p.args, rule, slog.String("reviewer", d.Reviewer))
		return &DecisionError{Tool: p.tool.name, Outcome: d.Outcome, Reviewer: d.Reviewer, Note: d.Note}
	case d.ArgsHash != p.argsHash():
		err := &ApprovalMismatchError{Tool: p.tool.name, Approved: d.ArgsHash, Called: p.argsHash()}
		e.event(ctx, slog.LevelWarn, StatusBlocked, c, p.args, rule, slog.String("reason", "approval_mismatch"), e.errAttr(err))
		return err
	}
	e.event(ctx, slog.LevelInfo, StatusApproved, c, p.args, rule, slog.String("reviewer", d.Reviewer))
	return nil
}

// runRead answers a read from the memo, or runs it once for all concurrent
// identical reads of the scope and memoises the result.
func (e *Executor) runRead(ctx context.Context, c *Call, p *prepared) (Result, error) {
	t := p.tool
	if c.Memo == nil || t.noMemo {
		return e.runPlain(ctx, c, p, "", nil)
	}
	key := MemoKey(t.name, t.version, p.args)
	hit := func() (Result, bool) {
		m, ok := e.memoGet(ctx, c.Memo, key)
		if !ok || m.Tool != t.name || m.Version != t.version {
			return Result{}, false
		}
		return Result{Tool: t.name, CallID: c.ID, Output: slices.Clone(m.Result), Status: StatusCacheHit}, true
	}
	if res, ok := hit(); ok {
		e.event(ctx, slog.LevelInfo, StatusCacheHit, c, p.args)
		return res, nil
	}
	// Identical reads of the scope that run at once run once. The memo is
	// read again inside the flight and written before it ends, so a read
	// that misses the flight finds the memo filled.
	ran := false // this call's own function ran the flight
	v, err, _ := e.flight.Do(p.scope+"\x00"+key, func() (v any, err error) {
		ran = true
		// singleflight panics again on another goroutine when the
		// flight's function panics: nothing may panic out of it.
		if pv := safe.Call(func() {
			if res, ok := hit(); ok {
				v = res
				return
			}
			res, rerr := e.runPlain(ctx, c, p, "", nil)
			if rerr == nil {
				e.memoPut(ctx, c.Memo, key, MemoEntry{Tool: t.name, Version: t.version, Result: res.Output})
			}
			v, err = res, rerr
		}); pv != nil {
			return nil, e.panicked(t, "the executor, running the read", pv)
		}
		return v, err
	})
	if err != nil {
		return Result{}, err
	}
	res := v.(Result)
	if !ran {
		// Another call's flight: its result is this call's, and this
		// call's memo gets it too.
		e.memoPut(ctx, c.Memo, key, MemoEntry{Tool: t.name, Version: t.version, Result: res.Output})
		res.CallID, res.Status, res.Attempts = c.ID, StatusCacheHit, 0
		res.Output = slices.Clone(res.Output)
	}
	if res.Status == StatusCacheHit {
		e.event(ctx, slog.LevelInfo, StatusCacheHit, c, p.args)
	}
	return res, nil
}

// runPlain runs the call with retries, without a ledger (key is "" unless
// a write runs through runWrite). late, if set, gets the result of an
// abandoned attempt that succeeds after all (see attempt).
func (e *Executor) runPlain(ctx context.Context, c *Call, p *prepared, key string, late func(json.RawMessage)) (Result, error) {
	out, attempts, _, err := e.attempts(ctx, c, p, key, late)
	if err != nil {
		return Result{}, err
	}
	e.event(ctx, slog.LevelInfo, StatusExecuted, c, p.args, slog.Int("attempts", attempts))
	return Result{Tool: p.tool.name, CallID: c.ID, Output: out, Status: StatusExecuted, Key: key, Attempts: attempts}, nil
}

// key derives the idempotency key of a write.
func (e *Executor) key(ctx context.Context, p *prepared) (string, error) {
	t := p.tool
	if t.naturalKey != nil {
		nk, err := e.naturalKeyOf(ctx, t, p.args)
		if err != nil {
			return "", err
		}
		return NaturalIdempotencyKey(t.name, nk), nil
	}
	if p.scope == "" {
		return "", fmt.Errorf("%w: tool %q: set Call.Scope or run inside a graph", ErrNoScope, t.name)
	}
	if info, ok := graph.TaskFrom(ctx); ok && info.NS != "" && p.scope == info.Thread {
		// Scoped by the thread, inside a subgraph: unique per subgraph
		// task (D20).
		return IdempotencyKeyNS(p.scope, info.NS, t.name, p.args), nil
	}
	return IdempotencyKey(p.scope, t.name, p.args), nil
}

// lease is how long a write's intent is held: enough for every attempt and
// backoff, plus a margin.
func lease(t *Tool) time.Duration {
	n := t.retry.Attempts()
	longest := max(t.retry.Delay(n-1, 1), t.maxRA) // the waits only grow
	return time.Duration(n)*t.timeout + time.Duration(n-1)*longest + 30*time.Second
}

// runWrite runs a write through the ledger: the intent before, the outcome
// after; a repeat replays.
func (e *Executor) runWrite(ctx context.Context, c *Call, p *prepared) (Result, error) {
	t := p.tool
	key, err := e.key(ctx, p)
	if err != nil {
		e.event(ctx, slog.LevelWarn, StatusFailed, c, p.args, slog.String("reason", "idempotency key"), e.errAttr(err))
		return Result{}, err
	}
	owner := e.owners()
	in := ledger.Intent{Key: key, Tool: t.name, ArgsHash: p.argsHash(), Owner: owner, Lease: lease(t), TakeOver: c.Reconciled}
	if info, ok := graph.TaskFrom(ctx); ok && info.Leased {
		// The run holds the thread's lease: an intent an earlier run of
		// the thread left is abandoned now, not in progress (D17).
		in.Thread, in.Run = info.Thread, info.Run
		if j, ok := e.ledger.(ledger.Joiner); ok && j.Fenced() {
			// The intent is fenced by the run's lease, which the run must
			// then hold in the saver (a new thread's first step has not
			// written yet).
			if err := graph.OwnThread(ctx); err != nil {
				return Result{}, e.ledgerRefusal(ctx, c, p, key, err)
			}
		}
	}
	entry, started, err := e.begin(ctx, in)
	var unknown *ledger.OutcomeUnknownError
	if errors.As(err, &unknown) {
		switch {
		case t.reconcile != nil:
			return e.reconcile(ctx, c, p, in)
		case t.dedupes:
			// The service enforces the key: running the call again with
			// the same key cannot do it twice.
			e.event(ctx, slog.LevelInfo, StatusRetry, c, p.args, slog.String("key", key),
				slog.String("reason", "outcome unknown: the service dedupes by key, so the call runs again with the same key"))
			in.TakeOver = true
			entry, started, err = e.begin(ctx, in)
		}
	}
	if err != nil {
		return Result{}, e.ledgerRefusal(ctx, c, p, key, err)
	}
	if !started {
		return e.replay(ctx, c, p, entry)
	}
	return e.runHeld(ctx, c, p, key, owner)
}

// beginRetries is how many times begin (and settle) tries again after a
// store error.
const beginRetries = 2

// settle runs a Complete or Release of the intent this execution holds,
// trying again up to beginRetries times after a store error: the effect
// has happened (or failed for good), and an outcome left unrecorded keeps
// the intent pending, so that the next execution finds it in progress
// until its lease ends, and then of unknown outcome. A try after one that
// committed gets ErrNotHeld (the outcome is there), which the callers
// already treat as "recorded".
func (e *Executor) settle(op func() error) error {
	err := op()
	for try := 0; try < beginRetries && err != nil && !errors.Is(err, ledger.ErrNotHeld) && !errors.Is(err, ledger.ErrNotFound) && !errors.Is(err, ledger.ErrInvalid) && !errors.Is(err, ledger.ErrCorrupt); try++ {
		err = op()
	}
	return err
}

// ledgerRefused reports whether err is one of the ledger's answers about
// the key (or the intent), as opposed to a failure to reach its store. A
// corrupt record is one: trying again reads it again, and releasing it
// would write on it.
func ledgerRefused(err error) bool {
	return errors.Is(err, ledger.ErrKeyReuse) || errors.Is(err, ledger.ErrInProgress) || errors.Is(err, ledger.ErrOutcomeUnknown) || errors.Is(err, ledger.ErrInvalid) ||
		errors.Is(err, ledger.ErrCorrupt) || fenced(err)
}

// fenced reports whether err says that the run lost its thread: a fenced
// ledger refused its write (D17), which trying again cannot change.
func fenced(err error) bool {
	return errors.Is(err, checkpoint.ErrThreadBusy) || errors.Is(err, checkpoint.ErrConflict)
}

// ledgerRefusal logs and wraps an error of Begin: the ledger's typed
// refusals keep their types; anything else is a *LedgerError.
func (e *Executor) ledgerRefusal(ctx context.Context, c *Call, p *prepared, key string, err error) error {
	e.event(ctx, slog.LevelWarn, StatusFailed, c, p.args, slog.String("reason", "ledger"), slog.String("key", key), e.errAttr(err))
	if errors.Is(err, ledger.ErrKeyReuse) || errors.Is(err, ledger.ErrInProgress) || errors.Is(err, ledger.ErrOutcomeUnknown) || fenced(err) || ctx.Err() != nil {
		return fmt.Errorf("nodes: tool %q: %w", p.tool.name, err)
	}
	return &LedgerError{Tool: p.tool.name, Err: err}
}

// begin records the intent, waiting for a concurrent duplicate when the
// executor was asked to. A store error may have come after the intent was
// committed (an I/O error at COMMIT): Begin is tried again, up to
// beginRetries times, with the same owner, which the ledger answers with
// the intent it recorded if it did, so that no intent is left that nobody
// holds (a later call would find it in progress until its lease ended,
// and then of unknown outcome).
func (e *Executor) begin(ctx context.Context, in ledger.Intent) (ledger.Entry, bool, error) {
	deadline := e.clock.Now().Add(e.wait)
	retries := 0
	for {
		entry, started, err := e.ledger.Begin(ctx, in)
		if err != nil && retries < beginRetries && ctx.Err() == nil && !ledgerRefused(err) {
			retries++
			continue
		}
		if err != nil && !ledgerRefused(err) {
			// The call stops before its body starts (cancelled, or the
			// store keeps failing), and the intent may have been
			// recorded all the same: give it back, so that no later run
			// takes a call that never started for one of unknown
			// outcome. A Release of an intent never recorded is ErrNotHeld.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = e.ledger.Release(rctx, in.Key, in.Owner)
			cancel()
		}
		if e.wait <= 0 || !errors.Is(err, ledger.ErrInProgress) {
			return entry, started, err
		}
		left := deadline.Sub(e.clock.Now())
		if left <= 0 {
			return entry, started, err
		}
		if serr := e.clock.Sleep(ctx, min(left, 50*time.Millisecond)); serr != nil {
			return ledger.Entry{}, false, serr
		}
	}
}

func (e *Executor) replay(ctx context.Context, c *Call, p *prepared, entry ledger.Entry) (Result, error) {
	key := slog.String("key", entry.Key)
	if f := entry.Outcome.Failure; f != nil {
		e.event(ctx, slog.LevelInfo, StatusReplayed, c, p.args, key, slog.String("outcome", "failure"))
		return Result{}, &ReplayedError{Tool: p.tool.name, Key: entry.Key, Status: f.Status, Message: f.Message}
	}
	e.event(ctx, slog.LevelInfo, StatusReplayed, c, p.args, key)
	return Result{Tool: p.tool.name, CallID: c.ID, Output: slices.Clone(entry.Outcome.Result), Status: StatusReplayed, Replayed: true, Key: entry.Key}, nil
}

// runHeld runs a write whose intent the executor holds, and records the
// outcome: the result, or a permanent failure. When the last attempt's
// outcome is unknown (it timed out, or the context ended while it ran),
// the intent stays pending, as after a crash, unless the tool
// DedupesByKey: the operation may have happened, and is not run again
// blindly. Anything else (a transient failure, a pause) releases the
// intent so that a retry runs, with the same key. An abandoned attempt
// that succeeds late records its result too (recordLate); whichever
// outcome is recorded first stays.
func (e *Executor) runHeld(ctx context.Context, c *Call, p *prepared, key, owner string) (Result, error) {
	store := context.WithoutCancel(ctx)
	lc := *c // the late hook may run after this call returns
	late := func(out json.RawMessage) { e.recordLate(store, &lc, p, key, owner, out) }
	out, attempts, unknown, err := e.attempts(ctx, c, p, key, late)
	if err == nil {
		e.event(ctx, slog.LevelInfo, StatusExecuted, c, p.args, slog.Int("attempts", attempts))
		res := Result{Tool: p.tool.name, CallID: c.ID, Output: out, Status: StatusExecuted, Key: key, Attempts: attempts}
		if j, ok := e.ledger.(ledger.Joiner); ok {
			// On the saver's database, the outcome commits with the write
			// that saves the result (the durable step around the call),
			// or not at all (D16).
			if w := j.CompleteJoin(key, owner, ledger.Outcome{Result: res.Output}); w != nil && graph.JoinWrite(ctx, w) {
				return res, nil
			}
		}
		cerr := e.settle(func() error { return e.ledger.Complete(store, key, owner, ledger.Outcome{Result: res.Output}) })
		if errors.Is(cerr, ledger.ErrNotHeld) {
			// Another outcome was recorded first (a late result of an
			// abandoned attempt): it is the operation's result.
			if entry, gerr := e.ledger.Get(store, key); gerr == nil && entry.State == ledger.StateDone && entry.Outcome.Failure == nil {
				res.Output = slices.Clone(entry.Outcome.Result)
				return res, nil
			}
		}
		if cerr != nil {
			e.event(ctx, slog.LevelWarn, StatusFailed, c, p.args, slog.String("reason", "ledger outcome not recorded"), slog.String("key", key), e.errAttr(cerr))
		}
		return res, nil
	}
	if unknown && !p.tool.dedupes {
		e.event(ctx, slog.LevelWarn, StatusFailed, c, p.args, slog.String("reason", "outcome unknown: the intent stays pending"), slog.String("key", key), e.errAttr(err))
		return Result{}, err
	}
	if Classify(err) == ClassPermanent {
		f := &ledger.Failure{Class: ClassPermanent.String(), Message: e.red.String(err.Error())}
		var he *HTTPError
		if errors.As(err, &he) && he != nil {
			f.Status = he.Status
		}
		if cerr := e.settle(func() error { return e.ledger.Complete(store, key, owner, ledger.Outcome{Failure: f}) }); cerr != nil {
			e.event(ctx, slog.LevelWarn, StatusFailed, c, p.args, slog.String("reason", "ledger outcome not recorded"), slog.String("key", key), e.errAttr(cerr))
		}
		return Result{}, err
	}
	if rerr := e.settle(func() error { return e.ledger.Release(store, key, owner) }); rerr != nil {
		e.event(ctx, slog.LevelWarn, StatusFailed, c, p.args, slog.String("reason", "ledger intent not released"), slog.String("key", key), e.errAttr(rerr))
	}
	return Result{}, err
}

// recordLate records the result of an abandoned attempt of a write that
// succeeded after its timeout: the operation took effect, so a repeat
// must replay it rather than run it again. The ledger takes one outcome
// per key, so nothing is recorded twice: the result completes the intent
// if this execution still holds it (its retry is running), or a fresh
// intent if the execution released it (it failed); if an outcome is
// recorded already, or another execution holds the key, the late result
// is dropped (that execution records its own).
func (e *Executor) recordLate(ctx context.Context, c *Call, p *prepared, key, owner string, out json.RawMessage) {
	o := ledger.Outcome{Result: e.red.JSON(out)}
	keyAttr, lateAttr := slog.String("key", key), slog.Bool("late", true)
	err := e.ledger.Complete(ctx, key, owner, o)
	if errors.Is(err, ledger.ErrNotHeld) {
		fresh := e.owners()
		_, started, berr := e.ledger.Begin(ctx, ledger.Intent{Key: key, Tool: p.tool.name, ArgsHash: p.argsHash(), Owner: fresh, Lease: lease(p.tool)})
		switch {
		case berr == nil && started:
			err = e.ledger.Complete(ctx, key, fresh, o)
		case berr == nil || errors.Is(berr, ledger.ErrInProgress) || errors.Is(berr, ledger.ErrOutcomeUnknown) || errors.Is(berr, ledger.ErrKeyReuse):
			e.event(ctx, slog.LevelInfo, StatusExecuted, c, p.args, keyAttr, lateAttr, slog.String("reason", "late result not recorded: the key has an outcome or another holder"))
			return
		default:
			err = berr
		}
	}
	if err != nil {
		e.event(ctx, slog.LevelWarn, StatusFailed, c, p.args, keyAttr, lateAttr, slog.String("reason", "late result not recorded"), e.errAttr(err))
		return
	}
	e.event(ctx, slog.LevelInfo, StatusExecuted, c, p.args, keyAttr, lateAttr, slog.String("reason", "late result recorded"))
}

// reconcile asks the tool whether an attempt with an unknown outcome took
// effect: if so its result is recorded and replayed; if not the intent is
// taken over and the call runs.
func (e *Executor) reconcile(ctx context.Context, c *Call, p *prepared, in ledger.Intent) (Result, error) {
	t := p.tool
	env, err := e.env(ctx, c, p, in.Key)
	if err != nil {
		return Result{}, err
	}
	out, found, err := e.reconcileCall(ctx, t, p.args, env)
	if err != nil {
		err = e.toolError(t, 1, e.redactPause(err))
		e.event(ctx, slog.LevelWarn, StatusFailed, c, p.args, slog.String("reason", "reconcile"), slog.String("key", in.Key), e.errAttr(err))
		return Result{}, err
	}
	if found {
		out = e.red.JSON(out)
		if err := e.ledger.Resolve(ctx, in.Key, ledger.Outcome{Result: out}); err != nil && !errors.Is(err, ledger.ErrNotHeld) {
			return Result{}, &LedgerError{Tool: t.name, Err: err}
		}
		entry, err := e.ledger.Get(ctx, in.Key)
		if err != nil {
			return Result{}, &LedgerError{Tool: t.name, Err: err}
		}
		return e.replay(ctx, c, p, entry)
	}
	in.TakeOver = true
	entry, started, err := e.ledger.Begin(ctx, in)
	if err != nil {
		return Result{}, e.ledgerRefusal(ctx, c, p, in.Key, err)
	}
	if !started {
		return e.replay(ctx, c, p, entry)
	}
	return e.runHeld(ctx, c, p, in.Key, in.Owner)
}

// env fetches the tool's secrets and builds its Env.
func (e *Executor) env(ctx context.Context, c *Call, p *prepared, key string) (Env, error) {
	env := Env{Thread: p.scope, CallID: c.ID, tool: p.tool.name, key: key, red: e.red}
	if len(p.tool.secrets) == 0 {
		return env, nil
	}
	env.secrets = make(map[string]Secret, len(p.tool.secrets))
	for _, name := range p.tool.secrets {
		v, err := e.secret(ctx, name)
		if err != nil {
			// The provider's error text is not shown: it may quote the value.
			reason := "the secret provider failed"
			if errors.Is(err, errProviderPanicked) {
				reason = "the secret provider panicked"
			}
			return Env{}, &ToolError{Tool: p.tool.name, Class: ClassPermanent, Err: &SecretError{Tool: p.tool.name, Name: name, Reason: reason},
				msg: fmt.Sprintf("secret %q unavailable", name)}
		}
		if len(strings.TrimSpace(v)) < minRedact {
			// Nothing could keep it out of what the body echoes.
			return Env{}, &ToolError{Tool: p.tool.name, Class: ClassPermanent,
				Err: &SecretError{Tool: p.tool.name, Name: name, Reason: fmt.Sprintf("the value is shorter than %d bytes, too short to be redacted", minRedact)},
				msg: fmt.Sprintf("secret %q unavailable: too short to be redacted", name)}
		}
		e.red.add(v)
		env.secrets[name] = Secret{value: v}
	}
	return env, nil
}

// attempts runs the call until it succeeds, fails for good, or uses up
// its retry policy. A write without a key (no ledger) gets one attempt. No
// attempt starts while the executor's abandoned bodies are at their cap.
//
// unknown reports that the last attempt's outcome is unknown: it timed out
// (or failed with an error whose Indeterminate method reports true), or the
// context ended while it ran. A write that does not DedupesByKey is not
// retried after such an attempt.
func (e *Executor) attempts(ctx context.Context, c *Call, p *prepared, key string, late func(json.RawMessage)) (out json.RawMessage, n int, unknown bool, err error) {
	t := p.tool
	limit := t.retry.Attempts()
	if !t.idempotent && key == "" {
		limit = 1 // a write is retried only through the ledger
	}
	env, err := e.env(ctx, c, p, key)
	if err != nil {
		if ctx.Err() != nil {
			// Cancelled before the body started: not the tool's failure.
			return nil, 0, false, fmt.Errorf("nodes: tool %q not started: %w", t.name, context.Cause(ctx))
		}
		return nil, 0, false, err
	}
	var last error // the previous attempt's error
	for attempt := 1; ; attempt++ {
		if e.aband.Running() >= e.maxAband {
			le := &AbandonedLimitError{Tool: t.name, Limit: int(e.maxAband), Attempts: attempt - 1, Err: last}
			e.event(ctx, slog.LevelWarn, StatusFailed, c, p.args, slog.Int("attempts", attempt-1), slog.String("reason", "abandoned limit"), e.errAttr(le))
			return nil, attempt - 1, indeterminate(last), le
		}
		env.Attempt = attempt
		out, started, err := e.attempt(ctx, t, p.args, env, late)
		if err == nil {
			return e.red.JSON(out), attempt, false, nil
		}
		if cerr := ctx.Err(); cerr != nil {
			if !started {
				// Cancelled before this attempt's body started: only an
				// earlier attempt may have taken effect.
				return nil, attempt - 1, indeterminate(last), fmt.Errorf("nodes: tool %q not started: %w", t.name, context.Cause(ctx))
			}
			return nil, attempt, true, fmt.Errorf("nodes: tool %q: %w", t.name, context.Cause(ctx))
		}
		class := Classify(err)
		if class == ClassPause {
			return nil, attempt, false, err // an interrupt or a confirmation: never retried
		}
		unsure := indeterminate(err)
		blind := unsure && !t.idempotent && !t.dedupes // a retry could run the write twice
		if class != ClassTransient || attempt >= limit || blind {
			te := e.toolError(t, attempt, err)
			te.Exhausted = class == ClassTransient && !blind
			attrs := []slog.Attr{slog.Int("attempts", attempt), slog.String("class", class.String())}
			if blind && attempt < limit {
				attrs = append(attrs, slog.String("reason", "outcome unknown: a write is not retried unless its service dedupes by key"))
			}
			e.event(ctx, slog.LevelWarn, StatusFailed, c, p.args, append(attrs, e.errAttr(te))...)
			return nil, attempt, unsure, te
		}
		wait, werr := e.retryWait(ctx, t, attempt)
		if werr != nil {
			if ctx.Err() != nil {
				return nil, attempt, unsure, fmt.Errorf("nodes: tool %q: backoff: %w", t.name, werr)
			}
			te := e.toolError(t, attempt, werr)
			e.event(ctx, slog.LevelWarn, StatusFailed, c, p.args, slog.Int("attempts", attempt), slog.String("reason", "the retry policy's Rand failed"), e.errAttr(te))
			return nil, attempt, unsure, te
		}
		if ra := retryAfter(err); ra > t.maxRA {
			// The service will not answer before then: retrying sooner
			// cannot help, and waiting that long is not the policy's.
			te := e.toolError(t, attempt, &RetryAfterError{Tool: t.name, Attempts: attempt, RetryAfter: ra, At: e.clock.Now().Add(ra), Max: t.maxRA, Err: err})
			e.event(ctx, slog.LevelWarn, StatusFailed, c, p.args, slog.Int("attempts", attempt), slog.Duration("retry_after", ra),
				slog.String("reason", "the service's Retry-After exceeds the tool's MaxRetryAfter"), e.errAttr(te))
			return nil, attempt, unsure, te
		} else if ra > 0 {
			wait = max(wait, ra)
		}
		if dl, ok := ctx.Deadline(); ok && e.clock.Now().Add(wait).After(dl) {
			te := e.toolError(t, attempt, err)
			te.Exhausted = true
			e.event(ctx, slog.LevelWarn, StatusFailed, c, p.args, slog.Int("attempts", attempt), slog.String("reason", "the next attempt would miss the deadline"), e.errAttr(te))
			return nil, attempt, unsure, te
		}
		last = err
		e.event(ctx, slog.LevelInfo, StatusRetry, c, p.args, slog.Int("attempt", attempt), slog.String("class", class.String()), slog.Duration("wait", wait), e.errAttr(err))
		if err := e.clock.Sleep(ctx, wait); err != nil {
			return nil, attempt, unsure, fmt.Errorf("nodes: tool %q: backoff: %w", t.name, err)
		}
	}
}

func (e *Executor) toolError(t *Tool, attempts int, err error) *ToolError {
	var te *ToolError
	if errors.As(err, &te) && te != nil && te.Tool == t.name {
		return te
	}
	return &ToolError{Tool: t.name, Attempts: attempts, Class: Classify(err), Err: err, msg: e.red.String(err.Error())}
}

// attempt runs the body once under the tool's timeout. The body runs on its
// own goroutine so that a body that ignores its context cannot hold the
// call past the timeout; it is then abandoned (counted in abandoned, and
// in running until it returns), and if it succeeds after all, late (when
// set) gets its result. started reports whether the body was called: a
// context that ends before it starts stops the attempt without calling
// it, so the write cannot have taken effect.
func (e *Executor) attempt(ctx context.Context, t *Tool, args []byte, env Env, late func(json.RawMessage)) (out json.RawMessage, started bool, err error) {
	if ctx.Err() != nil {
		return nil, false, ctx.Err()
	}
	actx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	type outcome struct {
		out json.RawMessage
		err error
	}
	var (
		mu    sync.Mutex // orders the body's start and answer against its abandonment
		gone  bool       // abandoned, or given up before it started: nobody receives from done
		began bool       // the body was called
		done  = make(chan outcome, 1)
	)
	go func() {
		mu.Lock()
		if gone || ctx.Err() != nil {
			// The call ended before the body started: it never runs.
			if !gone {
				done <- outcome{err: errNotStarted} // buffered: never blocks
			}
			mu.Unlock()
			return
		}
		began = true
		mu.Unlock()
		o := func() (o outcome) {
			defer func() {
				if r := recover(); r != nil {
					o = outcome{err: &PanicError{Tool: t.name, Value: e.red.String(fmt.Sprint(r)), Stack: e.red.Bytes(debug.Stack())}}
				}
			}()
			out, err := t.invoke(e.bodyContext(actx), args, env)
			// Read here, under recover and the attempt's timeout: the
			// error's methods are the tool's code too.
			return outcome{out, e.redactPause(e.contain(t, "body", err))}
		}()
		mu.Lock()
		abandoned := gone
		if !abandoned {
			done <- o // buffered: never blocks
		}
		mu.Unlock()
		if abandoned {
			defer e.aband.Done()
			if o.err == nil && late != nil {
				late(o.out)
			}
		}
	}()
	timedOut := func(err error) bool {
		return ctx.Err() == nil && errors.Is(actx.Err(), context.DeadlineExceeded) &&
			(err == nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled))
	}
	select {
	case o := <-done:
		if o.err == errNotStarted {
			return nil, false, ctx.Err()
		}
		if o.err != nil && timedOut(o.err) {
			return nil, true, &TimeoutError{Tool: t.name, After: t.timeout, Attempt: env.Attempt}
		}
		return o.out, true, o.err
	case <-actx.Done():
	}
	mu.Lock()
	var (
		o        outcome
		answered bool
	)
	select {
	case o = <-done:
		answered = true
	default:
		gone = true
		if began {
			e.aband.Add()
		}
	}
	started = began
	mu.Unlock()
	if answered && o.err == errNotStarted {
		return nil, false, ctx.Err()
	}
	if answered && (o.err == nil || !timedOut(o.err)) {
		return o.out, true, o.err
	}
	if ctx.Err() != nil {
		return nil, started, ctx.Err()
	}
	return nil, started, &TimeoutError{Tool: t.name, After: t.timeout, Attempt: env.Attempt}
}

// errNotStarted is what attempt's goroutine answers when the call ended
// before the body was called.
var errNotStarted = errors.New("nodes: the tool body was not started")

// bodyContext is the context a tool body runs under: a question it raises
// with interrupt.Ask or interrupt.AskKey (itself, or through code it calls
// with its context) is redacted, as its results are, before the runtime
// saves it or shows it to a reviewer.
func (e *Executor) bodyContext(ctx context.Context) context.Context {
	return interrupt.WithFilter(ctx, func(v json.RawMessage) json.RawMessage { return e.red.JSON(v) })
}

// redactPause returns err, or, when err holds an *interrupt.NodeInterrupt
// whose value holds a secret, a NodeInterrupt of the value with the
// secrets redacted: the runtime saves that value with the task and shows
// it to a reviewer. The error around it is then dropped (the runtime
// keeps only the value) and the body's own value is not modified. A value
// that does not encode is left to the runtime, which refuses it.
func (e *Executor) redactPause(err error) error {
	var ni *interrupt.NodeInterrupt
	if err == nil || !errors.As(err, &ni) || ni == nil {
		return err
	}
	v, merr := interrupt.Marshal(ni.Value)
	if merr != nil {
		return err
	}
	red := e.red.JSON(v)
	if bytes.Equal(red, v) {
		return err
	}
	return &interrupt.NodeInterrupt{Value: json.RawMessage(red)}
}

// fallback runs t's fallback after err, through the whole executor path.
func (e *Executor) fallback(ctx context.Context, c *Call, t *Tool, cause error, depth int) (Result, error) {
	fb := t.fallback
	why := e.red.String(cause.Error())
	e.event(ctx, slog.LevelInfo, StatusFallback, c, c.Args, slog.String("fallback", fb.name), slog.String("cause", why))
	fc := Call{ID: c.ID, Tool: fb.name, Args: c.Args, Scope: c.Scope, Memo: c.Memo, FallbackFor: t.name}
	res, err := e.execute(ctx, fc, depth+1)
	if err != nil {
		var cr *ConfirmationRequired
		if errors.As(err, &cr) && cr.Cause == "" {
			cr.Cause = why
		}
		if Classify(err) == ClassPause {
			return Result{}, err
		}
		return Result{}, errors.Join(cause, err)
	}
	if res.FallbackFrom == "" {
		res.FallbackFrom, res.Cause = t.name, why
	}
	res.Status = StatusFallback
	return res, nil
}

// indeterminate reports whether err says that the attempt that returned it
// may have taken effect (a *TimeoutError, or any error with an
// Indeterminate method that reports true).
func indeterminate(err error) bool {
	var ind interface{ Indeterminate() bool }
	return err != nil && errors.As(err, &ind) && ind.Indeterminate()
}
