package strictjson

import (
	"encoding"
	"encoding/base64"
	"reflect"
	"strconv"
	"unsafe"
)

// Decode decodes data, which Check accepted for the schema's type, into
// v, a settable zero value of that type, as json.Unmarshal would: the
// same value, without encoding/json's second scan of the document (its
// validity check) and without its per-value reflection lookups. It
// reports false, leaving v in an unspecified state, when it does not
// decode the document itself: the schema's type is opaque (Opaque: an
// interface or a type with its own JSON or text methods, whose bytes
// only encoding/json may interpret), a struct field has the ,string
// option or is promoted through an embedded pointer, a map's key type
// decodes through its own UnmarshalText, or a value is one Unmarshal
// refuses (a number out of the field's range). The caller then decodes a
// fresh value with json.Unmarshal, which gives the answer (or the error).
// Decode never panics on data Check accepted, and on other data it
// reports false or decodes some value: it is not a validator.
func (s *Schema) Decode(data []byte, v reflect.Value) bool {
	if s == nil || !s.decodable || !v.CanSet() || v.Type() != s.root.rt {
		return false
	}
	d := decoder{data: data}
	return d.value(s.root, v) && d.end()
}

// Decodable reports whether Decode decodes documents of the schema's type
// itself (it may still report false for one document).
func (s *Schema) Decodable() bool { return s != nil && s.decodable }

// decodable reports whether every node of the compiled type is one Decode
// handles.
func (c *compiler) decodable() bool {
	textUnmarshaler := reflect.TypeFor[encoding.TextUnmarshaler]()
	for t, n := range c.nodes {
		switch n.kind {
		case kindMap:
			if k := t.Key(); k.Implements(textUnmarshaler) || reflect.PointerTo(k).Implements(textUnmarshaler) {
				return false
			}
		case kindStruct:
			for _, f := range n.fields {
				if f.quoted != kindAny || f.qnull {
					return false
				}
				// A path through embedded structs: each step a struct,
				// never a pointer Unmarshal would have to allocate.
				st := t
				for _, i := range f.index[:len(f.index)-1] {
					st = st.Field(i).Type
					if st.Kind() != reflect.Struct {
						return false
					}
				}
			}
		case kindNumber, kindBool, kindString, kindBytes, kindSlice, kindArray, kindPtr:
		default:
			return false
		}
	}
	return true
}

// decoder walks a document Check accepted.
type decoder struct {
	data []byte
	pos  int
	buf  []byte // unescaped object keys
}

func (d *decoder) ws() {
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

// end reports whether only whitespace is left.
func (d *decoder) end() bool {
	d.ws()
	return d.pos == len(d.data)
}

// peek returns the next byte after whitespace, or 0 at the end.
func (d *decoder) peek() byte {
	d.ws()
	if d.pos >= len(d.data) {
		return 0
	}
	return d.data[d.pos]
}

// literal consumes lit at d.pos.
func (d *decoder) literal(lit string) bool {
	if len(d.data)-d.pos < len(lit) || string(d.data[d.pos:d.pos+len(lit)]) != lit {
		return false
	}
	d.pos += len(lit)
	return true
}

// str consumes the string at d.pos (a '"') and returns its raw content
// and whether it has escapes.
func (d *decoder) str() (raw []byte, esc bool, ok bool) {
	b := d.data
	start := d.pos + 1
	i := start
	for {
		for i+8 <= len(b) && !needsLook(leUint64(b[i:])) {
			i += 8
		}
		for i < len(b) && b[i] != '"' && b[i] != '\\' {
			i++
		}
		if i >= len(b) {
			return nil, false, false
		}
		if b[i] == '"' {
			d.pos = i + 1
			return b[start:i], esc, true
		}
		esc = true
		if i+1 >= len(b) {
			return nil, false, false
		}
		if b[i+1] == 'u' {
			i += 6
		} else {
			i += 2
		}
	}
}

func leUint64(b []byte) uint64 {
	_ = b[7]
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

// text returns the decoded string at d.pos.
func (d *decoder) text() (string, bool) {
	raw, esc, ok := d.str()
	if !ok {
		return "", false
	}
	if !esc {
		return string(raw), true
	}
	return string(unescape(make([]byte, 0, len(raw)), raw)), true
}

// key returns the decoded object key at d.pos, valid until the next key,
// and consumes the colon after it.
func (d *decoder) key() ([]byte, bool) {
	if d.peek() != '"' {
		return nil, false
	}
	raw, esc, ok := d.str()
	if !ok {
		return nil, false
	}
	if esc {
		d.buf = unescape(d.buf[:0], raw)
		raw = d.buf
	}
	if d.peek() != ':' {
		return nil, false
	}
	d.pos++
	return raw, true
}

// more consumes the ',' or the closing byte after a member or element
// and reports whether another follows.
func (d *decoder) more(close byte) (more, ok bool) {
	switch d.peek() {
	case ',':
		d.pos++
		return true, true
	case close:
		d.pos++
		return false, true
	}
	return false, false
}

// open consumes the opening byte of an array or object and reports
// whether it is empty (and then consumes its closing byte too).
func (d *decoder) open(open, close byte) (empty, ok bool) {
	if d.peek() != open {
		return false, false
	}
	d.pos++
	if d.peek() == close {
		d.pos++
		return true, true
	}
	return false, true
}

// value decodes the value at d.pos into v, a zero value of n's type.
func (d *decoder) value(n *node, v reflect.Value) bool {
	c := d.peek()
	if c == 'n' {
		// null leaves a zero value as it is, as Unmarshal does (Check
		// allowed it only where Marshal writes it).
		return d.literal("null")
	}
	switch n.kind {
	case kindBool:
		if d.literal("true") {
			v.SetBool(true)
			return true
		}
		return d.literal("false")
	case kindNumber:
		return d.number(v)
	case kindString:
		if c != '"' {
			return false
		}
		s, ok := d.text()
		v.SetString(s)
		return ok
	case kindBytes:
		if c != '"' {
			return false
		}
		raw, esc, ok := d.str()
		if !ok || esc {
			return false // base64 has no escapes
		}
		b := make([]byte, base64.StdEncoding.DecodedLen(len(raw)))
		m, err := base64.StdEncoding.Decode(b, raw)
		if err != nil {
			return false
		}
		v.SetBytes(b[:m])
		return true
	case kindPtr:
		p := reflect.New(n.rt.Elem())
		if !d.value(n.elem, p.Elem()) {
			return false
		}
		v.Set(p)
		return true
	case kindSlice:
		return d.slice(n, v)
	case kindArray:
		empty, ok := d.open('[', ']')
		if !ok {
			return false
		}
		for i := 0; !empty; i++ {
			if i >= v.Len() || !d.value(n.elem, v.Index(i)) {
				return false
			}
			more, ok := d.more(']')
			if !ok {
				return false
			}
			empty = !more
		}
		return true
	case kindMap:
		return d.object(n, v)
	case kindStruct:
		return d.structObject(n, v)
	}
	return false
}

func (d *decoder) slice(n *node, v reflect.Value) bool {
	empty, ok := d.open('[', ']')
	if !ok {
		return false
	}
	s := reflect.MakeSlice(n.rt, 0, 4)
	for i := 0; !empty; i++ {
		if i == s.Cap() {
			grown := reflect.MakeSlice(n.rt, i, 2*i)
			reflect.Copy(grown, s)
			s = grown
		}
		s = s.Slice(0, i+1)
		if !d.value(n.elem, s.Index(i)) {
			return false
		}
		more, ok := d.more(']')
		if !ok {
			return false
		}
		empty = !more
	}
	v.Set(s)
	return true
}

func (d *decoder) object(n *node, v reflect.Value) bool {
	empty, ok := d.open('{', '}')
	if !ok {
		return false
	}
	m := reflect.MakeMap(n.rt)
	kt, et := n.rt.Key(), n.rt.Elem()
	for !empty {
		k, ok := d.key()
		if !ok {
			return false
		}
		kv := reflect.New(kt).Elem()
		switch n.keys {
		case keyString:
			kv.SetString(string(k))
		case keyInt:
			i, err := strconv.ParseInt(unsafe.String(unsafe.SliceData(k), len(k)), 10, 64)
			if err != nil || kv.OverflowInt(i) {
				return false
			}
			kv.SetInt(i)
		case keyUint:
			u, err := strconv.ParseUint(unsafe.String(unsafe.SliceData(k), len(k)), 10, 64)
			if err != nil || kv.OverflowUint(u) {
				return false
			}
			kv.SetUint(u)
		default:
			return false
		}
		ev := reflect.New(et).Elem()
		if !d.value(n.elem, ev) {
			return false
		}
		m.SetMapIndex(kv, ev)
		more, ok := d.more('}')
		if !ok {
			return false
		}
		empty = !more
	}
	v.Set(m)
	return true
}

func (d *decoder) structObject(n *node, v reflect.Value) bool {
	empty, ok := d.open('{', '}')
	if !ok {
		return false
	}
	for next := 0; !empty; {
		k, ok := d.key()
		if !ok {
			return false
		}
		i := n.lookup(k, next)
		if i < 0 {
			return false
		}
		next = i + 1
		f := &n.fields[i]
		fv := v
		for _, x := range f.index {
			fv = fv.Field(x)
		}
		if !fv.CanSet() || !d.value(f.node, fv) {
			return false
		}
		more, ok := d.more('}')
		if !ok {
			return false
		}
		empty = !more
	}
	return true
}

// number decodes the number at d.pos into v as Unmarshal does: an
// integer kind from a decimal integer in its range, a float kind by
// strconv.ParseFloat at its size, a json.Number as its text.
func (d *decoder) number(v reflect.Value) bool {
	start := d.pos
	for d.pos < len(d.data) {
		switch c := d.data[d.pos]; {
		case '0' <= c && c <= '9', c == '-', c == '+', c == '.', c == 'e', c == 'E':
			d.pos++
			continue
		}
		break
	}
	lit := d.data[start:d.pos]
	if len(lit) == 0 {
		return false
	}
	s := unsafe.String(unsafe.SliceData(lit), len(lit)) // not retained: errors are dropped
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		i, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v.OverflowInt(i) {
			return false
		}
		v.SetInt(i)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		u, err := strconv.ParseUint(s, 10, 64)
		if err != nil || v.OverflowUint(u) {
			return false
		}
		v.SetUint(u)
	case reflect.Float32, reflect.Float64:
		f, err := strconv.ParseFloat(s, v.Type().Bits())
		if err != nil || v.OverflowFloat(f) {
			return false
		}
		v.SetFloat(f)
	case reflect.String: // json.Number
		v.SetString(string(lit))
	default:
		return false
	}
	return true
}
