package sqlite

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/internal/strictjson"
)

// This file encodes and decodes the JSON columns of a checkpoint row. The
// encoders write compact JSON with sorted keys; the decoders are small
// validating scanners that return stored values byte for byte (a value is
// everything between the ':' or '[' that opens it and the ',', '}' or ']'
// that closes it, exactly as the caller gave it) and share the row's
// bytes instead of copying them.
//
//	channels     {"<channel>":{"value":<json>}, "<channel>":{"append":<json>,"base":"<version>"}, ...}
//	task_writes  [{"task_id":"..","node":"..","path":"..","writes":[["<channel>",<json>] or ["<channel>"], ...]}, ...]
//
// A task write whose value is byte for byte the data the row holds for
// that channel in channels (the usual case: a node's update is what the
// checkpoint stores, or for an append channel the items it appended) is
// written as ["<channel>"] and read back from channels: the row stores
// those bytes once.
//	versions     {"<channel>":"<version>", ...}

// errNotUTF8 is wrapped for names JSON cannot store exactly.
var errNotUTF8 = errors.New("is not valid UTF-8 (JSON cannot store it exactly)")

// plainByte[c] is true for the bytes appendString copies as they are.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// appendString appends s as a JSON string. s must be valid UTF-8.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if plainByte[c] {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			const hex = "0123456789abcdef"
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendTime appends t in UTC as timeLayout does (RFC 3339, nine
// fraction digits), without time.Format's layout parsing.
func appendTime(b []byte, t time.Time) []byte {
	t = t.UTC()
	year, month, day := t.Date()
	hour, min, sec := t.Clock()
	if year < 0 || year > 9999 {
		return t.AppendFormat(b, timeLayout)
	}
	digits := func(b []byte, v, n int) []byte {
		for i := n - 1; i >= 0; i-- {
			b[i] = byte('0' + v%10)
			v /= 10
		}
		return b
	}
	var buf [30]byte
	digits(buf[0:4], year, 4)
	buf[4] = '-'
	digits(buf[5:7], int(month), 2)
	buf[7] = '-'
	digits(buf[8:10], day, 2)
	buf[10] = 'T'
	digits(buf[11:13], hour, 2)
	buf[13] = ':'
	digits(buf[14:16], min, 2)
	buf[16] = ':'
	digits(buf[17:19], sec, 2)
	buf[19] = '.'
	digits(buf[20:29], t.Nanosecond(), 9)
	buf[29] = 'Z'
	return append(b, buf[:]...)
}

func checkUTF8(what, s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s %q %v", checkpoint.ErrInvalid, what, s, errNotUTF8)
	}
	return nil
}

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[string]V) []string {
	return appendSortedKeys(make([]string, 0, len(m)), m)
}

// appendSortedKeys appends the keys of m to dst and sorts them (dst may be
// a small array on the caller's stack).
func appendSortedKeys[V any](dst []string, m map[string]V) []string {
	for k := range m {
		dst = append(dst, k)
	}
	slices.Sort(dst)
	return dst
}

// encodeVersions appends the versions object.
func encodeVersions(dst []byte, versions map[string]string) ([]byte, error) {
	dst = append(dst, '{')
	var stack [16]string
	for i, ch := range appendSortedKeys(stack[:0], versions) {
		v := versions[ch]
		if err := checkUTF8("channel", ch); err != nil {
			return nil, err
		}
		if err := checkUTF8("version", v); err != nil {
			return nil, err
		}
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendString(dst, ch)
		dst = append(dst, ':')
		dst = appendString(dst, v)
	}
	return append(dst, '}'), nil
}

// encodeChannels appends the channels object of a Put: the blob of every
// changed channel.
func encodeChannels(dst []byte, chans map[string][]checkpoint.Blob) ([]byte, error) {
	dst = append(dst, '{')
	var stack [16]string
	for i, ch := range appendSortedKeys(stack[:0], chans) {
		if err := checkUTF8("channel", ch); err != nil {
			return nil, err
		}
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendBlob(appendString(dst, ch), chans[ch][0])
	}
	return append(dst, '}'), nil
}

// appendBlob appends ':' and the blob's object.
func appendBlob(dst []byte, b checkpoint.Blob) []byte {
	if b.Append {
		dst = append(dst, `:{"append":`...)
		dst = append(dst, b.Data...)
		dst = append(dst, `,"base":`...)
		dst = appendString(dst, b.Base)
		return append(dst, '}')
	}
	dst = append(dst, `:{"value":`...)
	dst = append(dst, b.Data...)
	return append(dst, '}')
}

// encodeTaskWrites appends the task_writes array, or returns dst unchanged
// (NULL) when there is no task. chans are the channels the same row
// stores: a write whose value equals a channel's data refers to it.
func encodeTaskWrites(dst []byte, tasks []checkpoint.TaskWrites, chans map[string][]checkpoint.Blob) ([]byte, error) {
	if len(tasks) == 0 {
		return dst, nil
	}
	dst = append(dst, '[')
	for i, t := range tasks {
		for _, s := range [...]struct{ what, v string }{{"task ID", t.TaskID}, {"node", t.Node}, {"path", t.Path}} {
			if err := checkUTF8(s.what, s.v); err != nil {
				return nil, err
			}
		}
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"task_id":`...)
		dst = appendString(dst, t.TaskID)
		dst = append(dst, `,"node":`...)
		dst = appendString(dst, t.Node)
		dst = append(dst, `,"path":`...)
		dst = appendString(dst, t.Path)
		dst = append(dst, `,"writes":[`...)
		for j, w := range t.Writes {
			if err := checkUTF8("channel", w.Channel); err != nil {
				return nil, err
			}
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, '[')
			dst = appendString(dst, w.Channel)
			if !sameAsChannel(chans, w) {
				dst = append(dst, ',')
				dst = append(dst, w.Value...)
			}
			dst = append(dst, ']')
		}
		dst = append(dst, "]}"...)
	}
	return append(dst, ']'), nil
}

// sameAsChannel reports whether task write w's value is byte for byte
// the data the row holds for its channel, so that the row stores it once
// (a write written as ["<channel>"]).
func sameAsChannel(chans map[string][]checkpoint.Blob, w checkpoint.Write) bool {
	bs := chans[w.Channel]
	return len(bs) > 0 && bytes.Equal(bs[0].Data, w.Value)
}

// rowCRC is the CRC-32C of everything a checkpoint row holds (its key
// included), each part followed by a NUL byte so that moving bytes from
// one part to the next changes the sum. encodeRow computes the same sum
// over the row it builds.
func rowCRC(thread, ns, id, parent string, step int64, source, created string, metadata, versions, channels, taskWrites []byte, mark string, pruned bool) int64 {
	var c uint32
	var num [24]byte
	c = crcPart(c, thread)
	c = crcPart(c, ns)
	c = crcPart(c, id)
	c = crcPart(c, parent)
	c = crcBytes(c, strconv.AppendInt(num[:0], step, 10))
	c = crcPart(c, source)
	c = crcPart(c, created)
	c = crcBytes(c, metadata)
	c = crcBytes(c, versions)
	c = crcBytes(c, channels)
	c = crcBytes(c, taskWrites)
	c = crcPart(c, mark)
	if pruned {
		c = crcPart(c, "1")
	} else {
		c = crcPart(c, "0")
	}
	return int64(c)
}

func crcBytes(c uint32, p []byte) uint32 {
	c = crc32.Update(c, castagnoli, p)
	return crc32.Update(c, castagnoli, sep)
}

// crcPart adds s and a NUL. The CRC reads s's bytes in place (a read-only
// view, never written to or kept), rather than converting s to a new slice.
func crcPart(c uint32, s string) uint32 {
	c = crc32.Update(c, castagnoli, unsafe.Slice(unsafe.StringData(s), len(s)))
	return crc32.Update(c, castagnoli, sep)
}

// scanner reads JSON written by the encoders above, validating it.
type scanner struct {
	b     []byte
	i     int
	depth int
}

var errSyntax = errors.New("invalid JSON")

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// next skips whitespace and returns the next byte (0 at the end).
func (s *scanner) next() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func (s *scanner) expect(c byte) error {
	if s.next() != c {
		return s.errorf("want %q", c)
	}
	s.i++
	return nil
}

func (s *scanner) errorf(format string, args ...any) error {
	return fmt.Errorf("%w at offset %d: %s", errSyntax, s.i, fmt.Sprintf(format, args...))
}

// str reads a JSON string.
func (s *scanner) str() (string, error) {
	b, err := s.strBytes()
	return string(b), err
}

// strBytes reads a JSON string and returns its bytes: a slice of s.b when
// the string has no escapes, else its decoded copy. The strings it reads
// are names (channels, versions, tasks, parents), which the encoders
// write as valid UTF-8 without surrogate escapes: bytes that are not
// UTF-8 and the escape of a lone surrogate, which encoding/json would
// decode to U+FFFD (another name), are refused.
func (s *scanner) strBytes() ([]byte, error) {
	if s.next() != '"' {
		return nil, s.errorf("want a string")
	}
	start := s.i
	s.i++
	plain := true
	for {
		if s.i >= len(s.b) {
			return nil, s.errorf("unterminated string")
		}
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			raw := s.b[start+1 : s.i-1]
			if !utf8.Valid(raw) {
				return nil, s.errorf("string is not valid UTF-8")
			}
			if plain {
				return raw, nil
			}
			if err := strictjson.CheckJSON(s.b[start:s.i]); err != nil {
				return nil, s.errorf("string: %v", err) // a lone surrogate escape
			}
			var out string
			if err := json.Unmarshal(s.b[start:s.i], &out); err != nil {
				return nil, s.errorf("string: %v", err)
			}
			return []byte(out), nil
		case c == '\\':
			plain = false
			if err := s.escape(); err != nil {
				return nil, err
			}
		case c < 0x20:
			return nil, s.errorf("control character in string")
		default:
			s.i++
		}
	}
}

// escape checks the escape sequence at s.i and moves past it.
func (s *scanner) escape() error {
	if s.i+1 >= len(s.b) {
		return s.errorf("unterminated escape")
	}
	switch s.b[s.i+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		s.i += 2
		return nil
	case 'u':
		if s.i+6 > len(s.b) {
			return s.errorf("short \\u escape")
		}
		for _, h := range s.b[s.i+2 : s.i+6] {
			if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
				return s.errorf("bad \\u escape")
			}
		}
		s.i += 6
		return nil
	}
	return s.errorf("bad escape")
}

// strStop reports whether any byte of w (eight bytes of a string) is a
// '"', a '\\' or below 0x20, the bytes skip looks at. It may report true
// when none is (skip then goes byte by byte), never false when one is: the
// first such byte always sets its high bit, a false positive can only come
// from a borrow out of a byte below it.
func strStop(w uint64) bool {
	const lsb, msb = 0x0101010101010101, 0x8080808080808080
	q := w ^ (lsb * '"')
	e := w ^ (lsb * '\\')
	return (((w-lsb*0x20)&^w)|((q-lsb)&^q)|((e-lsb)&^e))&msb != 0
}

// maxDepth bounds nesting, as encoding/json does.
const maxDepth = 10000

// skip validates one JSON value and moves past it.
func (s *scanner) skip() error {
	switch c := s.next(); {
	case c == '"':
		s.i++
		for {
			// Eight bytes at a time while none ends the string or needs
			// a look (the strings of values are mostly plain text).
			for s.i+8 <= len(s.b) && !strStop(binary.LittleEndian.Uint64(s.b[s.i:])) {
				s.i += 8
			}
			if s.i >= len(s.b) {
				return s.errorf("unterminated string")
			}
			c := s.b[s.i]
			switch {
			case c == '"':
				s.i++
				return nil
			case c == '\\':
				if err := s.escape(); err != nil {
					return err
				}
			case c < 0x20:
				return s.errorf("control character in string")
			default:
				s.i++
			}
		}
	case c == '{' || c == '[':
		s.depth++
		if s.depth > maxDepth {
			return s.errorf("nested too deeply")
		}
		s.i++
		end := byte('}')
		if c == '[' {
			end = ']'
		}
		if s.next() == end {
			s.i++
			s.depth--
			return nil
		}
		for {
			if c == '{' {
				if s.next() != '"' {
					return s.errorf("want a key")
				}
				if err := s.skip(); err != nil {
					return err
				}
				if err := s.expect(':'); err != nil {
					return err
				}
			}
			if err := s.skip(); err != nil {
				return err
			}
			switch s.next() {
			case ',':
				s.i++
			case end:
				s.i++
				s.depth--
				return nil
			default:
				return s.errorf("want ',' or %q", end)
			}
		}
	case c == '-' || c >= '0' && c <= '9':
		return s.number()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	}
	return s.errorf("want a value")
}

func (s *scanner) literal(lit string) error {
	if len(s.b)-s.i < len(lit) || string(s.b[s.i:s.i+len(lit)]) != lit {
		return s.errorf("want %s", lit)
	}
	s.i += len(lit)
	return nil
}

func (s *scanner) digits() int {
	n := 0
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
		n++
	}
	return n
}

// number validates a JSON number.
func (s *scanner) number() error {
	if s.b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(s.b) && s.b[s.i] == '0':
		s.i++
	case s.digits() == 0:
		return s.errorf("bad number")
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if s.digits() == 0 {
			return s.errorf("bad fraction")
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if s.digits() == 0 {
			return s.errorf("bad exponent")
		}
	}
	return nil
}

// raw validates the value at s.i and returns its bytes as stored, from
// where it starts to the next ',', '}' or ']' (whitespace included: the
// encoders write none of their own). The result shares s.b and has no
// spare capacity.
func (s *scanner) raw() (json.RawMessage, error) {
	start := s.i
	if err := s.skip(); err != nil {
		return nil, err
	}
	s.ws()
	return s.b[start:s.i:s.i], nil
}

// end checks that nothing but whitespace follows.
func (s *scanner) end() error {
	if s.ws(); s.i != len(s.b) {
		return s.errorf("data after the value")
	}
	return nil
}

// members calls fn for every member of the object at s.i; fn reads the
// member's value.
func (s *scanner) members(fn func(key []byte) error) error {
	if err := s.expect('{'); err != nil {
		return err
	}
	if s.next() == '}' {
		s.i++
		return nil
	}
	for {
		key, err := s.strBytes()
		if err != nil {
			return err
		}
		if err := s.expect(':'); err != nil {
			return err
		}
		if err := fn(key); err != nil {
			return err
		}
		switch s.next() {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		default:
			return s.errorf("want ',' or '}'")
		}
	}
}

// elements calls fn for every element of the array at s.i.
func (s *scanner) elements(fn func() error) error {
	if err := s.expect('['); err != nil {
		return err
	}
	if s.next() == ']' {
		s.i++
		return nil
	}
	for {
		if err := fn(); err != nil {
			return err
		}
		switch s.next() {
		case ',':
			s.i++
		case ']':
			s.i++
			return nil
		default:
			return s.errorf("want ',' or ']'")
		}
	}
}

// chanBlob is one decoded entry of a channels column.
type chanBlob struct {
	channel string
	blob    checkpoint.Blob
}

// decodeChannels decodes a channels column written at version.
func decodeChannels(b []byte, version string) ([]chanBlob, error) {
	s := &scanner{b: b}
	var out []chanBlob
	err := s.members(func(key []byte) error {
		for _, prev := range out {
			if prev.channel == string(key) {
				return fmt.Errorf("channel %q twice", key)
			}
		}
		ch := string(key)
		e := chanBlob{channel: ch, blob: checkpoint.Blob{Version: version}}
		var hasValue, hasAppend, hasBase bool
		err := s.members(func(k []byte) error {
			var err error
			switch string(k) {
			case "value":
				if hasValue || hasAppend {
					return fmt.Errorf("channel %q: two values", ch)
				}
				hasValue = true
				e.blob.Data, err = s.raw()
			case "append":
				if hasValue || hasAppend {
					return fmt.Errorf("channel %q: two values", ch)
				}
				hasAppend, e.blob.Append = true, true
				e.blob.Data, err = s.raw()
			case "base":
				if hasBase {
					return fmt.Errorf("channel %q: two bases", ch)
				}
				hasBase = true
				e.blob.Base, err = s.str()
			default:
				return fmt.Errorf("channel %q: unknown key %q", ch, k)
			}
			return err
		})
		if err != nil {
			return err
		}
		if !hasValue && !hasAppend || hasBase != hasAppend {
			return fmt.Errorf("channel %q: want {\"value\"} or {\"append\", \"base\"}", ch)
		}
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, s.end()
}

// decodeTaskWrites decodes a task_writes column (empty: no task) into
// pending writes with their WriteIndex. chans are the row's decoded
// channels, which writes written as ["<channel>"] read their value from.
func decodeTaskWrites(b []byte, chans []chanBlob) ([]indexedWrite, error) {
	if len(b) == 0 {
		return nil, nil
	}
	s := &scanner{b: b}
	var out []indexedWrite
	err := s.elements(func() error {
		var task checkpoint.PendingWrite
		var writes []indexedWrite
		seen := 0
		err := s.members(func(k []byte) error {
			var err error
			switch string(k) {
			case "task_id":
				task.TaskID, err = s.str()
			case "node":
				task.Node, err = s.str()
			case "path":
				task.Path, err = s.str()
			case "writes":
				pos := 0
				err = s.elements(func() error {
					if err := s.expect('['); err != nil {
						return err
					}
					ch, err := s.str()
					if err != nil {
						return err
					}
					var v json.RawMessage
					if s.next() == ']' {
						for _, e := range chans {
							if e.channel == ch {
								v = e.blob.Data
							}
						}
						if v == nil {
							return fmt.Errorf("a write refers to channel %q, which the row does not hold", ch)
						}
					} else {
						if err := s.expect(','); err != nil {
							return err
						}
						if v, err = s.raw(); err != nil {
							return err
						}
					}
					if err := s.expect(']'); err != nil {
						return err
					}
					writes = append(writes, indexedWrite{w: checkpoint.PendingWrite{Channel: ch, Value: v}, idx: checkpoint.WriteIndex(ch, pos)})
					pos++
					return nil
				})
			default:
				return fmt.Errorf("unknown key %q in a task", k)
			}
			seen++
			return err
		})
		if err != nil {
			return err
		}
		if seen != 4 || task.TaskID == "" {
			return errors.New("a task needs task_id, node, path and writes")
		}
		for i := range writes {
			writes[i].w.TaskID, writes[i].w.Node, writes[i].w.Path = task.TaskID, task.Node, task.Path
		}
		out = append(out, writes...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, s.end()
}

// decodeVersions decodes a versions column.
func decodeVersions(b []byte) (map[string]string, error) {
	s := &scanner{b: b}
	out := map[string]string{}
	err := s.members(func(ch []byte) error {
		if _, dup := out[string(ch)]; dup {
			return fmt.Errorf("channel %q twice", ch)
		}
		v, err := s.str()
		out[string(ch)] = v
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, s.end()
}

// errUnusual: metadata the fast decoder leaves to Metadata.UnmarshalJSON.
var errUnusual = errors.New("unusual metadata")

// decodeMetadata decodes a metadata column. The usual object
// (durability-mode, parents, run_id, source, step and topology-fp, as
// appendMetadata writes it, each
// once) is read by the scanner; anything else (caller keys, other shapes, invalid
// JSON) by Metadata.UnmarshalJSON, so that both decode alike, as strictly
// as MarshalJSON writes.
func decodeMetadata(b []byte) (checkpoint.Metadata, error) {
	var m checkpoint.Metadata
	if err := strictjson.CheckJSON(b); err != nil {
		return m, err
	}
	s := &scanner{b: b}
	var seen [6]bool // parents, run_id, source, step, topology-fp, durability-mode
	once := func(i int) error {
		if seen[i] {
			return errUnusual
		}
		seen[i] = true
		return nil
	}
	err := s.members(func(k []byte) error {
		var err error
		switch string(k) {
		case "parents":
			if err := once(0); err != nil {
				return err
			}
			if s.next() != '{' {
				return errUnusual
			}
			m.Parents = map[string]string{}
			return s.members(func(pk []byte) error {
				if s.next() != '"' {
					return errUnusual
				}
				v, err := s.str()
				m.Parents[string(pk)] = v
				return err
			})
		case "run_id", "source", checkpoint.TopologyFilter, checkpoint.DurabilityFilter:
			i, dst := 1, &m.RunID
			switch string(k) {
			case "source":
				i, dst = 2, (*string)(&m.Source)
			case checkpoint.TopologyFilter:
				i, dst = 4, &m.Topology
			case checkpoint.DurabilityFilter:
				i, dst = 5, &m.Durability
			}
			if err := once(i); err != nil {
				return err
			}
			if s.next() != '"' {
				return errUnusual
			}
			*dst, err = s.str()
			if err == nil && i == 5 && !durabilityMode(m.Durability) {
				err = errUnusual // UnmarshalJSON says what is wrong
			}
		case "step":
			if err := once(3); err != nil {
				return err
			}
			if c := s.next(); c != '-' && (c < '0' || c > '9') {
				return errUnusual
			}
			start := s.i
			if s.number() != nil || bytes.ContainsAny(s.b[start:s.i], ".eE") {
				return errUnusual
			}
			n, perr := strconv.Atoi(string(s.b[start:s.i]))
			if perr != nil {
				return errUnusual
			}
			if c := s.next(); c != ',' && c != '}' {
				return errUnusual
			}
			m.Step = n
		default:
			return errUnusual
		}
		return err
	})
	if err == nil {
		err = s.end()
	}
	if err == nil && (!seen[0] || !seen[2] || !seen[3]) {
		err = errUnusual // a key is missing: UnmarshalJSON says which
	}
	if err != nil {
		m = checkpoint.Metadata{}
		err = json.Unmarshal(b, &m)
	}
	return m, err
}

// durabilityMode reports whether d is a durability mode a checkpoint may
// record (checkpoint.DurabilityModes).
func durabilityMode(d string) bool {
	return slices.Contains(checkpoint.DurabilityModes[:], d)
}
