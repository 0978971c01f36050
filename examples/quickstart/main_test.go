package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/lockstepgo/lockstep/checkpoint"
)

func TestQuickstart(t *testing.T) {
	var out bytes.Buffer
	var counts Counts
	if err := run(context.Background(), checkpoint.NewMemorySaver(nil), &out, &counts); err != nil {
		t.Fatal(err)
	}
	want := `run 1: waiting, waiting at [approve]: "charge 120 for lamp?"
state: status=waiting next=[approve] log=[priced lamp]
run 2: done, log=[priced lamp approved=true charged 120], charges=1
`
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
	if counts.Charges != 1 {
		t.Errorf("charges = %d, want 1", counts.Charges)
	}
}

// TestCommand: the command takes no arguments; a flag it does not know
// or an argument is a usage error (exit 2) and runs nothing, -h prints the
// usage.
func TestCommand(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		code    int
		wantOut string // a substring of stdout ("" means stdout is empty)
		wantErr string // a substring of stderr
	}{
		{nil, 0, "run 2: done", ""},
		{[]string{"-h"}, 0, "", "usage: quickstart"},
		{[]string{"--bad"}, 2, "", "flag provided but not defined: -bad"},
		{[]string{"extra"}, 2, "", `unexpected argument "extra"`},
	} {
		var out, errb bytes.Buffer
		code := command(context.Background(), tc.args, &out, &errb)
		if code != tc.code {
			t.Errorf("command(%q) = %d, want %d (stderr %q)", tc.args, code, tc.code, errb.String())
		}
		if tc.wantOut == "" && out.Len() > 0 || !strings.Contains(out.String(), tc.wantOut) {
			t.Errorf("command(%q) stdout %q, want it to contain %q", tc.args, out.String(), tc.wantOut)
		}
		if !strings.Contains(errb.String(), tc.wantErr) {
			t.Errorf("command(%q) stderr %q, want it to contain %q", tc.args, errb.String(), tc.wantErr)
		}
	}
}
