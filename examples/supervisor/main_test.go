package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun runs the command twice on one file: the second run refunds
// nothing, and says so.
func TestRun(t *testing.T) {
	db := filepath.Join(t.TempDir(), "lockstep.db")
	for i, want := range []string{"payments made 1 refund(s)", "payments made 0 refund(s)"} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), []string{"--db", db}, &out, &errb); code != 0 {
			t.Fatalf("run %d: exit %d: %s", i+1, code, errb.String())
		}
		if !strings.Contains(out.String(), want) {
			t.Errorf("run %d output lacks %q:\n%s", i+1, want, out.String())
		}
	}
}
