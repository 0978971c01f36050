package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/graph"
)

// TestBinary builds lockstep and runs the real binary (wall clock, real
// exit codes, real stdout and stderr) on a database of real runs: its
// output equals the in-process run's, a reviewer approves a live request,
// a second reviewer is refused and told who won, and a missing database
// is reported without being created.
func TestBinary(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build lockstep: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "lockstep")
	build := exec.Command(gobin, "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	f := buildFixture(t)
	db := f.copyDB(t)

	// A request made now by the wall clock, which the binary reads.
	live := func() string {
		s, err := sqlite.Open(db, sqlite.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		r, err := gatedGraph(time.Now, time.Hour).Compile(graph.WithSaver(s))
		if err != nil {
			t.Fatal(err)
		}
		res, err := r.Invoke(context.Background(), "live-1", graph.Set(Call{Tool: "refund", Args: map[string]any{"order": "B-1", "amount": 12},
			Owner: "payments", Rationale: "duplicate charge"}, "Tool", "Args", "Owner", "Rationale"))
		if err != nil || len(res.Interrupts) != 1 {
			t.Fatalf("live request: %v, %+v", err, res)
		}
		return res.Interrupts[0].ID
	}()

	exe := func(args ...string) result {
		t.Helper()
		var out, errb bytes.Buffer
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = &out, &errb
		code := 0
		if err := cmd.Run(); err != nil {
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Fatalf("run %v: %v", args, err)
			}
			code = ee.ExitCode()
		}
		return result{code, out.String(), errb.String()}
	}
	inProcess := func(args ...string) result {
		var out, errb bytes.Buffer
		code := run(context.Background(), args, &out, &errb, time.Now)
		return result{code, out.String(), errb.String()}
	}

	// Output that does not depend on the time is the in-process output.
	for _, args := range [][]string{
		{"help"},
		{"--db", db, "threads", "--json"},
		{"--db", db, "state", threadFailed, "--json"},
		{"--db", db, "history", threadDone},
		{"graph", "quickstart"},
		{"--db", db, "frobnicate"},
		{"--db", db, "state", "no-such-thread"},
	} {
		want, got := inProcess(args...), exe(args...)
		if diff := cmp.Diff(want, got, cmp.AllowUnexported(result{})); diff != "" {
			t.Errorf("lockstep %v: binary differs from in-process run (-want +got):\n%s", args, diff)
		}
	}
	if got := exe("--db", db, "frobnicate"); got.code != exitUsage {
		t.Errorf("unknown command: exit %d, want %d", got.code, exitUsage)
	}

	// The live request is listed, approved once, and the second reviewer
	// learns who won.
	got := exe("--db", db, "approvals", "--thread", "live-1", "--json")
	var page approvalsJSON
	if err := json.Unmarshal([]byte(got.stdout), &page); err != nil || got.code != exitOK {
		t.Fatalf("approvals: exit %d, %v\n%s%s", got.code, err, got.stdout, got.stderr)
	}
	if len(page.Approvals) != 1 || page.Approvals[0].ID != live || page.Approvals[0].ExpiresInSeconds <= 0 {
		t.Fatalf("approvals of live-1: %+v", page.Approvals)
	}
	got = exe("--db", db, "approve", live, "--reviewer", "alice", "--note", "confirmed with the bank", "--json")
	var dec decisionJSON
	if err := json.Unmarshal([]byte(got.stdout), &dec); err != nil || got.code != exitOK {
		t.Fatalf("approve: exit %d, %v\n%s%s", got.code, err, got.stdout, got.stderr)
	}
	if dec.Decision.Outcome != approval.Approved || dec.Decision.Reviewer != "alice" || dec.Thread != "live-1" || dec.Resumed {
		t.Errorf("approve: %+v", dec)
	}
	got = exe("--db", db, "reject", live, "--reviewer", "bob")
	if got.code != exitRefused || !strings.Contains(got.stderr, `already approved by "alice"`) || got.stdout != "" {
		t.Errorf("second decision: exit %d, stdout %q, stderr %q; want exit 4 naming alice", got.code, got.stdout, got.stderr)
	}

	// A missing database is reported, and not created.
	missing := filepath.Join(t.TempDir(), "nope.db")
	got = exe("--db", missing, "approvals")
	want := result{code: exitInternal, stderr: "lockstep: no database at " + missing + ": run an example first or pass --db PATH\n"}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(result{})); diff != "" {
		t.Errorf("missing database (-want +got):\n%s", diff)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the missing database was created (stat: %v)", err)
	}
}
