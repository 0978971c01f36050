package nodes_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/internal/jsonschema"
	"github.com/lockstepgo/lockstep/interrupt"
	"github.com/lockstepgo/lockstep/nodes"
)

type Empty struct{}

// flaky returns a read tool whose body returns errs[i] on its i-th attempt
// (and success after them), counting attempts.
func flaky(t testing.TB, name string, attempts *counter, errs []error, opts ...nodes.ToolOption) *nodes.Tool {
	return mustTool(t)(nodes.NewTool(name, "A tool that fails on schedule.",
		func(ctx context.Context, _ Empty, env nodes.Env) (string, error) {
			n := attempts.inc(name)
			if n <= len(errs) {
				return "", errs[n-1]
			}
			return "ok", nil
		}, append([]nodes.ToolOption{nodes.Idempotent(), nodes.NoMemo()}, opts...)...))
}

func repeat(err error, n int) []error {
	out := make([]error, n)
	for i := range out {
		out[i] = err
	}
	return out
}

// TestRetryClasses: permanent statuses are tried once; transient ones are
// retried up to the bound, then reported as exhausted.
func TestRetryClasses(t *testing.T) {
	for _, tc := range []struct {
		status    int
		attempts  int
		exhausted bool
	}{
		{401, 1, false}, {403, 1, false}, {404, 1, false}, {400, 1, false}, {422, 1, false},
		{500, 3, true}, {502, 3, true}, {503, 3, true}, {504, 3, true}, {429, 3, true}, {408, 3, true},
	} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			attempts := &counter{}
			clk := newFakeClock()
			ex, err := nodes.NewExecutor([]*nodes.Tool{flaky(t, "api", attempts, repeat(&nodes.HTTPError{Status: tc.status}, 10))}, nodes.WithClock(clk))
			if err != nil {
				t.Fatal(err)
			}
			_, err = ex.Execute(context.Background(), nodes.Call{Tool: "api", Scope: "t"})
			var te *nodes.ToolError
			if !errors.As(err, &te) || !errors.Is(err, nodes.ErrToolFailed) {
				t.Fatalf("err = %v, want *ToolError", err)
			}
			if attempts.get("api") != tc.attempts || te.Attempts != tc.attempts || te.Exhausted != tc.exhausted ||
				errors.Is(err, nodes.ErrRetriesExhausted) != tc.exhausted {
				t.Errorf("attempts %d (error says %d), exhausted %v; want %d, %v", attempts.get("api"), te.Attempts, te.Exhausted, tc.attempts, tc.exhausted)
			}
			var he *nodes.HTTPError
			if !errors.As(err, &he) || he.Status != tc.status {
				t.Errorf("the HTTP error is not reachable with errors.As: %v", err)
			}
			if len(clk.Sleeps()) != tc.attempts-1 {
				t.Errorf("%d backoff waits for %d attempts", len(clk.Sleeps()), tc.attempts)
			}
		})
	}
}

func TestRetryThenSuccess(t *testing.T) {
	for k := range 3 {
		attempts := &counter{}
		ex, _ := nodes.NewExecutor([]*nodes.Tool{flaky(t, "api", attempts, repeat(nodes.Transient(errors.New("reset")), k))}, nodes.WithClock(newFakeClock()))
		res, err := ex.Execute(context.Background(), nodes.Call{Tool: "api", Scope: "t"})
		if err != nil || res.Attempts != k+1 || attempts.get("api") != k+1 {
			t.Errorf("k=%d: %+v, %v; want %d attempts", k, res, err, k+1)
		}
	}
}

type myErr struct{ code int }

func (e *myErr) Error() string { return fmt.Sprintf("my error %d", e.code) }

type timeoutNetErr struct{}

func (timeoutNetErr) Error() string   { return "i/o timeout" }
func (timeoutNetErr) Timeout() bool   { return true }
func (timeoutNetErr) Temporary() bool { return true }

// TestClassify: by type, through wrapping and joins, with typed nils.
func TestClassify(t *testing.T) {
	var nilHTTP *nodes.HTTPError
	var nilMine *myErr
	transient := &nodes.HTTPError{Status: 503}
	permanent := &nodes.HTTPError{Status: 401}
	for _, tc := range []struct {
		name string
		err  error
		want nodes.Class
	}{
		{"nil", nil, nodes.ClassNone},
		{"plain", errors.New("boom"), nodes.ClassNone},
		{"text says 503 but the type does not", errors.New("http 503 service unavailable, retry"), nodes.ClassNone},
		{"503", transient, nodes.ClassTransient},
		{"401", permanent, nodes.ClassPermanent},
		{"wrapped three times", fmt.Errorf("a: %w", fmt.Errorf("b: %w", fmt.Errorf("c: %w", transient))), nodes.ClassTransient},
		{"join: permanent wins", errors.Join(transient, permanent), nodes.ClassPermanent},
		{"join: permanent wins in any order", errors.Join(permanent, fmt.Errorf("x: %w", transient)), nodes.ClassPermanent},
		{"multi-%w", fmt.Errorf("%w and %w", transient, permanent), nodes.ClassPermanent},
		{"join: pause wins", errors.Join(permanent, &interrupt.Error{}), nodes.ClassPause},
		{"typed nil HTTPError", nilHTTP, nodes.ClassNone},
		{"typed nil wrapped", fmt.Errorf("w: %w", nilMine), nodes.ClassNone},
		{"typed nil in a join", errors.Join(nilHTTP, transient), nodes.ClassTransient},
		{"Permanent marks", nodes.Permanent(transient), nodes.ClassPermanent},
		{"Transient marks", nodes.Transient(errors.New("x")), nodes.ClassTransient},
		{"RetryAfter marks", nodes.RetryAfter(errors.New("x"), time.Second), nodes.ClassTransient},
		{"deadline", context.DeadlineExceeded, nodes.ClassTransient},
		{"cancelled", context.Canceled, nodes.ClassNone},
		{"net timeout", fmt.Errorf("dial: %w", timeoutNetErr{}), nodes.ClassTransient},
		{"tool timeout", &nodes.TimeoutError{Tool: "x"}, nodes.ClassTransient},
		{"interrupt", fmt.Errorf("w: %w", &interrupt.Error{}), nodes.ClassPause},
		{"node interrupt", &interrupt.NodeInterrupt{}, nodes.ClassPause},
		{"confirmation", &nodes.ConfirmationRequired{}, nodes.ClassPause},
		{"schema validation", &jsonschema.ValidationError{Path: "$.x"}, nodes.ClassPermanent},
		{"panic", &nodes.PanicError{}, nodes.ClassPermanent},
	} {
		if got := nodes.Classify(tc.err); got != tc.want {
			t.Errorf("%s: Classify = %v, want %v", tc.name, got, tc.want)
		}
	}
	if nodes.Permanent(nil) != nil || nodes.Transient(nil) != nil || nodes.RetryAfter(nil, 1) != nil {
		t.Error("marking nil is not nil")
	}
}

// TestBackoffSchedule: exponential, capped, jitter within bounds.
func TestBackoffSchedule(t *testing.T) {
	p := nodes.RetryPolicy{Initial: 100 * time.Millisecond, Multiplier: 2, Max: time.Second, Jitter: 0.5}
	bases := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i, base := range bases {
		base *= time.Millisecond
		attempt := i + 1
		if got := p.Backoff(attempt, 0.5); got != base {
			t.Errorf("attempt %d, no jitter: %v, want %v", attempt, got, base)
		}
		for _, r := range []float64{0, 0.1, 0.9, 0.999999, -1, 2} {
			got := p.Backoff(attempt, r)
			lo, hi := time.Duration(float64(base)*0.5), min(time.Duration(float64(base)*1.5), time.Second)
			if got < lo || got > hi {
				t.Errorf("attempt %d, r %v: %v outside [%v, %v]", attempt, r, got, lo, hi)
			}
		}
	}
	// Defaults: 200ms doubling, jitter 0.2, capped at 10s.
	var d nodes.RetryPolicy
	if got := d.Backoff(1, 0.5); got != 200*time.Millisecond {
		t.Errorf("default first wait %v", got)
	}
	if got := d.Backoff(40, 0.99); got != 10*time.Second {
		t.Errorf("default cap %v", got)
	}
	// Through the executor, on the fake clock, with a fixed jitter draw.
	attempts := &counter{}
	clk := newFakeClock()
	ex, _ := nodes.NewExecutor([]*nodes.Tool{flaky(t, "api", attempts, repeat(&nodes.HTTPError{Status: 503}, 10), nodes.Retry(nodes.RetryPolicy{MaxAttempts: 6, Initial: 100 * time.Millisecond, Max: time.Second, Jitter: 0.5}))},
		nodes.WithClock(clk), nodes.WithJitterSource(func() float64 { return 0.5 }))
	if _, err := ex.Execute(context.Background(), nodes.Call{Tool: "api", Scope: "t"}); !errors.Is(err, nodes.ErrRetriesExhausted) {
		t.Fatal(err)
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second}
	if d := cmp.Diff(want, clk.Sleeps()); d != "" {
		t.Errorf("waits (-want +got):\n%s", d)
	}
}

// TestRetryAfter: a server's Retry-After sets the least wait, capped.
func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	resp := func(v string) *http.Response {
		return &http.Response{StatusCode: 429, Header: http.Header{"Retry-After": {v}}}
	}
	for _, tc := range []struct {
		header string
		want   time.Duration
	}{
		{"3", 3 * time.Second},
		{"1000000000", time.Duration(1_000_000_000) * time.Second},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{"soon", 0},
		{"-5", 0},
	} {
		if got := nodes.NewHTTPError(resp(tc.header), now).RetryAfter; got != tc.want {
			t.Errorf("Retry-After %q: %v, want %v", tc.header, got, tc.want)
		}
	}
	attempts := &counter{}
	clk := newFakeClock()
	errs := []error{nodes.NewHTTPError(resp("1000000000"), now), nodes.NewHTTPError(resp("5"), now)}
	ex, _ := nodes.NewExecutor([]*nodes.Tool{flaky(t, "api", attempts, errs, nodes.Retry(nodes.RetryPolicy{MaxRetryAfter: 30 * time.Second}))},
		nodes.WithClock(clk), nodes.WithJitterSource(func() float64 { return 0.5 }))
	if _, err := ex.Execute(context.Background(), nodes.Call{Tool: "api", Scope: "t"}); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]time.Duration{30 * time.Second, 5 * time.Second}, clk.Sleeps()); d != "" {
		t.Errorf("waits (-want +got):\n%s", d)
	}
}

// sleepSignal is a Clock whose Sleep reports that it started and then waits
// for ctx.
type sleepSignal struct {
	fakeClock
	started chan struct{}
	once    sync.Once
}

func (c *sleepSignal) Sleep(ctx context.Context, d time.Duration) error {
	c.once.Do(func() { close(c.started) })
	<-ctx.Done()
	return ctx.Err()
}

// TestCancelDuringBackoff: cancelling ctx during a backoff wait stops the
// call at once, with no further attempt.
func TestCancelDuringBackoff(t *testing.T) {
	attempts := &counter{}
	clk := &sleepSignal{fakeClock: *newFakeClock(), started: make(chan struct{})}
	ex, _ := nodes.NewExecutor([]*nodes.Tool{flaky(t, "api", attempts, repeat(&nodes.HTTPError{Status: 503}, 10))}, nodes.WithClock(clk))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := ex.Execute(ctx, nodes.Call{Tool: "api", Scope: "t"})
		done <- err
	}()
	<-clk.started
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Execute did not return after cancel")
	}
	if attempts.get("api") != 1 {
		t.Errorf("%d attempts, want 1", attempts.get("api"))
	}
}

// TestDeadlineStopsRetries: no attempt starts that would begin after the
// context's deadline.
func TestDeadlineStopsRetries(t *testing.T) {
	attempts := &counter{}
	clk := &fakeClock{now: time.Now()}
	ex, _ := nodes.NewExecutor([]*nodes.Tool{flaky(t, "api", attempts, repeat(&nodes.HTTPError{Status: 503}, 10), nodes.Retry(nodes.RetryPolicy{MaxAttempts: 10, Initial: time.Hour, Max: 2 * time.Hour}))}, nodes.WithClock(clk))
	ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(time.Minute))
	defer cancel()
	_, err := ex.Execute(ctx, nodes.Call{Tool: "api", Scope: "t"})
	if !errors.Is(err, nodes.ErrRetriesExhausted) || attempts.get("api") != 1 {
		t.Errorf("err %v after %d attempts", err, attempts.get("api"))
	}
}

// TestPausesAreNotRetried: an interrupt or a ConfirmationRequired from a
// tool body is returned as is after one attempt.
func TestPausesAreNotRetried(t *testing.T) {
	for _, pause := range []error{
		&interrupt.Error{Interrupt: interrupt.Interrupt{ID: "i1"}},
		fmt.Errorf("wrapped: %w", &interrupt.Error{}),
		&interrupt.NodeInterrupt{Value: "stop"},
		&nodes.ConfirmationRequired{Tool: "inner"},
	} {
		attempts := &counter{}
		ex, _ := nodes.NewExecutor([]*nodes.Tool{flaky(t, "api", attempts, repeat(pause, 10), nodes.Retry(nodes.RetryPolicy{MaxAttempts: 5}))}, nodes.WithClock(newFakeClock()))
		_, err := ex.Execute(context.Background(), nodes.Call{Tool: "api", Scope: "t"})
		if err != pause || attempts.get("api") != 1 {
			t.Errorf("%T: err %v after %d attempts; want it unchanged after 1", pause, err, attempts.get("api"))
		}
	}
}

type IssueArgs struct {
	Title string `json:"title"`
}

// TestWriteRetriedOnlyThroughLedger: a non-idempotent write is not retried
// without a ledger; with one it is, with the same key on every attempt.
func TestWriteRetriedOnlyThroughLedger(t *testing.T) {
	for _, withLedger := range []bool{false, true} {
		var keys []string
		var mu sync.Mutex
		tool := mustTool(t)(nodes.NewTool("create_issue", "Create an issue.", func(ctx context.Context, a IssueArgs, env nodes.Env) (string, error) {
			mu.Lock()
			keys = append(keys, env.IdempotencyKey())
			mu.Unlock()
			return "", &nodes.HTTPError{Status: 503}
		}))
		opts := []nodes.ExecutorOption{nodes.WithClock(newFakeClock())}
		if withLedger {
			opts = append(opts, nodes.WithLedger(newMemLedger(t, nil)))
		}
		ex, _ := nodes.NewExecutor([]*nodes.Tool{tool}, opts...)
		_, err := ex.Execute(context.Background(), nodes.Call{Tool: "create_issue", Args: json.RawMessage(`{"title":"x"}`), Scope: "t"})
		if !errors.Is(err, nodes.ErrRetriesExhausted) {
			t.Fatalf("ledger %v: %v", withLedger, err)
		}
		if !withLedger {
			if d := cmp.Diff([]string{""}, keys); d != "" {
				t.Errorf("without a ledger (-want +got):\n%s", d)
			}
			continue
		}
		want := nodes.IdempotencyKey("t", "create_issue", []byte(`{"title":"x"}`))
		if d := cmp.Diff([]string{want, want, want}, keys); d != "" {
			t.Errorf("with a ledger (-want +got):\n%s", d)
		}
	}
}

// TestLateSuccess (R31): the tracker records the issue and answers after
// the timeout; the attempt is a typed timeout, and the retry carries the
// same key, which the tracker dedupes: one issue.
func TestLateSuccess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		args := json.RawMessage(`{"title":"login broken"}`)
		// One attempt only: the timeout is reported as such, not as success.
		tr1 := newTracker(6 * time.Second)
		ex1, _ := nodes.NewExecutor([]*nodes.Tool{tr1.tool(t, nodes.Timeout(5*time.Second), nodes.Retry(nodes.NoRetry))}, nodes.WithLedger(newMemLedger(t, nil)))
		_, err := ex1.Execute(context.Background(), nodes.Call{Tool: "create_issue", Args: args, Scope: "t"})
		var te *nodes.TimeoutError
		if !errors.As(err, &te) || !errors.Is(err, nodes.ErrToolTimeout) || te.After != 5*time.Second || te.Attempt != 1 {
			t.Fatalf("single attempt: %v, want *TimeoutError", err)
		}
		if tr1.issues() != 1 {
			t.Errorf("the late success did not happen downstream: %d issues", tr1.issues())
		}
		// With retries: the second attempt reuses the key; one issue.
		tr := newTracker(6 * time.Second)
		ex, _ := nodes.NewExecutor([]*nodes.Tool{tr.tool(t, nodes.Timeout(5*time.Second))}, nodes.WithLedger(newMemLedger(t, nil)))
		res, err := ex.Execute(context.Background(), nodes.Call{Tool: "create_issue", Args: args, Scope: "t"})
		if err != nil {
			t.Fatal(err)
		}
		if res.Attempts != 2 || tr.issues() != 1 {
			t.Errorf("attempts %d, issues %d; want 2 and 1", res.Attempts, tr.issues())
		}
		keys := tr.keysSeen()
		if len(keys) != 2 || keys[0] != keys[1] || keys[0] != res.Key || res.Key == "" {
			t.Errorf("keys seen %v, result key %s", keys, res.Key)
		}
		var is Issue
		if json.Unmarshal(res.Output, &is) != nil || is.Created || is.Number != 1 {
			t.Errorf("result %s, want issue 1, already existing", res.Output)
		}
		time.Sleep(time.Minute) // let the tracker's slow answers finish
	})
}

// TestToolIgnoringContext (R33): a body that never returns does not hold
// the call past its timeout.
func TestToolIgnoringContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		tool := mustTool(t)(nodes.NewTool("stuck", "Never answers.", func(ctx context.Context, _ Empty, env nodes.Env) (string, error) {
			<-release
			return "late", nil
		}, nodes.Idempotent(), nodes.Timeout(time.Second), nodes.Retry(nodes.NoRetry)))
		ex, _ := nodes.NewExecutor([]*nodes.Tool{tool})
		start := time.Now()
		_, err := ex.Execute(context.Background(), nodes.Call{Tool: "stuck", Scope: "t"})
		if !errors.Is(err, nodes.ErrToolTimeout) || time.Since(start) != time.Second || ex.Abandoned() != 1 {
			t.Errorf("err %v after %v, abandoned %d", err, time.Since(start), ex.Abandoned())
		}
		close(release)
		time.Sleep(time.Second)
	})
}

func TestToolPanics(t *testing.T) {
	tool := mustTool(t)(nodes.NewTool("boom", "Panics.", func(ctx context.Context, _ Empty, env nodes.Env) (string, error) {
		panic("kaboom")
	}, nodes.Idempotent(), nodes.Retry(nodes.RetryPolicy{MaxAttempts: 3})))
	ex, _ := nodes.NewExecutor([]*nodes.Tool{tool}, nodes.WithClock(newFakeClock()))
	_, err := ex.Execute(context.Background(), nodes.Call{Tool: "boom", Scope: "t"})
	var pe *nodes.PanicError
	if !errors.As(err, &pe) || !errors.Is(err, nodes.ErrToolPanic) || pe.Value != "kaboom" || len(pe.Stack) == 0 {
		t.Fatalf("err %v", err)
	}
	var te *nodes.ToolError
	if !errors.As(err, &te) || te.Attempts != 1 {
		t.Errorf("a panic was retried: %v", err)
	}
}
