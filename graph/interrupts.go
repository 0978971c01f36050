package graph

import (
	"bytes"
	"encoding/json"

	"github.com/lockstepgo/lockstep/interrupt"
)

// decodeInterrupts decodes a task's interrupt write: the JSON array that
// json.Marshal writes for []interrupt.Interrupt. The exact form Marshal
// writes ([{"id":"<id>","value":<value>},...] with no space between the
// parts and an ID without escapes) is read directly, which is most of the
// cost of reading a waiting thread's state; anything else goes to
// json.Unmarshal. Both give the same result for the same bytes (a fuzz
// target compares them), and the errors are Unmarshal's.
func decodeInterrupts(b []byte) ([]interrupt.Interrupt, error) {
	if list, ok := readInterrupts(b); ok {
		return list, nil
	}
	var list []interrupt.Interrupt
	err := json.Unmarshal(b, &list)
	return list, err
}

// readInterrupts reads b when it has Marshal's exact form; ok is false
// otherwise.
func readInterrupts(b []byte) (list []interrupt.Interrupt, ok bool) {
	const idKey, valueKey = `{"id":"`, `","value":`
	if len(b) < 2 || b[0] != '[' {
		return nil, false
	}
	if len(b) == 2 && b[1] == ']' {
		return []interrupt.Interrupt{}, true
	}
	i := 1
	for {
		if !bytes.HasPrefix(b[i:], []byte(idKey)) {
			return nil, false
		}
		i += len(idKey)
		n := bytes.IndexByte(b[i:], '"')
		if n < 0 {
			return nil, false
		}
		id := b[i : i+n]
		for _, c := range id {
			if c == '\\' || c < 0x20 || c >= 0x80 {
				return nil, false // escapes, control bytes, non-ASCII: Unmarshal's rules
			}
		}
		i += n
		if !bytes.HasPrefix(b[i:], []byte(valueKey)) {
			return nil, false
		}
		i += len(valueKey)
		end := skipValue(b, i)
		if end <= i || end >= len(b) || b[end] != '}' || !json.Valid(b[i:end]) {
			return nil, false
		}
		list = append(list, interrupt.Interrupt{ID: string(id), Value: bytes.Clone(b[i:end])})
		i = end + 1
		switch {
		case i == len(b)-1 && b[i] == ']':
			return list, true
		case i < len(b) && b[i] == ',':
			i++
		default:
			return nil, false
		}
	}
}

// skipValue returns the end of the JSON value that starts at b[i], as far
// as its brackets and strings go (json.Valid judges the rest), or i when
// none ends in b.
func skipValue(b []byte, i int) int {
	depth := 0
	for j := i; j < len(b); j++ {
		switch c := b[j]; c {
		case '"':
			for j++; j < len(b) && b[j] != '"'; j++ {
				if b[j] == '\\' {
					j++
				}
			}
			if j >= len(b) {
				return i
			}
			if depth == 0 {
				return j + 1
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return j // a scalar ended by its container
			}
			if depth--; depth == 0 {
				return j + 1
			}
		case ',':
			if depth == 0 {
				return j
			}
		}
	}
	return i
}
