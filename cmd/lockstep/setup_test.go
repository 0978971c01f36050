package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
)

// setupKillEnv makes the test binary open a database and kill itself at a
// hook point of its set-up (TestHelperSetupKill) instead of running the
// tests: a program stopped while it creates its database.
const setupKillEnv = "LOCKSTEP_TEST_SETUP_KILL"

// TestHelperSetupKill opens the database named after "--" with a hook
// that SIGKILLs the process at the point in setupKillEnv; otherwise it
// does nothing.
func TestHelperSetupKill(t *testing.T) {
	point := os.Getenv(setupKillEnv)
	if point == "" {
		return
	}
	path := os.Args[len(os.Args)-1]
	s, err := sqlite.Open(path, sqlite.Config{Hook: func(p string) {
		if p == point {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}})
	if err == nil {
		s.Close()
	}
	os.Exit(3) // not killed: the parent says so
}

// TestSetUpKilledCLI (issue 15 item 6): a program killed while it creates
// its database, at any point before the set-up commits, leaves a file that
// lockstep calls "not a lockstep database (it has none of lockstep's
// tables)", which is true, with exit 1 and kind no_database, and leaves
// byte for byte as it is (the CLI opens files read-only and refuses files
// that are not lockstep's); never "written by an older lockstep", which
// is what a kill between the two set-up transactions left before. The
// program's next run sets the file up, and lockstep then reads it.
func TestSetUpKilledCLI(t *testing.T) {
	for _, point := range []string{
		"sqlite.create.identity", "sqlite.create.wal", "sqlite.setup.begin",
		"sqlite.setup.schema1", "sqlite.setup.schema2", "sqlite.setup.schema3", "sqlite.setup.schema4", "sqlite.setup.schema5",
		"sqlite.setup.beforeCommit",
	} {
		t.Run(point, func(t *testing.T) {
			dir := t.TempDir()
			db := filepath.Join(dir, "lockstep.db")
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperSetupKill$", "--", db)
			cmd.Env = append(os.Environ(), setupKillEnv+"="+point)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || !ee.Sys().(syscall.WaitStatus).Signaled() {
				t.Fatalf("the program was not killed at %s: %v\n%s", point, err, stderr.String())
			}
			before := files(t, dir)
			want := result{code: exitInternal, stderr: "lockstep: " + db + " is not a lockstep database (it has none of lockstep's tables; it was not modified): run an example first or pass --db PATH\n"}
			for _, args := range [][]string{{"threads"}, {"approvals"}, {"approve", "x", "--reviewer", "alice"}} {
				got := cli(db, cliNow(), args...)
				if diff := cmp.Diff(want, got, cmp.AllowUnexported(result{})); diff != "" {
					t.Errorf("%v (-want +got):\n%s", args, diff)
				}
				if strings.Contains(got.stderr, "older lockstep") {
					t.Errorf("%v: the file whose set-up was cut short reads as an older lockstep's", args)
				}
				got = cli(db, cliNow(), append(args, "--json")...)
				if kind := errorKind(t, got.stdout); kind != kindNoDatabase {
					t.Errorf("%v --json: kind %q, want %q", args, kind, kindNoDatabase)
				}
			}
			if diff := diffFiles(before, files(t, dir)); diff != "" {
				t.Errorf("lockstep changed the files: %s", diff)
			}
			s, err := sqlite.Open(db, sqlite.Config{})
			if err != nil {
				t.Fatalf("the program's next Open: %v", err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if got := cli(db, cliNow(), "threads"); got.code != 0 || got.stdout != "no threads in "+db+"\n" {
				t.Errorf("threads after the next Open: %v", got)
			}
		})
	}
}

// diffFiles names the first file that differs between a and b, apart from
// the -shm (SQLite's index of the -wal, which any reader may rebuild).
func diffFiles(a, b map[string]string) string {
	for _, m := range []map[string]string{a, b} {
		for name := range m {
			if strings.HasSuffix(name, "-shm") {
				continue
			}
			x, inA := a[name]
			y, inB := b[name]
			switch {
			case !inA:
				return name + " appeared"
			case !inB:
				return name + " is gone"
			case x != y:
				return name + " changed"
			}
		}
	}
	return ""
}
