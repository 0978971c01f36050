package strictjson

import (
	"encoding"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
	"unsafe"
)

// MaxDepth is the deepest nesting of arrays and objects Check accepts; it is
// encoding/json's own limit. A document nested deeper is refused with an
// *Error once the limit is passed, without scanning further and without
// deep recursion beyond it.
const MaxDepth = 10000

// ErrInvalid matches every *Error returned by Check, so callers can test
// errors.Is(err, ErrInvalid) without caring which rule was broken.
var ErrInvalid = errors.New("strictjson: not JSON that encoding/json writes for the type")

// Error reports why a document was refused. Path is a JSONPath-like location
// of the offending value ("$", "$.Item.ID", "$.Log[3]", "$.Tags[\"k\"]"),
// built from JSON names; for a problem with an object's key (unknown,
// duplicate, badly encoded) it is the path of the object. Reason says what
// is wrong. An *Error matches ErrInvalid under errors.Is.
type Error struct {
	Path   string
	Reason string
}

// Error returns "strictjson: <reason> at <path>".
// The message shows at most the first and last 60 bytes of a long path
// (a depth error's path holds every level); Path keeps all of it.
func (e *Error) Error() string {
	path := e.Path
	if len(path) > 160 {
		path = strings.ToValidUTF8(path[:60], "") + "…" + strings.ToValidUTF8(path[len(path)-60:], "")
	}
	return "strictjson: " + e.Reason + " at " + path
}

// Is reports whether target is ErrInvalid; it is false for any other target.
func (e *Error) Is(target error) bool { return target == ErrInvalid }

// Schema is a compiled checker for one Go type, made by For. It is
// immutable once built and safe for concurrent use by any number of
// goroutines: Check keeps all its working state in variables of its own
// call. The zero Schema and a nil *Schema check like For(nil).
type Schema struct {
	root      *node
	opaque    bool // see Opaque
	decodable bool // see Decode
}

// For compiles the checker for t, following encoding/json's rules for t's
// struct fields, embedding, tags and custom (un)marshalers. Recursive types
// are supported. For never fails: a type json.Marshal cannot encode (a
// channel, a function, a complex number, a map with an unsupported key type)
// gets a node that refuses every value there except the null Marshal writes
// for a nil pointer to it. A nil t (reflect.TypeOf of a nil interface) is
// treated as the empty interface: any well-formed document is accepted,
// still subject to the syntax, UTF-8, surrogate and duplicate-key rules.
func For(t reflect.Type) *Schema {
	if t == nil {
		return &Schema{root: &node{kind: kindAny, nullOK: true, typ: "interface {}"}, opaque: true}
	}
	c := newCompiler()
	s := &Schema{root: c.node(t)}
	for _, n := range c.nodes {
		if n.kind == kindAny || n.kind == kindUnsupported || n.kind == kindMap && n.keys == keyText {
			s.opaque = true
		}
	}
	s.decodable = !s.opaque && c.decodable()
	return s
}

// Opaque reports whether the type has parts whose JSON json.Marshal does
// not write by its own rules: an interface, a type with its own JSON or
// text methods (json.RawMessage, time.Time...), a map keyed by a text
// marshaler, or a type Marshal cannot encode. For a type that is not
// opaque, whatever json.Marshal writes passes Check, unless Marshal
// replaced invalid UTF-8 (which can make two map keys equal), so a writer
// that detects that need not check Marshal's output again.
func (s *Schema) Opaque() bool { return s == nil || s.root == nil || s.opaque }

// Check returns nil when data could have been written by json.Marshal for a
// value of the schema's type, and otherwise an *Error (matching ErrInvalid)
// naming the first problem found. Check never panics, never modifies or
// retains data, and allocates only on failure or for unusual documents
// (escaped object keys, escaped ,string values, more than 16 keys open at
// once in maps and free-form objects, structs with more than 64 fields).
func (s *Schema) Check(data []byte) error {
	if s == nil || s.root == nil {
		s = For(nil)
	}
	if len(data) == 0 {
		return &Error{Path: "$", Reason: "empty input"}
	}
	if len(data) >= 3 && data[0] == 0xEF && data[1] == 0xBB && data[2] == 0xBF {
		return &Error{Path: "$", Reason: "leading byte order mark (U+FEFF is not JSON whitespace)"}
	}
	c := checker{data: data}
	c.skipWS()
	if c.pos == len(data) {
		return &Error{Path: "$", Reason: "empty input (only whitespace)"}
	}
	if f := c.value(s.root); f != nil {
		return f.err()
	}
	c.skipWS()
	if c.pos != len(data) {
		return (&failure{reason: "invalid character " + quoteChar(data[c.pos]) + " after top-level value"}).err()
	}
	return nil
}

// ---------------------------------------------------------------------------
// Compiled form.

type kind uint8

const (
	kindAny         kind = iota // interface or custom (un)marshaler: any JSON
	kindBool                    // true or false
	kindNumber                  // integer and float kinds
	kindString                  // string kinds
	kindBytes                   // []byte: base64 string (or null)
	kindStruct                  // object with the struct's JSON field names
	kindSlice                   // array (or null)
	kindArray                   // array of exactly length elements
	kindMap                     // object with keys of keyKind
	kindPtr                     // null or elem
	kindUnsupported             // json.Marshal fails for this type
)

type keyKind uint8

const (
	keyString keyKind = iota // any string
	keyText                  // TextMarshaler keys: any string
	keyInt                   // canonical decimal integer
	keyUint                  // canonical decimal unsigned integer
)

// smallFields is the number of struct fields up to which a linear scan
// finds a key's field; larger structs get a name index.
const smallFields = 8

type node struct {
	kind   kind
	nullOK bool         // null is acceptable here
	typ    string       // Go type, for reasons
	rt     reflect.Type // the Go type itself (Decode)
	elem   *node        // slice, array, map value, pointer target
	length int          // kindArray
	keys   keyKind
	bits   int            // kindNumber for float32 (32) and float64 (64); 0 otherwise
	fields []field        // kindStruct, in json.Marshal's order
	byName map[string]int // kindStruct with more than smallFields fields
	why    string         // kindUnsupported
}

type field struct {
	index  []int // the field's index path in its struct (reflect.Value.FieldByIndex)
	name   string
	seg    string // path segment: ".Name" or "[\"odd name\"]"
	node   *node
	quoted kind // ,string option: kindBool, kindNumber or kindString; kindAny when absent
	qnull  bool // ,string on a pointer: bare null allowed
}

// lookup returns the index of the field named key, or -1. guess is the
// index json.Marshal would write next, tried first.
func (n *node) lookup(key []byte, guess int) int {
	if guess < len(n.fields) && n.fields[guess].name == string(key) {
		return guess
	}
	if n.byName != nil {
		if i, ok := n.byName[string(key)]; ok {
			return i
		}
		return -1
	}
	for i := range n.fields {
		if n.fields[i].name == string(key) {
			return i
		}
	}
	return -1
}

// compiler builds the nodes for one call of For; it is the only place
// reflect is used, and it lives no longer than that call.
type compiler struct {
	nodes map[reflect.Type]*node

	marshaler, unmarshaler, textMarshaler, textUnmarshaler, number reflect.Type
}

func newCompiler() *compiler {
	return &compiler{
		nodes:           map[reflect.Type]*node{},
		marshaler:       reflect.TypeFor[json.Marshaler](),
		unmarshaler:     reflect.TypeFor[json.Unmarshaler](),
		textMarshaler:   reflect.TypeFor[encoding.TextMarshaler](),
		textUnmarshaler: reflect.TypeFor[encoding.TextUnmarshaler](),
		number:          reflect.TypeFor[json.Number](),
	}
}

// custom reports whether t has a method encoding/json hands its bytes to.
func (c *compiler) custom(t reflect.Type) bool {
	return t.Implements(c.marshaler) || t.Implements(c.unmarshaler) ||
		t.Implements(c.textMarshaler) || t.Implements(c.textUnmarshaler)
}

func (c *compiler) node(t reflect.Type) *node {
	if n, ok := c.nodes[t]; ok {
		return n
	}
	n := &node{typ: t.String(), rt: t}
	c.nodes[t] = n
	if c.custom(t) || (t.Kind() != reflect.Pointer && c.custom(reflect.PointerTo(t))) {
		// Marshal and Unmarshal hand the bytes to the type's own methods:
		// any well-formed JSON (rules for syntax, UTF-8 and keys still apply).
		n.kind, n.nullOK = kindAny, true
		return n
	}
	switch t.Kind() {
	case reflect.Interface:
		n.kind, n.nullOK = kindAny, true
	case reflect.Bool:
		n.kind = kindBool
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		n.kind = kindNumber
	case reflect.Float32:
		n.kind, n.bits = kindNumber, 32
	case reflect.Float64:
		n.kind, n.bits = kindNumber, 64
	case reflect.String:
		if t == c.number {
			n.kind = kindNumber // Marshal writes a json.Number as a number
		} else {
			n.kind = kindString
		}
	case reflect.Pointer:
		n.kind, n.nullOK = kindPtr, true
		n.elem = c.node(t.Elem())
		// A type like "type P *P" only ever marshals as null: cut the
		// cycle so Check cannot loop on it.
		e := n.elem
		for steps := 0; e != nil && e.kind == kindPtr && steps <= len(c.nodes); steps++ {
			if e == n {
				n.elem = &node{kind: kindUnsupported, typ: t.String(), why: "json.Marshal cannot encode the pointer cycle " + t.String() + " except as null"}
				break
			}
			e = e.elem
		}
	case reflect.Slice:
		n.nullOK = true
		if t.Elem().Kind() == reflect.Uint8 {
			// encoding/json's rule: base64 unless *elem marshals itself.
			p := reflect.PointerTo(t.Elem())
			if !p.Implements(c.marshaler) && !p.Implements(c.textMarshaler) {
				n.kind = kindBytes
				return n
			}
		}
		n.kind = kindSlice
		n.elem = c.node(t.Elem())
	case reflect.Array:
		n.kind = kindArray
		n.length = t.Len()
		n.elem = c.node(t.Elem())
	case reflect.Map:
		n.nullOK = true
		k := t.Key()
		switch {
		case k.Kind() == reflect.String:
			n.keys = keyString
		case k.Implements(c.textMarshaler):
			n.keys = keyText
		default:
			switch k.Kind() {
			case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
				n.keys = keyInt
			case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
				n.keys = keyUint
			default:
				n.kind, n.nullOK = kindUnsupported, false
				n.why = "json.Marshal cannot encode map key type " + k.String()
				return n
			}
		}
		n.kind = kindMap
		n.elem = c.node(t.Elem())
	case reflect.Struct:
		n.kind = kindStruct
		c.structFields(n, t)
	default:
		n.kind = kindUnsupported
		n.why = "json.Marshal cannot encode type " + t.String()
	}
	return n
}

// jsonField is one candidate field found by typeFields, a port of
// encoding/json's function of the same name.
type jsonField struct {
	name   string
	tag    bool
	index  []int
	typ    reflect.Type // the field's type, pointer followed when unnamed (for embedding)
	vtyp   reflect.Type // the field's declared type
	quoted bool
}

func (c *compiler) structFields(n *node, t reflect.Type) {
	fs := typeFields(t)
	// The order json.Marshal writes them in, so Check can guess each key.
	slices.SortFunc(fs, func(a, b jsonField) int { return slices.Compare(a.index, b.index) })
	n.fields = make([]field, len(fs))
	for i, jf := range fs {
		f := field{index: jf.index, name: jf.name, seg: segment(jf.name), node: c.node(jf.vtyp)}
		if jf.quoted {
			base := f.node
			if base.kind == kindPtr {
				base = base.elem
				f.qnull = true
			}
			switch base.kind {
			case kindBool, kindNumber, kindString:
				f.quoted = base.kind
			default:
				// A type with its own marshaler ignores the option.
				f.qnull = false
			}
		}
		n.fields[i] = f
	}
	if len(n.fields) > smallFields {
		n.byName = make(map[string]int, len(n.fields))
		for i, f := range n.fields {
			n.byName[f.name] = i
		}
	}
}

func typeFields(t reflect.Type) []jsonField {
	current := []jsonField{}
	next := []jsonField{{typ: t}}
	var count, nextCount map[reflect.Type]int
	visited := map[reflect.Type]bool{}
	var fields []jsonField

	for len(next) > 0 {
		current, next = next, current[:0]
		count, nextCount = nextCount, map[reflect.Type]int{}

		for _, f := range current {
			if visited[f.typ] {
				continue
			}
			visited[f.typ] = true
			for i := 0; i < f.typ.NumField(); i++ {
				sf := f.typ.Field(i)
				if sf.Anonymous {
					et := sf.Type
					if et.Kind() == reflect.Pointer {
						et = et.Elem()
					}
					if !sf.IsExported() && et.Kind() != reflect.Struct {
						continue // unexported embedded non-struct
					}
				} else if !sf.IsExported() {
					continue
				}
				tag := sf.Tag.Get("json")
				if tag == "-" {
					continue
				}
				name, opts, _ := strings.Cut(tag, ",")
				if !isValidTag(name) {
					name = ""
				}
				index := make([]int, len(f.index)+1)
				copy(index, f.index)
				index[len(f.index)] = i

				ft := sf.Type
				if ft.Name() == "" && ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				quoted := false
				if hasOption(opts, "string") {
					switch ft.Kind() {
					case reflect.Bool,
						reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
						reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
						reflect.Float32, reflect.Float64,
						reflect.String:
						quoted = true
					}
				}
				if name != "" || !sf.Anonymous || ft.Kind() != reflect.Struct {
					tagged := name != ""
					if name == "" {
						name = sf.Name
					}
					fields = append(fields, jsonField{name: name, tag: tagged, index: index, typ: ft, vtyp: sf.Type, quoted: quoted})
					if count[f.typ] > 1 {
						// Two instances of the embedding type at this depth:
						// add a copy so the dominance pass drops the name.
						fields = append(fields, fields[len(fields)-1])
					}
					continue
				}
				nextCount[ft]++
				if nextCount[ft] == 1 {
					next = append(next, jsonField{name: ft.Name(), index: index, typ: ft})
				}
			}
		}
	}

	slices.SortFunc(fields, func(a, b jsonField) int {
		if c := strings.Compare(a.name, b.name); c != 0 {
			return c
		}
		if c := len(a.index) - len(b.index); c != 0 {
			return c
		}
		if a.tag != b.tag {
			if a.tag {
				return -1
			}
			return +1
		}
		return slices.Compare(a.index, b.index)
	})
	out := fields[:0]
	for advance, i := 0, 0; i < len(fields); i += advance {
		fi := fields[i]
		for advance = 1; i+advance < len(fields); advance++ {
			if fields[i+advance].name != fi.name {
				break
			}
		}
		if advance == 1 {
			out = append(out, fi)
			continue
		}
		// Sorted by depth then tag: the first dominates unless the second
		// is at the same depth with the same taggedness.
		group := fields[i : i+advance]
		if len(group[0].index) == len(group[1].index) && group[0].tag == group[1].tag {
			continue
		}
		out = append(out, group[0])
	}
	return out
}

func hasOption(opts, name string) bool {
	for opts != "" {
		var o string
		o, opts, _ = strings.Cut(opts, ",")
		if o == name {
			return true
		}
	}
	return false
}

// isValidTag is encoding/json's rule for a usable tag name.
func isValidTag(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		switch {
		case strings.ContainsRune("!#$%&()*+-./:;<=>?@[]^_{|}~ ", c):
		case !unicode.IsLetter(c) && !unicode.IsDigit(c):
			return false
		}
	}
	return true
}

func segment(name string) string {
	ident := name != ""
	for i, r := range name {
		if !(r == '_' || unicode.IsLetter(r) || (i > 0 && unicode.IsDigit(r))) {
			ident = false
			break
		}
	}
	if ident {
		return "." + name
	}
	return "[" + strconv.Quote(name) + "]"
}

// ---------------------------------------------------------------------------
// Checking.

// failure is an error on its way up: segs collects path segments innermost
// first, so the success path never builds a path.
type failure struct {
	reason string
	segs   []string
}

func (f *failure) at(seg string) *failure {
	f.segs = append(f.segs, seg)
	return f
}

func (f *failure) err() *Error {
	var b strings.Builder
	b.WriteByte('$')
	for i := len(f.segs) - 1; i >= 0; i-- {
		b.WriteString(f.segs[i])
	}
	return &Error{Path: b.String(), Reason: f.reason}
}

func failf(format string, args ...any) *failure {
	return &failure{reason: fmt.Sprintf(format, args...)}
}

// keySpan locates one unescaped key of an object being checked for
// duplicates: data[off:end] for a key without escapes, keyBuf[off:end] for
// one that had to be unescaped.
type keySpan struct {
	off, end int
	buf      bool
}

// smallKeys is how many keys of a map or free-form object are compared
// pairwise before a set is built.
const smallKeys = 16

type checker struct {
	data  []byte
	pos   int
	depth int
	// Stack of the keys of the open maps and free-form objects: the first
	// smallKeys entries live in keyArr (no allocation), the rest in keyMore.
	keyArr  [smallKeys]keySpan
	keyMore []keySpan
	nkeys   int
	keyBuf  []byte   // unescaped keys referenced by the key stack
	bits    []uint64 // stack of seen-field sets of open structs with > 64 fields
	scratch []byte   // unescaped struct key or ,string content
}

func (c *checker) skipWS() {
	for c.pos < len(c.data) && c.data[c.pos] <= ' ' {
		switch c.data[c.pos] {
		case ' ', '\t', '\n', '\r':
			c.pos++
		default:
			return
		}
	}
}

func quoteChar(b byte) string {
	switch {
	case b == '\'':
		return `'\''`
	case b == '"':
		return `'"'`
	case b < utf8.RuneSelf:
		s := strconv.QuoteRune(rune(b))
		return s
	default:
		return fmt.Sprintf(`'\x%02x'`, b)
	}
}

// syntax reports a syntax error at c.pos.
func (c *checker) syntax(context string) *failure {
	if c.pos >= len(c.data) {
		return &failure{reason: "unexpected end of JSON input"}
	}
	reason := "invalid character " + quoteChar(c.data[c.pos])
	if context != "" {
		reason += " " + context
	}
	return &failure{reason: reason}
}

func tokenName(b byte) string {
	switch {
	case b == '{':
		return "object"
	case b == '[':
		return "array"
	case b == '"':
		return "string"
	case b == 't' || b == 'f':
		return "boolean"
	case b == 'n':
		return "null"
	case b == '-' || ('0' <= b && b <= '9'):
		return "number"
	}
	return ""
}

// mismatch reports a value of the wrong JSON kind for n, or a syntax error
// if the byte starts no value at all.
func (c *checker) mismatch(n *node, want string) *failure {
	got := tokenName(c.data[c.pos])
	if got == "" {
		return c.syntax("looking for beginning of value")
	}
	return failf("found %s where json.Marshal writes %s for %s", got, want, n.typ)
}

// value checks one value starting at c.pos (whitespace already skipped)
// against n and leaves c.pos just after it.
func (c *checker) value(n *node) *failure {
	if c.pos >= len(c.data) {
		return c.syntax("")
	}
	b := c.data[c.pos]
	for n.kind == kindPtr {
		if b == 'n' {
			return c.literal("null")
		}
		n = n.elem
	}
	if b == 'n' {
		if f := c.literal("null"); f != nil {
			return f
		}
		if !n.nullOK {
			return nullFail(n)
		}
		return nil
	}
	switch n.kind {
	case kindAny:
		return c.anyValue(n)
	case kindBool:
		switch b {
		case 't':
			return c.literal("true")
		case 'f':
			return c.literal("false")
		}
		return c.mismatch(n, "true or false")
	case kindNumber:
		if b == '-' || ('0' <= b && b <= '9') {
			start := c.pos
			if f := c.number(); f != nil {
				return f
			}
			if n.bits != 0 && !floatExact(c.data[start:c.pos], n.bits) {
				text := c.data[start:c.pos]
				c.pos = start
				return inexactFloat(text, n.typ)
			}
			return nil
		}
		return c.mismatch(n, "a number")
	case kindString:
		if b == '"' {
			_, f := c.str()
			return f
		}
		return c.mismatch(n, "a string")
	case kindBytes:
		if b == '"' {
			return c.base64()
		}
		return c.mismatch(n, "a base64 string")
	case kindStruct:
		if b == '{' {
			return c.structObject(n)
		}
		return c.mismatch(n, "an object")
	case kindSlice:
		if b == '[' {
			return c.array(n, n.elem, -1)
		}
		return c.mismatch(n, "an array")
	case kindArray:
		if b == '[' {
			return c.array(n, n.elem, n.length)
		}
		return c.mismatch(n, "an array")
	case kindMap:
		if b == '{' {
			return c.object(n.elem, n.keys)
		}
		return c.mismatch(n, "an object")
	}
	if tokenName(b) == "" {
		return c.syntax("looking for beginning of value")
	}
	return &failure{reason: n.why}
}

// anyValue checks any well-formed value; n is the free-form node reused
// for elements and members.
func (c *checker) anyValue(n *node) *failure {
	switch b := c.data[c.pos]; b {
	case '{':
		return c.object(n, keyString)
	case '[':
		return c.array(n, n, -1)
	case '"':
		_, f := c.str()
		return f
	case 't':
		return c.literal("true")
	case 'f':
		return c.literal("false")
	case 'n':
		return c.literal("null")
	default:
		if b == '-' || ('0' <= b && b <= '9') {
			return c.number()
		}
	}
	return c.syntax("looking for beginning of value")
}

func (c *checker) literal(lit string) *failure {
	d := c.data[c.pos:]
	for i := 0; i < len(lit); i++ {
		if i >= len(d) {
			c.pos += i
			return c.syntax("")
		}
		if d[i] != lit[i] {
			c.pos += i
			return c.syntax("in literal " + lit + " (expecting " + quoteChar(lit[i]) + ")")
		}
	}
	c.pos += len(lit)
	return nil
}

func isDigit(b byte) bool { return '0' <= b && b <= '9' }

// number checks JSON number grammar: -?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?
func (c *checker) number() *failure {
	d := c.data
	i := c.pos
	if d[i] == '-' {
		i++
	}
	switch {
	case i >= len(d):
		c.pos = i
		return c.syntax("")
	case d[i] == '0':
		i++
		if i < len(d) && isDigit(d[i]) {
			c.pos = i
			return &failure{reason: "number with a leading zero"}
		}
	case '1' <= d[i] && d[i] <= '9':
		i++
		for i < len(d) && isDigit(d[i]) {
			i++
		}
	default:
		c.pos = i
		return c.syntax("in numeric literal")
	}
	if i < len(d) && d[i] == '.' {
		i++
		if i >= len(d) || !isDigit(d[i]) {
			c.pos = i
			return c.syntax("after decimal point in numeric literal")
		}
		for i < len(d) && isDigit(d[i]) {
			i++
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= len(d) || !isDigit(d[i]) {
			c.pos = i
			return c.syntax("in exponent of numeric literal")
		}
		for i < len(d) && isDigit(d[i]) {
			i++
		}
	}
	c.pos = i
	return nil
}

// str checks the string starting at c.pos (a '"') and leaves c.pos after
// its closing quote. esc reports whether it contains escapes.
func (c *checker) str() (esc bool, f *failure) {
	d := c.data
	i := c.pos + 1
	for {
		// ASCII fast path: eight bytes at a time while none needs a look.
		for i+8 <= len(d) && !needsLook(binary.LittleEndian.Uint64(d[i:])) {
			i += 8
		}
		for i < len(d) {
			b := d[i]
			if b < 0x20 || b == '"' || b == '\\' || b >= utf8.RuneSelf {
				break
			}
			i++
		}
		if i >= len(d) {
			c.pos = i
			return esc, &failure{reason: "unterminated string"}
		}
		switch b := d[i]; {
		case b == '"':
			c.pos = i + 1
			return esc, nil
		case b == '\\':
			esc = true
			var ok bool
			if i, ok = c.escape(i); !ok {
				return esc, c.badEscape(i)
			}
		case b < 0x20:
			c.pos = i
			return esc, failf("control character %s in string", quoteChar(b))
		default:
			r, size := utf8.DecodeRune(d[i:])
			if r == utf8.RuneError && size == 1 {
				c.pos = i
				return esc, &failure{reason: "invalid UTF-8 in string"}
			}
			i += size
		}
	}
}

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// needsLook reports whether any byte of w is < 0x20, '"', '\\' or >= 0x80.
// It may report true when no byte needs a look (the caller then goes byte
// by byte), never false when one does.
func needsLook(w uint64) bool {
	q := w ^ (lsb * '"')
	s := w ^ (lsb * '\\')
	return (w|((w-lsb*0x20)&^w)|((q-lsb)&^q)|((s-lsb)&^s))&msb != 0
}

// escape checks the escape sequence at d[i] ('\\') and returns the index
// after it, or the index of the problem and false.
func (c *checker) escape(i int) (int, bool) {
	d := c.data
	if i+1 >= len(d) {
		return i, false
	}
	switch d[i+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return i + 2, true
	case 'u':
		r, ok := hex4(d, i+2)
		if !ok {
			return i, false
		}
		switch {
		case 0xD800 <= r && r < 0xDC00:
			if i+7 < len(d) && d[i+6] == '\\' && d[i+7] == 'u' {
				if r2, ok := hex4(d, i+8); ok && 0xDC00 <= r2 && r2 < 0xE000 {
					return i + 12, true
				}
			}
			return i, false
		case 0xDC00 <= r && r < 0xE000:
			return i, false
		}
		return i + 6, true
	}
	return i, false
}

// badEscape describes the bad escape sequence at d[i].
func (c *checker) badEscape(i int) *failure {
	c.pos = i
	d := c.data
	if i+1 >= len(d) {
		return &failure{reason: "unterminated string"}
	}
	if d[i+1] != 'u' {
		return failf("invalid escape %s in string", quoteChar(d[i+1]))
	}
	r, ok := hex4(d, i+2)
	if !ok {
		return &failure{reason: "invalid \\u escape in string"}
	}
	return failf(`lone surrogate \u%04x in string (json.Marshal never writes one)`, r)
}

func hex4(d []byte, i int) (rune, bool) {
	if i+4 > len(d) {
		return 0, false
	}
	var r rune
	for _, b := range d[i : i+4] {
		switch {
		case '0' <= b && b <= '9':
			b -= '0'
		case 'a' <= b && b <= 'f':
			b -= 'a' - 10
		case 'A' <= b && b <= 'F':
			b -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(b)
	}
	return r, true
}

// unescape appends the decoded content of a string already checked by str.
func unescape(dst, raw []byte) []byte {
	for i := 0; i < len(raw); {
		b := raw[i]
		if b != '\\' {
			j := i + 1
			for j < len(raw) && raw[j] != '\\' {
				j++
			}
			dst = append(dst, raw[i:j]...)
			i = j
			continue
		}
		switch raw[i+1] {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, _ := hex4(raw, i+2)
			if 0xD800 <= r && r < 0xDC00 {
				r2, _ := hex4(raw, i+8)
				r = 0x10000 + (r-0xD800)<<10 + (r2 - 0xDC00)
				i += 6
			}
			dst = utf8.AppendRune(dst, r)
			i += 6
			continue
		default: // '"', '\\', '/'
			dst = append(dst, raw[i+1])
		}
		i += 2
	}
	return dst
}

// key checks the object key at c.pos and returns its unescaped bytes, in
// data when it has no escapes, else appended to *buf.
func (c *checker) key(buf *[]byte) (k []byte, inBuf bool, f *failure) {
	if c.pos >= len(c.data) || c.data[c.pos] != '"' {
		return nil, false, c.syntax("looking for beginning of object key string")
	}
	start := c.pos + 1
	esc, f := c.str()
	if f != nil {
		return nil, false, f
	}
	raw := c.data[start : c.pos-1]
	if !esc {
		return raw, false, nil
	}
	off := len(*buf)
	*buf = unescape(*buf, raw)
	return (*buf)[off:], true, nil
}

// colon consumes the ':' after a key and the whitespace around it.
func (c *checker) colon() *failure {
	c.skipWS()
	if c.pos >= len(c.data) || c.data[c.pos] != ':' {
		return c.syntax("after object key")
	}
	c.pos++
	c.skipWS()
	return nil
}

// next consumes whitespace and the ',' or closing byte after a member or
// element; done reports the closing byte.
func (c *checker) next(close byte, context string) (done bool, f *failure) {
	c.skipWS()
	if c.pos < len(c.data) {
		switch c.data[c.pos] {
		case ',':
			c.pos++
			c.skipWS()
			return false, nil
		case close:
			c.pos++
			return true, nil
		}
	}
	return false, c.syntax(context)
}

func (c *checker) enter() *failure {
	c.depth++
	if c.depth > MaxDepth {
		return failf("nesting deeper than %d", MaxDepth)
	}
	c.pos++
	c.skipWS()
	return nil
}

func (c *checker) structObject(n *node) *failure {
	if f := c.enter(); f != nil {
		return f
	}
	if c.pos < len(c.data) && c.data[c.pos] == '}' {
		c.pos++
		c.depth--
		return nil
	}
	var seen uint64
	guess := 0
	words := 0
	base := len(c.bits)
	if len(n.fields) > 64 {
		words = (len(n.fields) + 63) / 64
		for range words {
			c.bits = append(c.bits, 0)
		}
	}
	for {
		c.scratch = c.scratch[:0]
		k, _, f := c.key(&c.scratch)
		if f != nil {
			return f
		}
		i := n.lookup(k, guess)
		if i < 0 {
			return unknownField(n, k)
		}
		guess = i + 1
		if words == 0 {
			if seen&(1<<uint(i)) != 0 {
				return dupKey(k)
			}
			seen |= 1 << uint(i)
		} else {
			w := &c.bits[base+i/64]
			if *w&(1<<uint(i%64)) != 0 {
				return dupKey(k)
			}
			*w |= 1 << uint(i%64)
		}
		if f := c.colon(); f != nil {
			return f
		}
		fd := &n.fields[i]
		if fd.quoted != kindAny {
			f = c.quoted(fd)
		} else {
			f = c.value(fd.node)
		}
		if f != nil {
			return f.at(fd.seg)
		}
		done, f := c.next('}', "after object key:value pair")
		if f != nil {
			return f
		}
		if done {
			break
		}
	}
	c.bits = c.bits[:base]
	c.depth--
	return nil
}

func unknownField(n *node, k []byte) *failure {
	for _, f := range n.fields {
		if strings.EqualFold(f.name, string(k)) {
			return failf("unknown field %s for %s (the field is %s; names are case-sensitive)",
				strconv.Quote(string(k)), n.typ, strconv.Quote(f.name))
		}
	}
	return failf("unknown field %s for %s", strconv.Quote(string(k)), n.typ)
}

// quoted checks the value of a field with the ,string option: a JSON string
// holding exactly what json.Marshal puts there (or null for a pointer).
func (c *checker) quoted(fd *field) *failure {
	if c.pos >= len(c.data) {
		return c.syntax("")
	}
	b := c.data[c.pos]
	if b == 'n' && fd.qnull {
		return c.literal("null")
	}
	if b != '"' {
		return c.mismatch(fd.node, "a string (the field has the ,string option)")
	}
	start := c.pos
	esc, f := c.str()
	if f != nil {
		return f
	}
	inner := c.data[start+1 : c.pos-1]
	if esc {
		c.scratch = unescape(c.scratch[:0], inner)
		inner = c.scratch
	}
	sub := checker{data: inner}
	ok := len(inner) > 0
	if ok {
		switch fd.quoted {
		case kindBool:
			ok = string(inner) == "true" || string(inner) == "false"
		case kindNumber:
			ok = tokenName(inner[0]) == "number" && sub.number() == nil && sub.pos == len(inner)
			base := fd.node
			if base.kind == kindPtr {
				base = base.elem
			}
			if ok && base.bits != 0 && !floatExact(inner, base.bits) {
				text := string(inner)
				c.pos = start
				return inexactFloat([]byte(text), base.typ)
			}
		case kindString:
			ok = inner[0] == '"'
			if ok {
				_, f := sub.str()
				ok = f == nil && sub.pos == len(inner)
			}
		}
	}
	if !ok {
		what := "a JSON number"
		switch fd.quoted {
		case kindBool:
			what = "true or false"
		case kindString:
			what = "a JSON string"
		}
		c.pos = start
		return failf("string %s for %s with the ,string option does not hold %s",
			strconv.Quote(string(inner)), fd.node.typ, what)
	}
	return nil
}

// base64 checks a []byte value: standard padded base64 with no escapes,
// as json.Marshal writes.
func (c *checker) base64() *failure {
	start := c.pos
	esc, f := c.str()
	if f != nil {
		return f
	}
	s := c.data[start+1 : c.pos-1]
	if esc || !isBase64(s) {
		c.pos = start
		return &failure{reason: "string is not padded standard base64 as json.Marshal writes for []byte"}
	}
	return nil
}

func isBase64(s []byte) bool {
	if len(s)%4 != 0 {
		return false
	}
	n := len(s)
	if n > 0 && s[n-1] == '=' {
		n--
		if s[n-1] == '=' {
			n--
		}
	}
	for _, b := range s[:n] {
		if !('A' <= b && b <= 'Z' || 'a' <= b && b <= 'z' || '0' <= b && b <= '9' || b == '+' || b == '/') {
			return false
		}
	}
	return true
}

func (c *checker) array(n, elem *node, want int) *failure {
	if f := c.enter(); f != nil {
		return f
	}
	count := 0
	if c.pos < len(c.data) && c.data[c.pos] == ']' {
		c.pos++
	} else {
		for {
			if count == want {
				return failf("more than %d elements for %s (json.Marshal writes exactly %d)", want, n.typ, want)
			}
			if f := c.value(elem); f != nil {
				return indexSeg(f, count)
			}
			count++
			done, f := c.next(']', "after array element")
			if f != nil {
				return f
			}
			if done {
				break
			}
		}
	}
	if want >= 0 && count != want {
		return failf("%d elements for %s (json.Marshal writes exactly %d)", count, n.typ, want)
	}
	c.depth--
	return nil
}

func (c *checker) spanBytes(s keySpan) []byte {
	if s.buf {
		return c.keyBuf[s.off:s.end]
	}
	return c.data[s.off:s.end]
}

// object checks a map or free-form object: unique keys of the key kind,
// values against elem.
func (c *checker) object(elem *node, kk keyKind) *failure {
	if f := c.enter(); f != nil {
		return f
	}
	if c.pos < len(c.data) && c.data[c.pos] == '}' {
		c.pos++
		c.depth--
		return nil
	}
	base, bufBase := c.nkeys, len(c.keyBuf)
	var set map[string]struct{}
	for {
		start := c.pos + 1
		k, inBuf, f := c.key(&c.keyBuf)
		if f != nil {
			return f
		}
		sp := keySpan{off: start, end: c.pos - 1}
		if inBuf {
			sp = keySpan{off: len(c.keyBuf) - len(k), end: len(c.keyBuf), buf: true}
		}
		if kk >= keyInt && !canonicalInt(k, kk == keyInt) {
			return badIntKey(k)
		}
		if set == nil {
			for i := base; i < c.nkeys; i++ {
				if string(c.spanBytes(c.keyAt(i))) == string(k) {
					return dupKey(k)
				}
			}
			if c.nkeys-base < smallKeys {
				c.pushKey(sp)
			} else {
				set = c.keySet(base, k)
			}
		} else if f := addToSet(set, k); f != nil {
			return f
		}
		if f := c.colon(); f != nil {
			return f
		}
		if f := c.value(elem); f != nil {
			return keySeg(f, c.spanBytes(sp))
		}
		if set != nil {
			// Keys are in the set now; the buffer space can be reused.
			c.keyBuf = c.keyBuf[:bufBase]
		}
		done, f := c.next('}', "after object key:value pair")
		if f != nil {
			return f
		}
		if done {
			break
		}
	}
	c.nkeys = base
	c.keyBuf = c.keyBuf[:bufBase]
	c.depth--
	return nil
}

// keySet moves the keys of the object whose keys start at base from the
// key stack to a set, with k, once the object has more than smallKeys.
//
//go:noinline
func (c *checker) keySet(base int, k []byte) map[string]struct{} {
	set := make(map[string]struct{}, 4*smallKeys)
	for i := base; i < c.nkeys; i++ {
		set[string(c.spanBytes(c.keyAt(i)))] = struct{}{}
	}
	set[string(k)] = struct{}{}
	c.nkeys = base
	return set
}

//go:noinline
func addToSet(set map[string]struct{}, k []byte) *failure {
	if _, dup := set[string(k)]; dup {
		return dupKey(k)
	}
	set[string(k)] = struct{}{}
	return nil
}

//go:noinline
func dupKey(k []byte) *failure {
	return &failure{reason: "duplicate key " + strconv.Quote(string(k))}
}

//go:noinline
func badIntKey(k []byte) *failure {
	return &failure{reason: "map key " + strconv.Quote(string(k)) + " is not an integer as json.Marshal writes it"}
}

//go:noinline
func keySeg(f *failure, k []byte) *failure {
	return f.at("[" + strconv.Quote(string(k)) + "]")
}

//go:noinline
func indexSeg(f *failure, i int) *failure {
	return f.at("[" + strconv.Itoa(i) + "]")
}

//go:noinline
func nullFail(n *node) *failure {
	if n.kind == kindUnsupported {
		return &failure{reason: n.why}
	}
	return &failure{reason: "null for " + n.typ + ", which json.Marshal never writes as null"}
}

func (c *checker) keyAt(i int) keySpan {
	if i < smallKeys {
		return c.keyArr[i]
	}
	return c.keyMore[i-smallKeys]
}

func (c *checker) pushKey(s keySpan) {
	if c.nkeys < smallKeys {
		c.keyArr[c.nkeys] = s
	} else {
		c.keyMore = append(c.keyMore[:c.nkeys-smallKeys], s)
	}
	c.nkeys++
}

// canonicalInt reports whether k is written as json.Marshal writes integer
// map keys: -?(0|[1-9][0-9]*), no "-0", sign only when signed.
func canonicalInt(k []byte, signed bool) bool {
	if signed && len(k) > 0 && k[0] == '-' {
		k = k[1:]
		if len(k) == 1 && k[0] == '0' {
			return false
		}
	}
	if len(k) == 0 || (k[0] == '0' && len(k) > 1) {
		return false
	}
	for _, b := range k {
		if !isDigit(b) {
			return false
		}
	}
	return true
}

// ---------------------------------------------------------------------------
// Floating-point numbers.

// decimalForm is a JSON number read as a decimal: value = ±0.d₁d₂…dₙ ×
// 10^point, where d₁…dₙ are its significant digits (from the first
// non-zero digit to the last). zero is true for every spelling of zero.
type decimalForm struct {
	neg, zero bool
	mant      []byte // the digits and '.' before the exponent
	first     int    // index in mant of d₁
	last      int    // index in mant of dₙ
	sig       int    // n
	point     int64
	ok        bool // false for an exponent beyond ±1e15 (left to encoding/json)
}

// readDecimal reads a number already checked against the JSON grammar.
func readDecimal(t []byte) decimalForm {
	var d decimalForm
	if len(t) > 0 && t[0] == '-' {
		d.neg = true
		t = t[1:]
	}
	end := len(t)
	var exp int64
	for i, b := range t {
		if b == 'e' || b == 'E' {
			end = i
			e := t[i+1:]
			eneg := false
			if len(e) > 0 && (e[0] == '+' || e[0] == '-') {
				eneg = e[0] == '-'
				e = e[1:]
			}
			for _, b := range e {
				if exp > 1e15 {
					return d // ok false: no float64 is that far out
				}
				exp = exp*10 + int64(b-'0')
			}
			if eneg {
				exp = -exp
			}
			break
		}
	}
	d.mant = t[:end]
	d.first, d.last = -1, -1
	intDigits, digit := int64(0), int64(0)
	seenPoint := false
	var firstDigit int64
	for i, b := range d.mant {
		if b == '.' {
			seenPoint = true
			continue
		}
		if !seenPoint {
			intDigits++
		}
		if b != '0' {
			if d.first < 0 {
				d.first, firstDigit = i, digit
			}
			d.last = i
		}
		digit++
	}
	d.ok = true
	if d.first < 0 {
		d.zero = true
		return d
	}
	for i := d.first; i <= d.last; i++ {
		if d.mant[i] != '.' {
			d.sig++
		}
	}
	d.point = intDigits - firstDigit + exp
	return d
}

// sameDecimal reports whether a and b are the same decimal value.
func sameDecimal(a, b decimalForm) bool {
	if a.zero || b.zero {
		return a.zero == b.zero
	}
	if a.neg != b.neg || a.point != b.point || a.sig != b.sig {
		return false
	}
	i, j := a.first, b.first
	for n := 0; n < a.sig; n++ {
		if a.mant[i] == '.' {
			i++
		}
		if b.mant[j] == '.' {
			j++
		}
		if a.mant[i] != b.mant[j] {
			return false
		}
		i++
		j++
	}
	return true
}

// floatExact reports whether the JSON number text reads back, as a float
// of the given size, with its own value: whether the value json.Marshal
// writes for the float decoded from text is the value text spells (1.0
// and 1e0 are 1; 9007199254740993 reads as 9007199254740992, 1e-400 as
// 0). Numbers too large for the size are left to encoding/json, which
// refuses them.
func floatExact(text []byte, bits int) bool {
	d := readDecimal(text)
	if !d.ok {
		return true
	}
	// Up to 15 (float64) or 6 (float32) significant digits in the normal
	// range, every decimal reads back as itself (DBL_DIG, FLT_DIG).
	maxSig, maxPoint := 15, int64(300)
	if bits == 32 {
		maxSig, maxPoint = 6, 30
	}
	if d.zero || d.sig <= maxSig && -maxPoint <= d.point && d.point <= maxPoint {
		return true
	}
	f, err := strconv.ParseFloat(unsafe.String(unsafe.SliceData(text), len(text)), bits)
	if err != nil {
		return true // out of range: json.Unmarshal reports it
	}
	var buf [32]byte
	back := strconv.AppendFloat(buf[:0], f, 'e', -1, bits)
	return sameDecimal(d, readDecimal(back))
}

//go:noinline
func inexactFloat(text []byte, typ string) *failure {
	if len(text) > 40 {
		text = append(text[:40:40], "…"...)
	}
	return failf("number %s for %s reads back as another value (json.Marshal never writes it for a %s)", text, typ, typ)
}

// CheckJSON checks data as For(nil) does, without building a Schema: any
// well-formed document passes, subject to the syntax, UTF-8, surrogate,
// duplicate-key and depth rules. It returns an *Error (matching
// ErrInvalid) naming the first problem.
func CheckJSON(data []byte) error {
	root := node{kind: kindAny, nullOK: true, typ: "interface {}"}
	s := Schema{root: &root, opaque: true}
	return s.Check(data)
}

// ExactFloat reports whether num, a JSON number, reads back as itself as a
// float of the given size (32 or 64): whether json.Marshal writes the
// float that json.Unmarshal decodes from num as a number of the same
// value. It is the rule Check applies to float fields: 1.0 and 1e2 pass,
// 9007199254740993 (read as 9007199254740992 by a float64) and 1e-400
// (read as 0) do not. Text that is not a JSON number, and numbers too
// large for the size (which json.Unmarshal refuses), pass.
func ExactFloat(num []byte, bits int) bool {
	c := checker{data: num}
	if len(num) == 0 || tokenName(num[0]) != "number" || c.number() != nil || c.pos != len(num) {
		return true
	}
	return floatExact(num, bits)
}
