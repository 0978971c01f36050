package nodes_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/canon"
	"github.com/lockstepgo/lockstep/nodes"
	"github.com/lockstepgo/lockstep/nodes/ledger"
)

type OrderArgs struct {
	OrderID string `json:"order_id"`
	Amount  int    `json:"amount"`
}

// payments is a fake payment API that counts effects.
type payments struct {
	calls counter
	fail  error
	block chan struct{}
}

func (p *payments) tool(t testing.TB, opts ...nodes.ToolOption) *nodes.Tool {
	return mustTool(t)(nodes.NewTool("charge", "Charge an order. Returns the charge.",
		func(ctx context.Context, a OrderArgs, env nodes.Env) (map[string]any, error) {
			p.calls.inc("charge")
			if p.block != nil {
				<-p.block
			}
			if p.fail != nil {
				return nil, p.fail
			}
			return map[string]any{"order_id": a.OrderID, "amount": a.Amount, "charged": true}, nil
		}, opts...))
}

func charge(order string, amount int, scope string) nodes.Call {
	b, _ := json.Marshal(OrderArgs{OrderID: order, Amount: amount})
	return nodes.Call{Tool: "charge", Args: b, Scope: scope}
}

// TestLedgerReplay: a repeat of the same write returns the stored result,
// marked replayed; the tool ran once.
func TestLedgerReplay(t *testing.T) {
	p := &payments{}
	var logs logBuffer
	ex, _ := nodes.NewExecutor([]*nodes.Tool{p.tool(t)}, nodes.WithLedger(newMemLedger(t, nil)), nodes.WithLogger(logs.Logger()))
	first, err := ex.Execute(context.Background(), charge("O-1", 5, "th"))
	if err != nil || first.Status != nodes.StatusExecuted || first.Replayed {
		t.Fatal(first, err)
	}
	again, err := ex.Execute(context.Background(), charge("O-1", 5, "th"))
	if err != nil {
		t.Fatal(err)
	}
	want := nodes.Result{Tool: "charge", Output: first.Output, Status: nodes.StatusReplayed, Replayed: true, Key: first.Key}
	if d := cmp.Diff(want, again); d != "" {
		t.Errorf("replay (-want +got):\n%s", d)
	}
	if p.calls.get("charge") != 1 {
		t.Errorf("charged %d times", p.calls.get("charge"))
	}
	// Another thread is another operation.
	if res, err := ex.Execute(context.Background(), charge("O-1", 5, "other")); err != nil || res.Status != nodes.StatusExecuted {
		t.Errorf("other thread: %+v %v", res, err)
	}
	if d := cmp.Diff([]string{"charge:executed", "charge:replayed", "charge:executed"}, logs.Statuses()); d != "" {
		t.Errorf("decisions (-want +got):\n%s", d)
	}
}

// TestLedgerKeyReuse (R40): a natural key reused with other arguments is a
// typed error and the tool does not run.
func TestLedgerKeyReuse(t *testing.T) {
	p := &payments{}
	ex, _ := nodes.NewExecutor([]*nodes.Tool{p.tool(t, nodes.NaturalKey(func(a OrderArgs) string { return a.OrderID }))}, nodes.WithLedger(newMemLedger(t, nil)))
	if _, err := ex.Execute(context.Background(), charge("O-1", 5, "a")); err != nil {
		t.Fatal(err)
	}
	// Same natural key from another thread: the same operation, replayed.
	if res, err := ex.Execute(context.Background(), charge("O-1", 5, "b")); err != nil || !res.Replayed {
		t.Fatalf("same order from another thread: %+v, %v", res, err)
	}
	_, err := ex.Execute(context.Background(), charge("O-1", 500, "a"))
	var kr *ledger.KeyReuseError
	if !errors.As(err, &kr) || !errors.Is(err, ledger.ErrKeyReuse) {
		t.Fatalf("err = %v, want *ledger.KeyReuseError", err)
	}
	if p.calls.get("charge") != 1 {
		t.Errorf("charged %d times", p.calls.get("charge"))
	}
	// An empty natural key is refused.
	if _, err := ex.Execute(context.Background(), charge("", 5, "a")); !errors.Is(err, nodes.ErrInvalidArgs) {
		t.Errorf("empty natural key: %v", err)
	}
}

// TestLedgerConcurrentDuplicates (R41): 32 goroutines run one write; one
// effect; the others get "in progress", or wait and replay.
func TestLedgerConcurrentDuplicates(t *testing.T) {
	for _, wait := range []bool{false, true} {
		p := &payments{block: make(chan struct{})}
		opts := []nodes.ExecutorOption{nodes.WithLedger(newMemLedger(t, nil))}
		if wait {
			opts = append(opts, nodes.WithWaitInProgress(10*time.Second))
		}
		ex, _ := nodes.NewExecutor([]*nodes.Tool{p.tool(t)}, opts...)
		var inProgress, replayed, executed atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 32 {
			wg.Go(func() {
				<-start
				res, err := ex.Execute(context.Background(), charge("O-1", 5, "th"))
				switch {
				case errors.Is(err, ledger.ErrInProgress):
					inProgress.Add(1)
				case err != nil:
					t.Error(err)
				case res.Replayed:
					replayed.Add(1)
				default:
					executed.Add(1)
				}
			})
		}
		close(start)
		for p.calls.get("charge") == 0 {
			time.Sleep(time.Millisecond)
		}
		if !wait {
			for inProgress.Load() < 31 {
				time.Sleep(time.Millisecond)
			}
		} else {
			time.Sleep(30 * time.Millisecond)
		}
		close(p.block)
		wg.Wait()
		if p.calls.get("charge") != 1 || executed.Load() != 1 {
			t.Errorf("wait=%v: %d effects, %d executed", wait, p.calls.get("charge"), executed.Load())
		}
		if wait && replayed.Load() != 31 || !wait && inProgress.Load() != 31 {
			t.Errorf("wait=%v: %d replayed, %d in progress", wait, replayed.Load(), inProgress.Load())
		}
	}
}

// TestLedgerFailures (R42): a permanent failure is stored and replayed as
// the same failure; a transient one is not stored, so a retry runs.
func TestLedgerFailures(t *testing.T) {
	ctx := context.Background()
	l := newMemLedger(t, nil)
	p := &payments{fail: &nodes.HTTPError{Status: 404}}
	ex, _ := nodes.NewExecutor([]*nodes.Tool{p.tool(t)}, nodes.WithLedger(l), nodes.WithClock(newFakeClock()))
	if _, err := ex.Execute(ctx, charge("O-1", 5, "th")); !errors.Is(err, nodes.ErrToolFailed) {
		t.Fatal(err)
	}
	_, err := ex.Execute(ctx, charge("O-1", 5, "th"))
	var re *nodes.ReplayedError
	if !errors.As(err, &re) || re.Status != 404 || nodes.Classify(err) != nodes.ClassPermanent {
		t.Fatalf("repeat of a permanent failure: %v", err)
	}
	if p.calls.get("charge") != 1 {
		t.Errorf("ran %d times", p.calls.get("charge"))
	}
	p2 := &payments{fail: &nodes.HTTPError{Status: 503}}
	ex2, _ := nodes.NewExecutor([]*nodes.Tool{p2.tool(t, nodes.Retry(upTo(2)))}, nodes.WithLedger(l), nodes.WithClock(newFakeClock()))
	if _, err := ex2.Execute(ctx, charge("O-2", 5, "th")); !errors.Is(err, nodes.ErrRetriesExhausted) {
		t.Fatal(err)
	}
	if len(l.Entries()) != 1 {
		t.Errorf("ledger holds %d records; the transient failure was stored", len(l.Entries()))
	}
	p2.fail = nil
	if res, err := ex2.Execute(ctx, charge("O-2", 5, "th")); err != nil || res.Status != nodes.StatusExecuted {
		t.Errorf("retry after a transient failure: %+v, %v", res, err)
	}
	if p2.calls.get("charge") != 3 {
		t.Errorf("ran %d times, want 3", p2.calls.get("charge"))
	}
}

// abandon records an intent as a crashed process would leave it.
func abandon(t *testing.T, l ledger.Ledger, c nodes.Call) string {
	t.Helper()
	args, err := canon.JSON(c.Args)
	if err != nil {
		t.Fatal(err)
	}
	key := nodes.IdempotencyKey(c.Scope, c.Tool, args)
	if _, _, err := l.Begin(context.Background(), ledger.Intent{Key: key, Tool: c.Tool, ArgsHash: argsHash(t, c.Tool, string(c.Args)), Owner: "dead-process", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	return key
}

// TestLedgerOutcomeUnknown (R34): an intent whose holder died is in
// progress until its lease ends, then "outcome unknown": not run again
// without a decision.
func TestLedgerOutcomeUnknown(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	l := newMemLedger(t, clk.Now)
	p := &payments{}
	ex, _ := nodes.NewExecutor([]*nodes.Tool{p.tool(t)}, nodes.WithLedger(l))
	c := charge("O-1", 5, "th")
	abandon(t, l, c)
	if _, err := ex.Execute(ctx, c); !errors.Is(err, ledger.ErrInProgress) {
		t.Fatalf("within the lease: %v", err)
	}
	clk.Advance(time.Minute)
	if _, err := ex.Execute(ctx, c); !errors.Is(err, ledger.ErrOutcomeUnknown) {
		t.Fatalf("after the lease: %v", err)
	}
	if p.calls.get("charge") != 0 {
		t.Fatalf("ran %d times", p.calls.get("charge"))
	}
	// A human decides to run it again.
	c.Reconciled = true
	if res, err := ex.Execute(ctx, c); err != nil || res.Status != nodes.StatusExecuted || p.calls.get("charge") != 1 {
		t.Errorf("reconciled run: %+v, %v, %d runs", res, err, p.calls.get("charge"))
	}
}

// TestLedgerReconcileHook: a reconcile hook decides for an unknown outcome.
func TestLedgerReconcileHook(t *testing.T) {
	ctx := context.Background()
	for _, found := range []bool{true, false} {
		clk := newFakeClock()
		l := newMemLedger(t, clk.Now)
		p := &payments{}
		hook := nodes.Reconcile(func(ctx context.Context, a OrderArgs, env nodes.Env) (map[string]any, bool, error) {
			if env.IdempotencyKey() == "" {
				t.Error("reconcile without the key")
			}
			return map[string]any{"order_id": a.OrderID, "found": true}, found, nil
		})
		ex, _ := nodes.NewExecutor([]*nodes.Tool{p.tool(t, hook)}, nodes.WithLedger(l))
		c := charge("O-1", 5, "th")
		abandon(t, l, c)
		clk.Advance(time.Hour)
		res, err := ex.Execute(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		if found && (res.Status != nodes.StatusReplayed || p.calls.get("charge") != 0 || string(res.Output) != `{"found":true,"order_id":"O-1"}`) {
			t.Errorf("found downstream: %+v, %d runs", res, p.calls.get("charge"))
		}
		if !found && (res.Status != nodes.StatusExecuted || p.calls.get("charge") != 1) {
			t.Errorf("not found downstream: %+v, %d runs", res, p.calls.get("charge"))
		}
	}
}

// TestLedgerRetention (R43): within the retention a repeat replays; after
// it, the operation runs again.
func TestLedgerRetention(t *testing.T) {
	clk := newFakeClock()
	l := newMemLedger(t, clk.Now)
	p := &payments{}
	ex, _ := nodes.NewExecutor([]*nodes.Tool{p.tool(t)}, nodes.WithLedger(l))
	for i, step := range []struct {
		advance  time.Duration
		replayed bool
	}{{0, false}, {23 * time.Hour, true}, {time.Hour, false}} {
		clk.Advance(step.advance)
		res, err := ex.Execute(context.Background(), charge("O-1", 5, "th"))
		if err != nil || res.Replayed != step.replayed {
			t.Errorf("step %d: %+v, %v; want replayed %v", i, res, err, step.replayed)
		}
	}
	if p.calls.get("charge") != 2 {
		t.Errorf("ran %d times, want 2", p.calls.get("charge"))
	}
}

// TestIdempotencyKeyGolden (R39): keys are stable across processes and
// versions; testdata/idemkeys.json pins them.
func TestIdempotencyKeyGolden(t *testing.T) {
	b, err := os.ReadFile("testdata/idemkeys.json")
	if err != nil {
		t.Fatal(err)
	}
	var vectors []struct {
		Scope, Tool, Args, Natural, Key string
	}
	if err := json.Unmarshal(b, &vectors); err != nil {
		t.Fatal(err)
	}
	if len(vectors) == 0 {
		t.Fatal("no vectors")
	}
	// The documented construction, by hand: SHA-256 over each part
	// prefixed with its big-endian uint64 length.
	h := sha256.New()
	for _, part := range []string{"lockstep/idempotency/v1", vectors[0].Scope, vectors[0].Tool, vectors[0].Args} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write([]byte(part))
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != vectors[0].Key {
		t.Errorf("hand-made key %s, golden %s", got, vectors[0].Key)
	}
	for _, v := range vectors {
		var got string
		if v.Natural != "" {
			got = nodes.NaturalIdempotencyKey(v.Tool, v.Natural)
		} else {
			got = nodes.IdempotencyKey(v.Scope, v.Tool, []byte(v.Args))
		}
		if got != v.Key {
			t.Errorf("%+v: key %s", v, got)
		}
	}
}

// TestToolNodeOutcomeUnknownAsksAgain: the tool node turns an unknown
// outcome into an approval request (rule outcome_unknown); approved, the
// write runs once; rejected, it does not.
func TestToolNodeOutcomeUnknownAsksAgain(t *testing.T) {
	for _, ok := range []bool{true, false} {
		p := &payments{}
		h := newHarness(t, []*nodes.Tool{p.tool(t)}, answerThenDone(call("c", "charge", `{"order_id":"O-1","amount":5}`)), []nodes.ExecutorOption{nodes.WithPolicy(nodes.AlwaysApprove())})
		// Replace the harness's ledger by one with a dead intent.
		l := newMemLedger(t, h.clk.Now)
		ex, _ := nodes.NewExecutor([]*nodes.Tool{p.tool(t)}, nodes.WithLedger(l))
		tn, _ := nodes.ToolNode(ex, nodes.WithNodeClock(h.clk.Now))
		h.r = agentGraph(t, scriptedModel(answerThenDone(call("c", "charge", `{"order_id":"O-1","amount":5}`))), tn, h.saver)
		abandon(t, l, charge("O-1", 5, "th"))
		h.clk.Advance(time.Hour)
		res, err := h.r.Invoke(context.Background(), "th", userSays("charge"))
		if err != nil {
			t.Fatal(err)
		}
		req := h.request(t, res)
		if req.Rule != nodes.RuleOutcomeUnknown || req.Kind != approval.KindOutcomeUnknown || req.FallbackFor != "" || req.Risk != approval.RiskHigh || p.calls.get("charge") != 0 {
			t.Fatalf("request %+v after %d runs", req, p.calls.get("charge"))
		}
		d := approve(res.Interrupts[0].ID, req)
		if !ok {
			d.Outcome = approval.Rejected
		}
		res = h.resume(t, d)
		want := 0
		if ok {
			want = 1
		}
		if res.Status != graph.StatusDone || p.calls.get("charge") != want {
			t.Errorf("approved=%v: status %s, %d runs", ok, res.Status, p.calls.get("charge"))
		}
	}
}

// TestToolNodeOutcomeUnknownOfAFallbackNamesIt: the model's call to a
// tool fails, its fallback runs, and the fallback's write is of unknown
// outcome (an earlier run died inside it). The approval request names the
// fallback, whose write is unknown, as standing in for the failed tool,
// not the tool the model called; approved, the fallback runs once (and
// the failed tool is not run again); rejected, nothing runs.
func TestToolNodeOutcomeUnknownOfAFallbackNamesIt(t *testing.T) {
	for _, ok := range []bool{true, false} {
		p := &payments{}
		card := &counter{}
		primary := func() *nodes.Tool {
			return mustTool(t)(nodes.NewTool("card", "Charge an order on the card. Returns the charge.",
				func(ctx context.Context, a OrderArgs, env nodes.Env) (map[string]any, error) {
					card.inc("card")
					return nil, &nodes.HTTPError{Status: 401}
				}, nodes.Fallback(p.tool(t))))
		}
		h := newHarness(t, []*nodes.Tool{primary()}, answerThenDone(call("c", "card", `{"order_id":"O-1","amount":5}`)), []nodes.ExecutorOption{nodes.WithPolicy(nodes.AlwaysApprove())})
		l := newMemLedger(t, h.clk.Now)
		ex, err := nodes.NewExecutor([]*nodes.Tool{primary()}, nodes.WithLedger(l), nodes.WithPolicy(nodes.AlwaysApprove()))
		if err != nil {
			t.Fatal(err)
		}
		tn, _ := nodes.ToolNode(ex, nodes.WithNodeClock(h.clk.Now))
		h.r = agentGraph(t, scriptedModel(answerThenDone(call("c", "card", `{"order_id":"O-1","amount":5}`))), tn, h.saver)
		abandon(t, l, charge("O-1", 5, "th"))
		h.clk.Advance(time.Hour)
		res, err := h.r.Invoke(context.Background(), "th", userSays("charge"))
		if err != nil {
			t.Fatal(err)
		}
		req := h.request(t, res)
		if req.Tool != "charge" || req.FallbackFor != "card" || req.Kind != approval.KindOutcomeUnknown || req.Rule != nodes.RuleOutcomeUnknown || p.calls.get("charge") != 0 {
			t.Fatalf("request for %q (fallback for %q, kind %s, rule %s) after %d charges; want one for the fallback charge, standing in for card, of unknown outcome",
				req.Tool, req.FallbackFor, req.Kind, req.Rule, p.calls.get("charge"))
		}
		cards := card.get("card")
		d := approve(res.Interrupts[0].ID, req)
		if !ok {
			d.Outcome = approval.Rejected
		}
		res = h.resume(t, d)
		want := 0
		if ok {
			want = 1
		}
		if res.Status != graph.StatusDone || p.calls.get("charge") != want || card.get("card") != cards {
			t.Errorf("approved=%v: status %s, %d charges, card run %d more times; want done, %d, none", ok, res.Status, p.calls.get("charge"), card.get("card")-cards, want)
		}
	}
}

// flakyBegin is a ledger whose Begin fails: after is how many of the next
// calls fail after the real Begin (the intent is recorded, as when COMMIT
// reports an I/O error), before how many fail without calling it.
type flakyBegin struct {
	ledger.Ledger
	mu            sync.Mutex
	after, before int
	calls         int
}

var errDisk = errors.New("disk I/O error")

func (l *flakyBegin) Begin(ctx context.Context, in ledger.Intent) (ledger.Entry, bool, error) {
	l.mu.Lock()
	l.calls++
	before, after := l.before > 0, l.before == 0 && l.after > 0
	if before {
		l.before--
	} else if after {
		l.after--
	}
	l.mu.Unlock()
	if before {
		return ledger.Entry{}, false, errDisk
	}
	e, started, err := l.Ledger.Begin(ctx, in)
	if after && err == nil {
		return ledger.Entry{}, false, errDisk
	}
	return e, started, err
}

// TestLedgerAmbiguousBegin (R06): a Begin that fails, possibly after its
// intent was committed, is tried again with the same owner: the call runs
// once and its outcome is recorded, instead of leaving an intent nobody
// holds (which the next call would find in progress, then of unknown
// outcome, and never charge). A store that keeps failing fails the call
// with a *LedgerError and runs nothing.
func TestLedgerAmbiguousBegin(t *testing.T) {
	tests := []struct {
		name           string
		after, before  int
		wantErr        bool
		wantCharges    int
		wantBeginCalls int
	}{
		{"fault after the commit", 1, 0, false, 1, 2},
		{"fault before, then after the commit", 1, 1, false, 1, 3},
		{"two faults before", 0, 2, false, 1, 3},
		{"the store keeps failing", 0, 3, true, 0, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &payments{}
			mem := newMemLedger(t, nil)
			l := &flakyBegin{Ledger: mem, after: tc.after, before: tc.before}
			ex, _ := nodes.NewExecutor([]*nodes.Tool{p.tool(t)}, nodes.WithLedger(l))
			res, err := ex.Execute(context.Background(), charge("O-1", 5, "th"))
			var le *nodes.LedgerError
			switch {
			case tc.wantErr && (!errors.As(err, &le) || !errors.Is(err, errDisk)):
				t.Fatalf("Execute = %+v, %v; want a *LedgerError wrapping the store's error", res, err)
			case !tc.wantErr && (err != nil || res.Status != nodes.StatusExecuted):
				t.Fatalf("Execute = %+v, %v; want executed", res, err)
			}
			if got := p.calls.get("charge"); got != tc.wantCharges {
				t.Errorf("charged %d times, want %d", got, tc.wantCharges)
			}
			if l.calls != tc.wantBeginCalls {
				t.Errorf("Begin called %d times, want %d", l.calls, tc.wantBeginCalls)
			}
			// A second execution (another run, another owner) replays the
			// outcome, or, after a store that never recorded anything, runs.
			again, err := ex.Execute(context.Background(), charge("O-1", 5, "th"))
			if err != nil {
				t.Fatalf("second Execute: %v", err)
			}
			if want := !tc.wantErr; again.Replayed != want {
				t.Errorf("second Execute replayed = %v, want %v", again.Replayed, want)
			}
			if got := p.calls.get("charge"); got != 1 {
				t.Errorf("after the second Execute: charged %d times, want 1", got)
			}
		})
	}
}

// flakySettle is a ledger whose Complete and Release fail: after of the
// next calls fail after the real call (the outcome is recorded), before
// of them without making it.
type flakySettle struct {
	ledger.Ledger
	mu            sync.Mutex
	after, before int
}

func (l *flakySettle) fault() (before, after bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.before > 0:
		l.before--
		return true, false
	case l.after > 0:
		l.after--
		return false, true
	}
	return false, false
}

func (l *flakySettle) Complete(ctx context.Context, key, owner string, o ledger.Outcome) error {
	before, after := l.fault()
	if before {
		return errDisk
	}
	if err := l.Ledger.Complete(ctx, key, owner, o); err != nil || !after {
		return err
	}
	return errDisk
}

func (l *flakySettle) Release(ctx context.Context, key, owner string) error {
	before, after := l.fault()
	if before {
		return errDisk
	}
	if err := l.Ledger.Release(ctx, key, owner); err != nil || !after {
		return err
	}
	return errDisk
}

// TestLedgerAmbiguousSettle: after the effect, a Complete (or, after a
// transient failure, a Release) that fails is tried again: the outcome is
// recorded, so the next execution of the same call replays it (or runs
// it again) instead of finding it in progress and telling the model so
// while the effect happened.
func TestLedgerAmbiguousSettle(t *testing.T) {
	tests := []struct {
		name          string
		after, before int
		transient     bool // the first call fails transiently: Release, then a run
		wantCharges   int
	}{
		{"complete fails after the commit", 1, 0, false, 1},
		{"complete fails twice before", 0, 2, false, 1},
		{"release fails after the commit", 1, 0, true, 2},
		{"release fails twice before", 0, 2, true, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &payments{}
			if tc.transient {
				p.fail = &nodes.HTTPError{Status: 503}
			}
			l := &flakySettle{Ledger: newMemLedger(t, nil), after: tc.after, before: tc.before}
			ex, _ := nodes.NewExecutor([]*nodes.Tool{p.tool(t, nodes.Retry(upTo(1)))}, nodes.WithLedger(l))
			first, err := ex.Execute(context.Background(), charge("O-1", 5, "th"))
			if tc.transient != (err != nil) {
				t.Fatalf("first Execute = %+v, %v", first, err)
			}
			p.fail = nil
			again, err := ex.Execute(context.Background(), charge("O-1", 5, "th"))
			if err != nil {
				t.Fatalf("second Execute: %v (the outcome was left unrecorded)", err)
			}
			if want := !tc.transient; again.Replayed != want {
				t.Errorf("second Execute replayed = %v, want %v", again.Replayed, want)
			}
			if got := p.calls.get("charge"); got != tc.wantCharges {
				t.Errorf("charged %d times, want %d", got, tc.wantCharges)
			}
		})
	}
}

// TestApprovedCallInProgressIsRetried (R34, D11): the process that ran an
// approved write died between the effect and its record, and the resume
// comes back within the dead holder's lease. The call is not reported as
// failed (which would use up the decision and record a failure that may
// be false): the node fails, so the run is tried again, and once the lease
// has ended the tool node asks a human about the unknown outcome. Nothing
// runs the write meanwhile.
func TestApprovedCallInProgressIsRetried(t *testing.T) {
	ctx := context.Background()
	p := &payments{}
	pay := p.tool(t, nodes.Destructive(approval.RiskHigh))
	h := newHarness(t, []*nodes.Tool{pay}, answerThenDone(call("c", "charge", `{"order_id":"O-1","amount":5}`)), nil)
	l := newMemLedger(t, h.clk.Now)
	ex, _ := nodes.NewExecutor([]*nodes.Tool{pay}, nodes.WithLedger(l), nodes.WithClock(h.clk))
	tn, _ := nodes.ToolNode(ex, nodes.WithNodeClock(h.clk.Now))
	h.r = agentGraph(t, scriptedModel(answerThenDone(call("c", "charge", `{"order_id":"O-1","amount":5}`))), tn, h.saver)
	res, err := h.r.Invoke(ctx, "th", userSays("charge"))
	if err != nil {
		t.Fatal(err)
	}
	req := h.request(t, res)
	abandon(t, l, charge("O-1", 5, "th")) // the process that ran it died
	_, err = h.r.Resume(ctx, "th", graph.Command[nodes.AgentState]{Resume: approve(res.Interrupts[0].ID, req)})
	var ne *graph.NodeError
	if !errors.Is(err, ledger.ErrInProgress) || !errors.As(err, &ne) || ne.Node != "tools" {
		t.Fatalf("resume within the holder's lease: %v, want the tool node failed with ErrInProgress", err)
	}
	if s, _ := h.r.GetState(ctx, "th"); s.Status != graph.StatusFailed || p.calls.get("charge") != 0 {
		t.Fatalf("after it: %s, %d charges; want failed, none", s.Status, p.calls.get("charge"))
	}
	h.clk.Advance(time.Hour) // the dead holder's lease ends
	res, err = h.r.Continue(ctx, "th")
	if err != nil {
		t.Fatal(err)
	}
	if again := h.request(t, res); again.Kind != approval.KindOutcomeUnknown || p.calls.get("charge") != 0 {
		t.Errorf("after the lease: request %+v, %d charges; want a human asked about the unknown outcome, no charge", again, p.calls.get("charge"))
	}
}
