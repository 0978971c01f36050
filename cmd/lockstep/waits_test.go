package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/graph"
)

// threadUnknown waits on an approval of kind outcome_unknown: an earlier
// attempt of the charge may already have run.
const threadUnknown = "charge-5"

// TestStateShowsWhyAThreadWaits: state names the run that holds a
// thread's lease and until when (or that it lapsed), a decided approval
// whose resume a worker claimed and did not finish (or that failed), and
// the rule that raised each approval; for an outcome-unknown approval,
// state and approvals say that the write may already have happened and
// what to check, instead of the model's rationale written before it.
func TestStateShowsWhyAThreadWaits(t *testing.T) {
	f := buildFixture(t)
	claimedAt := cliNow()
	cases := []struct {
		name  string
		setup func(t *testing.T, db string)
		now   time.Time
		args  []string
		want  []string // lines the output must hold
	}{
		{"state-leased", leaseThread(threadPending, claimedAt, 30*time.Second), claimedAt.Add(10 * time.Second), []string{"state", threadPending},
			[]string{"lease       held by run run-killed of runner host-a/4242, claim 2 until 2026-03-02T10:00:30Z (for 20s more)", "run run-killed holds the thread's lease until 2026-03-02T10:00:30Z"}},
		{"state-leased-json", leaseThread(threadPending, claimedAt, 30*time.Second), claimedAt.Add(10 * time.Second), []string{"state", threadPending, "--json"},
			[]string{`"owner": "run-killed"`, `"runner": "host-a/4242"`, `"epoch": 2`, `"until": "2026-03-02T10:00:30Z"`, `"live": true`}},
		{"state-lease-lapsed", leaseThread(threadPending, claimedAt, 30*time.Second), claimedAt.Add(time.Minute), []string{"state", threadPending},
			[]string{"lease       lapsed at 2026-03-02T10:00:30Z (run run-killed of runner host-a/4242, claim 2 held it"}},
		{"state-resume-claimed", decideAndClaim(f, claimedAt, false), claimedAt.Add(10 * time.Second), []string{"state", threadRefund},
			[]string{"resume claimed by a worker until 2026-03-02T10:01:00Z, not finished", "a worker claimed its resume and has not finished"}},
		{"state-resume-claimed-json", decideAndClaim(f, claimedAt, false), claimedAt.Add(10 * time.Second), []string{"state", threadRefund, "--json"},
			[]string{`"state": "claimed"`, `"not_before": "2026-03-02T10:01:00Z"`}},
		{"state-resume-retrying", decideAndClaim(f, claimedAt, true), claimedAt.Add(10 * time.Second), []string{"state", threadRefund},
			[]string{"resume failed 1 time(s): checkpoint: thread \"refund-7\" is leased by runner run-killed", "resuming the thread failed 1 time(s)"}},
		{"state-outcome-unknown", outcomeUnknown, cliNow(), []string{"state", threadUnknown},
			[]string{"(rule outcome_unknown)", "outcome unknown: an earlier attempt may already have run; check downstream before deciding", "an earlier attempt of charge may already have taken effect (rule outcome_unknown): check downstream"}},
		{"approvals-outcome-unknown", outcomeUnknown, cliNow(), []string{"approvals", "--thread", threadUnknown},
			[]string{"outcome_unknown  " + approval.OutcomeUnknownShort, "outcome_unknown (1 above): " + approval.OutcomeUnknownNote}},
		{"approvals-outcome-unknown-json", outcomeUnknown, cliNow(), []string{"approvals", "--thread", threadUnknown, "--json"},
			[]string{`"kind": "outcome_unknown"`, `"rule": "outcome_unknown"`, `"rationale": "` + approval.OutcomeUnknownNote + `"`, `"model_rationale": "I will charge the card now"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			db := f.copyDB(t)
			tc.setup(t, db)
			got := cli(db, tc.now, tc.args...)
			if got.code != exitOK {
				t.Fatalf("exit %d: %s", got.code, got.stderr)
			}
			if slices.Contains(tc.args, "--json") {
				checkOneJSON(t, got.stdout)
			}
			for _, w := range tc.want {
				if !strings.Contains(got.stdout, w) {
					t.Errorf("output lacks %q:\n%s", w, got.stdout)
				}
			}
			checkGolden(t, tc.name, got, goldenData{db: db})
		})
	}
}

// leaseThread returns a setup that leaves thread leased by run-killed,
// for ttl from at, as a run that was killed would.
func leaseThread(thread string, at time.Time, ttl time.Duration) func(t *testing.T, db string) {
	return func(t *testing.T, db string) {
		t.Helper()
		ctx := context.Background()
		s, err := sqlite.Open(db, sqlite.Config{Now: func() time.Time { return at }})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		head, err := s.Get(ctx, checkpoint.Ref{Thread: thread}, checkpoint.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Claim(ctx, checkpoint.Ref{Thread: thread, ID: head.Checkpoint.ID}, checkpoint.Lease{Owner: "run-killed", Runner: "host-a/4242", TTL: ttl}); err != nil {
			t.Fatal(err)
		}
	}
}

// decideAndClaim returns a setup that approves the refund and leaves its
// resume claimed by a worker (for a minute from at) that did not finish,
// or, with failed, an attempt that failed on a busy thread.
func decideAndClaim(f *fixture, at time.Time, failed bool) func(t *testing.T, db string) {
	return func(t *testing.T, db string) {
		t.Helper()
		ctx := context.Background()
		if got := cli(db, at.Add(-time.Minute), "approve", f.refundID, "--reviewer", "alice"); got.code != exitOK {
			t.Fatalf("approve: exit %d: %s", got.code, got.stderr)
		}
		s, err := sqlite.Open(db, sqlite.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		store, err := approval.OpenSQLStore(ctx, s.DB(), func() time.Time { return at })
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := store.ClaimResume(ctx, f.refundID, time.Minute); err != nil || !ok {
			t.Fatalf("claim: %v, %v", ok, err)
		}
		if failed {
			busy := `checkpoint: thread "refund-7" is leased by runner run-killed until 2026-03-02T10:00:30Z`
			if err := store.RetryResume(ctx, f.refundID, busy, time.Minute); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// outcomeUnknown adds threadUnknown, waiting on an outcome-unknown
// approval whose stored rationale is the model's, from before the earlier
// attempt.
func outcomeUnknown(t *testing.T, db string) {
	t.Helper()
	ctx := context.Background()
	s, err := sqlite.Open(db, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	g := newGraphEnv(s)
	g.at(15 * time.Minute)
	r, err := askingGraph(g.clock, time.Hour, approval.KindOutcomeUnknown, "outcome_unknown").Compile(g.options()...)
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Invoke(ctx, threadUnknown, graph.Set(Call{Tool: "charge", Args: map[string]any{"card": "c-1", "cents": 1200},
		Owner: "billing", Rationale: "I will charge the card now"}, "Tool", "Args", "Owner", "Rationale"))
	if err != nil || res.Status != graph.StatusWaiting {
		t.Fatalf("%s: %v, %v", threadUnknown, res.Status, err)
	}
}
