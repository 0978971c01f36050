package interrupt

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Sentinel errors. Each is matched with errors.Is.
var (
	// ErrNoRuntime is returned by Ask when the context carries no Resumer,
	// that is, when the node was called outside a lockstep run.
	ErrNoRuntime = errors.New("interrupt: no runtime in context (Ask must be called inside a running node)")

	// ErrNotSerializable matches a *ValueError: an interrupt value or an
	// answer that cannot be encoded as JSON.
	ErrNotSerializable = errors.New("interrupt: value is not serialisable as JSON")

	// ErrAbandoned: Ask or AskKey gave up on the question's encoding (a
	// MarshalJSON method) or the answer's decoding (an UnmarshalJSON
	// method) because it had not returned when the node's context ended;
	// it was left running. The error also matches the context's
	// (context.DeadlineExceeded, context.Canceled).
	ErrAbandoned = errors.New("interrupt: an encoding or decoding did not return before the context ended and was left running")
)

// Interrupt is one pause point: the value a node raised and the ID it is
// answered by. Value is the JSON encoding of what the node passed to Ask or
// put in a NodeInterrupt.
type Interrupt struct {
	ID    string          `json:"id"`
	Value json.RawMessage `json:"value"`
}

// Decode unmarshals the interrupt's value into v. It returns the
// encoding/json error when the value does not fit v.
//
// A panic in an UnmarshalJSON method of v is returned as an error too.
func (i Interrupt) Decode(v any) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("interrupt %s: decode value: UnmarshalJSON panicked: %v", i.ID, r)
		}
	}()
	if err := json.Unmarshal(i.Value, v); err != nil {
		return fmt.Errorf("interrupt %s: decode value: %w", i.ID, readable(err, "UnmarshalJSON"))
	}
	return nil
}

// Error is the pause returned by Ask when no answer is waiting. A node
// returns it (wrapped or not) and the runtime saves the interrupt with the
// task. It is not a failure.
type Error struct {
	Interrupt Interrupt
}

// Error describes the pause; it names the interrupt ID and never the value,
// which may hold data the reviewer sees but logs should not.
func (e *Error) Error() string {
	return "interrupt: waiting for an answer to " + e.Interrupt.ID
}

// NodeInterrupt is the static form of a pause: a node returns it to stop the
// run with Value for a reviewer to see. It carries no answer; the run is
// continued after the reviewer updates the state, and the node runs again.
type NodeInterrupt struct {
	Value any
}

// Error describes the pause without the value.
func (e *NodeInterrupt) Error() string { return "interrupt: node raised NodeInterrupt" }

// Is reports whether err is, or wraps, a pause: an *Error or a
// *NodeInterrupt. Runtimes and retry policies use it so that a pause is never
// treated as a failure or retried.
//
// An error whose Unwrap or As method panics is not a pause.
func Is(err error) (is bool) {
	defer func() {
		if recover() != nil {
			is = false
		}
	}()
	var e *Error
	var n *NodeInterrupt
	return errors.As(err, &e) || errors.As(err, &n)
}

// ValueError reports a value that cannot be used as an interrupt value or an
// answer because it does not encode to JSON. It matches ErrNotSerializable.
type ValueError struct {
	// Path is where in the value the problem is, as a JSONPath-like
	// location ("$", "$.items[2].price", `$["key"]`), or "" when it
	// could not be located.
	Path string
	Err  error
}

// Error names the JSON path (when known) that does not serialise, and why.
func (e *ValueError) Error() string {
	if e.Path != "" {
		return fmt.Sprintf("interrupt: value is not serialisable as JSON at %s: %v", e.Path, e.Err)
	}
	return fmt.Sprintf("interrupt: value is not serialisable as JSON: %v", e.Err)
}

// Unwrap returns the encoding error.
func (e *ValueError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrNotSerializable) true.
func (e *ValueError) Is(target error) bool { return target == ErrNotSerializable }

// AnswerError reports a saved answer the node cannot use: Ask returns one
// when the answer does not decode into the type it asked for, and a node
// may return one (wrapped or not) for an answer it decoded and refuses,
// Err saying why. The runtime takes the answer back, and interrupt ID waits
// for another.
type AnswerError struct {
	ID  string
	Err error
}

// Error names the interrupt and why its answer was refused.
func (e *AnswerError) Error() string {
	return fmt.Sprintf("interrupt %s: answer refused: %v", e.ID, e.Err)
}

// Unwrap returns the decoding error.
func (e *AnswerError) Unwrap() error { return e.Err }

// Marshal encodes v as a JSON interrupt value or answer. It recovers a panic
// in a MarshalJSON method and reports it, like any encoding failure, as a
// *ValueError. NaN and infinities, channels and functions fail, and so do
// values JSON would store with a loss: a string that is not valid UTF-8
// (JSON replaces its bytes) and a struct whose fields are all unexported
// (JSON stores {}).
//
// A *ValueError's Path says where the problem is when it can be found
// (the value is walked only after encoding failed).
func Marshal(v any) (data json.RawMessage, err error) {
	if t := opaqueStruct(v); t != nil {
		return nil, &ValueError{Path: "$", Err: fmt.Errorf("%v has only unexported fields and would be stored as {}", t)}
	}
	b, err := safeMarshal(v)
	if err == nil && replacedUTF8(b) {
		err = errInvalidUTF8
	}
	if err != nil {
		path, reason := locate(reflect.ValueOf(v), "$", 0, map[uintptr]bool{})
		if reason != nil {
			err = reason
		}
		return nil, &ValueError{Path: path, Err: err}
	}
	return b, nil
}

var errInvalidUTF8 = errors.New("a string is not valid UTF-8 (JSON would replace its bytes)")

// safeMarshal is json.Marshal with a panic in a MarshalJSON method turned
// into an error.
func safeMarshal(v any) (b []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			b, err = nil, fmt.Errorf("MarshalJSON panicked: %v", r)
		}
	}()
	b, err = json.Marshal(v)
	if err != nil {
		err = readable(err, "MarshalJSON")
	}
	return b, err
}

// readable returns err, an error of encoding/json that may hold one a
// MarshalJSON or UnmarshalJSON method (method) returned, once its text
// has been read under recover: when that panics (a typed nil whose Error
// reads its receiver, say), an error that says so instead.
func readable(err error, method string) (out error) {
	defer func() {
		if r := recover(); r != nil {
			out = fmt.Errorf("%s returned an error whose Error method panicked: %v", method, r)
		}
	}()
	_ = err.Error()
	return err
}

// maxLocateDepth bounds the walk of locate: a deeper value is reported
// as too deep (JSON encoding of a cyclic value fails the same way).
const maxLocateDepth = 1000

// locate walks v, the value whose encoding failed, and returns the path of
// the first part that cannot be encoded without a loss and why; or "" and
// nil when it finds none (the failure is then reported without a path).
func locate(v reflect.Value, path string, depth int, seen map[uintptr]bool) (string, error) {
	if !v.IsValid() {
		return "", nil
	}
	if depth > maxLocateDepth {
		return path, errors.New("nested too deeply (a cycle?)")
	}
	t := v.Type()
	if t.Implements(jsonMarshaler) || t.Implements(textMarshaler) {
		if v.Kind() == reflect.Pointer && v.IsNil() || !v.CanInterface() {
			return "", nil
		}
		if _, err := safeMarshal(v.Interface()); err != nil {
			return path, err
		}
		return "", nil
	}
	switch v.Kind() {
	case reflect.Float32, reflect.Float64:
		if f := v.Float(); math.IsNaN(f) || math.IsInf(f, 0) {
			return path, fmt.Errorf("the number %v has no JSON form", f)
		}
	case reflect.Complex64, reflect.Complex128, reflect.Chan, reflect.Func, reflect.UnsafePointer:
		return path, fmt.Errorf("a %v has no JSON form", t)
	case reflect.String:
		if !utf8.ValidString(v.String()) {
			return path, errInvalidUTF8
		}
	case reflect.Interface:
		return locate(v.Elem(), path, depth+1, seen)
	case reflect.Pointer:
		if v.IsNil() {
			return "", nil
		}
		if seen[v.Pointer()] {
			return path, errors.New("the value refers to itself (a cycle)")
		}
		seen[v.Pointer()] = true
		defer delete(seen, v.Pointer())
		return locate(v.Elem(), path, depth+1, seen)
	case reflect.Map:
		if v.IsNil() {
			return "", nil
		}
		if seen[v.Pointer()] {
			return path, errors.New("the value refers to itself (a cycle)")
		}
		seen[v.Pointer()] = true
		defer delete(seen, v.Pointer())
		keys := v.MapKeys()
		names := make([]string, len(keys))
		for i, k := range keys {
			names[i] = fmt.Sprint(k.Interface())
			if k.Kind() == reflect.String && !utf8.ValidString(k.String()) {
				return path + "[" + strconv.QuoteToASCII(names[i]) + "]", errors.New("a key is not valid UTF-8")
			}
		}
		order := make([]int, len(keys))
		for i := range order {
			order[i] = i
		}
		slices.SortFunc(order, func(a, b int) int { return strings.Compare(names[a], names[b]) })
		for _, i := range order {
			if p, err := locate(v.MapIndex(keys[i]), path+"["+strconv.Quote(names[i])+"]", depth+1, seen); err != nil {
				return p, err
			}
		}
	case reflect.Slice:
		if v.IsNil() || t.Elem().Kind() == reflect.Uint8 {
			return "", nil
		}
		fallthrough
	case reflect.Array:
		for i := range v.Len() {
			if p, err := locate(v.Index(i), path+"["+strconv.Itoa(i)+"]", depth+1, seen); err != nil {
				return p, err
			}
		}
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() && !f.Anonymous {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" && !strings.HasPrefix(f.Tag.Get("json"), "-,") {
				continue
			}
			if name == "" {
				name = f.Name
			}
			sub := path + "." + name
			if f.Anonymous {
				sub = path // embedded fields are promoted
			}
			if p, err := locate(v.Field(i), sub, depth+1, seen); err != nil {
				return p, err
			}
		}
	}
	return "", nil
}

var (
	jsonMarshaler = reflect.TypeFor[json.Marshaler]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
)

// opaqueStruct returns the type of v (through pointers) when it is a struct
// with fields, none exported, and no JSON or text marshaler: JSON would
// drop everything it holds. Nested values are not inspected.
func opaqueStruct(v any) reflect.Type {
	rv := reflect.ValueOf(v)
	for rv.IsValid() {
		t := rv.Type()
		if t.Implements(jsonMarshaler) || t.Implements(textMarshaler) ||
			reflect.PointerTo(t).Implements(jsonMarshaler) || reflect.PointerTo(t).Implements(textMarshaler) {
			return nil
		}
		if t.Kind() != reflect.Pointer || rv.IsNil() {
			break
		}
		rv = rv.Elem()
	}
	if !rv.IsValid() || rv.Kind() != reflect.Struct || rv.NumField() == 0 {
		return nil
	}
	t := rv.Type()
	for i := range t.NumField() {
		if f := t.Field(i); f.IsExported() || f.Anonymous {
			return nil
		}
	}
	return t
}

// replacedUTF8 reports whether encoding/json replaced invalid UTF-8 in b: it
// writes a valid U+FFFD as raw bytes but a replaced byte as the escape
// \ufffd, which otherwise appears only after an escaped backslash. (Package
// graph checks state writes the same way; this package imports nothing of
// ours, so the check is repeated here.)
func replacedUTF8(b []byte) bool {
	for i := bytes.Index(b, []byte(`\ufffd`)); i >= 0; {
		slashes := 0
		for j := i - 1; j >= 0 && b[j] == '\\'; j-- {
			slashes++
		}
		if slashes%2 == 0 {
			return true
		}
		next := bytes.Index(b[i+1:], []byte(`\ufffd`))
		if next < 0 {
			return false
		}
		i += 1 + next
	}
	return false
}

// ID returns the interrupt ID of the call at position index of task taskID:
// the first 16 bytes of SHA-256 over the task ID and the decimal position,
// in lowercase hex. The static NodeInterrupt of a task uses position -1.
func ID(taskID string, index int) string {
	h := sha256.New()
	h.Write([]byte(taskID))
	h.Write([]byte{0})
	h.Write([]byte(strconv.Itoa(index)))
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0])[:16])
}

// KeyID returns the interrupt ID of the AskKey call with key in task
// taskID: the first 16 bytes of SHA-256 over the task ID and the key, in
// lowercase hex. Positional and keyed IDs never collide.
func KeyID(taskID, key string) string {
	h := sha256.New()
	h.Write([]byte(taskID))
	h.Write([]byte{1}) // positional IDs use 0 here
	h.Write([]byte(key))
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0])[:16])
}

// Resumer answers the Ask and AskKey calls of one task. Runtimes implement
// it and install it with NewContext; application code does not need it.
type Resumer interface {
	// Answer is called once per Ask call, in call order, with the
	// question as the context's filters (WithFilter) left it. It returns the
	// saved answer for this call, if there is one, and the interrupt ID of
	// the call either way. When there is no answer it records that the task
	// raised question, so that a node that swallows the pause is still
	// treated as paused.
	Answer(question json.RawMessage) (answer json.RawMessage, id string, answered bool)
	// AnswerKey is Answer for an AskKey call: the call is identified by
	// key, not by position, and every unanswered call is recorded.
	AnswerKey(key string, question json.RawMessage) (answer json.RawMessage, id string, answered bool)
}

type resumerKey struct{}

// NewContext returns a copy of ctx that carries r for Ask.
func NewContext(ctx context.Context, r Resumer) context.Context {
	return context.WithValue(ctx, resumerKey{}, r)
}

// FromContext returns the Resumer installed by NewContext, if any.
func FromContext(ctx context.Context) (Resumer, bool) {
	r, ok := ctx.Value(resumerKey{}).(Resumer)
	return r, ok
}

// Filter rewrites an interrupt value, the JSON encoding of a question,
// before the runtime records it. It must return valid JSON.
type Filter func(value json.RawMessage) json.RawMessage

type filterKey struct{}

// filterChain is the filters of a context, innermost first.
type filterChain struct {
	f     Filter
	outer *filterChain
}

// WithFilter returns a copy of ctx in which Ask and AskKey pass every
// question, once encoded, through f before the Resumer sees it and before
// it goes into an *Error: what the runtime saves and shows a reviewer is
// what f returned. A package that hands code a context it does not trust
// to keep data out of questions (package nodes redacts the secrets a tool
// body holds) installs one. Filters accumulate: f runs first, then the
// filters ctx already carried, so code cannot undo a filter of a caller
// by adding its own. Interrupt IDs do not depend on the value, so
// answers still reach the call that asked. When f returns something
// that is not valid JSON, Ask and AskKey return a *ValueError and raise
// nothing. A nil f adds nothing.
//
// The filter applies to Ask and AskKey only: not to a NodeInterrupt a
// node returns (the code that sees the error filters it) nor to a
// Resumer called directly.
func WithFilter(ctx context.Context, f Filter) context.Context {
	if f == nil {
		return ctx
	}
	outer, _ := ctx.Value(filterKey{}).(*filterChain)
	return context.WithValue(ctx, filterKey{}, &filterChain{f: f, outer: outer})
}

// errFilterOutput is the reason of the *ValueError for a filter that
// returned a value that is not JSON.
var errFilterOutput = errors.New("a filter (WithFilter) returned a value that is not valid JSON")

// filter passes q through the filters of ctx, innermost first.
func filter(ctx context.Context, q json.RawMessage) (out json.RawMessage, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, &ValueError{Err: fmt.Errorf("a filter (WithFilter) panicked: %v", r)}
		}
	}()
	for c, _ := ctx.Value(filterKey{}).(*filterChain); c != nil; c = c.outer {
		q = c.f(q)
		if !json.Valid(q) || !utf8.Valid(q) {
			return nil, &ValueError{Err: errFilterOutput}
		}
	}
	return q, nil
}

// AskKey is Ask for a call identified by key (unique within the node)
// rather than by its position: its interrupt ID is KeyID(task, key). Calls
// may come in any order and from several goroutines, and a node may raise
// several keyed interrupts before it returns, each answered by its ID; the
// run pauses with all of them. It returns what Ask returns: ErrNoRuntime
// outside a node, a *ValueError when question does not serialise, an
// *Error before the answer exists, an *AnswerError when the answer does
// not decode into T, and an error matching ErrAbandoned when the
// question's encoding or the answer's decoding does not return before ctx
// ends. The question passes through the filters of ctx
// (WithFilter) first.
func AskKey[T any](ctx context.Context, key string, question any) (T, error) {
	var zero T
	r, ok := FromContext(ctx)
	if !ok {
		return zero, ErrNoRuntime
	}
	q, err := marshalQuestion(ctx, r, question)
	if err == nil {
		q, err = filter(ctx, q)
	}
	if err != nil {
		return zero, err
	}
	answer, id, answered := r.AnswerKey(key, q)
	return decodeAnswer[T](ctx, r, answer, id, answered, q)
}

func decodeAnswer[T any](ctx context.Context, r Resumer, answer json.RawMessage, id string, answered bool, q json.RawMessage) (T, error) {
	var zero T
	if !answered {
		return zero, &Error{Interrupt: Interrupt{ID: id, Value: q}}
	}
	type result struct {
		v   T
		err error
	}
	res, err := bounded(ctx, r, "the answer's decoding (an UnmarshalJSON method)", func() (res result) {
		defer func() {
			if p := recover(); p != nil {
				res = result{err: fmt.Errorf("UnmarshalJSON panicked: %v", p)}
			}
		}()
		var v T
		if err := json.Unmarshal(answer, &v); err != nil {
			return result{err: readable(err, "UnmarshalJSON")}
		}
		return result{v: v}
	})
	switch {
	case err != nil:
		return zero, err
	case res.err != nil:
		return zero, &AnswerError{ID: id, Err: res.err}
	}
	return res.v, nil
}

// marshalQuestion is Marshal(question) under ctx (see bounded).
func marshalQuestion(ctx context.Context, r Resumer, question any) (json.RawMessage, error) {
	type result struct {
		q   json.RawMessage
		err error
	}
	res, err := bounded(ctx, r, "the question's encoding (a MarshalJSON method)", func() result {
		q, err := Marshal(question)
		return result{q, err}
	})
	if err != nil {
		return nil, err
	}
	return res.q, res.err
}

// Abandoner is implemented by a Resumer that counts the encodings and
// decodings Ask and AskKey gave up on (see Ask): the runtime reports them
// (package graph's Runnable.Abandoned).
type Abandoner interface {
	// Abandoned is called when Ask gives up on a call that is still
	// running; the function it returns is called once that call returns.
	Abandoned() (returned func())
}

// abandonGrace is how long bounded still waits for a call once ctx has
// ended, so that one that was about to return still returns its result.
const abandonGrace = 100 * time.Millisecond

// bounded runs fn, application code (what), and returns its result; when
// ctx can end, fn runs on a goroutine of its own, and when it has not
// returned abandonGrace after ctx ended, bounded gives up on it: it
// returns an error matching ErrAbandoned and ctx's, and tells r when r is
// an Abandoner. fn must recover its own panics.
func bounded[T any](ctx context.Context, r Resumer, what string, fn func() T) (T, error) {
	if ctx.Done() == nil {
		return fn(), nil
	}
	var (
		mu       sync.Mutex // orders fn's answer against its abandonment
		returned func()     // set when fn was given up on
		done     = make(chan T, 1)
	)
	go func() {
		v := fn()
		mu.Lock()
		ret := returned
		if ret == nil {
			done <- v // buffered: never blocks
		}
		mu.Unlock()
		if ret != nil {
			ret()
		}
	}()
	select {
	case v := <-done:
		return v, nil
	case <-ctx.Done():
	}
	t := time.NewTimer(abandonGrace)
	defer t.Stop()
	select {
	case v := <-done:
		return v, nil
	case <-t.C:
	}
	mu.Lock()
	defer mu.Unlock()
	select {
	case v := <-done:
		return v, nil
	default:
	}
	if a, ok := r.(Abandoner); ok {
		returned = a.Abandoned()
	}
	if returned == nil {
		returned = func() {}
	}
	var zero T
	return zero, fmt.Errorf("interrupt: %s did not return before the context ended: %w: %w", what, ErrAbandoned, context.Cause(ctx))
}

// Ask pauses the run with question until a human answers. It returns the
// answer decoded into T when the run was resumed with one for this call, and
// otherwise the zero T and an *Error that the node must return. Several calls
// in one node are answered in order.
//
// The question passes through the filters of ctx (WithFilter) before it
// is recorded. Ask returns a *ValueError when question does not encode as
// JSON (or a filter's result is not JSON, or a filter panics), an
// *AnswerError when the saved answer does not decode into T (or its
// UnmarshalJSON panics), an error matching ErrAbandoned (and ctx's error)
// when the encoding or the decoding has not returned once ctx ended (see
// the package doc), and ErrNoRuntime outside a running node.
func Ask[T any](ctx context.Context, question any) (T, error) {
	var zero T
	r, ok := FromContext(ctx)
	if !ok {
		return zero, ErrNoRuntime
	}
	q, err := marshalQuestion(ctx, r, question)
	if err == nil {
		q, err = filter(ctx, q)
	}
	if err != nil {
		return zero, err
	}
	answer, id, answered := r.Answer(q)
	return decodeAnswer[T](ctx, r, answer, id, answered, q)
}
