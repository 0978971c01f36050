package jsonschema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/lockstepgo/lockstep/internal/canon"
	"github.com/lockstepgo/lockstep/internal/strictjson"
)

// Schema is a JSON Schema node.
type Schema struct {
	Type                 string             `json:"type,omitempty"`
	Format               string             `json:"format,omitempty"`
	Description          string             `json:"description,omitempty"`
	Properties           map[string]*Schema `json:"properties,omitempty"`
	Required             []string           `json:"required,omitempty"`
	AdditionalProperties any                `json:"additionalProperties,omitempty"` // false, or a *Schema for maps
	Items                *Schema            `json:"items,omitempty"`
	Enum                 []any              `json:"enum,omitempty"`
	Minimum              *float64           `json:"minimum,omitempty"`
	Maximum              *float64           `json:"maximum,omitempty"`
	MinLength            *int               `json:"minLength,omitempty"`
	MaxLength            *int               `json:"maxLength,omitempty"`
	MinItems             *int               `json:"minItems,omitempty"`
	MaxItems             *int               `json:"maxItems,omitempty"`
	Pattern              string             `json:"pattern,omitempty"`
}

// UnmarshalJSON reads a schema, with additionalProperties as a bool or a
// *Schema (what check knows), so that a schema that went through JSON
// (stored with an approval request, say) checks a document as the one it
// was written from did. It fails for any other additionalProperties.
func (s *Schema) UnmarshalJSON(b []byte) error {
	type plain Schema // without this method
	var raw struct {
		plain
		AdditionalProperties json.RawMessage `json:"additionalProperties,omitempty"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*s = Schema(raw.plain)
	s.AdditionalProperties = nil
	switch ap := bytes.TrimSpace(raw.AdditionalProperties); {
	case len(ap) == 0, string(ap) == "null":
	case string(ap) == "true", string(ap) == "false":
		s.AdditionalProperties = string(ap) == "true"
	case ap[0] == '{':
		var sub Schema
		if err := json.Unmarshal(ap, &sub); err != nil {
			return err
		}
		s.AdditionalProperties = &sub
	default:
		return fmt.Errorf("jsonschema: additionalProperties is %s, want a boolean or a schema", ap)
	}
	return nil
}

// ErrInvalid matches every *ValidationError.
var ErrInvalid = errors.New("jsonschema: document does not match schema")

// ErrUnsupported reports a Go type that has no JSON Schema.
var ErrUnsupported = errors.New("jsonschema: unsupported type")

// ValidationError says where and why a document failed.
type ValidationError struct {
	Path   string // "$" is the root, "$.a.b[2]" a nested value
	Reason string
}

// Error names the argument's path and why it is invalid.
func (e *ValidationError) Error() string {
	return fmt.Sprintf("invalid argument %s: %s", e.Path, e.Reason)
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalid }

var (
	timeType = reflect.TypeFor[time.Time]()
	rawType  = reflect.TypeFor[json.RawMessage]()
)

// For derives the schema of T. It returns an error wrapping ErrUnsupported
// for types that cannot be expressed, and for bad `jsonschema` tags.
func For[T any]() (*Schema, error) { return FromType(reflect.TypeFor[T]()) }

// FromType derives the schema of t. Like For, it returns an error wrapping
// ErrUnsupported for types that cannot be expressed and for bad
// `jsonschema` tags.
func FromType(t reflect.Type) (*Schema, error) { return fromType(t, map[reflect.Type]bool{}) }

func fromType(t reflect.Type, seen map[reflect.Type]bool) (*Schema, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == timeType:
		return &Schema{Type: "string", Format: "date-time"}, nil
	case t == rawType, t.Kind() == reflect.Interface:
		return &Schema{}, nil
	}
	switch t.Kind() {
	case reflect.String:
		return &Schema{Type: "string"}, nil
	case reflect.Bool:
		return &Schema{Type: "boolean"}, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		// The type's range, so that a value the Go type cannot hold fails
		// validation (naming the field), not decoding after a human
		// approved it: both bounds for types of 32 bits or fewer, the
		// minimum 0 for wider unsigned ones (64-bit bounds are beyond what
		// a JSON number holds exactly, and would only clutter the schema).
		s := &Schema{Type: "integer"}
		lo, hi := intRange(t)
		if t.Bits() <= 32 {
			s.Minimum, s.Maximum = &lo, &hi
		} else if lo == 0 {
			s.Minimum = &lo
		}
		return s, nil
	case reflect.Float32:
		lo, hi := -math.MaxFloat32, math.MaxFloat32
		return &Schema{Type: "number", Minimum: &lo, Maximum: &hi}, nil
	case reflect.Float64:
		return &Schema{Type: "number"}, nil
	case reflect.Slice, reflect.Array:
		items, err := fromType(t.Elem(), seen)
		if err != nil {
			return nil, err
		}
		return &Schema{Type: "array", Items: items}, nil
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return nil, fmt.Errorf("%w: map key %s (want string)", ErrUnsupported, t.Key())
		}
		vs, err := fromType(t.Elem(), seen)
		if err != nil {
			return nil, err
		}
		return &Schema{Type: "object", AdditionalProperties: vs}, nil
	case reflect.Struct:
		if seen[t] {
			return nil, fmt.Errorf("%w: recursive type %s", ErrUnsupported, t)
		}
		seen[t] = true
		defer delete(seen, t)
		s := &Schema{Type: "object", Properties: map[string]*Schema{}, AdditionalProperties: false}
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			if name == "" {
				name = f.Name
			}
			fs, err := fromType(f.Type, seen)
			if err != nil {
				return nil, fmt.Errorf("field %s: %w", f.Name, err)
			}
			fs.Description = f.Tag.Get("description")
			if err := applyTag(fs, f.Tag.Get("jsonschema")); err != nil {
				return nil, fmt.Errorf("field %s: %w", f.Name, err)
			}
			s.Properties[name] = fs
			optional := f.Type.Kind() == reflect.Pointer
			for _, o := range strings.Split(opts, ",") {
				if o == "omitempty" || o == "omitzero" {
					optional = true
				}
			}
			if !optional {
				s.Required = append(s.Required, name)
			}
		}
		return s, nil
	}
	return nil, fmt.Errorf("%w: %s", ErrUnsupported, t)
}

func applyTag(s *Schema, tag string) error {
	if tag == "" {
		return nil
	}
	for _, part := range strings.Split(tag, ",") {
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return fmt.Errorf("%w: jsonschema tag %q: want key=value", ErrUnsupported, part)
		}
		num := func() (*float64, error) {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return nil, fmt.Errorf("%w: jsonschema tag %s=%q is not a number", ErrUnsupported, k, v)
			}
			return &f, nil
		}
		count := func() (*int, error) {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("%w: jsonschema tag %s=%q is not a count", ErrUnsupported, k, v)
			}
			return &n, nil
		}
		var err error
		switch k {
		case "enum":
			for _, e := range strings.Split(v, "|") {
				if s.Type == "integer" || s.Type == "number" {
					f, perr := strconv.ParseFloat(e, 64)
					if perr != nil {
						return fmt.Errorf("%w: enum value %q is not a number", ErrUnsupported, e)
					}
					s.Enum = append(s.Enum, f)
				} else {
					s.Enum = append(s.Enum, e)
				}
			}
		case "minimum": // a tag narrows the type's range, never widens it
			var m *float64
			if m, err = num(); err == nil && (s.Minimum == nil || *m > *s.Minimum) {
				s.Minimum = m
			}
		case "maximum":
			var m *float64
			if m, err = num(); err == nil && (s.Maximum == nil || *m < *s.Maximum) {
				s.Maximum = m
			}
		case "minLength":
			s.MinLength, err = count()
		case "maxLength":
			s.MaxLength, err = count()
		case "minItems":
			s.MinItems, err = count()
		case "maxItems":
			s.MaxItems, err = count()
		case "pattern":
			if _, rerr := regexp.Compile(v); rerr != nil {
				return fmt.Errorf("%w: pattern %q: %v", ErrUnsupported, v, rerr)
			}
			s.Pattern = v
		default:
			return fmt.Errorf("%w: unknown jsonschema tag key %q", ErrUnsupported, k)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Validate checks doc against s. It returns a *ValidationError naming the
// first offending value (the first of ValidateAll's, in path order).
func Validate(s *Schema, doc []byte) error {
	if ps := ValidateAll(s, doc); len(ps) > 0 {
		return ps[0]
	}
	return nil
}

// MaxProblems caps what ValidateAll reports: a hostile document (a
// million unknown fields) cannot make an unbounded report.
const MaxProblems = 100

// ValidateAll checks doc against s and returns every problem found, each
// at its path, sorted by path and then reason; nil when doc matches. A
// document that is not canonical JSON (bad syntax, duplicate keys, invalid
// UTF-8) has one problem, where canon found it. Below a value of the wrong
// type nothing more is checked; at most MaxProblems are returned.
func ValidateAll(s *Schema, doc []byte) []*ValidationError {
	if _, err := canon.JSON(doc); err != nil {
		var ce *canon.Error
		if errors.As(err, &ce) {
			return []*ValidationError{{Path: ce.Path, Reason: ce.Reason}}
		}
		return []*ValidationError{{Path: "$", Reason: err.Error()}}
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return []*ValidationError{{Path: "$", Reason: err.Error()}}
	}
	var ps problems
	ps.check(s, v, "$")
	slices.SortFunc(ps.list, func(a, b *ValidationError) int {
		if c := strings.Compare(a.Path, b.Path); c != 0 {
			return c
		}
		return strings.Compare(a.Reason, b.Reason)
	})
	if len(ps.list) > MaxProblems {
		ps.list = ps.list[:MaxProblems]
	}
	return ps.list
}

// problems collects a document's failures, all of them (a document is at
// most as large as its caller allows), so that the sorted report's first
// MaxProblems are the same whatever the order of a map's keys.
type problems struct{ list []*ValidationError }

func (ps *problems) add(path, format string, args ...any) {
	ps.list = append(ps.list, &ValidationError{Path: path, Reason: fmt.Sprintf(format, args...)})
}

func (ps *problems) check(s *Schema, v any, path string) {
	if s == nil {
		return
	}
	bad := func(format string, args ...any) { ps.add(path, format, args...) }
	switch s.Type {
	case "":
	case "object":
		obj, ok := v.(map[string]any)
		if !ok {
			bad("want an object, got %s", kind(v))
			return
		}
		for _, r := range s.Required {
			if _, ok := obj[r]; !ok {
				ps.add(path+"."+r, "required field is missing")
			}
		}
		for k, fv := range obj {
			ps2, ok := s.Properties[k]
			if !ok {
				switch ap := s.AdditionalProperties.(type) {
				case bool:
					if !ap {
						ps.add(path+"."+k, "unknown field")
					}
					continue
				case *Schema:
					ps2 = ap
				case nil:
					if s.Properties != nil {
						ps.add(path+"."+k, "unknown field")
					}
					continue
				default: // not a schema check knows: refuse rather than pass
					ps.add(path+"."+k, "the schema's additionalProperties cannot be checked")
					continue
				}
			}
			ps.check(ps2, fv, path+"."+k)
		}
	case "array":
		arr, ok := v.([]any)
		if !ok {
			bad("want an array, got %s", kind(v))
			return
		}
		if s.MinItems != nil && len(arr) < *s.MinItems {
			bad("want at least %d items, got %d", *s.MinItems, len(arr))
		}
		if s.MaxItems != nil && len(arr) > *s.MaxItems {
			bad("want at most %d items, got %d", *s.MaxItems, len(arr))
		}
		for i, e := range arr {
			ps.check(s.Items, e, fmt.Sprintf("%s[%d]", path, i))
		}
	case "string":
		str, ok := v.(string)
		if !ok {
			bad("want a string, got %s", kind(v))
			return
		}
		n := utf8.RuneCountInString(str)
		if s.MinLength != nil && n < *s.MinLength {
			bad("want at least %d characters, got %d", *s.MinLength, n)
		}
		if s.MaxLength != nil && n > *s.MaxLength {
			bad("want at most %d characters, got %d", *s.MaxLength, n)
		}
		if s.Pattern != "" {
			re, err := regexp.Compile(s.Pattern)
			if err != nil || !re.MatchString(str) {
				bad("does not match pattern %q", s.Pattern)
			}
		}
		if s.Format == "date-time" {
			if _, err := time.Parse(time.RFC3339Nano, str); err != nil {
				bad("want an RFC 3339 date-time")
			}
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			bad("want a boolean, got %s", kind(v))
			return
		}
	case "integer", "number":
		n, ok := v.(json.Number)
		if !ok {
			bad("want %s, got %s", article(s.Type), kind(v))
			return
		}
		f, err := n.Float64()
		if err != nil {
			bad("number out of range")
			return
		}
		if s.Type == "integer" {
			c, _ := canon.Number(string(n))
			if strings.ContainsAny(c, ".e") && !isBigInteger(c) {
				bad("want an integer, got %s", n)
			}
		} else if bits := floatBits(s); !strictjson.ExactFloat([]byte(n), bits) {
			// A float field would receive another value than the one
			// sent (and hashed, and approved).
			bad("%s is not a number a float%d holds: it would be read as %v", cutNumber(n), bits, roundTo(f, bits))
		}
		if s.Minimum != nil && f < *s.Minimum {
			bad("want at least %v, got %s", *s.Minimum, n)
		}
		if s.Maximum != nil && f > *s.Maximum {
			bad("want at most %v, got %s", *s.Maximum, n)
		}
	default:
		bad("schema has unknown type %q", s.Type)
		return
	}
	if len(s.Enum) > 0 && !inEnum(s.Enum, v) {
		bad("must be one of %v", s.Enum)
	}
}

// floatBits is the size of the float a "number" schema was derived from:
// 32 when its bounds are float32's (see fromType), else 64.
func floatBits(s *Schema) int {
	if s.Minimum != nil && s.Maximum != nil && *s.Minimum == -math.MaxFloat32 && *s.Maximum == math.MaxFloat32 {
		return 32
	}
	return 64
}

// roundTo is f as a float of the given size reads it.
func roundTo(f float64, bits int) any {
	if bits == 32 {
		return float32(f)
	}
	return f
}

// cutNumber keeps a long number short in a message.
func cutNumber(n json.Number) string {
	if len(n) > 40 {
		return string(n[:40]) + "…"
	}
	return string(n)
}

// isBigInteger reports whether a canonical number in exponent form is an
// integer (d.ddde+n with no more fraction digits than n).
func isBigInteger(c string) bool {
	mant, exp, ok := strings.Cut(c, "e+")
	if !ok {
		return false
	}
	n, err := strconv.Atoi(exp)
	if err != nil {
		return false
	}
	_, frac, _ := strings.Cut(mant, ".")
	return len(frac) <= n
}

func inEnum(enum []any, v any) bool {
	for _, e := range enum {
		switch x := v.(type) {
		case json.Number:
			if f, err := x.Float64(); err == nil {
				if ef, ok := e.(float64); ok && ef == f {
					return true
				}
			}
		case []any, map[string]any:
			// == on two of these panics (uncomparable); compare the
			// canonical JSON, which also equates 1 and 1.0 inside them.
			if sameJSON(e, v) {
				return true
			}
		default:
			if e == v {
				return true
			}
		}
	}
	return false
}

// sameJSON reports whether a and b encode to the same canonical JSON.
func sameJSON(a, b any) bool {
	ca, err := canon.Value(a)
	if err != nil {
		return false
	}
	cb, err := canon.Value(b)
	return err == nil && bytes.Equal(ca, cb)
}

func kind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	}
	return fmt.Sprintf("%T", v)
}

// article puts "a" or "an" before a JSON type name.
func article(typ string) string {
	switch typ {
	case "integer", "object", "array":
		return "an " + typ
	}
	return "a " + typ
}

// intRange is the range of integer type t, as float64 (the 64-bit bounds
// round to the nearest float64, which the checker's float comparison
// treats alike).
func intRange(t reflect.Type) (lo, hi float64) {
	bits := t.Bits()
	if t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uint64 {
		return 0, math.Ldexp(1, bits) - 1
	}
	return -math.Ldexp(1, bits-1), math.Ldexp(1, bits-1) - 1
}
