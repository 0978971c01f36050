package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// FuzzParseDuration checks the --older-than style flags an operator types.
// Properties: it never panics, never yields a negative duration, and reads
// "Nd" as N days and anything else as time.ParseDuration does.
func FuzzParseDuration(f *testing.F) {
	for _, seed := range []string{"90s", "1h30m", "2d", "0d", "3660d", "3661d", "-1d", "+2d", "1.5d", "d", "", "-5m", "9999999h", "1e3s", "2D"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := parseDuration(s)
		if err != nil {
			return
		}
		if v < 0 {
			t.Fatalf("parseDuration(%q) = %v, negative", s, v)
		}
		if n, ok := strings.CutSuffix(s, "d"); ok {
			if v%(24*time.Hour) != 0 || v > 3660*24*time.Hour || n == "" {
				t.Fatalf("parseDuration(%q) = %v, not a whole number of days in range", s, v)
			}
			return
		}
		if want, err := time.ParseDuration(s); err != nil || want != v {
			t.Fatalf("parseDuration(%q) = %v; time.ParseDuration gives %v, %v", s, v, want, err)
		}
	})
}

// FuzzParseInterleaved parses command lines with flags before, between
// and after positional arguments. Properties: it never panics or loops;
// the positional arguments it returns are, in order, a subsequence of the
// arguments given.
func FuzzParseInterleaved(f *testing.F) {
	for _, seed := range []string{"t1", "t1\x00--json", "--json\x00t1\x00--note\x00x y", "t1\x00--\x00--json", "--\x00-x", "t1\x00--nope", "--note", "-note=a\x00b", "-\x00t1", "---json"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, line string) {
		var args []string
		if line != "" {
			args = strings.Split(line, "\x00")
		}
		fs := newFlagSet("fuzz")
		fs.Bool("json", false, "")
		fs.String("note", "", "")
		pos, err := parseInterleaved(fs, slices.Clone(args))
		if err != nil {
			return
		}
		i := 0
		for _, p := range pos {
			for i < len(args) && args[i] != p {
				i++
			}
			if i == len(args) {
				t.Fatalf("args %q: positional %q is not in order among them (got %q)", args, p, pos)
			}
			i++
		}
	})
}
