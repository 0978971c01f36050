package approval_test

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/approval/approvaltest"
)

// TestStoreContract runs the stores' shared contract (package
// approvaltest) against both stores of this package; package postgres runs
// it on PostgreSQL.
func TestStoreContract(t *testing.T) {
	for _, k := range storeKinds {
		t.Run(k.name, func(t *testing.T) {
			approvaltest.Run(t, func(t testing.TB, now func() time.Time) (approval.Store, func(ids ...string) string) {
				return k.open(t, now)
			})
		})
	}
}

// TestValidateRequest: the checks the tool node runs before pausing.
func TestValidateRequest(t *testing.T) {
	good := newRequest(t, refundSchema(t), epoch, "o1", 40)
	tests := []struct {
		name   string
		change func(*approval.Request)
		want   error
	}{
		{"valid", func(*approval.Request) {}, nil},
		{"wrong type", func(r *approval.Request) { r.Type = "other" }, approval.ErrInvalidRequest},
		{"no tool", func(r *approval.Request) { r.Tool = "" }, approval.ErrInvalidRequest},
		{"unknown risk", func(r *approval.Request) { r.Risk = "HIGH" }, approval.ErrInvalidRequest},
		{"hash of other arguments", func(r *approval.Request) { r.ArgsHash = "00" }, approval.ErrInvalidRequest},
		{"arguments not JSON", func(r *approval.Request) { r.Args = json.RawMessage(`{`) }, approval.ErrInvalidRequest},
		{"zero created", func(r *approval.Request) { r.CreatedAt = time.Time{} }, approval.ErrInvalidExpiry},
		{"zero expiry", func(r *approval.Request) { r.ExpiresAt = time.Time{} }, approval.ErrInvalidExpiry},
		{"expiry in the past", func(r *approval.Request) { r.ExpiresAt = r.CreatedAt.Add(-time.Minute) }, approval.ErrInvalidExpiry},
		{"expiry at creation", func(r *approval.Request) { r.ExpiresAt = r.CreatedAt }, approval.ErrInvalidExpiry},
		{"expiry in 9999", func(r *approval.Request) { r.ExpiresAt = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC) }, approval.ErrInvalidExpiry},
		{"just under MaxTTL", func(r *approval.Request) { r.ExpiresAt = r.CreatedAt.Add(approval.MaxTTL) }, nil},
		{"kind gate", func(r *approval.Request) { r.Kind = approval.KindGate }, nil},
		{"kind fallback", func(r *approval.Request) { r.Kind, r.FallbackFor = approval.KindFallback, "create_issue" }, nil},
		{"kind outcome unknown of a fallback", func(r *approval.Request) { r.Kind, r.FallbackFor = approval.KindOutcomeUnknown, "create_issue" }, nil},
		{"unknown kind", func(r *approval.Request) { r.Kind = "Gate" }, approval.ErrInvalidRequest},
		{"fallback without fallback_for", func(r *approval.Request) { r.Kind = approval.KindFallback }, approval.ErrInvalidRequest},
		{"fallback_for on a gate", func(r *approval.Request) { r.Kind, r.FallbackFor = approval.KindGate, "create_issue" }, approval.ErrInvalidRequest},
		{"fallback_for without a kind", func(r *approval.Request) { r.FallbackFor = "create_issue" }, approval.ErrInvalidRequest},
		{"traceparent", func(r *approval.Request) { r.TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" }, nil},
		{"traceparent upper case", func(r *approval.Request) { r.TraceParent = "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01" }, approval.ErrInvalidRequest},
		{"traceparent of zeros", func(r *approval.Request) { r.TraceParent = "00-00000000000000000000000000000000-00f067aa0ba902b7-01" }, approval.ErrInvalidRequest},
		{"traceparent of version 01", func(r *approval.Request) { r.TraceParent = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" }, approval.ErrInvalidRequest},
		{"traceparent cut", func(r *approval.Request) { r.TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7" }, approval.ErrInvalidRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := good
			tc.change(&r)
			err := r.Validate()
			if tc.want == nil && err != nil || !errors.Is(err, tc.want) {
				t.Fatalf("Validate: %v, want %v", err, tc.want)
			}
		})
	}
}

// TestSQLStoreSchema: opening twice is a no-op, a newer schema is refused,
// and the stock sqlite3 shell reads the tables (JSON in TEXT columns).
func TestSQLStoreSchema(t *testing.T) {
	ctx := context.Background()
	db, path := tempDB(t)
	clock := newClock()
	s := openSQLStore(t, db, clock.Now)
	it := newItem(t, refundSchema(t), clock.Now(), "s1")
	if _, err := s.Decide(ctx, it, approval.Verdict{Outcome: approval.Rejected, Reviewer: "carol", Note: "too much"}); err != nil {
		t.Fatal(err)
	}
	before := dumpTables(t, db)
	openSQLStore(t, db, clock.Now)
	if diff := cmp.Diff(before, dumpTables(t, db)); diff != "" {
		t.Errorf("reopening changed the tables:\n%s", diff)
	}
	if _, err := db.Exec(`INSERT INTO approval_schema (version) VALUES (?)`, approval.SchemaVersion+1); err != nil {
		t.Fatal(err)
	}
	if _, err := approval.OpenSQLStore(ctx, db, nil); !errors.Is(err, approval.ErrSchemaVersion) {
		t.Errorf("open with a newer schema: %v, want ErrSchemaVersion", err)
	}

	shell, err := exec.LookPath("sqlite3")
	if err != nil {
		t.Skip("no sqlite3 shell")
	}
	out, err := exec.Command(shell, path, `SELECT id, outcome, reviewer, note, json_extract(request, '$.tool'), json_extract(request, '$.args.amount'), decided_at FROM approval_decisions`).CombinedOutput()
	if err != nil {
		t.Fatalf("sqlite3: %v: %s", err, out)
	}
	want := "s1|rejected|carol|too much|refund|40|2026-03-02T09:00:00.000000000Z\n"
	if diff := cmp.Diff(want, string(out)); diff != "" {
		t.Errorf("sqlite3 output (-want +got):\n%s", diff)
	}
}

// TestOpenSQLStoreWaitsForNoWriter: opening a store whose tables are
// current writes nothing, so it does not wait for another connection's
// write transaction (the CLI listing approvals while the application
// writes).
func TestOpenSQLStoreWaitsForNoWriter(t *testing.T) {
	db, path := tempDB(t)
	if _, err := approval.OpenSQLStore(context.Background(), db, nil); err != nil {
		t.Fatal(err)
	}
	writer := openDB(t, path)
	tx, err := writer.BeginTx(context.Background(), nil) // IMMEDIATE: holds the write lock
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	// Generous: an open that waited for the writer would wait until the
	// end of the test (the lock is held until then), or fail with BUSY.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := approval.OpenSQLStore(ctx, db, nil); err != nil {
		t.Fatalf("open while a writer holds the lock: %v (after %v)", err, time.Since(start))
	}
}

// TestEditReportsEveryProblem (issue 17): an edit that fails the tool's
// schema in several places is refused with every problem at its path, in
// path order (Error.Problems), the first few named in the message, and
// nothing is recorded. Before, only the first problem was reported.
func TestEditReportsEveryProblem(t *testing.T) {
	schema := refundSchema(t)
	args := json.RawMessage(`{"amount":"forty","note":1,"to":"x","zz":2}`) // order missing
	want := []approval.ArgsProblem{
		{Path: "$.amount", Reason: "want an integer, got a string"},
		{Path: "$.note", Reason: "unknown field"},
		{Path: "$.order", Reason: "required field is missing"},
		{Path: "$.to", Reason: "unknown field"},
		{Path: "$.zz", Reason: "unknown field"},
	}
	for _, k := range storeKinds {
		t.Run(k.name, func(t *testing.T) {
			ctx := context.Background()
			clock := newClock()
			s, dump := k.open(t, clock.Now)
			it := newItem(t, schema, clock.Now(), "p1")
			before := dump("p1")
			_, err := s.Decide(ctx, it, approval.Verdict{Outcome: approval.Edited, Reviewer: "alice", Args: args})
			var ae *approval.Error
			if !errors.Is(err, approval.ErrInvalidArgs) || !errors.As(err, &ae) {
				t.Fatalf("Decide: %v, want an *approval.Error matching ErrInvalidArgs", err)
			}
			if d := cmp.Diff(want, ae.Problems); d != "" {
				t.Errorf("Problems (-want +got):\n%s", d)
			}
			for _, p := range want[:3] {
				if !strings.Contains(err.Error(), p.Path+": "+p.Reason) {
					t.Errorf("the message does not name %s: %v", p.Path, err)
				}
			}
			if !strings.Contains(err.Error(), "and 2 more") {
				t.Errorf("the message does not count the others: %v", err)
			}
			if d := cmp.Diff(before, dump("p1")); d != "" {
				t.Errorf("state changed (-before +after):\n%s", d)
			}
		})
	}
}

// TestCheckEditIsTheStoresRule: Request.CheckEdit refuses what a store's
// Decide refuses for an edit, with the same typed error and problems, and
// accepts what it records (canonical form); Editable says which requests
// take an edit at all.
func TestCheckEditIsTheStoresRule(t *testing.T) {
	schema := refundSchema(t)
	now := epoch
	for _, tc := range []struct {
		name     string
		kind     approval.Kind
		noSchema bool
		args     string
		problems int // -1: refused without problems; 0: accepted
	}{
		{"a valid edit", approval.KindGate, false, `{"order":"o", "amount":1}`, 0},
		{"a fallback's edit", approval.KindFallback, false, `{"amount":1,"order":"o"}`, 0},
		{"an outcome-unknown request", approval.KindOutcomeUnknown, false, `{"amount":1,"order":"o"}`, -1},
		{"no schema", approval.KindGate, true, `{"amount":1,"order":"o"}`, -1},
		{"two problems", approval.KindGate, false, `{"amount":10000,"order":"o","to":"x"}`, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			it := newItem(t, schema, now, "p1")
			it.Request.Kind = tc.kind
			if tc.kind == approval.KindFallback {
				it.Request.FallbackFor = "card"
			}
			if tc.noSchema {
				it.Request.Schema = nil
			}
			if want := tc.kind != approval.KindOutcomeUnknown && !tc.noSchema; it.Request.Editable() != want {
				t.Errorf("Editable() = %v, want %v", !want, want)
			}
			got, err := it.Request.CheckEdit(it.ID, json.RawMessage(tc.args))
			s := approval.NewMemoryStore(func() time.Time { return now })
			_, derr := s.Decide(context.Background(), it, approval.Verdict{Outcome: approval.Edited, Reviewer: "alice", Args: json.RawMessage(tc.args)})
			if tc.problems == 0 {
				if err != nil || derr != nil || string(got) != `{"amount":1,"order":"o"}` {
					t.Fatalf("CheckEdit = %s, %v; Decide: %v; want both to accept it, canonical", got, err, derr)
				}
				return
			}
			var ae, de *approval.Error
			if !errors.As(err, &ae) || !errors.Is(err, approval.ErrInvalidArgs) || !errors.As(derr, &de) || !errors.Is(derr, approval.ErrInvalidArgs) {
				t.Fatalf("CheckEdit: %v; Decide: %v; want both ErrInvalidArgs", err, derr)
			}
			if want := max(tc.problems, 0); len(ae.Problems) != want || !cmp.Equal(ae.Problems, de.Problems) || ae.Reason != de.Reason {
				t.Errorf("CheckEdit's problems %+v (%q), Decide's %+v (%q); want the same %d", ae.Problems, ae.Reason, de.Problems, de.Reason, want)
			}
		})
	}
}
