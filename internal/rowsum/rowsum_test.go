package rowsum

import (
	"strings"
	"testing"
)

// TestDistinctRows: rows whose fields differ (by a boundary, a NULL, a
// type, the domain) never give the same input, so their checksums differ.
func TestDistinctRows(t *testing.T) {
	rows := map[string]Sum{
		"a\\0|b":     New("d").String("a\x00").String("b"),
		"a|\\0b":     New("d").String("a").String("\x00b"),
		"ab|":        New("d").String("ab").String(""),
		"a|b":        New("d").String("a").String("b"),
		"|ab":        New("d").String("").String("ab"),
		"empty":      New("d").String(""),
		"null":       New("d").Null(),
		"int 1":      New("d").Int(1),
		"string 1":   New("d").String("1"),
		"bytes 1":    New("d").Bytes([]byte("2")),
		"other dom":  New("e").String("a").String("b"),
		"no field":   New("d"),
		"null str":   New("d").NullString("x", false).String("y"),
		"int -1":     New("d").Int(-1),
		"int 0":      New("d").NullInt(0, true),
		"long":       New("d").String(strings.Repeat("x", 1000)),
		"long+1":     New("d").String(strings.Repeat("x", 1001)),
		"dom concat": New("da").String("b"),
	}
	seen := map[int64]string{}
	for name, s := range rows {
		v := s.Value()
		if v < 0 || v > 1<<32-1 {
			t.Errorf("%s: Value() = %d, want a uint32", name, v)
		}
		if other, dup := seen[v]; dup {
			t.Errorf("%s and %s have the same checksum %d", name, other, v)
		}
		seen[v] = name
	}
}

// TestSameRows: String and Bytes of the same bytes agree, a long string is
// summed as a whole, and the zero Sum never verifies.
func TestSameRows(t *testing.T) {
	long := strings.Repeat("0123456789", 100)
	if a, b := New("d").String(long).Value(), New("d").Bytes([]byte(long)).Value(); a != b {
		t.Errorf("String and Bytes of one value differ: %d, %d", a, b)
	}
	if a, b := New("d").NullString("x", true).Value(), New("d").String("x").Value(); a != b {
		t.Errorf("NullString(valid) and String differ: %d, %d", a, b)
	}
	if a, b := New("d").NullInt(7, false).Value(), New("d").Null().Value(); a != b {
		t.Errorf("NullInt(invalid) and Null differ: %d, %d", a, b)
	}
	var zero Sum
	if v := zero.String("x").Value(); v != -1 {
		t.Errorf("zero Sum Value() = %d, want -1", v)
	}
}
