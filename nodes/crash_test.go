package nodes_test

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/nodes"
	"github.com/lockstepgo/lockstep/nodes/ledger"
)

const crashHelperEnv = "LOCKSTEP_NODES_CRASH_HELPER"

func crashDSN(path string) string {
	return "file:" + path + "?_journal_mode=WAL&_busy_timeout=5000&_txlock=immediate"
}

// witnessTool is create_issue with an external effect: a line appended to
// the witness file (fsynced). kill makes the process SIGKILL itself right
// after the effect, before the ledger records the outcome.
func witnessTool(t testing.TB, witness string, kill bool, runs *counter, opts ...nodes.ToolOption) *nodes.Tool {
	tool, err := nodes.NewTool("create_issue", "Create an issue.", func(ctx context.Context, a IssueArgs, env nodes.Env) (string, error) {
		if runs != nil {
			runs.inc("create")
		}
		f, err := os.OpenFile(witness, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return "", err
		}
		fmt.Fprintln(f, env.IdempotencyKey())
		f.Sync()
		f.Close()
		if kill {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
		return "issue 1", nil
	}, opts...)
	if err != nil {
		if t != nil {
			t.Fatal(err)
		}
		panic(err)
	}
	return tool
}

var crashCall = nodes.Call{Tool: "create_issue", Args: json.RawMessage(`{"title":"login broken"}`), Scope: "thread-7"}

// crashHelperMain is the child of TestLedgerCrash: it runs the write and
// dies between its effect and the outcome record.
func crashHelperMain() int {
	ctx := context.Background()
	db, err := sql.Open("sqlite3", crashDSN(os.Getenv("CRASH_DB")))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	l, err := ledger.NewSQL(ctx, db, ledger.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ex, err := nodes.NewExecutor([]*nodes.Tool{witnessTool(nil, os.Getenv("CRASH_WITNESS"), true, nil)}, nodes.WithLedger(l))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	_, err = ex.Execute(ctx, crashCall)
	fmt.Fprintln(os.Stderr, "survived:", err)
	return 3
}

func lines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	for s := bufio.NewScanner(f); s.Scan(); {
		out = append(out, s.Text())
	}
	return out
}

// TestLedgerCrash (R34): a process is SIGKILLed between the tool's effect
// and the outcome record. Afterwards the call is "in progress" while the
// dead holder's lease lasts and "outcome unknown" after it: not run a
// second time. A reconcile hook that finds the effect downstream settles
// it. The key is the same in both processes.
func TestLedgerCrash(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	dbPath, witness := filepath.Join(dir, "agent.db"), filepath.Join(dir, "witness")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashHelperEnv+"=1", "CRASH_DB="+dbPath, "CRASH_WITNESS="+witness)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die by SIGKILL: %v\n%s", err, out)
	}
	effects := lines(t, witness)
	if len(effects) != 1 {
		t.Fatalf("%d effects before the restart", len(effects))
	}
	db, err := sql.Open("sqlite3", crashDSN(dbPath))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, tc := range []struct {
		name  string
		after time.Duration
		want  error
	}{
		{"restart within the lease", 0, ledger.ErrInProgress},
		{"restart after the lease", 2 * time.Hour, ledger.ErrOutcomeUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := ledger.NewSQL(ctx, db, ledger.Options{Now: func() time.Time { return time.Now().Add(tc.after) }})
			if err != nil {
				t.Fatal(err)
			}
			runs := &counter{}
			ex, _ := nodes.NewExecutor([]*nodes.Tool{witnessTool(t, witness, false, runs)}, nodes.WithLedger(l))
			_, err = ex.Execute(ctx, crashCall)
			if !errors.Is(err, tc.want) {
				t.Errorf("err = %v, want %v", err, tc.want)
			}
			if runs.get("create") != 0 || len(lines(t, witness)) != 1 {
				t.Errorf("the tool ran again: %d runs, %d effects", runs.get("create"), len(lines(t, witness)))
			}
		})
	}
	// A reconcile hook looks downstream for the key and finds the effect.
	l, _ := ledger.NewSQL(ctx, db, ledger.Options{Now: func() time.Time { return time.Now().Add(2 * time.Hour) }})
	hook := nodes.Reconcile(func(ctx context.Context, a IssueArgs, env nodes.Env) (string, bool, error) {
		for _, k := range lines(t, witness) {
			if k == env.IdempotencyKey() {
				return "issue 1 (found downstream)", true, nil
			}
		}
		return "", false, nil
	})
	runs := &counter{}
	ex, _ := nodes.NewExecutor([]*nodes.Tool{witnessTool(t, witness, false, runs, hook)}, nodes.WithLedger(l))
	res, err := ex.Execute(ctx, crashCall)
	if err != nil || !res.Replayed || string(res.Output) != `"issue 1 (found downstream)"` || runs.get("create") != 0 {
		t.Errorf("reconcile: %+v, %v, %d runs", res, err, runs.get("create"))
	}
	if effects[0] != res.Key {
		t.Errorf("the key differs across processes: %s then %s", effects[0], res.Key)
	}
}
