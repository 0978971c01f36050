package ledger_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	_ "github.com/mattn/go-sqlite3"

	"github.com/lockstepgo/lockstep/nodes/ledger"
	"github.com/lockstepgo/lockstep/nodes/ledger/ledgertest"
)

// fakeClock is a settable clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// dsn is the DSN of the SQLite saver: WAL, a busy timeout and IMMEDIATE
// write transactions.
func dsn(path string) string {
	return "file:" + path + "?_journal_mode=WAL&_busy_timeout=5000&_txlock=immediate"
}

func openDB(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite3", dsn(path))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

type factory func(t *testing.T, opts ledger.Options) ledger.Ledger

func implementations() map[string]factory {
	return map[string]factory{
		"memory": func(t *testing.T, opts ledger.Options) ledger.Ledger {
			l, err := ledger.NewMemory(opts)
			if err != nil {
				t.Fatal(err)
			}
			return l
		},
		"sql": func(t *testing.T, opts ledger.Options) ledger.Ledger {
			db := openDB(t, filepath.Join(t.TempDir(), "ledger.db"))
			l, err := ledger.NewSQL(context.Background(), db, opts)
			if err != nil {
				t.Fatal(err)
			}
			return l
		},
	}
}

// TestLedger runs the shared contract (package ledgertest) against every
// implementation of this package; package postgres runs it on PostgreSQL.
func TestLedger(t *testing.T) {
	for name, newLedger := range implementations() {
		t.Run(name, func(t *testing.T) { ledgertest.Run(t, ledgertest.Factory(newLedger)) })
	}
}

func intent(key, owner string) ledger.Intent {
	return ledger.Intent{Key: key, Tool: "create_issue", ArgsHash: "h1", Owner: owner, Lease: time.Minute}
}

// claim is the claim of a message with payload in scope.
func claim(scope, id, payload string) ledger.Claim {
	return ledger.Claim{Scope: scope, ID: id, Fingerprint: ledger.MessageFingerprint([]byte(payload))}
}

func TestNewMemoryInvalid(t *testing.T) {
	if _, err := ledger.NewMemory(ledger.Options{Retention: -time.Second}); !errors.Is(err, ledger.ErrInvalid) {
		t.Errorf("NewMemory(negative retention) = %v, want ErrInvalid", err)
	}
}

func TestMemoryEntries(t *testing.T) {
	ctx := context.Background()
	l, _ := ledger.NewMemory(ledger.Options{})
	for _, k := range []string{"b", "a"} {
		if _, _, err := l.Begin(ctx, intent(k, "o")); err != nil {
			t.Fatal(err)
		}
	}
	var keys []string
	for _, e := range l.Entries() {
		keys = append(keys, e.Key)
	}
	if d := cmp.Diff([]string{"a", "b"}, keys); d != "" {
		t.Error(d)
	}
}
