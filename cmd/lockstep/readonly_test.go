package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/graph"
)

// helperEnv makes the test binary run lockstep (TestHelperCLI) instead of
// the tests: a second process, as a user's lockstep would be.
const helperEnv = "LOCKSTEP_TEST_CLI"

// TestHelperCLI is lockstep itself when the test binary is started with
// helperEnv set; otherwise it does nothing.
func TestHelperCLI(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		return
	}
	args := os.Args[slices.Index(os.Args, "--")+1:]
	os.Exit(run(context.Background(), args, os.Stdout, os.Stderr, cliNow))
}

// cliProcess runs lockstep in a new process on db.
func cliProcess(t *testing.T, db string, args ...string) result {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^TestHelperCLI$", "--", "--db", db}, args...)...)
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	var out, errb bytes.Buffer
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

// files returns the names in dir and their contents.
func files(t *testing.T, dir string) map[string]string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(b)
	}
	return out
}

// readOnlyDir makes dir and the files in it read-only until the test ends.
func readOnlyDir(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		if err := os.Chmod(p, 0o444); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(p, 0o644) })
	}
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(dir, 0o755) })
}

// errorKind returns the kind of a --json failure document.
func errorKind(t *testing.T, stdout string) string {
	t.Helper()
	var doc jsonError
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatalf("not an error document: %v\n%s", err, stdout)
	}
	return doc.Error.Kind
}

// TestReadOnlyDatabase runs lockstep as a user who may read the database
// and its directory but write neither. While a program has the database
// open (its -wal and -shm files exist), the reading commands work, see
// what that program commits, and create nothing; once it closed the
// database, they are refused with kind read_only and an error that says
// what is needed, and so are approve and reject at any time, before
// anything is recorded.
func TestReadOnlyDatabase(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("file permissions do not bind root")
	}
	f := buildFixture(t)
	reads := [][]string{
		{"threads"},
		{"state", threadRefund},
		{"history", threadRefund, "--values"},
		{"approvals"},
	}

	t.Run("closed", func(t *testing.T) {
		db := f.copyDB(t)
		dir := filepath.Dir(db)
		want := cli(db, cliNow(), "threads")
		readOnlyDir(t, dir)
		before := files(t, dir)
		for _, args := range reads {
			got := cliProcess(t, db, append(args, "--json")...)
			if got.code != exitInternal || errorKind(t, got.stdout) != kindReadOnly ||
				!strings.Contains(got.stderr, db+"-wal or "+db+"-shm") || !strings.Contains(got.stderr, "while that program has the database open") {
				t.Errorf("%v: want exit 1, kind read_only, naming the -wal and -shm files; got %v", args, got)
			}
		}
		got := cliProcess(t, db, "approve", f.refundID, "--reviewer", "alice", "--json")
		if got.code != exitInternal || errorKind(t, got.stdout) != kindReadOnly || !strings.Contains(got.stderr, "nothing was recorded") {
			t.Errorf("approve: want exit 1, kind read_only; got %v", got)
		}
		if diff := cmp.Diff(before, files(t, dir)); diff != "" {
			t.Errorf("lockstep changed the read-only directory (-before +after):\n%s", diff)
		}
		// With write access again, the same commands work.
		os.Chmod(dir, 0o755)
		os.Chmod(db, 0o644)
		if got := cli(db, cliNow(), "threads"); got.code != exitOK || got.stdout != want.stdout {
			t.Errorf("threads after chmod: %v", got)
		}
	})

	// A directory the user may write does not change that: the -wal and
	// -shm files lockstep would create there would be the reader's, with
	// the database file's read-only permissions, and the program that
	// writes the database could not write them.
	t.Run("writable directory", func(t *testing.T) {
		db := f.copyDB(t)
		if err := os.Chmod(db, 0o444); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(db, 0o644) })
		before := files(t, filepath.Dir(db))
		got := cliProcess(t, db, "threads", "--json")
		if got.code != exitInternal || errorKind(t, got.stdout) != kindReadOnly {
			t.Errorf("threads: want exit 1, kind read_only; got %v", got)
		}
		if diff := cmp.Diff(before, files(t, filepath.Dir(db))); diff != "" {
			t.Errorf("lockstep created files beside a database it may only read (-before +after):\n%s", diff)
		}
	})

	t.Run("open by a writer", func(t *testing.T) {
		db := f.copyDB(t)
		dir := filepath.Dir(db)
		w, err := sqlite.Open(db, sqlite.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		ask := func(thread string) {
			t.Helper()
			r, err := gatedGraph(cliNow, time.Hour).Compile(graph.WithSaver(w))
			if err != nil {
				t.Fatal(err)
			}
			_, err = r.Invoke(context.Background(), thread, graph.Set(Call{Tool: "refund", Args: map[string]any{"order": "C-" + thread, "amount": 5},
				Owner: "payments", Rationale: "test"}, "Tool", "Args", "Owner", "Rationale"))
			if err != nil {
				t.Fatal(err)
			}
		}
		ask("before-chmod")
		readOnlyDir(t, dir)
		for _, args := range reads {
			if got := cliProcess(t, db, args...); got.code != exitOK {
				t.Errorf("%v: %v", args, got)
			}
		}
		// The writer goes on committing (its files were open before the
		// chmod); the read-only reader sees its latest commit.
		ask("after-chmod")
		before := files(t, dir)
		got := cliProcess(t, db, "state", "after-chmod")
		if got.code != exitOK || !strings.Contains(got.stdout, "waiting") {
			t.Errorf("state of a thread committed after the chmod: %v", got)
		}
		got = cliProcess(t, db, "approvals", "--thread", "after-chmod", "--json")
		var page approvalsJSON
		if err := json.Unmarshal([]byte(got.stdout), &page); err != nil || got.code != exitOK || len(page.Approvals) != 1 {
			t.Errorf("approvals of a thread committed after the chmod: %v (%v)", got, err)
		}
		got = cliProcess(t, db, "reject", f.refundID, "--reviewer", "bob")
		if got.code != exitInternal || !strings.Contains(got.stderr, "is read-only to you") {
			t.Errorf("reject: want exit 1, read-only; got %v", got)
		}
		if diff := cmp.Diff(before, files(t, dir)); diff != "" {
			t.Errorf("lockstep changed the read-only directory (-before +after):\n%s", diff)
		}
	})
}
