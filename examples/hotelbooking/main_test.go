package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    config
		wantErr bool
	}{
		{nil, config{db: "./lockstep.db"}, false},
		{[]string{"--db", "x.db", "--resume"}, config{db: "x.db", resume: true}, false},
		{[]string{"--nope"}, config{}, true},
		{[]string{"extra"}, config{}, true},
	} {
		got, err := parseFlags(tc.args, &bytes.Buffer{})
		if (err != nil) != tc.wantErr {
			t.Errorf("parseFlags(%q) error = %v, want error %v", tc.args, err, tc.wantErr)
		}
		if d := cmp.Diff(tc.want, got, cmp.AllowUnexported(config{})); d != "" {
			t.Errorf("parseFlags(%q) (-want +got):\n%s", tc.args, d)
		}
	}
}

// TestRun runs the command twice on one file: the second run books
// nothing, and says so.
func TestRun(t *testing.T) {
	db := filepath.Join(t.TempDir(), "lockstep.db")
	for i, want := range []string{"This run booked 1.", "This run booked 0."} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), []string{"--db", db}, &out, &errb); code != 0 {
			t.Fatalf("run %d: exit %d: %s", i+1, code, errb.String())
		}
		if !strings.Contains(out.String(), want) {
			t.Errorf("run %d output lacks %q:\n%s", i+1, want, out.String())
		}
	}
	var errb bytes.Buffer
	if code := run(context.Background(), []string{"--bad"}, &bytes.Buffer{}, &errb); code != 2 {
		t.Errorf("bad flag: exit %d, want 2", code)
	}
}
