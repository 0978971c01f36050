package helpdesk_test

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/examples/internal/demo"
	"github.com/lockstepgo/lockstep/examples/support/helpdesk"
	"github.com/lockstepgo/lockstep/internal/canon"
	"github.com/lockstepgo/lockstep/nodes"
	"github.com/lockstepgo/lockstep/nodes/ledger"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func run(t *testing.T, db string) (helpdesk.Counts, string) {
	t.Helper()
	var out bytes.Buffer
	c, err := helpdesk.Run(context.Background(), helpdesk.Config{DB: db, Out: &out})
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

// TestSupport: the search runs once and its repeat is a cache hit; the
// close waits for approval and, approved, closes TKT-3 once. A second run
// on the file repeats nothing.
func TestSupport(t *testing.T) {
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "lockstep.db")
	c, out := run(t, db)
	first := out
	if d := cmp.Diff(helpdesk.Counts{Closures: 1, Searches: 1, CacheHits: 1, Closed: 1, Approved: 1, Resumed: 1}, c); d != "" {
		t.Errorf("first run counts (-want +got):\n%s", d)
	}
	wantLines(t, out,
		`Thread support-login-ticket: "find the login ticket and close it".`,
		"search_tickets: executed",
		"search_tickets: cache_hit",
		"close_ticket:   blocked",
		"The thread is waiting, not failed: status waiting, next [tools].",
		"asks support-leads: close_ticket",
		"Sam Okafor (support lead) approves it in the approval inbox",
		"The approval worker resumes the thread (1 resumed):",
		"close_ticket:   approved",
		"close_ticket:   executed",
		`Status done. Agent: Done: TKT-3, "Login fails after password reset", is closed`,
		"helpdesk_closures holds 1 close(s).",
	)

	c, out = run(t, db)
	if d := cmp.Diff(helpdesk.Counts{Closures: 1}, c); d != "" {
		t.Errorf("second run counts (-want +got):\n%s", d)
	}
	wantLines(t, out, "Already finished (status done): nothing runs again, nothing is closed twice.")

	s, err := sqlite.Open(db, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	desk, err := helpdesk.OpenHelpdesk(ctx, s.DB(), nil)
	if err != nil {
		t.Fatal(err)
	}
	tickets, err := desk.Tickets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	status := map[string]string{}
	for _, tk := range tickets {
		status[tk.ID] = tk.Status
	}
	if d := cmp.Diff(map[string]string{"TKT-1": "open", "TKT-2": "open", "TKT-3": "closed", "TKT-4": "open"}, status); d != "" {
		t.Errorf("tickets (-want +got):\n%s", d)
	}
	in, err := demo.Inspect(ctx, s, helpdesk.Thread)
	if err != nil {
		t.Fatal(err)
	}
	if in.Status != "done" || len(in.Interrupts) != 0 {
		t.Errorf("CLI view: status %s with %d interrupts, want done with none", in.Status, len(in.Interrupts))
	}
	// The audit trail: who approved, and that what ran is what was approved.
	store, err := approval.OpenSQLStore(ctx, s.DB(), nil)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`Approval ([0-9a-f]{32}) asks`).FindStringSubmatch(first)
	if m == nil {
		t.Fatal("the narrative names no approval")
	}
	tr, err := store.Audit(ctx, m[1])
	if err != nil {
		t.Fatal(err)
	}
	if tr.Execution == nil || tr.Execution.ArgsHash != tr.Decision.ArgsHash || tr.Decision.Reviewer != helpdesk.Reviewer || tr.Resume.At.IsZero() {
		t.Errorf("audit trail: decision %+v, execution %+v, resume %+v", tr.Decision, tr.Execution, tr.Resume)
	}
}

// abandonClose leaves in db what a run killed inside close_ticket's body
// leaves: the ledger's intent for the close, with no outcome and a lease
// that has lapsed, and, when closed, the close the helpdesk made before
// the kill.
func abandonClose(t *testing.T, db string, closed bool) {
	t.Helper()
	ctx := context.Background()
	s, err := sqlite.Open(db, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	desk, err := helpdesk.OpenHelpdesk(ctx, s.DB(), nil)
	if err != nil {
		t.Fatal(err)
	}
	args, err := canon.JSON(json.RawMessage(`{"ticket_id":"TKT-3","resolution":"The password reset link was fixed; logging in works again."}`))
	if err != nil {
		t.Fatal(err)
	}
	key := nodes.IdempotencyKey(helpdesk.Thread, "close_ticket", args)
	hash, err := approval.ArgsHash("close_ticket", args)
	if err != nil {
		t.Fatal(err)
	}
	led, err := ledger.NewSQL(ctx, s.DB(), ledger.Options{Now: func() time.Time { return time.Now().Add(-time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	if _, started, err := led.Begin(ctx, ledger.Intent{Key: key, Tool: "close_ticket", ArgsHash: hash, Owner: "killed-run", Lease: time.Minute}); err != nil || !started {
		t.Fatalf("the killed run's intent: %v, %v", started, err)
	}
	if closed {
		if _, err := desk.Close(ctx, "TKT-3", "The password reset link was fixed; logging in works again.", key); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSupportOutcomeUnknown: an earlier run was killed inside the approved
// close, after or before the helpdesk closed the ticket. The program tells
// the outcome-unknown approval as a step of its story, and the support
// lead checks helpdesk_closures before deciding (she does not approve it
// as she approved the first request) and says what she found. Either way
// TKT-3 is closed exactly once.
func TestSupportOutcomeUnknown(t *testing.T) {
	for _, tc := range []struct {
		name   string
		closed bool
		found  string
	}{
		{"closed before the kill", true, "TKT-3 was closed at"},
		{"killed before the close", false, "no close of TKT-3, so the earlier attempt did not close it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "lockstep.db")
			abandonClose(t, db, tc.closed)
			c, out := run(t, db)
			wantLines(t, out,
				"Sam Okafor (support lead) approves it in the approval inbox",
				"close_ticket:   approved",
				"The thread waits again: the approved call found an earlier attempt of itself, stopped inside the call.",
				"asks whether to run close_ticket",
				"again (rule outcome_unknown): an earlier attempt was stopped inside the call, so the ticket may already be closed.",
				helpdesk.Reviewer+" checks helpdesk_closures before deciding, for the call's idempotency key ",
				tc.found,
				helpdesk.Reviewer+"'s decision is recorded: approved at",
				"close_ticket:   executed",
				`Status done. Agent: Done: TKT-3, "Login fails after password reset", is closed`,
			)
			if c.Closures != 1 {
				t.Errorf("%d closures, want 1\n%s", c.Closures, out)
			}
		})
	}
}
