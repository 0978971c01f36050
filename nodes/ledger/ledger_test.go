package ledger_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	_ "github.com/mattn/go-sqlite3"

	"github.com/lockstepgo/lockstep/nodes/ledger"
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

// TestLedger runs the same contract against every implementation.
func TestLedger(t *testing.T) {
	for name, newLedger := range implementations() {
		t.Run(name, func(t *testing.T) {
			t.Run("replay", func(t *testing.T) { testReplay(t, newLedger) })
			t.Run("key-reuse", func(t *testing.T) { testKeyReuse(t, newLedger) })
			t.Run("in-progress-and-unknown", func(t *testing.T) { testInProgress(t, newLedger) })
			t.Run("holder-begins-again", func(t *testing.T) { testHolderAgain(t, newLedger) })
			t.Run("transient-release", func(t *testing.T) { testRelease(t, newLedger) })
			t.Run("stored-failure", func(t *testing.T) { testStoredFailure(t, newLedger) })
			t.Run("retention", func(t *testing.T) { testRetention(t, newLedger) })
			t.Run("resolve-forget", func(t *testing.T) { testResolveForget(t, newLedger) })
			t.Run("messages", func(t *testing.T) { testMessages(t, newLedger) })
			t.Run("invalid", func(t *testing.T) { testInvalid(t, newLedger) })
			t.Run("32-goroutines", func(t *testing.T) { testConcurrent(t, newLedger) })
		})
	}
}

func intent(key, owner string) ledger.Intent {
	return ledger.Intent{Key: key, Tool: "create_issue", ArgsHash: "h1", Owner: owner, Lease: time.Minute}
}

func testReplay(t *testing.T, newLedger factory) {
	ctx := context.Background()
	clk := newFakeClock()
	l := newLedger(t, ledger.Options{Now: clk.Now})
	e, started, err := l.Begin(ctx, intent("k1", "a"))
	if err != nil || !started {
		t.Fatalf("first Begin = %v, started %v; want started", err, started)
	}
	if e.State != ledger.StatePending || e.Owner != "a" {
		t.Fatalf("first entry %+v", e)
	}
	result := json.RawMessage(`{"number":7,"url":"https://tracker/7"}`)
	if err := l.Complete(ctx, "k1", "a", ledger.Outcome{Result: result}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	e, started, err = l.Begin(ctx, intent("k1", "b"))
	if err != nil || started {
		t.Fatalf("repeat Begin = %v, started %v; want the stored outcome", err, started)
	}
	want := ledger.Entry{Key: "k1", Tool: "create_issue", ArgsHash: "h1", State: ledger.StateDone, Owner: "a",
		Outcome: ledger.Outcome{Result: result}, LeaseUntil: clk.Now().Add(-time.Hour + time.Minute),
		CreatedAt: clk.Now().Add(-time.Hour), CompletedAt: clk.Now().Add(-time.Hour)}
	if d := cmp.Diff(want, e, timeEqual); d != "" {
		t.Errorf("replayed entry (-want +got):\n%s", d)
	}
	// Completing again is refused: the outcome is stored once.
	if err := l.Complete(ctx, "k1", "a", ledger.Outcome{Result: json.RawMessage(`{}`)}); !errors.Is(err, ledger.ErrNotHeld) {
		t.Errorf("second Complete = %v, want ErrNotHeld", err)
	}
}

var timeEqual = cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })

func testKeyReuse(t *testing.T, newLedger factory) {
	ctx := context.Background()
	l := newLedger(t, ledger.Options{})
	if _, _, err := l.Begin(ctx, intent("k", "a")); err != nil {
		t.Fatal(err)
	}
	if err := l.Complete(ctx, "k", "a", ledger.Outcome{Result: json.RawMessage(`1`)}); err != nil {
		t.Fatal(err)
	}
	for _, in := range []ledger.Intent{
		{Key: "k", Tool: "create_issue", ArgsHash: "h2", Owner: "b"},
		{Key: "k", Tool: "delete_issue", ArgsHash: "h1", Owner: "b"},
	} {
		_, started, err := l.Begin(ctx, in)
		var kr *ledger.KeyReuseError
		if !errors.As(err, &kr) || !errors.Is(err, ledger.ErrKeyReuse) || started {
			t.Errorf("Begin(%+v) = %v, started %v; want *KeyReuseError", in, err, started)
		}
	}
	e, err := l.Get(ctx, "k")
	if err != nil || string(e.Outcome.Result) != "1" {
		t.Errorf("stored outcome changed: %+v, %v", e, err)
	}
}

func testInProgress(t *testing.T, newLedger factory) {
	ctx := context.Background()
	clk := newFakeClock()
	l := newLedger(t, ledger.Options{Now: clk.Now})
	if _, started, err := l.Begin(ctx, intent("k", "a")); err != nil || !started {
		t.Fatal(err)
	}
	_, started, err := l.Begin(ctx, intent("k", "b"))
	var ip *ledger.InProgressError
	if !errors.As(err, &ip) || started {
		t.Fatalf("concurrent Begin = %v; want *InProgressError", err)
	}
	if !ip.LeaseUntil.Equal(clk.Now().Add(time.Minute)) {
		t.Errorf("LeaseUntil = %v", ip.LeaseUntil)
	}
	// The holder vanishes: after its lease the outcome is unknown, and
	// the call is not started again.
	clk.Advance(time.Minute)
	_, started, err = l.Begin(ctx, intent("k", "b"))
	var ou *ledger.OutcomeUnknownError
	if !errors.As(err, &ou) || !errors.Is(err, ledger.ErrOutcomeUnknown) || started {
		t.Fatalf("Begin after the lease = %v, started %v; want *OutcomeUnknownError", err, started)
	}
	// A late holder may still record its outcome (it is the truth) until
	// a reconcile takes the intent over; then it cannot.
	in := intent("k", "c")
	in.TakeOver = true
	e, started, err := l.Begin(ctx, in)
	if err != nil || !started || e.Owner != "c" {
		t.Fatalf("TakeOver Begin = %+v, %v, %v", e, started, err)
	}
	if err := l.Complete(ctx, "k", "a", ledger.Outcome{Result: json.RawMessage(`1`)}); !errors.Is(err, ledger.ErrNotHeld) {
		t.Errorf("Complete by the old holder = %v, want ErrNotHeld", err)
	}
	if err := l.Complete(ctx, "k", "c", ledger.Outcome{Result: json.RawMessage(`2`)}); err != nil {
		t.Fatal(err)
	}
}

func testRelease(t *testing.T, newLedger factory) {
	ctx := context.Background()
	l := newLedger(t, ledger.Options{})
	if _, _, err := l.Begin(ctx, intent("k", "a")); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx, "k", "b"); !errors.Is(err, ledger.ErrNotHeld) {
		t.Errorf("Release by another owner = %v, want ErrNotHeld", err)
	}
	if err := l.Release(ctx, "k", "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Get(ctx, "k"); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("Get after Release = %v, want ErrNotFound", err)
	}
	if _, started, err := l.Begin(ctx, intent("k", "b")); err != nil || !started {
		t.Errorf("Begin after a transient failure = %v, %v; want a fresh start", started, err)
	}
}

func testStoredFailure(t *testing.T, newLedger factory) {
	ctx := context.Background()
	l := newLedger(t, ledger.Options{})
	if _, _, err := l.Begin(ctx, intent("k", "a")); err != nil {
		t.Fatal(err)
	}
	f := &ledger.Failure{Class: "permanent", Message: "tracker: 404 not found", Status: 404}
	if err := l.Complete(ctx, "k", "a", ledger.Outcome{Failure: f}); err != nil {
		t.Fatal(err)
	}
	e, started, err := l.Begin(ctx, intent("k", "b"))
	if err != nil || started {
		t.Fatal(err, started)
	}
	if d := cmp.Diff(f, e.Outcome.Failure); d != "" || e.Outcome.Result != nil {
		t.Errorf("replayed failure (-want +got):\n%s", d)
	}
}

func testRetention(t *testing.T, newLedger factory) {
	ctx := context.Background()
	clk := newFakeClock()
	l := newLedger(t, ledger.Options{Now: clk.Now, Retention: 24 * time.Hour})
	if _, _, err := l.Begin(ctx, intent("done", "a")); err != nil {
		t.Fatal(err)
	}
	if err := l.Complete(ctx, "done", "a", ledger.Outcome{Result: json.RawMessage(`1`)}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Begin(ctx, intent("pending", "a")); err != nil {
		t.Fatal(err)
	}
	clk.Advance(24*time.Hour - time.Nanosecond)
	if _, started, err := l.Begin(ctx, intent("done", "b")); err != nil || started {
		t.Fatalf("one tick before the retention: %v, started %v; want a replay", err, started)
	}
	if n, err := l.Prune(ctx); err != nil || n != 0 {
		t.Fatalf("Prune before retention = %d, %v", n, err)
	}
	clk.Advance(time.Nanosecond)
	if n, err := l.Prune(ctx); err != nil || n != 1 {
		t.Fatalf("Prune at retention = %d, %v; want 1 (the pending record stays)", n, err)
	}
	if _, err := l.Get(ctx, "pending"); err != nil {
		t.Errorf("pending record was pruned: %v", err)
	}
	if _, started, err := l.Begin(ctx, intent("done", "b")); err != nil || !started {
		t.Errorf("Begin after retention = %v, %v; want a fresh start", started, err)
	}
	// An expired record is replaced even without Prune.
	if err := l.Complete(ctx, "done", "b", ledger.Outcome{Result: json.RawMessage(`2`)}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(24 * time.Hour)
	other := intent("done", "c")
	other.ArgsHash = "other args"
	if _, started, err := l.Begin(ctx, other); err != nil || !started {
		t.Errorf("Begin on an expired key with other args = %v, %v; want a fresh start", started, err)
	}
}

func testResolveForget(t *testing.T, newLedger factory) {
	ctx := context.Background()
	clk := newFakeClock()
	l := newLedger(t, ledger.Options{Now: clk.Now})
	if err := l.Resolve(ctx, "missing", ledger.Outcome{}); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("Resolve(missing) = %v", err)
	}
	if _, _, err := l.Begin(ctx, intent("k", "a")); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Minute)
	if err := l.Resolve(ctx, "k", ledger.Outcome{Result: json.RawMessage(`"found downstream"`)}); err != nil {
		t.Fatal(err)
	}
	if err := l.Resolve(ctx, "k", ledger.Outcome{}); !errors.Is(err, ledger.ErrNotHeld) {
		t.Errorf("second Resolve = %v, want ErrNotHeld", err)
	}
	e, started, err := l.Begin(ctx, intent("k", "b"))
	if err != nil || started || string(e.Outcome.Result) != `"found downstream"` {
		t.Errorf("Begin after Resolve = %+v, %v, %v", e, started, err)
	}
	if err := l.Forget(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if err := l.Forget(ctx, "k"); err != nil {
		t.Errorf("Forget twice = %v", err)
	}
	if _, started, err := l.Begin(ctx, intent("k", "b")); err != nil || !started {
		t.Errorf("Begin after Forget = %v, %v", started, err)
	}
}

// claim is the claim of a message with payload in scope.
func claim(scope, id, payload string) ledger.Claim {
	return ledger.Claim{Scope: scope, ID: id, Fingerprint: ledger.MessageFingerprint([]byte(payload))}
}

func testMessages(t *testing.T, newLedger factory) {
	ctx := context.Background()
	clk := newFakeClock()
	l := newLedger(t, ledger.Options{Now: clk.Now, Retention: time.Hour})
	if err := l.ClaimMessage(ctx, claim("s", "", "p")); !errors.Is(err, ledger.ErrInvalid) {
		t.Errorf("empty ID = %v, want ErrInvalid", err)
	}
	for _, id := range []string{"evt_1", "EVT_1", "evt_1 ", "evt_2"} {
		if err := l.ClaimMessage(ctx, claim("s", id, "p")); err != nil {
			t.Errorf("first claim of %q = %v", id, err)
		}
	}
	if err := l.ClaimMessage(ctx, claim("s", "evt_1", "p")); !errors.Is(err, ledger.ErrDuplicateMessage) {
		t.Errorf("second claim = %v, want ErrDuplicateMessage", err)
	}
	clk.Advance(time.Hour)
	if err := l.ClaimMessage(ctx, claim("s", "evt_1", "p")); err != nil {
		t.Errorf("claim after the retention = %v", err)
	}
	// 8 consumers, 100 messages delivered 3 times each: 100 claims win
	// (TestMessageDedupLoadR44 is the full R44 load).
	var won atomic.Int64
	var wg sync.WaitGroup
	for c := range 8 {
		wg.Go(func() {
			for i := range 300 {
				n := (i*7 + c) % 100
				switch err := l.ClaimMessage(ctx, claim("s", fmt.Sprintf("m%d", n), fmt.Sprintf("payload %d", n))); {
				case err == nil:
					won.Add(1)
				case !errors.Is(err, ledger.ErrDuplicateMessage):
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if won.Load() != 100 {
		t.Errorf("claims won = %d, want 100", won.Load())
	}
}

func testInvalid(t *testing.T, newLedger factory) {
	ctx := context.Background()
	l := newLedger(t, ledger.Options{})
	for _, in := range []ledger.Intent{
		{Owner: "a"},
		{Key: "k"},
		{Key: "k", Owner: "a", Lease: -1},
		{Key: strings.Repeat("k", ledger.MaxIDBytes+1), Owner: "a"},
		{Key: "k", Owner: strings.Repeat("o", ledger.MaxIDBytes+1)},
	} {
		if _, _, err := l.Begin(ctx, in); !errors.Is(err, ledger.ErrInvalid) {
			t.Errorf("Begin(key of %d bytes, owner of %d bytes, lease %v) = %v, want ErrInvalid", len(in.Key), len(in.Owner), in.Lease, err)
		}
	}
	over := strings.Repeat("x", ledger.MaxIDBytes+1)
	for _, c := range []ledger.Claim{
		{Scope: "s", ID: "", Fingerprint: "f"},
		{Scope: "s", ID: over, Fingerprint: "f"},
		{Scope: "", ID: "m", Fingerprint: "f"},
		{Scope: over, ID: "m", Fingerprint: "f"},
		{Scope: "s", ID: "m", Fingerprint: ""},
		{Scope: "s", ID: "m", Fingerprint: over},
	} {
		if err := l.ClaimMessage(ctx, c); !errors.Is(err, ledger.ErrInvalid) {
			t.Errorf("ClaimMessage(scope of %d bytes, ID of %d, fingerprint of %d) = %v, want ErrInvalid", len(c.Scope), len(c.ID), len(c.Fingerprint), err)
		}
	}
	// At the cap is fine, and nothing refused was stored.
	atCap := strings.Repeat("m", ledger.MaxIDBytes)
	for _, c := range []ledger.Claim{{Scope: atCap, ID: atCap, Fingerprint: atCap}, {Scope: "s", ID: "m", Fingerprint: "f"}} {
		if err := l.ClaimMessage(ctx, c); err != nil {
			t.Errorf("ClaimMessage(scope of %d bytes, ID of %d, fingerprint of %d) = %v", len(c.Scope), len(c.ID), len(c.Fingerprint), err)
		}
	}
	if _, err := l.Get(ctx, "k"); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("after refused intents, Get(k) = %v, want ErrNotFound", err)
	}
}

// testConcurrent: 32 goroutines run one operation under one key; exactly
// one effect happens, and the others see it in progress or replay it.
func testConcurrent(t *testing.T, newLedger factory) {
	ctx := context.Background()
	l := newLedger(t, ledger.Options{})
	var effects, inProgress, replays atomic.Int64
	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			<-start
			owner := fmt.Sprintf("g%d", g)
			_, started, err := l.Begin(ctx, intent("one-key", owner))
			switch {
			case errors.Is(err, ledger.ErrInProgress):
				inProgress.Add(1)
				return
			case err != nil:
				t.Error(err)
				return
			case !started:
				replays.Add(1)
				return
			}
			effects.Add(1)
			time.Sleep(5 * time.Millisecond)
			if err := l.Complete(ctx, "one-key", owner, ledger.Outcome{Result: json.RawMessage(`"ok"`)}); err != nil {
				t.Error(err)
			}
		})
	}
	close(start)
	wg.Wait()
	if effects.Load() != 1 || effects.Load()+inProgress.Load()+replays.Load() != 32 {
		t.Errorf("effects %d, in progress %d, replays %d; want 1 effect of 32", effects.Load(), inProgress.Load(), replays.Load())
	}
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

// testHolderAgain: Begin by the owner that holds the pending intent (after
// a Begin whose error may have come after its commit) takes it again,
// live or lapsed, with its lease renewed and its age kept; once the
// outcome is recorded, the same owner gets the outcome like anyone else.
func testHolderAgain(t *testing.T, newLedger factory) {
	ctx := context.Background()
	clk := newFakeClock()
	l := newLedger(t, ledger.Options{Now: clk.Now})
	created := clk.Now()
	if _, started, err := l.Begin(ctx, intent("k", "a")); err != nil || !started {
		t.Fatalf("first Begin = %v, started %v", err, started)
	}
	for _, wait := range []time.Duration{time.Second, 2 * time.Minute} {
		clk.Advance(wait)
		e, started, err := l.Begin(ctx, intent("k", "a"))
		if err != nil || !started {
			t.Fatalf("Begin by the holder after %v = %v, started %v; want the intent again", wait, err, started)
		}
		want := ledger.Entry{Key: "k", Tool: "create_issue", ArgsHash: "h1", State: ledger.StatePending, Owner: "a",
			LeaseUntil: clk.Now().Add(time.Minute), CreatedAt: created}
		if d := cmp.Diff(want, e, timeEqual); d != "" {
			t.Errorf("entry after %v (-want +got):\n%s", wait, d)
		}
	}
	if _, started, err := l.Begin(ctx, intent("k", "b")); !errors.Is(err, ledger.ErrInProgress) || started {
		t.Errorf("Begin by another owner = %v, started %v; want ErrInProgress", err, started)
	}
	if err := l.Complete(ctx, "k", "a", ledger.Outcome{Result: json.RawMessage(`1`)}); err != nil {
		t.Fatal(err)
	}
	e, started, err := l.Begin(ctx, intent("k", "a"))
	if err != nil || started || e.State != ledger.StateDone {
		t.Errorf("Begin by the holder after Complete = %+v, %v, %v; want the outcome", e, started, err)
	}
	in := intent("k2", "a")
	in.ArgsHash = "h1"
	if _, _, err := l.Begin(ctx, in); err != nil {
		t.Fatal(err)
	}
	in.ArgsHash = "other"
	if _, started, err := l.Begin(ctx, in); !errors.Is(err, ledger.ErrKeyReuse) || started {
		t.Errorf("the holder beginning with other arguments = %v, started %v; want ErrKeyReuse", err, started)
	}
}
