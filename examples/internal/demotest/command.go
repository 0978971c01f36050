package demotest

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
)

// Main is an example command's run function: it runs the command with
// args (without the program name), writes to stdout and stderr, and
// returns the exit status.
type Main func(ctx context.Context, args []string, stdout, stderr io.Writer) int

// RunTwice runs main twice on one new database file (--db <file>): each
// run must exit 0, the first one's output must contain first and the
// second one's second (an example says there what the second run did not
// do again).
func RunTwice(t *testing.T, main Main, first, second string) {
	t.Helper()
	db := filepath.Join(t.TempDir(), "lockstep.db")
	for i, want := range []string{first, second} {
		var out, errb bytes.Buffer
		if code := main(context.Background(), []string{"--db", db}, &out, &errb); code != 0 {
			t.Fatalf("run %d: exit %d: %s", i+1, code, errb.String())
		}
		if !strings.Contains(out.String(), want) {
			t.Errorf("run %d output lacks %q:\n%s", i+1, want, out.String())
		}
	}
}

// RefusesArgs checks that main exits 2 (a usage error) for each of the
// argument lists.
func RefusesArgs(t *testing.T, main Main, args ...[]string) {
	t.Helper()
	for _, a := range args {
		if code := main(context.Background(), a, &bytes.Buffer{}, &bytes.Buffer{}); code != 2 {
			t.Errorf("run(%q): exit %d, want 2", a, code)
		}
	}
}
