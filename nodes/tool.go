package nodes

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"time"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/internal/jsonschema"
	"github.com/lockstepgo/lockstep/retry"
)

// DefaultTimeout is a tool's per-attempt timeout when it declares none.
const DefaultTimeout = 30 * time.Second

// toolName is what a tool may be called: what the model APIs accept, and
// nothing a reader could mistake for another name (no spaces, no
// look-alike letters, no invisible characters).
var toolName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Tool is a registered tool: its name, its description for the model, its
// argument schema, its body, and what it declared at registration. Build
// one with NewTool. A Tool is immutable and safe for concurrent use.
type Tool struct {
	name        string
	description string
	schema      *jsonschema.Schema
	schemaJSON  json.RawMessage
	invoke      func(ctx context.Context, args []byte, env Env) (json.RawMessage, error)
	reconcile   func(ctx context.Context, args []byte, env Env) (json.RawMessage, bool, error)
	naturalKey  func(args []byte) (string, error)
	destructive bool
	risk        approval.Risk
	idempotent  bool
	dedupes     bool // the downstream enforces the idempotency key
	noMemo      bool
	timeout     time.Duration
	retry       retry.Policy
	maxRA       time.Duration // MaxRetryAfter
	fallback    *Tool
	version     string
	secrets     []string
	info        ToolInfo // what policies see (shared: policies must not modify it)
}

// ToolOption declares a property of a tool at registration.
type ToolOption func(*toolConfig)

type toolConfig struct {
	t          *Tool
	naturalKey any // func(A) string
	reconcile  any // func(context.Context, A, Env) (R, bool, error)
	errs       []error
}

// Destructive declares a tool whose effect is hard or impossible to undo
// (a one-way door), with its risk tier. The gate asks its policy about
// every call of a destructive tool; with no policy, every call needs a
// human. A destructive tool is never served from the memo.
func Destructive(risk approval.Risk) ToolOption {
	return func(c *toolConfig) {
		if !risk.Valid() || risk == approval.RiskNone {
			c.errs = append(c.errs, fmt.Errorf("destructive tool with risk %q (want low, medium, high or critical)", risk))
		}
		c.t.destructive, c.t.risk = true, risk
	}
}

// Idempotent declares that running the call twice has the effect of
// running it once. An idempotent tool that is not destructive is a read:
// its results are memoised and it is retried freely. A tool that is not
// idempotent is a write: it is retried only through the ledger, with the
// same idempotency key on every attempt, and after an attempt whose
// outcome is unknown (a timeout) only when it DedupesByKey.
func Idempotent() ToolOption { return func(c *toolConfig) { c.t.idempotent = true } }

// DedupesByKey declares that the service a write calls enforces the
// idempotency key the body sends it (Env.IdempotencyKey): a second request
// with the same key has no second effect, and answers with the first
// one's result. Only such a write is run again after an attempt whose
// outcome is unknown (it timed out, or its context ended while it ran):
// the executor retries it with the same key, and a later repeat runs it
// again. The intent of any other write stays pending after such an
// attempt, as after a crash: a repeat finds it in progress while its lease
// lasts and of unknown outcome after, and it does not run again until its
// late result arrives, a Reconcile hook or ledger.Resolve settles it, or a
// human decides (Call.Reconciled). Declaring it for a service that does
// not dedupe can run a write twice.
func DedupesByKey() ToolOption { return func(c *toolConfig) { c.t.dedupes = true } }

// NoMemo keeps a read's results out of the memo (for reads whose answer
// changes from one turn to the next).
func NoMemo() ToolOption { return func(c *toolConfig) { c.t.noMemo = true } }

// Timeout sets the per-attempt timeout (default DefaultTimeout). Set it
// above the API's worst latency: an attempt that times out has an unknown
// outcome.
func Timeout(d time.Duration) ToolOption {
	return func(c *toolConfig) {
		if d <= 0 {
			c.errs = append(c.errs, fmt.Errorf("timeout %v is not positive", d))
		}
		c.t.timeout = d
	}
}

// DefaultRetry is the retry policy of a tool without the Retry option:
// three attempts, 200ms doubling to 10s, spread by a fifth.
func DefaultRetry() retry.Policy {
	return retry.Policy{MaxAttempts: 3, Initial: 200 * time.Millisecond, Multiplier: 2, Max: 10 * time.Second, Jitter: 0.2}
}

// DefaultMaxRetryAfter is the longest Retry-After a tool without the
// MaxRetryAfter option waits for.
const DefaultMaxRetryAfter = 30 * time.Second

// Retry sets the retry policy of the tool's transient failures (without
// it, DefaultRetry()). p's fields mean what package retry says (the zero
// Policy: three attempts, no wait between them); a p that p.Validate
// refuses makes NewTool fail with an error matching ErrInvalidTool that
// wraps its *retry.PolicyError. A write without an idempotency ledger
// gets one attempt whatever p says. Reading p.Rand is the application's
// code: the executor contains it like a tool body's.
func Retry(p retry.Policy) ToolOption {
	return func(c *toolConfig) {
		if err := p.Validate(); err != nil {
			c.errs = append(c.errs, fmt.Errorf("Retry: %w", err))
		}
		c.t.retry = p
	}
}

// MaxRetryAfter caps how long the executor waits for a service's
// Retry-After (see RetryAfter and HTTPError; without the option,
// DefaultMaxRetryAfter). A longer request ends the retries instead of
// waiting: the call fails at once with a *ToolError around a
// *RetryAfterError (ErrRetryAfterTooLong), which says when the service
// said to come back. 0 waits for no Retry-After; a negative d makes
// NewTool fail.
func MaxRetryAfter(d time.Duration) ToolOption {
	return func(c *toolConfig) {
		if d < 0 {
			c.errs = append(c.errs, fmt.Errorf("MaxRetryAfter %v is negative (0 waits for no Retry-After)", d))
		}
		c.t.maxRA = d
	}
}

// NaturalKey derives the idempotency key from the arguments instead of from
// the thread and the whole arguments: an external order ID, say. Calls with
// the same natural key are one operation, across threads. fn must be a
// func(A) string for the tool's argument type A (checked by NewTool); an
// empty string means "no natural key" and fails the call.
func NaturalKey[A any](fn func(args A) string) ToolOption {
	return func(c *toolConfig) { c.naturalKey = fn }
}

// Reconcile gives a write a way to find out whether an earlier attempt
// whose outcome is unknown (its process died between the effect and the
// ledger record, or it timed out) took effect downstream. fn returns the result it found and
// true, or false when the effect did not happen (the call then runs). It
// must be a func(context.Context, A, Env) (R, bool, error) for the tool's
// types (checked by NewTool).
func Reconcile[A, R any](fn func(ctx context.Context, args A, env Env) (R, bool, error)) ToolOption {
	return func(c *toolConfig) { c.reconcile = fn }
}

// Fallback names a tool to run, with the same arguments, when this tool's
// retries are exhausted or its error is permanent, but not after an
// attempt of a write that may have taken effect (a timeout, unless the
// tool DedupesByKey): another way of doing it could do it twice. The
// fallback goes through the executor like any call (its own gate, memo or
// ledger, retries); the result says it came from the fallback.
func Fallback(t *Tool) ToolOption {
	return func(c *toolConfig) {
		if t == nil {
			c.errs = append(c.errs, fmt.Errorf("nil fallback tool"))
		}
		c.t.fallback = t
	}
}

// Version sets the tool's version (default "1"). It is part of memo keys,
// so a new version never serves an old version's results. It is not part
// of idempotency keys: an operation stays the same operation across
// versions.
func Version(v string) ToolOption {
	return func(c *toolConfig) {
		if v == "" {
			c.errs = append(c.errs, fmt.Errorf("empty version"))
		}
		c.t.version = v
	}
}

// Secrets declares the names of the credentials the body needs. The
// executor fetches them from its SecretProvider at call time and hands them
// to the body through Env; they never appear in arguments, results, logs,
// errors or stored rows. A value shorter than 4 bytes cannot be redacted:
// the call then fails with a *SecretError and the body does not run.
func Secrets(names ...string) ToolOption {
	return func(c *toolConfig) {
		for _, n := range names {
			if n == "" {
				c.errs = append(c.errs, fmt.Errorf("empty secret name"))
			}
		}
		c.t.secrets = append(c.t.secrets, names...)
	}
}

// NewTool registers a tool named name whose body is fn. The argument type A
// must be a struct (or a map with string keys) from which a JSON Schema can
// be derived; tags `json`, `description` and `jsonschema` shape it (see
// package internal/jsonschema). R must encode as JSON. description tells the
// model what the tool does, when to call it and what it returns.
//
// fn receives the validated arguments and an Env with the call's
// idempotency key and declared secrets; its error is classified for
// retries (see Classify).
//
// NewTool returns an error matching ErrInvalidTool when the name is not 1 to
// 64 of [A-Za-z0-9_-], the description is empty, fn is nil, A has no
// schema, or an option does not fit.
func NewTool[A, R any](name, description string, fn func(ctx context.Context, args A, env Env) (R, error), opts ...ToolOption) (*Tool, error) {
	bad := func(format string, args ...any) (*Tool, error) {
		return nil, fmt.Errorf("%w %s: %s", ErrInvalidTool, quote(name), fmt.Sprintf(format, args...))
	}
	if !toolName.MatchString(name) {
		return bad("name must be 1 to 64 characters of A-Z, a-z, 0-9, '_' and '-'")
	}
	if description == "" {
		return bad("empty description: tell the model what the tool does, when to call it and what it returns")
	}
	if fn == nil {
		return bad("nil body")
	}
	at := reflect.TypeFor[A]()
	for at.Kind() == reflect.Pointer {
		at = at.Elem()
	}
	if at.Kind() != reflect.Struct && at.Kind() != reflect.Map {
		return bad("argument type %s is not a struct or a map (the model sends a JSON object)", at)
	}
	schema, err := jsonschema.For[A]()
	if err != nil {
		return bad("argument schema: %v", err)
	}
	schemaJSON, err := json.Marshal(schema)
	if err != nil {
		return bad("argument schema: %v", err)
	}
	t := &Tool{
		name: name, description: description, schema: schema, schemaJSON: schemaJSON,
		risk: approval.RiskNone, timeout: DefaultTimeout, version: "1",
		retry: DefaultRetry(), maxRA: DefaultMaxRetryAfter,
	}
	cfg := &toolConfig{t: t}
	for _, o := range opts {
		if o != nil {
			o(cfg)
		}
	}
	if len(cfg.errs) > 0 {
		return nil, fmt.Errorf("%w %s: %w", ErrInvalidTool, quote(name), cfg.errs[0])
	}
	decode := func(args []byte) (A, error) {
		var a A
		err := json.Unmarshal(args, &a)
		return a, err
	}
	t.invoke = func(ctx context.Context, args []byte, env Env) (json.RawMessage, error) {
		a, err := decode(args)
		if err != nil {
			return nil, &ArgsError{Tool: name, Path: "$", Reason: "does not decode: " + err.Error(), Err: err}
		}
		r, err := fn(ctx, a, env)
		if err != nil {
			return nil, err
		}
		out, err := json.Marshal(r)
		if err != nil {
			return nil, Permanent(fmt.Errorf("result does not encode as JSON: %w", err))
		}
		return out, nil
	}
	if cfg.naturalKey != nil {
		nk, ok := cfg.naturalKey.(func(A) string)
		if !ok {
			return bad("NaturalKey takes a %T; want a func(%s) string", cfg.naturalKey, reflect.TypeFor[A]())
		}
		t.naturalKey = func(args []byte) (string, error) {
			a, err := decode(args)
			if err != nil {
				return "", err
			}
			return nk(a), nil
		}
	}
	if cfg.reconcile != nil {
		rc, ok := cfg.reconcile.(func(context.Context, A, Env) (R, bool, error))
		if !ok {
			return bad("Reconcile takes a %T; want a func(context.Context, %s, nodes.Env) (%s, bool, error)", cfg.reconcile, reflect.TypeFor[A](), reflect.TypeFor[R]())
		}
		t.reconcile = func(ctx context.Context, args []byte, env Env) (json.RawMessage, bool, error) {
			a, err := decode(args)
			if err != nil {
				return nil, false, err
			}
			r, found, err := rc(ctx, a, env)
			if err != nil || !found {
				return nil, false, err
			}
			out, err := json.Marshal(r)
			return out, true, err
		}
	}
	for f, depth := t.fallback, 0; f != nil; f, depth = f.fallback, depth+1 {
		if f.name == name || depth > 8 {
			return bad("fallback chain loops back to the tool or is too long")
		}
	}
	t.secrets = slices.Compact(slices.Sorted(slices.Values(t.secrets)))
	t.info = t.buildInfo()
	return t, nil
}

// Name returns the tool's name.
func (t *Tool) Name() string { return t.name }

// Description returns the description the model reads.
func (t *Tool) Description() string { return t.description }

// Schema returns the JSON Schema of the arguments (a copy).
func (t *Tool) Schema() json.RawMessage { return slices.Clone(t.schemaJSON) }

// Info describes the tool for policies and listings (a copy).
func (t *Tool) Info() ToolInfo {
	i := t.info
	i.Secrets, i.Schema = slices.Clone(i.Secrets), slices.Clone(i.Schema)
	return i
}

func (t *Tool) buildInfo() ToolInfo {
	var fb string
	if t.fallback != nil {
		fb = t.fallback.name
	}
	return ToolInfo{
		Name: t.name, Description: t.description, Destructive: t.destructive, Risk: t.risk,
		Idempotent: t.idempotent, Version: t.version, Timeout: t.timeout, Fallback: fb,
		Secrets: slices.Clone(t.secrets), Schema: t.Schema(),
	}
}

// read reports whether the tool is a read: idempotent and not destructive.
func (t *Tool) read() bool { return t.idempotent && !t.destructive }

// ToolInfo is what a tool declared at registration. Policies see it; the
// destructive flag and the risk come only from here, never from a call. A
// policy must not modify its slices.
type ToolInfo struct {
	Name        string
	Description string
	Destructive bool
	Risk        approval.Risk
	Idempotent  bool
	Version     string
	Timeout     time.Duration
	Fallback    string
	Secrets     []string // names only
	Schema      json.RawMessage
}

// Definition is a tool as a model sees it: name, description and the JSON
// Schema of its parameters (no secret is ever part of it).
type Definition struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}
