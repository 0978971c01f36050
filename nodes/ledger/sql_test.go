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

// TestSQLClaimMessageTx: the claim inside the caller's transaction commits
// or rolls back with the caller's effect (R44), and a refused claim writes
// nothing in it.
func TestSQLClaimMessageTx(t *testing.T) {
	ctx := context.Background()
	db := openDB(t, filepath.Join(t.TempDir(), "l.db"))
	l, err := ledger.NewSQL(ctx, db, ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE effects (id TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	evt := claim("acme/orders", "evt", `{"amount":5}`)
	// deliver claims evt and records its effect in one transaction, which
	// it commits or rolls back.
	deliver := func(c ledger.Claim, commit bool) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if err := l.ClaimMessageTx(ctx, tx, c); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO effects (id) VALUES (?)`, c.ID); err != nil {
			t.Fatal(err)
		}
		if commit {
			return tx.Commit()
		}
		return nil
	}
	// A claim rolled back with its effect does not count: neither is kept.
	if err := deliver(evt, false); err != nil {
		t.Fatal(err)
	}
	if got := count(t, db, `SELECT COUNT(*) FROM effects`) + count(t, db, `SELECT COUNT(*) FROM lockstep_messages`); got != 0 {
		t.Errorf("after a rolled-back claim and effect, %d rows are left, want 0", got)
	}
	if err := deliver(evt, true); err != nil {
		t.Errorf("claim after a rolled-back claim = %v", err)
	}
	if err := deliver(evt, true); !errors.Is(err, ledger.ErrDuplicateMessage) {
		t.Errorf("ClaimMessageTx of a claimed message = %v, want ErrDuplicateMessage", err)
	}
	other := claim("acme/orders", "evt", `{"amount":500}`)
	var mm *ledger.DuplicateMismatchError
	if err := deliver(other, true); !errors.As(err, &mm) || mm.Scope != "acme/orders" || mm.ID != "evt" {
		t.Errorf("ClaimMessageTx with another payload = %v, want *DuplicateMismatchError", err)
	}
	for _, c := range []ledger.Claim{{Scope: "s", Fingerprint: "f"}, {ID: "evt", Fingerprint: "f"}, {Scope: "s", ID: "evt"}} {
		if err := deliver(c, true); !errors.Is(err, ledger.ErrInvalid) {
			t.Errorf("ClaimMessageTx(%+v) = %v, want ErrInvalid", c, err)
		}
	}
	// A refused claim writes nothing in the caller's transaction: the
	// caller's other writes commit, and the stored claim is unchanged.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.ClaimMessageTx(ctx, tx, other); !errors.Is(err, ledger.ErrDuplicateMismatch) {
		t.Errorf("ClaimMessageTx with another payload = %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := count(t, db, `SELECT COUNT(*) FROM effects`); got != 1 {
		t.Errorf("effects = %d, want 1", got)
	}
	var fp string
	if err := db.QueryRow(`SELECT fingerprint FROM lockstep_messages WHERE scope = ? AND id = ?`, evt.Scope, evt.ID).Scan(&fp); err != nil || fp != evt.Fingerprint {
		t.Errorf("stored fingerprint = %q, %v; want the first claim's", fp, err)
	}
	if got := count(t, db, `SELECT COUNT(*) FROM lockstep_messages`); got != 1 {
		t.Errorf("claims stored = %d, want 1", got)
	}
}

func count(t testing.TB, db *sql.DB, q string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
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

// dbFence is a Fencer on a database that runs nothing: NewSQL only
// checks whose database it is.
type dbFence struct{ db *sql.DB }

func (f dbFence) DB() *sql.DB { return f.db }

func (f dbFence) Fenced(context.Context, string, string, func(ctx context.Context, tx any) error) error {
	return errors.New("not run")
}

// TestUnfencedOption: Unfenced with a Fence is refused with ErrInvalid by
// both ledgers; alone it changes nothing for a ledger with no default
// fence.
func TestUnfencedOption(t *testing.T) {
	ctx := context.Background()
	db := openDB(t, filepath.Join(t.TempDir(), "l.db"))
	if _, err := ledger.NewSQL(ctx, db, ledger.Options{Unfenced: true, Fence: dbFence{db}}); !errors.Is(err, ledger.ErrInvalid) {
		t.Errorf("NewSQL with Unfenced and a Fence: %v, want ErrInvalid", err)
	}
	if _, err := ledger.NewMemory(ledger.Options{Unfenced: true, Fence: dbFence{db}}); !errors.Is(err, ledger.ErrInvalid) {
		t.Errorf("NewMemory with Unfenced and a Fence: %v, want ErrInvalid", err)
	}
	l, err := ledger.NewSQL(ctx, db, ledger.Options{Unfenced: true})
	if err != nil || l.Fenced() {
		t.Errorf("NewSQL with Unfenced: fenced %v, %v", l != nil && l.Fenced(), err)
	}
	fl, err := ledger.NewSQL(ctx, db, ledger.Options{Fence: dbFence{db}})
	if err != nil || !fl.Fenced() {
		t.Errorf("NewSQL with a Fence: %v", err)
	}
	if _, err := ledger.NewMemory(ledger.Options{Unfenced: true}); err != nil {
		t.Errorf("NewMemory with Unfenced: %v", err)
	}
}
