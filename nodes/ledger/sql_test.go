package ledger_test

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
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/nodes/ledger"
)

func TestSQLSchemaVersion(t *testing.T) {
	ctx := context.Background()
	db := openDB(t, filepath.Join(t.TempDir(), "l.db"))
	if _, err := ledger.NewSQL(ctx, nil, ledger.Options{}); !errors.Is(err, ledger.ErrInvalid) {
		t.Errorf("NewSQL(nil) = %v", err)
	}
	if _, err := ledger.NewSQL(ctx, db, ledger.Options{}); err != nil {
		t.Fatal(err)
	}
	// Opening twice is fine (IF NOT EXISTS).
	if _, err := ledger.NewSQL(ctx, db, ledger.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE lockstep_ledger_meta SET version = 99 WHERE name = 'ledger'`); err != nil {
		t.Fatal(err)
	}
	if _, err := ledger.NewSQL(ctx, db, ledger.Options{}); !errors.Is(err, ledger.ErrSchemaVersion) {
		t.Errorf("NewSQL on a newer schema = %v, want ErrSchemaVersion", err)
	}
}

func TestSQLSurvivesReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "l.db")
	db := openDB(t, path)
	l, err := ledger.NewSQL(ctx, db, ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Begin(ctx, intent("k", "a")); err != nil {
		t.Fatal(err)
	}
	if err := l.Complete(ctx, "k", "a", ledger.Outcome{Result: json.RawMessage(`{"n":1}`)}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	l2, err := ledger.NewSQL(ctx, openDB(t, path), ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e, started, err := l2.Begin(ctx, intent("k", "b"))
	if err != nil || started || string(e.Outcome.Result) != `{"n":1}` {
		t.Errorf("after reopen: %+v, %v, %v", e, started, err)
	}
}

func TestSQLClaimMessageTx(t *testing.T) {
	ctx := context.Background()
	db := openDB(t, filepath.Join(t.TempDir(), "l.db"))
	l, err := ledger.NewSQL(ctx, db, ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// A claim rolled back with its effect does not count.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.ClaimMessageTx(ctx, tx, "evt"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := l.ClaimMessage(ctx, "evt"); err != nil {
		t.Errorf("claim after a rolled-back claim = %v", err)
	}
	tx, err = db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := l.ClaimMessageTx(ctx, tx, "evt"); !errors.Is(err, ledger.ErrDuplicateMessage) {
		t.Errorf("ClaimMessageTx of a claimed ID = %v", err)
	}
	if err := l.ClaimMessageTx(ctx, tx, ""); !errors.Is(err, ledger.ErrInvalid) {
		t.Errorf("ClaimMessageTx(\"\") = %v", err)
	}
}

const helperEnv = "LOCKSTEP_LEDGER_HELPER"

// helperMain is the child process of TestSQLTwoProcesses: 16 goroutines
// run the operation of one key against the database file, appending a line
// to the witness file for every effect.
func helperMain() int {
	ctx := context.Background()
	path, witness := os.Getenv("LEDGER_DB"), os.Getenv("LEDGER_WITNESS")
	db, err := sql.Open("sqlite3", dsn(path))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer db.Close()
	l, err := ledger.NewSQL(ctx, db, ledger.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	// Start together with the other process.
	for time.Now().UnixNano() < parseInt(os.Getenv("LEDGER_START")) {
		time.Sleep(time.Millisecond)
	}
	var wg sync.WaitGroup
	failed := false
	var mu sync.Mutex
	for g := range 16 {
		wg.Go(func() {
			owner := fmt.Sprintf("pid%d-g%d", os.Getpid(), g)
			_, started, err := l.Begin(ctx, intent("shared-key", owner))
			if err != nil || !started {
				if err != nil && !errors.Is(err, ledger.ErrInProgress) {
					mu.Lock()
					failed = true
					mu.Unlock()
					fmt.Fprintln(os.Stderr, err)
				}
				return
			}
			f, err := os.OpenFile(witness, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
			if err == nil {
				fmt.Fprintln(f, owner)
				f.Sync()
				f.Close()
			}
			time.Sleep(20 * time.Millisecond)
			if err := l.Complete(ctx, "shared-key", owner, ledger.Outcome{Result: json.RawMessage(`"done"`)}); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
		})
	}
	wg.Wait()
	if failed {
		return 1
	}
	return 0
}

func parseInt(s string) int64 {
	var n int64
	fmt.Sscan(s, &n)
	return n
}

// TestSQLTwoProcesses: two processes × 16 goroutines on one key in one
// SQLite file produce one effect.
func TestSQLTwoProcesses(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path, witness := filepath.Join(dir, "l.db"), filepath.Join(dir, "witness")
	db := openDB(t, path)
	l, err := ledger.NewSQL(ctx, db, ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(300 * time.Millisecond).UnixNano()
	var cmds []*exec.Cmd
	for range 2 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), helperEnv+"=1", "LEDGER_DB="+path, "LEDGER_WITNESS="+witness, fmt.Sprintf("LEDGER_START=%d", start))
		var out strings.Builder
		cmd.Stderr, cmd.Stdout = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
		t.Cleanup(func() {
			if t.Failed() {
				t.Log(out.String())
			}
		})
	}
	for _, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Errorf("child: %v", err)
		}
	}
	f, err := os.Open(witness)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lines := 0
	for s := bufio.NewScanner(f); s.Scan(); {
		lines++
	}
	if lines != 1 {
		t.Errorf("effects = %d, want 1", lines)
	}
	e, err := l.Get(ctx, "shared-key")
	if err != nil || e.State != ledger.StateDone {
		t.Errorf("record = %+v, %v", e, err)
	}
}
