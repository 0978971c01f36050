package nodes_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/lockstepgo/lockstep/internal/jsonschema"
	"github.com/lockstepgo/lockstep/interrupt"
	"github.com/lockstepgo/lockstep/nodes"
	"github.com/lockstepgo/lockstep/nodes/ledger"
	"github.com/lockstepgo/lockstep/retry"
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

// middle is a Rand whose every draw is the middle of the range: jitter
// moves no wait.
type middle struct{}

func (middle) Read(b []byte) (int, error) {
	clear(b)
	for i := 7; i < len(b); i += 8 {
		b[i] = 0x80
	}
	return len(b), nil
}

// TestBackoffSchedule: the executor sleeps the tool's retry policy's
// waits between attempts, on its clock: DefaultRetry (the former
// RetryPolicy defaults: 200ms doubling to 10s) without Retry, the policy
// given with it, no wait for a zero Initial, jitter from the policy's Rand.
func TestBackoffSchedule(t *testing.T) {
	ms := time.Millisecond
	mid := func(p retry.Policy) retry.Policy { p.Rand = middle{}; return p }
	for _, tc := range []struct {
		name  string
		opts  []nodes.ToolOption
		waits []time.Duration
	}{
		{"DefaultRetry: 200ms doubling (the former defaults)", []nodes.ToolOption{nodes.Retry(mid(nodes.DefaultRetry()))}, []time.Duration{200 * ms, 400 * ms}},
		{"the default, 8 attempts", []nodes.ToolOption{nodes.Retry(mid(upTo(8)))},
			[]time.Duration{200 * ms, 400 * ms, 800 * ms, 1600 * ms, 3200 * ms, 6400 * ms, 10 * time.Second}},
		{"exponential, capped", []nodes.ToolOption{nodes.Retry(mid(retry.Policy{MaxAttempts: 6, Initial: 100 * ms, Multiplier: 2, Max: time.Second, Jitter: 0.5}))},
			[]time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, time.Second}},
		{"the zero policy: three attempts, no wait", []nodes.ToolOption{nodes.Retry(retry.Policy{})}, []time.Duration{0, 0}},
		{"one attempt", []nodes.ToolOption{nodes.Retry(retry.Policy{MaxAttempts: 1, Initial: time.Second})}, nil},
		{"jitter at the low end", []nodes.ToolOption{nodes.Retry(retry.Policy{Initial: time.Second, Jitter: 0.5, Rand: bytes.NewReader(make([]byte, 16))})},
			[]time.Duration{500 * ms, time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			attempts := &counter{}
			clk := newFakeClock()
			ex, _ := nodes.NewExecutor([]*nodes.Tool{flaky(t, "api", attempts, repeat(&nodes.HTTPError{Status: 503}, 10), tc.opts...)}, nodes.WithClock(clk))
			if _, err := ex.Execute(context.Background(), nodes.Call{Tool: "api", Scope: "t"}); !errors.Is(err, nodes.ErrRetriesExhausted) {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.waits, clk.Sleeps()); d != "" {
				t.Errorf("waits (-want +got):\n%s", d)
			}
			if attempts.get("api") != len(tc.waits)+1 {
				t.Errorf("%d attempts, want %d", attempts.get("api"), len(tc.waits)+1)
			}
		})
	}
	t.Run("without a Retry option", func(t *testing.T) {
		attempts := &counter{}
		clk := newFakeClock()
		ex, _ := nodes.NewExecutor([]*nodes.Tool{flaky(t, "api", attempts, repeat(&nodes.HTTPError{Status: 503}, 10))}, nodes.WithClock(clk))
		if _, err := ex.Execute(context.Background(), nodes.Call{Tool: "api", Scope: "t"}); !errors.Is(err, nodes.ErrRetriesExhausted) {
			t.Fatal(err)
		}
		// DefaultRetry, its jitter from crypto/rand: 200ms and 400ms spread by a fifth.
		got := clk.Sleeps()
		if len(got) != 2 || got[0] < 160*ms || got[0] > 240*ms || got[1] < 320*ms || got[1] > 480*ms {
			t.Errorf("waits %v, want 200ms and 400ms, each within a fifth", got)
		}
	})
}

// TestRetryRandContained: a retry policy's Rand is the application's
// code: a panic in it fails the call with a *PanicError of the tool, and
// one that blocks holds the call no longer than its context.
func TestRetryRandContained(t *testing.T) {
	t.Run("panics", func(t *testing.T) {
		attempts := &counter{}
		p := retry.Policy{Initial: time.Second, Jitter: 0.5, Rand: readerFunc(func([]byte) (int, error) { panic("Rand exploded") })}
		ex, _ := nodes.NewExecutor([]*nodes.Tool{flaky(t, "api", attempts, repeat(&nodes.HTTPError{Status: 503}, 10), nodes.Retry(p))}, nodes.WithClock(newFakeClock()))
		_, err := ex.Execute(context.Background(), nodes.Call{Tool: "api", Scope: "t"})
		var pe *nodes.PanicError
		if !errors.As(err, &pe) || pe.Tool != "api" || pe.In != "the Rand reader of its retry policy" || !errors.Is(err, nodes.ErrToolFailed) || attempts.get("api") != 1 {
			t.Fatalf("err %v (%+v) after %d attempts; want a *PanicError of the Rand after 1", err, pe, attempts.get("api"))
		}
	})
	t.Run("blocks", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			release := make(chan struct{})
			attempts := &counter{}
			p := retry.Policy{Initial: time.Second, Jitter: 0.5, Rand: readerFunc(func(b []byte) (int, error) { <-release; return len(b), nil })}
			ex, _ := nodes.NewExecutor([]*nodes.Tool{flaky(t, "api", attempts, repeat(&nodes.HTTPError{Status: 503}, 10), nodes.Retry(p))}, nodes.WithClock(newFakeClock()))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			start := time.Now()
			_, err := ex.Execute(ctx, nodes.Call{Tool: "api", Scope: "t"})
			if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > time.Minute+time.Second || ex.AbandonedRunning() != 1 {
				t.Errorf("err %v after %v, %d abandoned; want the deadline's error by the deadline, the read abandoned", err, time.Since(start), ex.AbandonedRunning())
			}
			close(release)
			synctest.Wait()
		})
	})
}

// readerFunc is an io.Reader made of a function.
type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(b []byte) (int, error) { return f(b) }

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
}

// TestRetryAfterSchedule (R30, issue 16 item 6): a Retry-After within the
// policy's MaxRetryAfter sets the least wait; one beyond it ends the
// retries at once, with no sleep, in a *RetryAfterError that says when
// the service said to come back. The clock is injected: nothing sleeps.
func TestRetryAfterSchedule(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	resp := func(v string) *http.Response {
		return &http.Response{StatusCode: 429, Header: http.Header{"Retry-After": {v}}}
	}
	far := nodes.NewHTTPError(resp("1000000000"), now)
	for _, tc := range []struct {
		name     string
		errs     []error
		attempts int             // attempts made
		sleeps   []time.Duration // the waits between them
		after    time.Duration   // the RetryAfterError's, 0 for success
		opts     []nodes.ToolOption
		max      time.Duration // the RetryAfterError's Max
	}{
		{"within the cap: waited, then success", []error{nodes.NewHTTPError(resp("5"), now)}, 2, []time.Duration{5 * time.Second}, 0, nil, 0},
		{"at the cap: waited", []error{nodes.NewHTTPError(resp("30"), now)}, 2, []time.Duration{30 * time.Second}, 0, nil, 0},
		{"1e9 seconds: ends at once", []error{far, nodes.NewHTTPError(resp("5"), now)}, 1, nil, 1_000_000_000 * time.Second, nil, 30 * time.Second},
		{"just past the cap", []error{nodes.NewHTTPError(resp("31"), now)}, 1, nil, 31 * time.Second, nil, 30 * time.Second},
		{"an HTTP date an hour away", []error{nodes.NewHTTPError(resp(now.Add(time.Hour).Format(http.TimeFormat)), now)}, 1, nil, time.Hour, nil, 30 * time.Second},
		{"after a retry", []error{nodes.NewHTTPError(resp("2"), now), nodes.RetryAfter(errors.New("slow down"), 2*time.Hour)}, 2, []time.Duration{2 * time.Second}, 2 * time.Hour, nil, 30 * time.Second},
		{"wrapped in a join", []error{errors.Join(errors.New("x"), fmt.Errorf("wrapped: %w", far))}, 1, nil, 1_000_000_000 * time.Second, nil, 30 * time.Second},
		{"a longer MaxRetryAfter: waited", []error{nodes.NewHTTPError(resp("31"), now)}, 2, []time.Duration{31 * time.Second}, 0,
			[]nodes.ToolOption{nodes.MaxRetryAfter(time.Minute)}, 0},
		{"a shorter MaxRetryAfter: ends at once", []error{nodes.NewHTTPError(resp("6"), now)}, 1, nil, 6 * time.Second,
			[]nodes.ToolOption{nodes.MaxRetryAfter(5 * time.Second)}, 5 * time.Second},
		{"MaxRetryAfter 0: any Retry-After ends at once", []error{nodes.NewHTTPError(resp("1"), now)}, 1, nil, time.Second,
			[]nodes.ToolOption{nodes.MaxRetryAfter(0)}, 0},
		{"MaxRetryAfter 0: no Retry-After, the policy's wait", []error{&nodes.HTTPError{Status: 503}}, 2, []time.Duration{200 * time.Millisecond}, 0,
			[]nodes.ToolOption{nodes.MaxRetryAfter(0), nodes.Retry(retry.Policy{Initial: 200 * time.Millisecond})}, 0},
		{"a Retry-After below the policy's wait: the policy's", []error{nodes.NewHTTPError(resp("1"), now)}, 2, []time.Duration{3 * time.Second}, 0,
			[]nodes.ToolOption{nodes.Retry(retry.Policy{Initial: 3 * time.Second})}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			attempts := &counter{}
			clk := newFakeClock()
			start := clk.Now()
			ex, _ := nodes.NewExecutor([]*nodes.Tool{flaky(t, "api", attempts, tc.errs, tc.opts...)}, nodes.WithClock(clk))
			_, err := ex.Execute(context.Background(), nodes.Call{Tool: "api", Scope: "t"})
			if attempts.get("api") != tc.attempts {
				t.Errorf("%d attempts, want %d", attempts.get("api"), tc.attempts)
			}
			if d := cmp.Diff(tc.sleeps, clk.Sleeps()); d != "" {
				t.Errorf("waits (-want +got):\n%s", d)
			}
			if tc.after == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var rae *nodes.RetryAfterError
			if !errors.As(err, &rae) || !errors.Is(err, nodes.ErrRetryAfterTooLong) || !errors.Is(err, nodes.ErrToolFailed) || errors.Is(err, nodes.ErrRetriesExhausted) {
				t.Fatalf("err = %v, want a *RetryAfterError matching ErrRetryAfterTooLong and ErrToolFailed, not ErrRetriesExhausted", err)
			}
			at := start.Add(sum(tc.sleeps) + tc.after)
			if rae.Tool != "api" || rae.RetryAfter != tc.after || !rae.At.Equal(at) || rae.Max != tc.max || rae.Attempts != tc.attempts {
				t.Errorf("%+v; want %v after %d attempts, at %v", rae, tc.after, tc.attempts, at)
			}
			if !strings.Contains(err.Error(), at.Format(time.RFC3339)) {
				t.Errorf("the message does not say when to come back (%s): %v", at.Format(time.RFC3339), err)
			}
			if nodes.Classify(err) != nodes.ClassTransient {
				t.Errorf("class %v, want transient", nodes.Classify(err))
			}
		})
	}
}

func sum(ds []time.Duration) time.Duration {
	var t time.Duration
	for _, d := range ds {
		t += d
	}
	return t
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
	ex, _ := nodes.NewExecutor([]*nodes.Tool{flaky(t, "api", attempts, repeat(&nodes.HTTPError{Status: 503}, 10), nodes.Retry(retry.Policy{MaxAttempts: 10, Initial: time.Hour, Max: 2 * time.Hour}))}, nodes.WithClock(clk))
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
		ex, _ := nodes.NewExecutor([]*nodes.Tool{flaky(t, "api", attempts, repeat(pause, 10), nodes.Retry(upTo(5)))}, nodes.WithClock(newFakeClock()))
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
// same key, which the tracker dedupes: one issue. The body honours its
// context, so the late success happens downstream only: the executor never
// sees it, and the ledger holds what the retry answered.
func TestLateSuccess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		args := json.RawMessage(`{"title":"login broken"}`)
		call := nodes.Call{Tool: "create_issue", Args: args, Scope: "t"}
		// One attempt only: the timeout is reported as such, not as success.
		tr1 := newTracker(6 * time.Second)
		l1 := newMemLedger(t, nil)
		ex1, _ := nodes.NewExecutor([]*nodes.Tool{tr1.tool(t, nodes.Timeout(5*time.Second), nodes.Retry(retry.Policy{MaxAttempts: 1}))}, nodes.WithLedger(l1))
		_, err := ex1.Execute(context.Background(), call)
		var te *nodes.TimeoutError
		if !errors.As(err, &te) || !errors.Is(err, nodes.ErrToolTimeout) || te.After != 5*time.Second || te.Attempt != 1 || !te.Indeterminate() {
			t.Fatalf("single attempt: %v, want an indeterminate *TimeoutError", err)
		}
		if tr1.issues() != 1 {
			t.Errorf("the late success did not happen downstream: %d issues", tr1.issues())
		}
		time.Sleep(time.Minute) // the tracker answers; nobody listens
		// The tracker dedupes by key (its tool declares DedupesByKey), so
		// the timeout released the intent: nothing is recorded, and a
		// repeat runs again with the same key, which the tracker dedupes.
		// (TestUnknownOutcomeNotRunAgain: a service that does not.)
		if es := l1.Entries(); len(es) != 0 {
			t.Errorf("ledger after a released timeout: %+v, want nothing", es)
		}
		again, err := ex1.Execute(context.Background(), call)
		var is Issue
		if err != nil || again.Status != nodes.StatusExecuted || json.Unmarshal(again.Output, &is) != nil || is.Created || is.Number != 1 || tr1.issues() != 1 {
			t.Errorf("repeat after a timeout: %+v %v; %d issues", again, err, tr1.issues())
		}

		// With retries: the second attempt reuses the key; one issue.
		tr := newTracker(6 * time.Second)
		l := newMemLedger(t, nil)
		ex, _ := nodes.NewExecutor([]*nodes.Tool{tr.tool(t, nodes.Timeout(5*time.Second))}, nodes.WithLedger(l))
		res, err := ex.Execute(context.Background(), call)
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
		is = Issue{}
		if json.Unmarshal(res.Output, &is) != nil || is.Created || is.Number != 1 {
			t.Errorf("result %s, want issue 1, already existing", res.Output)
		}
		recorded := l.Entries()
		time.Sleep(time.Minute) // let the tracker's slow answers finish
		// The ledger holds one outcome under the key: the tracker's one
		// issue, as the retry reported it, untouched by the late answer.
		if d := cmp.Diff(recorded, l.Entries()); d != "" {
			t.Errorf("the late answer changed the ledger (-before +after):\n%s", d)
		}
		assertOneOutcome(t, l, res.Key, tr.first())
		replay, err := ex.Execute(context.Background(), call)
		if err != nil || replay.Status != nodes.StatusReplayed || !replay.Replayed || string(replay.Output) != string(res.Output) {
			t.Errorf("repeat: %+v %v, want a replay of %s", replay, err, res.Output)
		}
		if tr.requests() != 2 || tr.issues() != 1 {
			t.Errorf("the replay reached the tracker: %d requests, %d issues", tr.requests(), tr.issues())
		}
	})
}

// assertOneOutcome checks that l holds exactly one record, done under key,
// whose result is the tracker's issue want (Created aside: a deduped
// request reports false).
func assertOneOutcome(t *testing.T, l *ledger.Memory, key string, want Issue) Issue {
	t.Helper()
	es := l.Entries()
	if len(es) != 1 || es[0].Key != key || es[0].State != ledger.StateDone || es[0].Outcome.Failure != nil {
		t.Fatalf("ledger %+v, want one done record under %s", es, key)
	}
	var got Issue
	if err := json.Unmarshal(es[0].Outcome.Result, &got); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, got, cmpopts.IgnoreFields(Issue{}, "Created")); d != "" {
		t.Errorf("recorded outcome (-tracker +ledger):\n%s", d)
	}
	return got
}

// TestLateSuccessRecorded (R31): a body that ignores its context creates
// the issue, is abandoned at the timeout and succeeds late. Its result
// goes into the ledger once, without overwriting an outcome recorded
// first, and a repeat replays it without reaching the tracker.
func TestLateSuccessRecorded(t *testing.T) {
	args := json.RawMessage(`{"title":"login broken"}`)
	call := nodes.Call{Tool: "create_issue", Args: args, Scope: "t"}
	run := func(t *testing.T, p retry.Policy, retryDelay time.Duration) (*tracker, *ledger.Memory, *nodes.Executor, nodes.Result, error) {
		tr := newTracker(6 * time.Second)
		l := newMemLedger(t, nil)
		p.Rand = middle{}
		ex, _ := nodes.NewExecutor([]*nodes.Tool{tr.stubbornTool(t, retryDelay, nodes.Timeout(5*time.Second), nodes.Retry(p))},
			nodes.WithLedger(l))
		res, err := ex.Execute(context.Background(), call)
		return tr, l, ex, res, err
	}
	replays := func(t *testing.T, tr *tracker, ex *nodes.Executor, want json.RawMessage) {
		t.Helper()
		before := tr.requests()
		res, err := ex.Execute(context.Background(), call)
		if err != nil || res.Status != nodes.StatusReplayed || !res.Replayed || string(res.Output) != string(want) {
			t.Errorf("repeat: %+v %v, want a replay of %s", res, err, want)
		}
		if tr.requests() != before || tr.issues() != 1 {
			t.Errorf("the repeat reached the tracker: %d requests (was %d), %d issues", tr.requests(), before, tr.issues())
		}
	}

	t.Run("no retry", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			tr, l, ex, _, err := run(t, retry.Policy{MaxAttempts: 1}, 0)
			var te *nodes.TimeoutError
			if !errors.As(err, &te) || !te.Indeterminate() || ex.Abandoned() != 1 || ex.AbandonedRunning() != 1 {
				t.Fatalf("err %v (%+v), abandoned %d, running %d", err, te, ex.Abandoned(), ex.AbandonedRunning())
			}
			if es := l.Entries(); len(es) != 0 {
				t.Errorf("ledger right after the timeout: %+v, want the intent released", es)
			}
			time.Sleep(2 * time.Second) // the body answers at 6s
			synctest.Wait()
			if ex.AbandonedRunning() != 0 {
				t.Errorf("abandoned bodies running: %d", ex.AbandonedRunning())
			}
			key := nodes.IdempotencyKey("t", "create_issue", []byte(`{"title":"login broken"}`))
			got := assertOneOutcome(t, l, key, tr.first())
			if !got.Created {
				t.Errorf("recorded %+v, want the issue as the slow attempt created it", got)
			}
			replays(t, tr, ex, l.Entries()[0].Outcome.Result)
		})
	})

	t.Run("retry recorded first", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// The retry (at 5.2s) answers at once and is recorded; the late
			// success (at 6s) finds an outcome and is dropped.
			tr, l, ex, res, err := run(t, nodes.DefaultRetry(), 0)
			if err != nil || res.Attempts != 2 || ex.Abandoned() != 1 {
				t.Fatalf("%+v %v, abandoned %d", res, err, ex.Abandoned())
			}
			recorded := l.Entries()
			time.Sleep(2 * time.Second)
			synctest.Wait()
			if d := cmp.Diff(recorded, l.Entries()); d != "" {
				t.Errorf("the late success changed the ledger (-before +after):\n%s", d)
			}
			if got := assertOneOutcome(t, l, res.Key, tr.first()); got.Created {
				t.Errorf("recorded %+v, want the retry's answer (already existing)", got)
			}
			replays(t, tr, ex, res.Output)
		})
	})

	t.Run("late success recorded first", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// The retry (at 5.2s) answers at 8.2s; the late success (at
			// 6s) completes the intent first, and the call returns it.
			tr, l, ex, res, err := run(t, nodes.DefaultRetry(), 3*time.Second)
			if err != nil || res.Attempts != 2 || res.Status != nodes.StatusExecuted {
				t.Fatalf("%+v %v", res, err)
			}
			synctest.Wait()
			got := assertOneOutcome(t, l, res.Key, tr.first())
			if !got.Created || string(res.Output) != string(l.Entries()[0].Outcome.Result) {
				t.Errorf("recorded %+v, returned %s; want the late success, returned as recorded", got, res.Output)
			}
			replays(t, tr, ex, res.Output)
		})
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
		}, nodes.Idempotent(), nodes.Timeout(time.Second), nodes.Retry(retry.Policy{MaxAttempts: 1})))
		ex, _ := nodes.NewExecutor([]*nodes.Tool{tool})
		start := time.Now()
		_, err := ex.Execute(context.Background(), nodes.Call{Tool: "stuck", Scope: "t"})
		var te *nodes.TimeoutError
		if !errors.As(err, &te) || !te.Indeterminate() || time.Since(start) != time.Second || ex.Abandoned() != 1 || ex.AbandonedRunning() != 1 {
			t.Errorf("err %v after %v, abandoned %d, running %d", err, time.Since(start), ex.Abandoned(), ex.AbandonedRunning())
		}
		close(release)
		time.Sleep(time.Second)
		if ex.AbandonedRunning() != 0 || ex.Abandoned() != 1 {
			t.Errorf("after release: running %d, abandoned %d", ex.AbandonedRunning(), ex.Abandoned())
		}
	})
}

// TestAbandonedLimit (R33): with n abandoned bodies still running, a new
// call of any tool fails at once with *AbandonedLimitError and starts no
// body; once the bodies return, calls run again.
func TestAbandonedLimit(t *testing.T) {
	const n = 3
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		started := &counter{}
		stuck := mustTool(t)(nodes.NewTool("stuck", "Answers when released.", func(ctx context.Context, _ Empty, env nodes.Env) (string, error) {
			started.inc("stuck")
			<-release
			return "late", nil
		}, nodes.Idempotent(), nodes.Timeout(time.Second), nodes.Retry(retry.Policy{MaxAttempts: 1})))
		quick := mustTool(t)(nodes.NewTool("quick", "Answers at once.", func(ctx context.Context, _ Empty, env nodes.Env) (string, error) {
			started.inc("quick")
			return "ok", nil
		}, nodes.Idempotent()))
		ex, err := nodes.NewExecutor([]*nodes.Tool{stuck, quick}, nodes.WithMaxAbandoned(n))
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				if _, err := ex.Execute(context.Background(), nodes.Call{Tool: "stuck", Scope: "t"}); !errors.Is(err, nodes.ErrToolTimeout) {
					t.Errorf("stuck call: %v, want a timeout", err)
				}
			})
		}
		wg.Wait()
		if ex.AbandonedRunning() != n || ex.Abandoned() != n {
			t.Fatalf("running %d, abandoned %d; want %d", ex.AbandonedRunning(), ex.Abandoned(), n)
		}
		for _, name := range []string{"stuck", "quick"} {
			start := time.Now()
			_, err := ex.Execute(context.Background(), nodes.Call{Tool: name, Scope: "t"})
			var le *nodes.AbandonedLimitError
			if !errors.As(err, &le) || !errors.Is(err, nodes.ErrAbandonedLimit) || le.Tool != name || le.Limit != n || le.Attempts != 0 || le.Err != nil {
				t.Errorf("%s at the cap: %v (%+v), want *AbandonedLimitError", name, err, le)
			}
			if errors.Is(err, nodes.ErrToolFailed) || nodes.Classify(err) != nodes.ClassNone {
				t.Errorf("%s at the cap: %v is a tool failure or retryable", name, err)
			}
			if d := time.Since(start); d != 0 {
				t.Errorf("%s at the cap took %v, want an immediate refusal", name, d)
			}
		}
		if started.get("stuck") != n || started.get("quick") != 0 {
			t.Errorf("bodies started at the cap: stuck %d, quick %d", started.get("stuck"), started.get("quick"))
		}
		close(release)
		synctest.Wait()
		if ex.AbandonedRunning() != 0 {
			t.Fatalf("running %d after release", ex.AbandonedRunning())
		}
		for _, name := range []string{"stuck", "quick"} {
			if _, err := ex.Execute(context.Background(), nodes.Call{Tool: name, Scope: "t"}); err != nil {
				t.Errorf("%s after release: %v", name, err)
			}
		}
	})
}

// TestAbandonedLimitRefusesRetry: a retry is an attempt like any other; when
// the first attempt's abandonment reaches the cap, the retry is refused,
// and the error still says that the call timed out (it may have taken
// effect). No fallback runs.
func TestAbandonedLimitRefusesRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		fb := mustTool(t)(nodes.NewTool("stuck_fallback", "A fallback.", func(ctx context.Context, _ Empty, env nodes.Env) (string, error) {
			return "fallback", nil
		}, nodes.Idempotent()))
		stuck := mustTool(t)(nodes.NewTool("stuck", "Answers when released.", func(ctx context.Context, _ Empty, env nodes.Env) (string, error) {
			<-release
			return "late", nil
		}, nodes.Idempotent(), nodes.NoMemo(), nodes.Timeout(time.Second), nodes.Fallback(fb)))
		ex, _ := nodes.NewExecutor([]*nodes.Tool{stuck}, nodes.WithMaxAbandoned(1))
		_, err := ex.Execute(context.Background(), nodes.Call{Tool: "stuck", Scope: "t"})
		var le *nodes.AbandonedLimitError
		var te *nodes.TimeoutError
		if !errors.As(err, &le) || le.Attempts != 1 || !errors.As(err, &te) || !te.Indeterminate() || errors.Is(err, nodes.ErrToolFailed) {
			t.Errorf("err %v (%+v), want *AbandonedLimitError after one timed-out attempt, no fallback", err, le)
		}
		close(release)
		synctest.Wait()
	})
}

func TestToolPanics(t *testing.T) {
	tool := mustTool(t)(nodes.NewTool("boom", "Panics.", func(ctx context.Context, _ Empty, env nodes.Env) (string, error) {
		panic("kaboom")
	}, nodes.Idempotent(), nodes.Retry(upTo(3))))
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
