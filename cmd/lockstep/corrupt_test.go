package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
)

// execDB runs statements on the database file at db, as an operator with
// the sqlite3 shell would, through the saver (which keeps the file's WAL
// settings).
func execDB(t *testing.T, db string, stmts ...string) {
	t.Helper()
	s, err := sqlite.Open(db, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, q := range stmts {
		res, err := s.DB().ExecContext(context.Background(), q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		if n, _ := res.RowsAffected(); n == 0 && !strings.HasPrefix(q, "ALTER") {
			t.Fatalf("%s changed nothing", q)
		}
	}
}

// kindOf returns the kind of the one JSON error document a command
// printed.
func kindOf(t *testing.T, got result) string {
	t.Helper()
	checkOneJSON(t, got.stdout)
	return errorKind(t, got.stdout)
}

// TestCorruptRowsKind (issue 17): a stored row that does not verify is a
// failure of kind corrupt (exit 1), whichever store it belongs to: a
// checkpoint whose checksum does not match (state, history), and an
// approval decision copied, with its checksum, onto another approval
// (approvals, state, approve). Nothing is recorded on it. Before, a
// checkpoint's was kind internal, and the copied decision was read as the
// other approval's.
func TestCorruptRowsKind(t *testing.T) {
	f := buildFixture(t)

	t.Run("checkpoint", func(t *testing.T) {
		db := f.copyDB(t)
		execDB(t, db, `UPDATE checkpoints SET channels = json_set(channels, '$.Source.value', 'tampered')
			WHERE thread_id = '`+threadFailed+`' AND json_extract(channels, '$.Source') IS NOT NULL`)
		for _, args := range [][]string{{"state", threadFailed, "--json"}, {"history", threadFailed, "--json"}, {"graph", threadFailed, "--json"}} {
			got := cli(db, cliNow(), args...)
			if kind := kindOf(t, got); got.code != exitInternal || kind != kindCorrupt {
				t.Errorf("%v: exit %d kind %q, want %d %q (%s)", args, got.code, kind, exitInternal, kindCorrupt, got.stderr)
			}
		}
		// threads lists the others, and the thread as unreadable with the
		// kind of its error.
		got := cli(db, cliNow(), "threads", "--json")
		var out threadsJSON
		if err := json.Unmarshal([]byte(got.stdout), &out); err != nil {
			t.Fatalf("threads --json: %v\n%s", err, got.stdout)
		}
		var kinds []string
		for _, r := range out.Threads {
			if r.Status == statusUnreadable {
				kinds = append(kinds, r.Thread+" "+r.ErrorKind)
			}
		}
		if want := []string{threadFailed + " " + kindCorrupt}; got.code != exitInternal || !slices.Equal(kinds, want) || !strings.Contains(got.stderr, "does not verify") {
			t.Errorf("threads: exit %d, unreadable %q, want %d and %q (%s)", got.code, kinds, exitInternal, want, got.stderr)
		}
		got = cli(db, cliNow(), "threads")
		if got.code != exitInternal || !strings.Contains(got.stderr, "does not verify") {
			t.Errorf("threads: exit %d (%s)", got.code, got.stderr)
		}
	})

	// A stored topology that is not what its fingerprint names: graph
	// (which draws it) and state (which names it) say corrupt.
	t.Run("topology", func(t *testing.T) {
		db := f.copyDB(t)
		execDB(t, db, `UPDATE topologies SET topology = replace(topology, '"execute"', '"exfiltrate"')`)
		for _, args := range [][]string{{"graph", threadRefund, "--json"}, {"state", threadRefund, "--json"}} {
			got := cli(db, cliNow(), args...)
			if kind := kindOf(t, got); got.code != exitInternal || kind != kindCorrupt {
				t.Errorf("%v: exit %d kind %q, want %d %q (%s)", args, got.code, kind, exitInternal, kindCorrupt, got.stderr)
			}
		}
	})

	t.Run("approval", func(t *testing.T) {
		db := f.copyDB(t)
		if got := cli(db, cliNow(), "approve", f.refundID, "--reviewer", "alice"); got.code != exitOK {
			t.Fatalf("approve: %v", got)
		}
		// The refund's decision copied, with its checksum, onto the email's
		// approval: it would decide a request nobody decided.
		execDB(t, db, `INSERT INTO approval_decisions (id, thread, checkpoint, tool, owner, outcome, reviewer, note, args, args_hash, decided_at, request,
			resumed_at, resume_note, resume_attempts, resume_error, resume_not_before, crc, resume_crc)
			SELECT '`+f.emailID+`', '`+threadEmail+`', checkpoint, tool, owner, outcome, reviewer, note, args, args_hash, decided_at, request,
			resumed_at, resume_note, resume_attempts, resume_error, resume_not_before, crc, resume_crc FROM approval_decisions WHERE id = '`+f.refundID+`'`)
		before := dumpDecisions(t, db)
		for _, args := range [][]string{
			{"approvals", "--json"},
			{"state", threadEmail, "--json"},
			{"approve", f.emailID, "--reviewer", "bob", "--json"},
			{"reject", f.emailID, "--reviewer", "bob", "--json"},
		} {
			got := cli(db, cliNow(), args...)
			if kind := kindOf(t, got); got.code != exitInternal || kind != kindCorrupt || !strings.Contains(got.stderr, f.emailID) {
				t.Errorf("%v: exit %d kind %q, want %d %q and the approval named (%s)", args, got.code, kind, exitInternal, kindCorrupt, got.stderr)
			}
		}
		if after := dumpDecisions(t, db); after != before {
			t.Errorf("the commands wrote on the corrupt decisions:\n%s\n%s", before, after)
		}
	})

	// Approval tables an older lockstep wrote are refused, not upgraded:
	// the program still running that version would write rows without
	// checksums into them.
	t.Run("older approval tables", func(t *testing.T) {
		db := f.copyDB(t)
		if got := cli(db, cliNow(), "approve", f.refundID, "--reviewer", "alice"); got.code != exitOK {
			t.Fatalf("approve: %v", got)
		}
		execDB(t, db,
			`ALTER TABLE approval_decisions DROP COLUMN crc`,
			`ALTER TABLE approval_decisions DROP COLUMN resume_crc`,
			`ALTER TABLE approval_executions DROP COLUMN crc`,
			`DELETE FROM approval_schema WHERE version > 1`)
		old, err := os.ReadFile(db)
		if err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{{"approvals", "--json"}, {"state", threadRefund, "--json"}, {"approve", f.emailID, "--reviewer", "bob", "--json"}} {
			got := cli(db, cliNow(), args...)
			if kind := kindOf(t, got); got.code != exitInternal || kind != kindNoDatabase || !strings.Contains(got.stderr, "older lockstep") {
				t.Errorf("%v: exit %d kind %q, want %d %q (%s)", args, got.code, kind, exitInternal, kindNoDatabase, got.stderr)
			}
		}
		if now, err := os.ReadFile(db); err != nil || !bytes.Equal(old, now) {
			t.Errorf("the refused commands changed the file (%v)", err)
		}
	})
}

// dumpDecisions renders the approval decisions of the database at db.
func dumpDecisions(t *testing.T, db string) string {
	t.Helper()
	conn, err := sql.Open("sqlite3", "file:"+db+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rows, err := conn.Query(`SELECT id, outcome, reviewer, coalesce(resumed_at, ''), resume_not_before, resume_attempts, crc, resume_crc FROM approval_decisions ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var id, outcome, reviewer, resumed, notBefore string
		var attempts, crc, rcrc int64
		if err := rows.Scan(&id, &outcome, &reviewer, &resumed, &notBefore, &attempts, &crc, &rcrc); err != nil {
			t.Fatal(err)
		}
		b.WriteString(strings.Join([]string{id, outcome, reviewer, resumed, notBefore}, "|"))
		b.WriteString("\n")
	}
	return b.String()
}
