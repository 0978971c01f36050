package checkpoint

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// decodeValue decodes one JSON value as Metadata returns caller values:
// numbers as json.Number.
func decodeValue(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if d.More() {
		return nil, fmt.Errorf("data after the JSON value")
	}
	return v, nil
}

// canonicalNumber returns n written as a plain integer when its value is
// an integer that fits an int64 ("5.0", "5e0" and "-0" become "5", "5"
// and "0"), and n as it is otherwise. Savers that compare numbers in a
// query rely on it: an integer filter value can then only equal a stored
// integer.
func canonicalNumber(n json.Number) json.Number {
	if _, err := strconv.ParseInt(string(n), 10, 64); err == nil && n != "-0" {
		return n
	}
	neg, digits, exp, ok := decimalOf(string(n))
	switch {
	case !ok || exp < 0 || int64(len(digits))+exp > 19:
		return n
	case digits == "":
		return "0"
	}
	s := digits + strings.Repeat("0", int(exp))
	if neg {
		s = "-" + s
	}
	if _, err := strconv.ParseInt(s, 10, 64); err != nil {
		return n
	}
	return json.Number(s)
}

// decimalOf reads a JSON number as sign, significant digits (no leading
// or trailing zeros) and a power of ten: value = digits × 10^exp. Zero is
// "" with neg false. ok is false for text that is not a JSON number or an
// exponent beyond ±2^62.
func decimalOf(s string) (neg bool, digits string, exp int64, ok bool) {
	if strings.HasPrefix(s, "-") {
		neg, s = true, s[1:]
	}
	mant := s
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		mant = s[:i]
		e, err := strconv.ParseInt(s[i+1:], 10, 64)
		if err != nil || e > 1<<62 || e < -(1<<62) {
			return false, "", 0, false
		}
		exp = e
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	if intPart == "" {
		return false, "", 0, false
	}
	digits = intPart + frac
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return false, "", 0, false
		}
	}
	exp -= int64(len(frac))
	trimmed := strings.TrimRight(digits, "0")
	exp += int64(len(digits) - len(trimmed))
	digits = strings.TrimLeft(trimmed, "0")
	if digits == "" {
		return false, "", 0, true
	}
	return neg, digits, exp, true
}

// sameNumber reports whether two JSON numbers have the same value,
// exactly: 1, 1.0 and 1e0 are equal, 9007199254740993 and
// 9007199254740992 are not.
func sameNumber(a, b json.Number) bool {
	if a == b {
		return true
	}
	an, ad, ae, aok := decimalOf(string(a))
	bn, bd, be, bok := decimalOf(string(b))
	return aok && bok && an == bn && ad == bd && ae == be
}

// sameValue compares two values decoded by decodeValue: numbers by exact
// value, everything else by equality, arrays and objects member by member.
func sameValue(a, b any) bool {
	switch a := a.(type) {
	case json.Number:
		b, ok := b.(json.Number)
		return ok && sameNumber(a, b)
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !sameValue(a[i], b[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, av := range a {
			bv, ok := b[k]
			if !ok || !sameValue(av, bv) {
				return false
			}
		}
		return true
	case string, bool, nil:
		return a == b
	}
	return false
}

// flatMetadata returns m as its flat JSON object, decoded as Metadata
// decodes it.
func flatMetadata(m Metadata) (map[string]any, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	v, err := decodeValue(b)
	if err != nil {
		return nil, err
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("metadata is not a JSON object")
	}
	return obj, nil
}

// MetadataMatches reports whether m passes a List filter (see
// ListOptions.Filter), as every saver must decide it: m has every key of
// filter with an equal value; a nil filter value matches an absent key or
// a JSON null. Values compare by their JSON form: strings and bools
// exactly, numbers by exact decimal value whatever their Go type (1,
// 1.0, int64(1) and json.Number("1e0") are equal; 9007199254740993 and
// 9007199254740992 are not), arrays and objects member by member. A
// filter value that cannot be encoded as JSON matches nothing; so does
// every filter when m cannot be encoded.
func MetadataMatches(m Metadata, filter map[string]any) bool {
	if len(filter) == 0 {
		return true
	}
	obj, err := flatMetadata(m)
	if err != nil {
		return false
	}
	for k, want := range filter {
		got, ok := obj[k]
		if want == nil {
			if ok && got != nil {
				return false
			}
			continue
		}
		b, err := json.Marshal(want)
		if err != nil {
			return false
		}
		w, err := decodeValue(b)
		if err != nil || !ok || !sameValue(got, w) {
			return false
		}
	}
	return true
}

// validateMetadata checks what a saver stores of m: the caller keys do
// not shadow a fixed key (it would be lost) and the whole encodes as JSON.
// It returns an error wrapping ErrInvalid naming the checkpoint.
func validateMetadata(id string, m Metadata) error {
	if len(m.RunKey) > MaxRunKeyBytes || !utf8.ValidString(m.RunKey) {
		return fmt.Errorf("%w: checkpoint %q: run key is not UTF-8 of at most %d bytes", ErrInvalid, id, MaxRunKeyBytes)
	}
	if m.Topology != "" && !ValidFingerprint(m.Topology) {
		return fmt.Errorf("%w: checkpoint %q: topology %q is not a fingerprint (%d lowercase hex digits)", ErrInvalid, id, m.Topology, fingerprintHexLen)
	}
	if !validDurability(m.Durability) {
		return fmt.Errorf("%w: checkpoint %q: durability mode %q is not one of %q", ErrInvalid, id, m.Durability, DurabilityModes)
	}
	for k := range m.Extra {
		if reservedMetadataKeys[k] {
			return fmt.Errorf("%w: checkpoint %q: metadata key %q is reserved", ErrInvalid, id, k)
		}
	}
	if len(m.Extra) == 0 {
		return nil
	}
	if _, err := json.Marshal(m); err != nil {
		return fmt.Errorf("%w: checkpoint %q: metadata does not encode as JSON: %w", ErrInvalid, id, err)
	}
	return nil
}

// storedExtra returns extra as a saver returns it: the JSON round trip of
// the metadata, numbers as json.Number. extra must have passed
// validateMetadata.
func storedExtra(m Metadata) map[string]any {
	if len(m.Extra) == 0 {
		return nil
	}
	obj, err := flatMetadata(Metadata{Extra: m.Extra})
	if err != nil {
		return maps.Clone(m.Extra) // unreachable after validateMetadata
	}
	for k := range reservedMetadataKeys {
		delete(obj, k)
	}
	return obj
}

// cloneValue copies the arrays and objects of a decoded JSON value, so
// that a caller changing what a saver returned changes nothing stored.
func cloneValue(v any) any {
	switch v := v.(type) {
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = cloneValue(x)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[k] = cloneValue(x)
		}
		return out
	}
	return v
}

// finite reports whether a float can be written as JSON.
func finite(f float64) bool { return !math.IsInf(f, 0) && !math.IsNaN(f) }
