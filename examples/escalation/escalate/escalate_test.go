package escalate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.uber.org/goleak"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/examples/escalation/escalate"
	"github.com/lockstepgo/lockstep/examples/internal/demo"
	"github.com/lockstepgo/lockstep/internal/canon"
	"github.com/lockstepgo/lockstep/nodes"
	"github.com/lockstepgo/lockstep/nodes/ledger"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The story needs the tracker to answer a create after create_issue
// gave up, and the retry that finds the issue to answer in time. Two
// timers racing (a timeout just below the latency) tell it only on an
// idle machine: under load the goroutine wakes after both fired and
// either may win. So the tracker here never answers a create in time
// (its latency is an hour: the attempt's timeout always ends it first),
// and the timeout leaves a loaded machine seconds for the retry, which
// only reads and inserts a row.
const (
	timeout = 2 * time.Second
	latency = time.Hour
)

func run(t *testing.T, db string) (escalate.Counts, string) {
	t.Helper()
	var out bytes.Buffer
	c, err := escalate.Run(context.Background(), escalate.Config{DB: db, Out: &out, Timeout: timeout, Latency: latency})
	if err != nil {
		t.Fatalf("Run: %v\noutput:\n%s", err, out.String())
	}
	return c, out.String()
}

// wantLines checks that out holds every line of want, in order.
func wantLines(t *testing.T, out string, want ...string) {
	t.Helper()
	rest := out
	for _, w := range want {
		i := strings.Index(rest, w)
		if i < 0 {
			t.Errorf("output lacks %q (after the lines before it)\noutput:\n%s", w, out)
			return
		}
		rest = rest[i+len(w):]
	}
}

// toolResults returns the observations of a thread's tool messages, by
// call ID, read from the file as the CLI reads it.
func toolResults(t *testing.T, s checkpoint.Saver, thread string) map[string]nodes.Observation {
	t.Helper()
	in, err := demo.Inspect(context.Background(), s, thread)
	if err != nil {
		t.Fatal(err)
	}
	if in.Status != "done" {
		t.Errorf("%s: status %s, want done", thread, in.Status)
	}
	var msgs []nodes.Message
	if err := json.Unmarshal(in.Values["Messages"], &msgs); err != nil {
		t.Fatal(err)
	}
	out := map[string]nodes.Observation{}
	for _, m := range msgs {
		if m.Role == nodes.RoleTool {
			var obs nodes.Observation
			if err := json.Unmarshal([]byte(m.Content), &obs); err != nil {
				t.Fatal(err)
			}
			out[m.ToolCallID] = obs
		}
	}
	return out
}

// TestEscalation: a slow tracker gets one issue (timeout, retry with the
// same key, dedupe; a repeat is replayed by the ledger), and an outage
// gives a degraded answer. A second run repeats nothing.
func TestEscalation(t *testing.T) {
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "lockstep.db")
	c, out := run(t, db)
	want := escalate.Counts{Issues: 1, Queued: 1, Requests: 5, Created: 1, Retries: 3, Replayed: 1, Fallbacks: 1}
	if d := cmp.Diff(want, c); d != "" {
		t.Errorf("first run counts (-want +got):\n%s", d)
	}
	wantLines(t, out,
		"Thread escalation-checkout-latency:",
		`create_issue:     retry    attempt 1 failed (nodes: tool "create_issue" attempt 1 timed out after `+timeout.String()+`; its outcome is unknown`,
		"create_issue:     executed after 2 attempts",
		"create_issue:     replayed answered by the ledger",
		"existing: the attempt that timed out had created #1; the retry's idempotency key found it.",
		"Status done. Agent: Escalated: the incident is filed in payments/checkout, once.",
		"Thread escalation-refund-webhook:",
		"create_issue:     retry    attempt 1 failed (http status 503 Service Unavailable",
		"create_issue:     retry    attempt 2 failed (http status 503 Service Unavailable",
		"create_issue:     failed   retries used up",
		"create_issue:     fallback its fallback queue_escalation runs instead",
		"queue_escalation: executed",
		"Status done. Agent: I could not open the issue: the tracker answered 503 Service Unavailable to all 3 attempts",
		"tracker_issues holds 1 issue(s): #1 https://tracker.example/payments/checkout/issues/1; escalation_outbox holds 1.",
	)

	s, err := sqlite.Open(db, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// The slow thread: the tool result says what was created, and the
	// repeat is the same result, replayed.
	res := toolResults(t, s, escalate.ThreadSlow)
	var first, again escalate.Created
	if err := json.Unmarshal(res["issue-1"].Result, &first); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(res["issue-2"].Result, &again); err != nil {
		t.Fatal(err)
	}
	wantCreated := escalate.Created{Success: true, Number: 1, URL: "https://tracker.example/payments/checkout/issues/1",
		Repository: escalate.Repository, IdempotencyKey: res["issue-1"].Key, Existing: true}
	if d := cmp.Diff(wantCreated, first, cmpopts.IgnoreFields(escalate.Created{}, "CreatedAt")); d != "" {
		t.Errorf("create_issue result (-want +got):\n%s", d)
	}
	if _, err := time.Parse(time.RFC3339, first.CreatedAt); err != nil || len(first.IdempotencyKey) != 64 {
		t.Errorf("created_at %q (%v), idempotency key %q", first.CreatedAt, err, first.IdempotencyKey)
	}
	if d := cmp.Diff(first, again); d != "" || res["issue-1"].Status != nodes.StatusExecuted || res["issue-2"].Status != nodes.StatusReplayed || res["issue-2"].Key != first.IdempotencyKey {
		t.Errorf("the repeat: status %s, key %s, result diff (-first +again):\n%s", res["issue-2"].Status, res["issue-2"].Key, d)
	}
	// The outage: the fallback's result, and the note naming the failure.
	res = toolResults(t, s, escalate.ThreadOutage)
	obs := res["issue-1"]
	var q escalate.QueuedResult
	if err := json.Unmarshal(obs.Result, &q); err != nil {
		t.Fatal(err)
	}
	if obs.Status != nodes.StatusFallback || obs.Fallback != "queue_escalation" || !q.Queued || q.OutboxID != "OUT-0001" ||
		!strings.Contains(obs.Note, "503 Service Unavailable") || !strings.Contains(obs.Note, "retries exhausted") {
		t.Errorf("outage result: %+v (queued %+v)", obs, q)
	}
	tracker, err := escalate.OpenTracker(ctx, s.DB(), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	issues, err := tracker.Issues(ctx)
	if err != nil || len(issues) != 1 {
		t.Fatalf("tracker_issues: %+v, %v; want one issue", issues, err)
	}

	c, out = run(t, db)
	if d := cmp.Diff(escalate.Counts{Issues: 1, Queued: 1}, c); d != "" {
		t.Errorf("second run counts (-want +got):\n%s", d)
	}
	wantLines(t, out, "Already finished (status done)", "Already finished (status done)", "the tracker got 0 request(s) and created 0 issue(s)")
}

// TestTrackerDedupes: the fake tracker creates once per key, answers late,
// and fails every request during an outage.
func TestTrackerDedupes(t *testing.T) {
	ctx := context.Background()
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "lockstep.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tr, err := escalate.OpenTracker(ctx, s.DB(), nil, latency)
	if err != nil {
		t.Fatal(err)
	}
	in := escalate.NewIssue{Repository: "a/b", Title: "t", Severity: "low"}
	// A client that has given up (the tracker answers after an hour).
	short, cancel := context.WithCancel(ctx)
	cancel()
	_, err = tr.Create(short, in, "k1")
	if err == nil {
		t.Fatal("a create answered before its latency")
	}
	is, err := tr.Create(ctx, in, "k1")
	if err != nil || !is.Existing || is.Number != 1 {
		t.Fatalf("retry with the key: %+v, %v; want issue 1, existing", is, err)
	}
	tr.SetOutage(true)
	var se *escalate.StatusError
	if _, err := tr.Create(ctx, in, "k2"); !errors.As(err, &se) || se.Status != 503 {
		t.Fatalf("during the outage: %v, want a 503", err)
	}
	if tr.Requests() != 3 || tr.Creates() != 1 {
		t.Errorf("%d requests, %d creates; want 3, 1", tr.Requests(), tr.Creates())
	}
}

// TestQueueAfterAKilledRun: an earlier run was killed inside
// queue_escalation, after the outbox took the escalation. The outbox
// deduplicates by idempotency key, and the tool says so (DedupesByKey), so
// the run again queues under the same key, which returns the queued
// escalation: no human is asked (this example has nobody to ask), and the
// outbox holds it once.
func TestQueueAfterAKilledRun(t *testing.T) {
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "lockstep.db")
	args, err := canon.JSON(json.RawMessage(`{"repository":"payments/checkout","title":"Refund webhook failing with 500s","body":"The refund webhook has answered 500 to every delivery since 09:12 UTC. Reported by the on-call bot.","severity":"critical"}`))
	if err != nil {
		t.Fatal(err)
	}
	key := nodes.IdempotencyKey(escalate.ThreadOutage, "queue_escalation", args)
	func() {
		s, err := sqlite.Open(db, sqlite.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		hash, err := approval.ArgsHash("queue_escalation", args)
		if err != nil {
			t.Fatal(err)
		}
		led, err := ledger.NewSQL(ctx, s.DB(), ledger.Options{Now: func() time.Time { return time.Now().Add(-time.Hour) }})
		if err != nil {
			t.Fatal(err)
		}
		if _, started, err := led.Begin(ctx, ledger.Intent{Key: key, Tool: "queue_escalation", ArgsHash: hash, Owner: "killed-run", Lease: time.Minute}); err != nil || !started {
			t.Fatalf("the killed run's intent: %v, %v", started, err)
		}
	}()
	c, out := run(t, db)
	wantLines(t, out, "queue_escalation: executed", "I queued the escalation in the outbox instead")
	if c.Queued != 1 {
		t.Errorf("the outbox holds %d escalations, want 1\n%s", c.Queued, out)
	}
	s, err := sqlite.Open(db, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, thread := range []string{escalate.ThreadSlow, escalate.ThreadOutage} {
		in, err := demo.Inspect(ctx, s, thread)
		if err != nil || in.Status != "done" {
			var st string
			if in != nil {
				st = in.Status
			}
			t.Errorf("%s: status %q, %v; want done", thread, st, err)
		}
	}
}
