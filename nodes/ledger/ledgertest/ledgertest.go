// Package ledgertest is the conformance suite of ledger.Ledger: every
// implementation (ledger.Memory, ledger.SQL on SQLite, the PostgreSQL
// ledger of package postgres) runs it, so that they answer alike. The
// cases are the contract of package ledger's documentation: replays, key
// reuse, in-progress and unknown outcomes, the successor rule of D17,
// transient releases, stored failures, retention, Resolve and Forget,
// message claims (R44), invalid input, and 32 goroutines on one key.
package ledgertest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/nodes/ledger"
)

// Factory returns a new, empty ledger with opts, registering its cleanup
// with t.Cleanup and reporting its own failures with t.Fatal.
type Factory func(t *testing.T, opts ledger.Options) ledger.Ledger

// Options describe what the ledger under test cannot do, so that the
// suite checks the typed error it promises instead.
type Options struct {
	// TextOnly: keys, owners, scopes, message IDs and fingerprints are
	// stored as text, so one holding a NUL byte or invalid UTF-8 is
	// refused with an error matching ledger.ErrInvalid, and nothing is
	// written (PostgreSQL). Without it every byte string is a distinct
	// identifier.
	TextOnly bool
}

// Run runs every case against the ledgers newLedger makes, as subtests of
// t. Each case gets a ledger of its own. Results come back as the same
// JSON value, not necessarily the same bytes (PostgreSQL's JSONB keeps
// neither key order nor spacing).
func Run(t *testing.T, newLedger Factory, opts ...Options) {
	t.Helper()
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	textOnly = o.TextOnly
	for _, c := range []struct {
		name string
		run  func(*testing.T, Factory)
	}{
		{"replay", testReplay},
		{"key-reuse", testKeyReuse},
		{"in-progress-and-unknown", testInProgress},
		{"holder-begins-again", testHolderAgain},
		{"earlier-run-is-abandoned", testEarlierRun},
		{"transient-release", testRelease},
		{"stored-failure", testStoredFailure},
		{"retention", testRetention},
		{"resolve-forget", testResolveForget},
		{"messages", testMessages},
		{"message-claims-R44", testMessageClaims},
		{"invalid", testInvalid},
		{"32-goroutines", testConcurrent},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(t, newLedger) })
	}
}

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

func intent(key, owner string) ledger.Intent {
	return ledger.Intent{Key: key, Tool: "create_issue", ArgsHash: "h1", Owner: owner, Lease: time.Minute}
}

func testReplay(t *testing.T, newLedger Factory) {
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
	if d := cmp.Diff(want, e, timeEqual, sameJSON); d != "" {
		t.Errorf("replayed entry (-want +got):\n%s", d)
	}
	// Completing again is refused: the outcome is stored once.
	if err := l.Complete(ctx, "k1", "a", ledger.Outcome{Result: json.RawMessage(`{}`)}); !errors.Is(err, ledger.ErrNotHeld) {
		t.Errorf("second Complete = %v, want ErrNotHeld", err)
	}
}

var timeEqual = cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })

// sameJSON compares JSON by value: key order and spacing aside.
var sameJSON = cmp.Comparer(func(a, b json.RawMessage) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return cmp.Equal(x, y)
})

func testKeyReuse(t *testing.T, newLedger Factory) {
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

func testInProgress(t *testing.T, newLedger Factory) {
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

func testRelease(t *testing.T, newLedger Factory) {
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

func testStoredFailure(t *testing.T, newLedger Factory) {
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

func testRetention(t *testing.T, newLedger Factory) {
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

func testResolveForget(t *testing.T, newLedger Factory) {
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

func testMessages(t *testing.T, newLedger Factory) {
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

func testInvalid(t *testing.T, newLedger Factory) {
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
func testConcurrent(t *testing.T, newLedger Factory) {
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

// testHolderAgain: Begin by the owner that holds the pending intent (after
// a Begin whose error may have come after its commit) takes it again,
// live or lapsed, with its lease renewed and its age kept; once the
// outcome is recorded, the same owner gets the outcome like anyone else.
func testHolderAgain(t *testing.T, newLedger Factory) {
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

// claimStep is one claim of a scenario, after advancing the clock by
// advance; want is nil, ErrDuplicateMessage, ErrDuplicateMismatch or
// ErrInvalid.
type claimStep struct {
	advance time.Duration
	c       ledger.Claim
	want    error
}

// testMessageClaims is the contract of R44's message dedup: a redelivery is a duplicate; the same (scope, ID)
// with another payload is ErrDuplicateMismatch and writes nothing; the
// same ID in two scopes wins in both; scopes and IDs compare as exact
// bytes; empty or oversized fields are ErrInvalid and write nothing.
func testMessageClaims(t *testing.T, newLedger Factory) {
	const s1, s2 = "acme/orders", "globex/orders"
	p1, p2 := `{"card":"canary-4242","amount":5}`, `{"card":"canary-4242","amount":500}`
	over := strings.Repeat("x", ledger.MaxIDBytes+1)
	cases := []struct {
		name  string
		steps []claimStep
	}{
		{"redelivery-same-payload", []claimStep{
			{c: claim(s1, "evt_1", p1)},
			{c: claim(s1, "evt_1", p1), want: ledger.ErrDuplicateMessage},
			{advance: time.Minute, c: claim(s1, "evt_1", p1), want: ledger.ErrDuplicateMessage},
		}},
		{"same-id-other-payload-mismatch", []claimStep{
			{c: claim(s1, "evt_1", p1)},
			{c: claim(s1, "evt_1", p2), want: ledger.ErrDuplicateMismatch},
			// Nothing was written: the other payload still mismatches, and
			// the first one is still a plain duplicate.
			{c: claim(s1, "evt_1", p2), want: ledger.ErrDuplicateMismatch},
			{c: claim(s1, "evt_1", p1), want: ledger.ErrDuplicateMessage},
		}},
		{"same-id-two-scopes", []claimStep{
			{c: claim(s1, "evt_1", p1)},
			{c: claim(s2, "evt_1", p1)},
			{c: claim(s2, "evt_1", p2), want: ledger.ErrDuplicateMismatch},
			{c: claim(s1, "evt_1", p1), want: ledger.ErrDuplicateMessage},
			{c: claim(s2, "evt_1", p1), want: ledger.ErrDuplicateMessage},
		}},
		{"ids-case-and-whitespace-are-exact-bytes", exactBytes([]string{
			"evt_1", "EVT_1", "Evt_1", "evt_1 ", " evt_1", "evt_1\n", "evt_1\t", "evt_1\u00a0",
			"évt_1", "e\u0301vt_1", // NFC and NFD
		}, func(v string) ledger.Claim { return claim(s1, v, p1) })},
		{"ids-nul-and-invalid-utf8", binaryIDs([]string{"evt_1\x00", "evt_1\xff"}, func(v string) ledger.Claim { return claim(s1, v, p1) })},
		{"scopes-case-and-whitespace-are-exact-bytes", exactBytes([]string{
			"acme/orders", "ACME/orders", "acme/orders ", " acme/orders", "acme/Orders",
		}, func(v string) ledger.Claim { return claim(v, "evt_1", p1) })},
		{"message-scope-parts-never-collide", []claimStep{
			{c: claim(ledger.MessageScope("a/b", "c"), "evt_1", p1)},
			{c: claim(ledger.MessageScope("a", "b/c"), "evt_1", p1)},
			{c: claim(ledger.MessageScope("a", "b", "c"), "evt_1", p1)},
			{c: claim(ledger.MessageScope("a%2Fb", "c"), "evt_1", p1)},
			{c: claim(ledger.MessageScope("a/b", "c"), "evt_1", p1), want: ledger.ErrDuplicateMessage},
		}},
		{"empty-id", []claimStep{
			{c: claim(s1, "", p1), want: ledger.ErrInvalid},
			{c: claim(s1, "", p1), want: ledger.ErrInvalid},
			{c: claim(s1, " ", p1)}, // not empty: a message
		}},
		{"empty-scope-writes-nothing", []claimStep{
			{c: claim("", "evt_1", p1), want: ledger.ErrInvalid},
			{c: ledger.Claim{Scope: ledger.MessageScope(), ID: "evt_1", Fingerprint: "f"}, want: ledger.ErrInvalid},
			// Had the empty scope been stored, it would read as a claim
			// migrated from version 1 and refuse evt_1 in every scope.
			{c: claim(s1, "evt_1", p2)},
		}},
		{"empty-fingerprint", []claimStep{
			{c: ledger.Claim{Scope: s1, ID: "evt_1"}, want: ledger.ErrInvalid},
			{c: claim(s1, "evt_1", p1)},
		}},
		{"oversized", []claimStep{
			{c: claim(over, "evt_1", p1), want: ledger.ErrInvalid},
			{c: claim(s1, over, p1), want: ledger.ErrInvalid},
			{c: ledger.Claim{Scope: s1, ID: "evt_1", Fingerprint: over}, want: ledger.ErrInvalid},
			{c: claim(over[1:], over[1:], p1)},
			{c: claim(s1, "evt_1", p1)},
		}},
		{"mismatch-after-retention-wins", []claimStep{
			{c: claim(s1, "evt_1", p1)},
			{advance: time.Hour - time.Nanosecond, c: claim(s1, "evt_1", p2), want: ledger.ErrDuplicateMismatch},
			{advance: time.Nanosecond, c: claim(s1, "evt_1", p2)},
			{c: claim(s1, "evt_1", p1), want: ledger.ErrDuplicateMismatch},
			{c: claim(s1, "evt_1", p2), want: ledger.ErrDuplicateMessage},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			clk := newFakeClock()
			l := newLedger(t, ledger.Options{Now: clk.Now, Retention: time.Hour})
			for i, st := range tc.steps {
				clk.Advance(st.advance)
				CheckClaimErr(t, fmt.Sprintf("step %d (scope %q, ID %q)", i, short(st.c.Scope), short(st.c.ID)), st.c, l.ClaimMessage(ctx, st.c), st.want)
			}
		})
	}
}

// exactBytes claims every variant once (each wins), then again (each is a
// duplicate).
// textOnly is Options.TextOnly of the run (Run is not called in
// parallel with itself).
var textOnly bool

// binaryIDs claims identifiers that are not text: as exactBytes does, or,
// for a ledger that stores text only, each is refused with ErrInvalid
// every time (nothing written).
func binaryIDs(variants []string, mk func(string) ledger.Claim) []claimStep {
	if !textOnly {
		return exactBytes(variants, mk)
	}
	var steps []claimStep
	for range 2 {
		for _, v := range variants {
			steps = append(steps, claimStep{c: mk(v), want: ledger.ErrInvalid})
		}
	}
	return steps
}

func exactBytes(variants []string, mk func(string) ledger.Claim) []claimStep {
	var steps []claimStep
	for _, v := range variants {
		steps = append(steps, claimStep{c: mk(v)})
	}
	for _, v := range variants {
		steps = append(steps, claimStep{c: mk(v), want: ledger.ErrDuplicateMessage})
	}
	return steps
}

func short(s string) string {
	if len(s) > 20 {
		return s[:20] + "…"
	}
	return s
}

// CheckClaimErr checks the error of claim c against want (nil,
// ledger.ErrDuplicateMessage, ledger.ErrDuplicateMismatch or
// ledger.ErrInvalid), and that a mismatch is typed, distinct from a
// duplicate, and names no payload; it reports what it finds on t, as what.
func CheckClaimErr(t *testing.T, what string, c ledger.Claim, err, want error) {
	t.Helper()
	switch {
	case want == nil:
		if err != nil {
			t.Errorf("%s = %v, want it to win", what, err)
		}
		return
	case !errors.Is(err, want):
		t.Errorf("%s = %v, want %v", what, err, want)
		return
	}
	if want == ledger.ErrDuplicateMismatch {
		var mm *ledger.DuplicateMismatchError
		if !errors.As(err, &mm) || mm.Scope != c.Scope || mm.ID != c.ID || mm.ClaimedAt.IsZero() {
			t.Errorf("%s = %#v, want a *DuplicateMismatchError naming the scope and ID", what, err)
		}
		if errors.Is(err, ledger.ErrDuplicateMessage) {
			t.Errorf("%s matches ErrDuplicateMessage: a caller that skips redeliveries would drop it", what)
		}
	}
	if want == ledger.ErrDuplicateMessage && errors.Is(err, ledger.ErrDuplicateMismatch) {
		t.Errorf("%s = %v: a redelivery reported as a mismatch", what, err)
	}
	if msg := err.Error(); strings.Contains(msg, "canary") || (c.Fingerprint != "" && strings.Contains(msg, c.Fingerprint)) {
		t.Errorf("%s: error %q names the payload or its fingerprint", what, msg)
	}
}

// runIntent is intent of a graph run: thread and run ID.
func runIntent(key, owner, thread, run string) ledger.Intent {
	in := intent(key, owner)
	in.Thread, in.Run = thread, run
	return in
}

// testEarlierRun (D17, issue 15 item 1): a pending intent that
// an earlier run of the same thread recorded counts as abandoned at once,
// well inside its lease: Begin by the thread's current run returns an
// *OutcomeUnknownError with EarlierRun set (naming that run), or, with
// TakeOver, hands the intent over, recording the new run. An intent of a
// run of another thread, of the same run (another execution), or of a
// holder outside a graph run (no run recorded) is still in progress while
// its lease lasts, with an *InProgressError naming the holder and when to
// retry.
func testEarlierRun(t *testing.T, newLedger Factory) {
	ctx := context.Background()
	clk := newFakeClock()
	l := newLedger(t, ledger.Options{Now: clk.Now})
	if _, started, err := l.Begin(ctx, runIntent("k", "exec-1", "thread-7", "run-1")); err != nil || !started {
		t.Fatalf("Begin: %v, %v", started, err)
	}
	clk.Advance(3 * time.Second) // well inside the minute's lease

	for _, tc := range []struct {
		name string
		in   ledger.Intent
	}{
		{"another thread", runIntent("k", "exec-2", "thread-8", "run-9")},
		{"the same run", runIntent("k", "exec-2", "thread-7", "run-1")},
		{"outside a graph run", intent("k", "exec-2")},
	} {
		_, _, err := l.Begin(ctx, tc.in)
		var ip *ledger.InProgressError
		if !errors.As(err, &ip) || ip.Thread != "thread-7" || ip.Run != "run-1" {
			t.Errorf("%s: %v, want an *InProgressError naming run-1 of thread-7", tc.name, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "in run run-1 of thread \"thread-7\"") || !strings.Contains(msg, "retry after") {
			t.Errorf("%s: message %q does not name the holder and when to retry", tc.name, msg)
		}
	}

	_, started, err := l.Begin(ctx, runIntent("k", "exec-2", "thread-7", "run-2"))
	var ou *ledger.OutcomeUnknownError
	if started || !errors.As(err, &ou) || !ou.EarlierRun || ou.Run != "run-1" || ou.Thread != "thread-7" {
		t.Fatalf("Begin by the thread's next run: started %v, %v; want an *OutcomeUnknownError of the earlier run", started, err)
	}
	if msg := err.Error(); !strings.Contains(msg, "earlier run (run-1)") || !strings.Contains(msg, "may or may not have taken effect") {
		t.Errorf("message %q does not say an earlier run left it, outcome unknown", msg)
	}
	if e, err := l.Get(ctx, "k"); err != nil || e.State != ledger.StatePending || e.Owner != "exec-1" {
		t.Fatalf("the refused Begin changed the record: %+v, %v", e, err)
	}

	take := runIntent("k", "exec-3", "thread-7", "run-2")
	take.TakeOver = true
	e, started, err := l.Begin(ctx, take)
	if err != nil || !started || e.Owner != "exec-3" || e.Run != "run-2" || e.Thread != "thread-7" {
		t.Fatalf("TakeOver by the next run: %+v, started %v, %v", e, started, err)
	}
	if got, _ := l.Get(ctx, "k"); got.Run != "run-2" || got.Owner != "exec-3" {
		t.Errorf("stored after the takeover: %+v", got)
	}
	// The new holder is live: the run after it waits for nothing
	// either; another thread's call still does.
	if _, _, err := l.Begin(ctx, runIntent("k", "exec-4", "thread-8", "run-9")); !errors.Is(err, ledger.ErrInProgress) {
		t.Errorf("another thread after the takeover: %v, want ErrInProgress", err)
	}
	if _, _, err := l.Begin(ctx, runIntent("k", "exec-4", "thread-7", "run-3")); !errors.Is(err, ledger.ErrOutcomeUnknown) {
		t.Errorf("the thread's run after that: %v, want ErrOutcomeUnknown", err)
	}
}
