package graph

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"

	"github.com/lockstepgo/lockstep/internal/safe"
	"github.com/lockstepgo/lockstep/internal/strictjson"
)

type reducerKind int

const (
	kindLastValue reducerKind = iota
	kindAppend
	kindMerge
	kindFunc
)

// Reducer says how a state field combines the writes of one superstep. The
// default, LastValue, accepts one write per step.
type Reducer struct {
	kind reducerKind
	fn   reflect.Value // kindFunc: func(T, T) T
	typ  reflect.Type  // kindFunc: T
}

// LastValue keeps the written value. Two writes in one step are a
// *ConflictError. It is the default for every field.
func LastValue() Reducer { return Reducer{kind: kindLastValue} }

// Append appends the written items to a slice field, in task order. The
// struct tag `lockstep:"append"` does the same. Only the appended items are
// stored per checkpoint.
func Append() Reducer { return Reducer{kind: kindAppend} }

// Merge sets the written keys into a map field, in task order (a later
// task's key wins). The struct tag `lockstep:"merge"` does the same.
func Merge() Reducer { return Reducer{kind: kindMerge} }

// ReduceFunc folds writes into a field of type T with f(current, update).
// Compile fails when T is not the field's type.
func ReduceFunc[T any](f func(current, update T) T) Reducer {
	return Reducer{kind: kindFunc, fn: reflect.ValueOf(f), typ: reflect.TypeFor[T]()}
}

// String names the reducer: "append", "merge", "func(T)" or "last value".
func (r Reducer) String() string {
	switch r.kind {
	case kindAppend:
		return "append"
	case kindMerge:
		return "merge"
	case kindFunc:
		return "func(" + r.typ.String() + ")"
	}
	return "last value"
}

// field is one channel of the state: an exported field of S.
type field struct {
	name    string // the Go field name: the channel's stored name
	key     string // the json tag's key when it differs from name (an alias)
	index   int
	typ     reflect.Type
	strict  *strictjson.Schema // refuses stored JSON that Marshal never writes for typ
	reducer Reducer
	foreign bool // encoding or decoding typ may call application code (safe.Foreign)
	quote   bool // typ encodes as a plain JSON string (plainString): quoteString writes it
}

// schema describes the state type S.
type schema struct {
	typ    reflect.Type
	fields []field
	byName map[string]int
	byKey  map[string]int // json keys that differ from the Go name (lookup)
	// sliceAt holds the offsets in S of the slice fields among fields,
	// for view.
	sliceAt []uintptr
}

// newSchema reflects over the state type. Tags `lockstep:"append"` and
// `lockstep:"merge"` set reducers; `lockstep:"-"` leaves a field out.
func newSchema(t reflect.Type) (*schema, []error) {
	if t.Kind() != reflect.Struct {
		return nil, []error{&CompileError{Problem: fmt.Sprintf("the state type %s is not a struct", t)}}
	}
	s := &schema{typ: t, byName: map[string]int{}}
	var errs []error
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		tag := sf.Tag.Get("lockstep")
		if tag == "-" {
			continue
		}
		f := field{name: sf.Name, index: i, typ: sf.Type, strict: strictjson.For(sf.Type), foreign: safe.Foreign(sf.Type), quote: plainString(sf.Type)}
		switch tag {
		case "":
		case "append":
			f.reducer = Append()
		case "merge":
			f.reducer = Merge()
		default:
			errs = append(errs, &CompileError{Problem: fmt.Sprintf("unknown lockstep tag %q (want append, merge or -)", tag), Field: sf.Name})
			continue
		}
		if err := checkReducer(f.reducer, sf.Type); err != nil {
			errs = append(errs, &CompileError{Problem: err.Error(), Field: sf.Name})
		}
		s.byName[f.name] = len(s.fields)
		s.fields = append(s.fields, f)
		if sf.Type.Kind() == reflect.Slice {
			s.sliceAt = append(s.sliceAt, sf.Offset)
		}
	}
	errs = append(errs, s.addAliases(t)...)
	return s, errs
}

func checkReducer(r Reducer, t reflect.Type) error {
	switch r.kind {
	case kindAppend:
		if t.Kind() != reflect.Slice {
			return fmt.Errorf("append reducer on a %s field (want a slice)", t)
		}
	case kindMerge:
		if t.Kind() != reflect.Map {
			return fmt.Errorf("merge reducer on a %s field (want a map)", t)
		}
	case kindFunc:
		if r.typ != t {
			return fmt.Errorf("reducer function for %s on a %s field", r.typ, t)
		}
	}
	return nil
}

// setReducer replaces a field's reducer (Graph.Reducer).
func (s *schema) setReducer(name string, r Reducer) error {
	i, ok := s.lookup(name)
	if !ok {
		return &CompileError{Problem: "reducer on a field that does not exist", Field: name}
	}
	if err := checkReducer(r, s.fields[i].typ); err != nil {
		return &CompileError{Problem: err.Error(), Field: name}
	}
	s.fields[i].reducer = r
	return nil
}

func (s *schema) names() []string {
	out := make([]string, len(s.fields))
	for i, f := range s.fields {
		out[i] = f.name
	}
	return out
}

// fieldWrite is one write to a field within a step.
type fieldWrite struct {
	value     reflect.Value // the written value (for append: the items)
	overwrite bool          // replace the value, skipping the reducer
	node      string        // writer, for conflict messages
	// enc is the value as its task's writes store it (task.encoded),
	// when they were encoded already: a field that takes the value as
	// it is stores the same bytes rather than encoding it again.
	enc json.RawMessage
}

// taken returns the encoding of the write whose value the field holds
// after reduce, when the new value is one write's value as it is (the
// only write of a last-value field, or an overwrite of a field that is
// not an append field), and nil otherwise: then the field's value is
// encoded on its own.
func (f *field) taken(ws []fieldWrite) json.RawMessage {
	if f.reducer.kind == kindAppend {
		return nil // stored as a chain of items (encodeAppend)
	}
	for i := range ws {
		if ws[i].overwrite {
			return ws[i].enc // reduce refuses a second overwrite
		}
	}
	if f.reducer.kind == kindLastValue && len(ws) == 1 {
		return ws[0].enc
	}
	return nil
}

// reduce combines a step's writes to f with the current value cur. It
// returns the new value and, for append fields, whether the change is a pure
// append of items (so storage can keep only the items). spare, when valid,
// is a slice with the same elements as cur and free capacity after them
// that the caller owns; appends extend it in place. A reducer function is
// application code: it runs under ctx (see callReducer).
func (f *field) reduce(ctx context.Context, ab *safe.Counter, cur reflect.Value, spare reflect.Value, ws []fieldWrite, step int) (next reflect.Value, pureAppend bool, err error) {
	var over *fieldWrite
	for i := range ws {
		if ws[i].overwrite {
			if over != nil {
				return reflect.Value{}, false, &ConflictError{Field: f.name, Nodes: []string{over.node, ws[i].node}, Step: step}
			}
			over = &ws[i]
		}
	}
	if over != nil {
		return over.value, false, nil
	}
	switch f.reducer.kind {
	case kindLastValue:
		if len(ws) > 1 {
			nodes := make([]string, len(ws))
			for i, w := range ws {
				nodes[i] = w.node
			}
			return reflect.Value{}, false, &ConflictError{Field: f.name, Nodes: nodes, Step: step}
		}
		return ws[0].value, false, nil
	case kindAppend:
		n := 0
		for _, w := range ws {
			n += w.value.Len()
		}
		base := spare
		if !spare.IsValid() || spare.Len() != cur.Len() {
			grown := reflect.MakeSlice(f.typ, cur.Len(), growCap(cur.Len()+n))
			reflect.Copy(grown, cur)
			base = grown
		}
		for _, w := range ws {
			base = reflect.AppendSlice(base, w.value)
		}
		return base, true, nil
	case kindMerge:
		out := reflect.MakeMapWithSize(f.typ, cur.Len())
		iter := cur.MapRange()
		for iter.Next() {
			out.SetMapIndex(iter.Key(), iter.Value())
		}
		for _, w := range ws {
			iter := w.value.MapRange()
			for iter.Next() {
				out.SetMapIndex(iter.Key(), iter.Value())
			}
		}
		return out, false, nil
	default: // kindFunc
		v := cur
		for _, w := range ws {
			if v, err = f.callReducer(ctx, ab, v, w.value); err != nil {
				return reflect.Value{}, false, err
			}
		}
		return v, false, nil
	}
}

// callReducer runs f's reducer function on cur and w under ctx: a panic
// is a *PanicError naming the field, and a function still running when
// ctx ends is given up on (an error matching ErrAbandoned and ctx's).
func (f *field) callReducer(ctx context.Context, ab *safe.Counter, cur, w reflect.Value) (reflect.Value, error) {
	what := "the reducer of field " + strconv.Quote(f.name)
	v, p, err := safe.Bound(ctx, ab, what, func() reflect.Value { return f.reducer.fn.Call([]reflect.Value{cur, w})[0] })
	switch {
	case p != nil:
		return reflect.Value{}, &PanicError{Call: what, Value: p.Value, Stack: p.Stack}
	case err != nil:
		return reflect.Value{}, fmt.Errorf("graph: %w", err)
	}
	return v, nil
}

func growCap(n int) int {
	if n < 8 {
		return 8
	}
	return n + n/2
}

// capped returns v with its capacity cut to its length when v is a slice,
// so that an append by a node never writes into the runtime's array.
func capped(v reflect.Value) reflect.Value {
	if v.Kind() == reflect.Slice && v.Cap() != v.Len() {
		return v.Slice3(0, v.Len(), v.Len())
	}
	return v
}

// encodeValue marshals a value (or the new items) of field fl for storage.
// What it returns, decodeValue reads back: JSON that the strict decoder
// would refuse (invalid UTF-8 or duplicate keys from a MarshalJSON or a
// json.RawMessage, say) is refused here, when it is written, not reported
// as corrupt when it is read.
//
// A field whose type may call application code (a MarshalJSON method, an
// interface) is encoded under ctx: one still running when ctx ends is
// given up on, counted in ab, and encodeValue returns an error matching
// ErrAbandoned and ctx's.
func encodeValue(ctx context.Context, ab *safe.Counter, v reflect.Value, fl *field, what where, limit int) (json.RawMessage, error) {
	if fl.quote && v.IsValid() && v.Kind() == reflect.String {
		// Measured first, so that the value is encoded once, into an
		// array of its size, and not at all when it is over the cap.
		s := v.String()
		n, ok := quotedLen(s)
		if !ok {
			return nil, &EncodeError{What: what.String(), Err: errInvalidUTF8}
		}
		if limit > 0 && n > limit {
			return nil, &SizeError{What: what.String(), Size: n, Limit: limit}
		}
		return appendQuoted(make([]byte, 0, n), s), nil
	}
	var x any
	if v.IsValid() {
		x = v.Interface()
	}
	b, err := marshalApp(ctx, ab, x, fl.foreign, what.String)
	if errors.Is(err, ErrAbandoned) {
		return nil, fmt.Errorf("graph: %s: %w", what, err)
	}
	if err != nil {
		return nil, &EncodeError{What: what.String(), Err: err}
	}
	if hasReplacedUTF8(b) {
		return nil, &EncodeError{What: what.String(), Err: errInvalidUTF8}
	}
	if limit > 0 && len(b) > limit {
		return nil, &SizeError{What: what.String(), Size: len(b), Limit: limit}
	}
	if fl.strict.Opaque() { // otherwise Marshal's own output always passes
		if err := fl.strict.Check(b); err != nil {
			return nil, &EncodeError{What: what.String(), Err: err}
		}
	}
	return b, nil
}

// where names the value encodeValue encodes, for its errors: "field Log",
// "input field Log", `write of node "n1" to field Log`. It is formatted
// only when encoding fails, so that a step builds no message it does not
// need.
type where struct {
	prefix string // "field", "input field", "write of node", "send 0 to \"n\" field"
	node   string // the node that wrote the value, quoted after prefix
	field  string
}

func (w where) String() string {
	if w.node != "" {
		return w.prefix + " " + strconv.Quote(w.node) + " to field " + w.field
	}
	return w.prefix + " " + w.field
}

var errInvalidUTF8 = errors.New("a string is not valid UTF-8 (JSON would silently replace its bytes)")

// hasReplacedUTF8 reports whether encoding/json replaced invalid UTF-8 while
// encoding: it writes a valid U+FFFD as raw bytes but a replaced byte as the
// escape \ufffd, which otherwise appears only after an escaped backslash.
func hasReplacedUTF8(b []byte) bool {
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

func safeMarshal(x any) (b []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			b, err = nil, fmt.Errorf("MarshalJSON panicked: %v", r)
		}
	}()
	b, err = json.Marshal(x)
	if err != nil {
		// A MarshalJSON method's own error is inside: read it once.
		err = containCodecError(err, "MarshalJSON")
	}
	return b, err
}

// decodeValue unmarshals stored data into a new value of the field's type.
// It first refuses JSON that json.Marshal never writes for the type
// (duplicate or unknown keys, keys in another case, null for a struct or a
// number, invalid UTF-8...): encoding/json would decode it silently into a
// different or zero value.
//
// A field whose type may call application code (an UnmarshalJSON method,
// an interface) is decoded under ctx, and a panic in that code is a
// *PanicError naming the field (not a corruption of the data); one
// still running when ctx ends is given up on (an error matching
// ErrAbandoned and ctx's). appFailure tells those from bad data.
func decodeValue(ctx context.Context, ab *safe.Counter, fl *field, data []byte) (reflect.Value, error) {
	if err := fl.strict.Check(data); err != nil {
		return reflect.Value{}, err
	}
	if !fl.foreign {
		// The strict check proved data is what json.Marshal writes for
		// the type: its own decoder reads it in one pass, and leaves
		// what it does not decode itself to encoding/json.
		p := reflect.New(fl.typ)
		if fl.strict.Decode(data, p.Elem()) {
			return p.Elem(), nil
		}
		p = reflect.New(fl.typ)
		if err := json.Unmarshal(data, p.Interface()); err != nil {
			return reflect.Value{}, err
		}
		return p.Elem(), nil
	}
	type result struct {
		v   reflect.Value
		err error
	}
	what := "the UnmarshalJSON method of field " + strconv.Quote(fl.name) + " (" + fl.typ.String() + ")"
	r, p, err := safe.Bound(ctx, ab, what, func() result {
		p := reflect.New(fl.typ)
		if err := json.Unmarshal(data, p.Interface()); err != nil {
			return result{err: containCodecError(err, "UnmarshalJSON")}
		}
		return result{v: p.Elem()}
	})
	switch {
	case p != nil:
		return reflect.Value{}, &PanicError{Call: what, Value: p.Value, Stack: p.Stack}
	case err != nil:
		return reflect.Value{}, fmt.Errorf("graph: %w", err)
	}
	return r.v, r.err
}
