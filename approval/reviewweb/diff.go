package reviewweb

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"github.com/lockstepgo/lockstep/internal/canon"
)

// Change is one difference between the original arguments of a call and
// an edit of them, at a JSON path ("$.nights", "$.rooms[1].guest").
type Change struct {
	Path string `json:"path"`
	// Op is "changed", "added" or "removed".
	Op string `json:"op"`
	// Old and New are the values as compact JSON; Old is empty for an
	// addition and New for a removal.
	Old json.RawMessage `json:"old,omitempty"`
	New json.RawMessage `json:"new,omitempty"`
}

// maxChanges caps a diff; a larger one ends with a change at path "…"
// that says how many were left out.
const maxChanges = 200

// diffJSON compares two JSON documents value by value: objects key by key,
// arrays index by index, anything else as a whole, each in canonical form
// (so 1 and 1.0 are the same value, as they are to the approval's hash).
// Both must be valid JSON; it returns an error otherwise.
func diffJSON(old, edited []byte) ([]Change, error) {
	if c, err := canon.JSON(old); err == nil {
		old = c
	}
	if c, err := canon.JSON(edited); err == nil {
		edited = c
	}
	var a, b any
	if err := decodeNumbers(old, &a); err != nil {
		return nil, fmt.Errorf("the original arguments: %w", err)
	}
	if err := decodeNumbers(edited, &b); err != nil {
		return nil, fmt.Errorf("the edited arguments: %w", err)
	}
	var out []Change
	total := 0
	emit := func(c Change) {
		total++
		if len(out) < maxChanges {
			out = append(out, c)
		}
	}
	var walk func(path string, x, y any)
	walk = func(path string, x, y any) {
		xm, xok := x.(map[string]any)
		ym, yok := y.(map[string]any)
		if xok && yok {
			keys := make([]string, 0, len(xm)+len(ym))
			for k := range xm {
				keys = append(keys, k)
			}
			for k := range ym {
				if _, ok := xm[k]; !ok {
					keys = append(keys, k)
				}
			}
			slices.Sort(keys)
			for _, k := range keys {
				p := path + "." + k
				xv, inX := xm[k]
				yv, inY := ym[k]
				switch {
				case !inY:
					emit(Change{Path: p, Op: "removed", Old: compact(xv)})
				case !inX:
					emit(Change{Path: p, Op: "added", New: compact(yv)})
				default:
					walk(p, xv, yv)
				}
			}
			return
		}
		xa, xok := x.([]any)
		ya, yok := y.([]any)
		if xok && yok {
			for i := range max(len(xa), len(ya)) {
				p := path + "[" + strconv.Itoa(i) + "]"
				switch {
				case i >= len(ya):
					emit(Change{Path: p, Op: "removed", Old: compact(xa[i])})
				case i >= len(xa):
					emit(Change{Path: p, Op: "added", New: compact(ya[i])})
				default:
					walk(p, xa[i], ya[i])
				}
			}
			return
		}
		ox, oy := compact(x), compact(y)
		if !bytes.Equal(ox, oy) {
			emit(Change{Path: path, Op: "changed", Old: ox, New: oy})
		}
	}
	walk("$", a, b)
	if total > len(out) {
		out = append(out, Change{Path: "…", Op: "changed", New: json.RawMessage(strconv.Quote(fmt.Sprintf("%d more changes not listed", total-len(out))))})
	}
	return out, nil
}

func decodeNumbers(b []byte, v *any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("trailing data after the JSON value")
	}
	return nil
}

// compact encodes a decoded value without HTML escaping.
func compact(v any) json.RawMessage {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return json.RawMessage(`null`)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}
