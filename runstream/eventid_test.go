package runstream_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/runstream"
)

const cp = "01938a6c-1f2e-7abc-8def-0123456789ab"

func TestParseEventID(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want runstream.EventID
	}{
		{cp + ".0", runstream.EventID{Checkpoint: cp, Ordinal: 0}},
		{cp + ".2", runstream.EventID{Checkpoint: cp, Ordinal: 2}},
		{cp + ".999999", runstream.EventID{Checkpoint: cp, Ordinal: 999999}},
		{cp + ".1.0123456789abcdef", runstream.EventID{Checkpoint: cp, Ordinal: 1, Digest: "0123456789abcdef"}},
		// A checkpoint ID of graph.WithIDs may hold dots.
		{"a.1.5", runstream.EventID{Checkpoint: "a.1", Ordinal: 5}},
		{"a.1.1.0123456789abcdef", runstream.EventID{Checkpoint: "a.1", Ordinal: 1, Digest: "0123456789abcdef"}},
	} {
		got, err := runstream.ParseEventID(tc.in)
		if err != nil {
			t.Errorf("ParseEventID(%q): %v", tc.in, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("ParseEventID(%q) (-want +got):\n%s", tc.in, diff)
		}
		if s := got.String(); s != tc.in {
			t.Errorf("ParseEventID(%q).String() = %q", tc.in, s)
		}
	}
}

func TestParseEventIDRefuses(t *testing.T) {
	for _, in := range []string{
		"", ".", "0", cp, cp + ".", cp + ".-1", cp + ".+2", cp + ".02", cp + ".1000000", cp + ".1",
		cp + ".0.0123456789abcdef", cp + ".2.0123456789abcdef", cp + ".1.0123456789ABCDEF", cp + ".1.0123456789abcde",
		".0", " .0", "a b.0", "a\n.0", "a\x00.0", "é.0", "a.0 ", cp + ".1.0123456789abcdef\n",
		strings.Repeat("a", 257) + ".0", strings.Repeat("a", runstream.MaxEventIDBytes+1),
	} {
		_, err := runstream.ParseEventID(in)
		var ie *runstream.EventIDError
		if !errors.Is(err, runstream.ErrBadEventID) || !errors.As(err, &ie) {
			t.Errorf("ParseEventID(%q) = %v, want an *EventIDError matching ErrBadEventID", in, err)
			continue
		}
		if len(ie.ID) > runstream.MaxEventIDBytes {
			t.Errorf("ParseEventID(%q): the error holds %d bytes of the ID", in, len(ie.ID))
		}
	}
}

// FuzzParseEventID: the parser never panics, what it accepts prints back
// as itself (one ID, one text), and what it refuses is an *EventIDError
// matching ErrBadEventID.
func FuzzParseEventID(f *testing.F) {
	for _, s := range []string{cp + ".0", cp + ".7", cp + ".1.0123456789abcdef", "a.1.1.0123456789abcdef", "x..0", "", "\xff.0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := runstream.ParseEventID(s)
		if err != nil {
			if !errors.Is(err, runstream.ErrBadEventID) {
				t.Fatalf("ParseEventID(%q) = %v, want ErrBadEventID", s, err)
			}
			return
		}
		if got := id.String(); got != s {
			t.Fatalf("ParseEventID(%q).String() = %q", s, got)
		}
		again, err := runstream.ParseEventID(id.String())
		if err != nil || again != id {
			t.Fatalf("ParseEventID(%q) = %+v, %v; want %+v", id.String(), again, err, id)
		}
	})
}
