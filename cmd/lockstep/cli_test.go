package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/graph"
)

// TestReadCommands runs every reading subcommand on a database of real
// runs, with the clock pinned, and compares its output (table and JSON)
// with the golden files. Reading changes nothing in the database: not a
// row, and no approval tables appear.
func TestReadCommands(t *testing.T) {
	f := buildFixture(t)
	db := f.copyDB(t)
	updated := threadUpdates(t, db)
	var newest time.Time
	for _, u := range updated {
		if u.After(newest) {
			newest = u
		}
	}
	// The saver stamps updates with the wall clock; the threads command
	// is run 3m12s after the newest one.
	threadsNow := newest.Add(3*time.Minute + 12*time.Second)
	now := cliNow()
	expired := t0().Add(10*time.Minute + refundTTL) // the refund request's ExpiresAt
	before := dump(t, db)
	checkDumpFull(t, before)

	cases := []struct {
		name string
		now  time.Time
		args []string
	}{
		{"help", now, []string{"help"}},
		{"help-flag", now, []string{"-h"}},
		{"help-approve", now, []string{"help", "approve"}},
		{"help-help", now, []string{"help", "help"}},
		{"approve-h", now, []string{"approve", "-h"}},
		{"threads", threadsNow, []string{"threads"}},
		{"threads-json", threadsNow, []string{"--json", "threads"}},
		{"threads-limit", threadsNow, []string{"threads", "--limit", "2"}},
		{"threads-limit-json", threadsNow, []string{"threads", "--limit", "2", "--json"}},
		{"state-done", now, []string{"state", threadDone}},
		{"state-done-json", now, []string{"state", threadDone, "--json"}},
		{"state-refund", now, []string{"state", threadRefund}},
		{"state-refund-json", now, []string{"--json", "state", threadRefund}},
		{"state-refund-expired", expired, []string{"state", threadRefund}},
		{"state-refund-older", now, []string{"state", "--checkpoint", f.refundInput, threadRefund}},
		{"state-failed", now, []string{"state", threadFailed}},
		{"state-failed-json", now, []string{"state", threadFailed, "--json"}},
		{"state-pending", now, []string{"state", threadPending}},
		{"state-pending-json", now, []string{"state", threadPending, "--json"}},
		{"state-breakpoint", now, []string{"state", threadBreakpoint}},
		{"state-breakpoint-json", now, []string{"state", threadBreakpoint, "--json"}},
		{"history", now, []string{"history", threadDone}},
		{"history-json", now, []string{"history", threadDone, "--json"}},
		{"history-limit", now, []string{"history", threadDone, "--limit", "2"}},
		{"history-values", now, []string{"history", threadRefund, "--values"}},
		{"history-values-json", now, []string{"history", "--values", "--limit", "1", "--json", threadRefund}},
		{"approvals", now, []string{"approvals"}},
		{"approvals-json", now, []string{"approvals", "--json"}},
		{"approvals-tool", now, []string{"approvals", "--tool", "send_email"}},
		{"approvals-owner", now, []string{"approvals", "--owner", "payments"}},
		{"approvals-thread", now, []string{"approvals", "--thread", threadEmail}},
		{"approvals-older-than", now, []string{"approvals", "--older-than", "45m"}},
		{"approvals-expiring-within", now, []string{"approvals", "--expiring-within", "1h"}},
		{"approvals-days", now, []string{"approvals", "--expiring-within", "1d"}},
		{"approvals-none", now, []string{"approvals", "--owner", "nobody"}},
		{"approvals-none-json", now, []string{"approvals", "--owner", "nobody", "--json"}},
		{"approvals-expired-hidden", expired, []string{"approvals"}},
		{"graph-done", now, []string{"graph", threadDone}},
		{"graph-refund", now, []string{"graph", threadRefund}},
		{"graph-refund-json", now, []string{"--json", "graph", threadRefund}},
		{"graph-refund-older", now, []string{"graph", threadRefund, "--checkpoint", f.refundInput}},
		{"graph-breakpoint", now, []string{"graph", threadBreakpoint}},
		{"graph-breakpoint-json", now, []string{"graph", threadBreakpoint, "--json"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := cli(db, tc.now, tc.args...)
			if got.code != exitOK {
				t.Errorf("exit %d, want 0; stderr: %s", got.code, got.stderr)
			}
			if slices.Contains(tc.args, "--json") {
				checkOneJSON(t, got.stdout)
			}
			checkGolden(t, tc.name, got, goldenData{db: db, now: threadsNow, updated: updated})
		})
	}
	if diff := cmp.Diff(before, dump(t, db)); diff != "" {
		t.Errorf("reading changed the database (-before +after):\n%s", diff)
	}
}

// TestApprovalsPaging pages through the pending approvals one at a time
// with the cursor each page prints.
func TestApprovalsPaging(t *testing.T) {
	f := buildFixture(t)
	db := f.copyDB(t)
	var ids []string
	cursor := ""
	for range 3 {
		args := []string{"approvals", "--json", "--limit", "1"}
		if cursor != "" {
			args = append(args, "--cursor", cursor)
		}
		got := cli(db, cliNow(), args...)
		if got.code != exitOK {
			t.Fatalf("%v: exit %d: %s", args, got.code, got.stderr)
		}
		var page approvalsJSON
		if err := json.Unmarshal([]byte(got.stdout), &page); err != nil {
			t.Fatal(err)
		}
		for _, a := range page.Approvals {
			ids = append(ids, a.ID)
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	if diff := cmp.Diff([]string{f.refundID, f.emailID}, ids); diff != "" {
		t.Errorf("approvals paged oldest first (-want +got):\n%s", diff)
	}
	// The table prints the command for the next page.
	got := cli(db, cliNow(), "approvals", "--limit", "1", "--owner", "payments", "--expiring-within", "2d")
	if !strings.Contains(got.stdout, "next page: lockstep approvals --owner payments --expiring-within 48h0m0s --limit 1 --cursor c1.") {
		t.Errorf("page 1 does not say how to get page 2:\n%s", got.stdout)
	}
}

// TestDecisions records decisions with approve (as is, and edited) and
// reject, checks the output and the stored decision, and shows that the
// thread is not resumed until approval.Worker runs; the worker then runs
// exactly the decided call.
func TestDecisions(t *testing.T) {
	f := buildFixture(t)
	decidedAt := cliNow()
	cases := []struct {
		name       string
		args       []string
		wantResult string // the refund thread's Result once the worker resumed it
		want       approval.Decision
	}{
		{"approve", []string{"approve", f.refundID, "--reviewer", "alice", "--note", "lost parcels are refunded"},
			`ran refund {"amount":40,"order":"A-7"}`,
			approval.Decision{Outcome: approval.Approved, Reviewer: "alice", Note: "lost parcels are refunded"}},
		{"approve-json", []string{"--json", "approve", f.refundID, "--reviewer", "alice"},
			`ran refund {"amount":40,"order":"A-7"}`,
			approval.Decision{Outcome: approval.Approved, Reviewer: "alice"}},
		{"approve-edit", []string{"approve", f.refundID, "--reviewer", "alice", "--args", `{"order": "A-7", "amount": 30}`, "--note", "partial refund"},
			`ran refund {"amount":30,"order":"A-7"}`,
			approval.Decision{Outcome: approval.Edited, Reviewer: "alice", Note: "partial refund", Args: json.RawMessage(`{"amount":30,"order":"A-7"}`)}},
		{"reject", []string{"reject", f.refundID, "--reviewer", "bob", "--note", "refund the customer in store instead"},
			"not run: rejected by bob: refund the customer in store instead",
			approval.Decision{Outcome: approval.Rejected, Reviewer: "bob", Note: "refund the customer in store instead"}},
		{"reject-json", []string{"reject", f.refundID, "--reviewer", "bob", "--json"},
			"not run: rejected by bob: ",
			approval.Decision{Outcome: approval.Rejected, Reviewer: "bob"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			db := f.copyDB(t)
			got := cli(db, decidedAt, tc.args...)
			if got.code != exitOK {
				t.Fatalf("exit %d: %s", got.code, got.stderr)
			}
			if slices.Contains(tc.args, "--json") {
				checkOneJSON(t, got.stdout)
			}
			checkGolden(t, "decide-"+tc.name, got, goldenData{db: db})

			s, err := sqlite.Open(db, sqlite.Config{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			clock := func() time.Time { return decidedAt.Add(time.Minute) }
			store, err := approval.OpenSQLStore(ctx, s.DB(), clock)
			if err != nil {
				t.Fatal(err)
			}
			rec, err := store.Get(ctx, f.refundID)
			if err != nil {
				t.Fatal(err)
			}
			want := tc.want
			want.ID, want.DecidedAt = f.refundID, decidedAt
			if want.Outcome == approval.Edited {
				want.ArgsHash, _ = approval.ArgsHash("refund", want.Args)
			} else {
				want.ArgsHash = rec.Request.ArgsHash
			}
			if diff := cmp.Diff(want, rec.Decision); diff != "" {
				t.Errorf("stored decision (-want +got):\n%s", diff)
			}
			if rec.Thread != threadRefund || rec.Request.Tool != "refund" || rec.Request.Owner != "payments" {
				t.Errorf("decision record names thread %q, tool %q, owner %q", rec.Thread, rec.Request.Tool, rec.Request.Owner)
			}

			// Not resumed: the thread still waits on the approval.
			st := cli(db, decidedAt, "state", threadRefund, "--json")
			var before stateJSON
			if err := json.Unmarshal([]byte(st.stdout), &before); err != nil {
				t.Fatal(err)
			}
			if before.Status != "waiting" || len(before.Interrupts) != 1 || before.Interrupts[0].Approval.Decision == nil {
				t.Fatalf("after %s: status %s, interrupts %+v; want waiting on the decided approval", tc.name, before.Status, before.Interrupts)
			}
			if !strings.Contains(before.Hint, "approval.Worker") {
				t.Errorf("hint %q does not point to approval.Worker", before.Hint)
			}

			// The worker resumes it with the recorded decision.
			g := newGraphEnv(s)
			g.now.Store(clock().UnixNano())
			r, err := gatedGraph(g.clock, refundTTL).Compile(g.options()...)
			if err != nil {
				t.Fatal(err)
			}
			w, err := approval.NewWorker(store, approval.ResumeGraph(r), approval.WorkerOptions{})
			if err != nil {
				t.Fatal(err)
			}
			rep, err := w.RunOnce(ctx)
			if err != nil || rep.Resumed != 1 {
				t.Fatalf("worker: %+v, %v; want 1 resumed", rep, err)
			}
			snap, err := r.GetState(ctx, threadRefund)
			if err != nil {
				t.Fatal(err)
			}
			if snap.Status != graph.StatusDone || snap.Values.Result != tc.wantResult {
				t.Errorf("after the worker: %s with result %q; want done with %q", snap.Status, snap.Values.Result, tc.wantResult)
			}
			if got := cli(db, decidedAt, "approvals", "--thread", threadRefund); got.stdout != "no pending approvals\n" {
				t.Errorf("approvals after the decision:\n%s", got.stdout)
			}
		})
	}
}

// TestRefusals gives bad input to every command: each gets a clear
// message, the documented exit code and, with --json, one JSON error
// document; none changes a row of the database, except that a decision
// arriving after the request expired records the expiry (and nothing
// else).
func TestRefusals(t *testing.T) {
	f := buildFixture(t)
	now := cliNow()
	expired := t0().Add(10*time.Minute + refundTTL)
	approveAlice := [][]string{{"approve", f.refundID, "--reviewer", "alice", "--note", "ok"}}
	cases := []struct {
		name  string
		now   time.Time
		prior [][]string // commands run first (their changes are not checked)
		args  []string
		code  int
	}{
		{"unknown-command", now, nil, []string{"frobnicate"}, exitUsage},
		{"unknown-command-json", now, nil, []string{"--json", "frobnicate"}, exitUsage},
		{"no-command", now, nil, nil, exitUsage},
		{"unknown-flag", now, nil, []string{"threads", "--colour"}, exitUsage},
		{"bad-global-flag", now, nil, []string{"--dbx", "x", "threads"}, exitUsage},
		{"missing-thread-arg", now, nil, []string{"state"}, exitUsage},
		{"extra-arg", now, nil, []string{"threads", "extra"}, exitUsage},
		{"help-unknown", now, nil, []string{"help", "frobnicate"}, exitUsage},
		{"bad-limit", now, nil, []string{"threads", "--limit", "-1"}, exitUsage},
		{"unknown-thread", now, nil, []string{"state", "no-such-thread"}, exitNotFound},
		{"unknown-thread-json", now, nil, []string{"state", "no-such-thread", "--json"}, exitNotFound},
		{"unknown-thread-history", now, nil, []string{"history", "no-such-thread"}, exitNotFound},
		{"empty-thread", now, nil, []string{"state", ""}, exitUsage},
		{"unknown-checkpoint", now, nil, []string{"state", threadRefund, "--checkpoint", "no-such-checkpoint"}, exitNotFound},
		{"unknown-graph", now, nil, []string{"graph", "hotel"}, exitNotFound},
		{"graph-no-thread", now, nil, []string{"graph"}, exitUsage},
		{"graph-unknown-checkpoint", now, nil, []string{"graph", threadRefund, "--checkpoint", "nope"}, exitNotFound},
		{"approvals-bad-limit", now, nil, []string{"approvals", "--limit", "-1"}, exitUsage},
		{"approvals-bad-duration", now, nil, []string{"approvals", "--older-than", "soon"}, exitUsage},
		{"approvals-bad-cursor", now, nil, []string{"approvals", "--cursor", "nonsense"}, exitUsage},
		{"unknown-approval", now, nil, []string{"approve", "0123456789abcdef0123456789abcdef", "--reviewer", "alice"}, exitNotFound},
		{"unknown-approval-reject", now, nil, []string{"reject", "nope", "--reviewer", "alice"}, exitNotFound},
		{"unknown-approval-json", now, nil, []string{"approve", "nope", "--reviewer", "alice", "--json"}, exitNotFound},
		{"expired", expired, nil, []string{"approve", f.refundID, "--reviewer", "alice"}, exitRefused},
		{"expired-reject", expired, nil, []string{"reject", f.refundID, "--reviewer", "alice"}, exitRefused},
		{"expired-json", expired, nil, []string{"approve", f.refundID, "--reviewer", "alice", "--json"}, exitRefused},
		{"expired-edit", expired, nil, []string{"approve", f.refundID, "--reviewer", "alice", "--args", `{"order":"A-7","amount":30}`}, exitRefused},
		{"approve-twice", now, approveAlice, []string{"approve", f.refundID, "--reviewer", "bob"}, exitRefused},
		{"reject-after-approve", now, approveAlice, []string{"reject", f.refundID, "--reviewer", "bob", "--note", "no"}, exitRefused},
		{"approve-twice-json", now, approveAlice, []string{"approve", f.refundID, "--reviewer", "bob", "--json"}, exitRefused},
		{"malformed-args", now, nil, []string{"approve", f.refundID, "--reviewer", "alice", "--args", `{"order": "A-7", amount: 30}`}, exitUsage},
		{"malformed-args-json", now, nil, []string{"approve", f.refundID, "--reviewer", "alice", "--args", `{"order"`, "--json"}, exitUsage},
		{"args-over-maximum", now, nil, []string{"approve", f.refundID, "--reviewer", "alice", "--args", `{"order":"A-7","amount":500}`}, exitRefused},
		{"args-extra-field", now, nil, []string{"approve", f.refundID, "--reviewer", "alice", "--args", `{"order":"A-7","amount":30,"to":"me"}`}, exitRefused},
		{"args-every-problem", now, nil, []string{"approve", f.refundID, "--reviewer", "alice", "--args", `{"amount":"30","to":"me"}`}, exitRefused},
		{"args-every-problem-json", now, nil, []string{"approve", f.refundID, "--reviewer", "alice", "--json", "--args", `{"amount":"30","to":"me"}`}, exitRefused},
		{"args-wrong-type", now, nil, []string{"approve", f.refundID, "--reviewer", "alice", "--args", `{"order":"A-7","amount":"30"}`}, exitRefused},
		{"args-json", now, nil, []string{"approve", f.refundID, "--reviewer", "alice", "--args", `{"order":"A-7"}`, "--json"}, exitRefused},
		{"missing-reviewer", now, nil, []string{"approve", f.refundID}, exitUsage},
		{"blank-reviewer", now, nil, []string{"reject", f.refundID, "--reviewer", "  "}, exitUsage},
		{"system-reviewer", now, nil, []string{"approve", f.refundID, "--reviewer", "system:expiry"}, exitRefused},
		{"reject-with-args", now, nil, []string{"reject", f.refundID, "--reviewer", "alice", "--args", `{}`}, exitUsage},
		{"dash-id", now, nil, []string{"approve", "--reviewer", "alice", "--", "--args"}, exitNotFound},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			db := f.copyDB(t)
			for _, p := range tc.prior {
				if got := cli(db, tc.now, p...); got.code != exitOK {
					t.Fatalf("prior %v: exit %d: %s", p, got.code, got.stderr)
				}
			}
			before := dump(t, db)
			got := cli(db, tc.now, tc.args...)
			if got.code != tc.code {
				t.Errorf("exit %d, want %d", got.code, tc.code)
			}
			lines := strings.Split(strings.TrimSuffix(got.stderr, "\n"), "\n")
			if last := lines[len(lines)-1]; !strings.HasPrefix(last, "lockstep: ") || !strings.HasSuffix(got.stderr, "\n") {
				t.Errorf("stderr does not end with a lockstep message: %q", got.stderr)
			}
			if slices.Contains(tc.args, "--json") {
				checkOneJSON(t, got.stdout)
				var doc jsonError
				if err := json.Unmarshal([]byte(got.stdout), &doc); err != nil || doc.Error.ExitCode != tc.code || doc.Error.Message == "" {
					t.Errorf("JSON error %+v (%v), want exit_code %d and a message", doc, err, tc.code)
				}
			} else if tc.name != "no-command" && got.stdout != "" {
				t.Errorf("stdout of a failure is not empty:\n%s", got.stdout)
			}
			checkGolden(t, "refuse-"+tc.name, got, goldenData{db: db})
			if strings.HasPrefix(tc.name, "expired") {
				// The late decision recorded the expiry, and only that.
				if d := expiryOf(t, db, f.refundID); d == nil || d.Outcome != approval.Expired || d.Reviewer != approval.ExpiryReviewer || !d.DecidedAt.Equal(tc.now) {
					t.Errorf("after a late decision the approval's decision is %+v, want the expiry recorded at %v", d, tc.now)
				}
				return
			}
			if diff := cmp.Diff(before, dump(t, db)); diff != "" {
				t.Errorf("a refused command changed the database (-before +after):\n%s", diff)
			}
		})
	}
}

// TestDatabaseFile: reading never creates a database, and a file that is
// not a lockstep database is refused without being touched.
func TestDatabaseFile(t *testing.T) {
	dir := t.TempDir()
	notDB := filepath.Join(dir, "notes.txt")
	text := []byte("these are not the tables you are looking for\n")
	if err := os.WriteFile(notDB, text, 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.db")
	// Other files that are SQLite but not this lockstep's, in a directory
	// of their own (SQLite may put -wal and -shm files beside them).
	other := t.TempDir()
	appDB := filepath.Join(other, "app.db")
	db, err := sql.Open("sqlite3", appDB)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT)", "INSERT INTO orders (item) VALUES ('tea')"} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	oldDB := filepath.Join(other, "old.db")
	schema1, err := os.ReadFile(filepath.Join("..", "..", "checkpoint", "sqlite", "testdata", "schema1.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(oldDB, schema1, 0o600); err != nil {
		t.Fatal(err)
	}
	kept := map[string][]byte{}
	for _, p := range []string{appDB, oldDB} {
		if kept[p], err = os.ReadFile(p); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name string
		db   string
		args []string
		want string // stderr
	}{
		{"missing", missing, []string{"threads"}, "lockstep: no database at " + missing + ": run an example first or pass --db PATH\n"},
		{"missing-approve", missing, []string{"approve", "x", "--reviewer", "alice"}, "lockstep: no database at " + missing + ": run an example first or pass --db PATH\n"},
		{"directory", dir, []string{"approvals"}, "lockstep: " + dir + " is a directory, not a database file: run an example first or pass --db PATH\n"},
		{"empty", empty, []string{"state", "t"}, "lockstep: " + empty + " is empty, not a lockstep database: run an example first or pass --db PATH\n"},
		{"not-sqlite", notDB, []string{"history", "t"}, "lockstep: " + notDB + " is not a SQLite database: run an example first or pass --db PATH\n"},
		{"app-threads", appDB, []string{"threads"}, "lockstep: " + appDB + " is not a lockstep database (it has none of lockstep's tables; it was not modified): run an example first or pass --db PATH\n"},
		{"app-approve", appDB, []string{"approve", "x", "--reviewer", "alice"}, "lockstep: " + appDB + " is not a lockstep database (it has none of lockstep's tables; it was not modified): run an example first or pass --db PATH\n"},
		{"older", oldDB, []string{"approvals"}, "lockstep: " + oldDB + " was written by an older lockstep (it was not modified): open it once with the program that uses it, which upgrades it, or with this version's library\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := cli(tc.db, cliNow(), tc.args...)
			want := result{code: exitInternal, stderr: tc.want}
			if diff := cmp.Diff(want, got, cmp.AllowUnexported(result{})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			got = cli(tc.db, cliNow(), append(tc.args, "--json")...)
			checkOneJSON(t, got.stdout)
			if !strings.Contains(got.stdout, `"kind": "no_database"`) {
				t.Errorf("JSON error does not say no_database:\n%s", got.stdout)
			}
		})
	}
	for p, want := range kept {
		if b, err := os.ReadFile(p); err != nil || !bytes.Equal(b, want) {
			t.Errorf("%s changed (%v)", p, err)
		}
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("the missing database was created (stat: %v)", err)
	}
	for _, p := range []string{notDB, empty} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[string][]byte{notDB: text, empty: nil}[p]; string(b) != string(want) {
			t.Errorf("%s changed: %q", p, b)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if diff := cmp.Diff([]string{"empty.db", "notes.txt"}, names); diff != "" {
		t.Errorf("files in the directory (-want +got):\n%s", diff)
	}
}

// TestCorruptThread: a thread whose stored data does not verify is listed
// as unreadable among the others (exit 1, still one JSON document), and
// state on it says so.
func TestCorruptThread(t *testing.T) {
	f := buildFixture(t)
	db := f.copyDB(t)
	func() {
		s, err := sqlite.Open(db, sqlite.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		// The saver's schema (checkpoints.channels: the channels a
		// checkpoint wrote, as JSON, the row checksummed) is written down
		// in checkpoint/sqlite; if it changes, change this statement.
		res, err := s.DB().ExecContext(context.Background(), `UPDATE checkpoints SET channels = json_set(channels, '$.Source.value', 'tampered')
WHERE thread_id = ? AND json_extract(channels, '$.Source') IS NOT NULL`, threadFailed)
		if err != nil {
			t.Fatalf("corrupt a stored value (did the saver's schema change?): %v", err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			t.Fatalf("corrupted %d stored values, want 1 (did the saver's schema change?)", n)
		}
	}()
	got := cli(db, cliNow(), "threads", "--json")
	if got.code != exitInternal {
		t.Errorf("threads: exit %d, want %d", got.code, exitInternal)
	}
	checkOneJSON(t, got.stdout)
	var out threadsJSON
	if err := json.Unmarshal([]byte(got.stdout), &out); err != nil {
		t.Fatal(err)
	}
	status := map[string]string{}
	for _, th := range out.Threads {
		status[th.Thread] = th.Status
		if th.Status == statusUnreadable && th.Error == "" {
			t.Errorf("%s is unreadable without an error", th.Thread)
		}
	}
	want := map[string]string{threadDone: "done", threadRefund: "waiting", threadEmail: "waiting", threadFailed: statusUnreadable,
		threadPending: "pending", threadBreakpoint: "waiting"}
	if diff := cmp.Diff(want, status); diff != "" {
		t.Errorf("statuses (-want +got):\n%s", diff)
	}
	if !strings.Contains(got.stderr, "1 thread(s) could not be read") {
		t.Errorf("stderr: %q", got.stderr)
	}
	got = cli(db, cliNow(), "state", threadFailed)
	if got.code != exitInternal || !strings.Contains(got.stderr, "the stored data does not verify") || got.stdout != "" {
		t.Errorf("state of the corrupt thread: %v", got)
	}
	// history prints nothing of a thread it cannot read whole: no table
	// rows before the error, and with --json only the error document.
	got = cli(db, cliNow(), "history", threadFailed, "--values")
	if got.code != exitInternal || !strings.Contains(got.stderr, "the stored data does not verify") || got.stdout != "" {
		t.Errorf("history of the corrupt thread: %v", got)
	}
	got = cli(db, cliNow(), "history", threadFailed, "--values", "--json")
	if got.code != exitInternal || strings.Contains(got.stdout, `"checkpoints"`) {
		t.Errorf("history --json of the corrupt thread: %v", got)
	}
	checkOneJSON(t, got.stdout)
}

// expiryOf returns the decision recorded for approval id in the database
// at db, or nil when there is none.
func expiryOf(t *testing.T, db, id string) *approval.Decision {
	t.Helper()
	ctx := context.Background()
	s, err := sqlite.Open(db, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	store, err := approval.OpenSQLStore(ctx, s.DB(), nil)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := store.Get(ctx, id)
	if errors.Is(err, approval.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return &rec.Decision
}

// TestExpirySeenStaysExpired: once the CLI has seen a request expired (a
// late approve, reject or edit, the approvals listing, state), the
// expiry is recorded, and when the clock then steps back before the
// deadline (an NTP step) no approve gets through: it is refused as
// already expired, and the worker would give the agent the rejection.
func TestExpirySeenStaysExpired(t *testing.T) {
	f := buildFixture(t)
	now := cliNow()
	expired := t0().Add(10*time.Minute + refundTTL)
	observers := []struct {
		name string
		args []string
		code int
	}{
		{"approve", []string{"approve", f.refundID, "--reviewer", "alice"}, exitRefused},
		{"reject", []string{"reject", f.refundID, "--reviewer", "bob"}, exitRefused},
		{"edit", []string{"approve", f.refundID, "--reviewer", "carol", "--args", `{"order":"A-7","amount":30}`}, exitRefused},
		{"approvals", []string{"approvals"}, exitOK},
		{"approvals-json", []string{"approvals", "--json"}, exitOK},
		{"state", []string{"state", threadRefund}, exitOK},
	}
	for _, o := range observers {
		t.Run(o.name, func(t *testing.T) {
			db := f.copyDB(t)
			// The email approval is decided first, so that the approval
			// tables exist, as they do once an application opened its
			// store.
			if got := cli(db, now, "reject", f.emailID, "--reviewer", "dana"); got.code != exitOK {
				t.Fatalf("reject the email: exit %d: %s", got.code, got.stderr)
			}
			if got := cli(db, expired, o.args...); got.code != o.code {
				t.Fatalf("%v at the deadline: exit %d, want %d: %s%s", o.args, got.code, o.code, got.stdout, got.stderr)
			}
			if d := expiryOf(t, db, f.refundID); d == nil || d.Outcome != approval.Expired {
				t.Errorf("after %v saw it expired, the refund's decision is %+v; want the expiry recorded", o.args, d)
			}
			stepped := expired.Add(-time.Hour) // the clock steps back
			got := cli(db, stepped, "--json", "approve", f.refundID, "--reviewer", "alice")
			var doc jsonError
			if err := json.Unmarshal([]byte(got.stdout), &doc); err != nil || got.code != exitRefused || doc.Error.Winner == nil || doc.Error.Winner.Outcome != approval.Expired {
				t.Errorf("approve after the clock stepped back: exit %d, %s; want refused, already expired", got.code, got.stdout)
			}
			if d := expiryOf(t, db, f.refundID); d == nil || d.Outcome != approval.Expired {
				t.Errorf("after the clock stepped back the refund's decision is %+v; want still the expiry", d)
			}
		})
	}
}
