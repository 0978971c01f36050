package reviewweb_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	_ "github.com/mattn/go-sqlite3"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/approval/reviewweb"
)

// TestCorruptDecision (issue 16, item 3; issue 17): a decision row copied,
// with its checksum, onto another waiting approval of the same call is
// reported by the API and the pages with code corrupt (500) naming that
// approval, never read as its decision; nothing is recorded.
func TestCorruptDecision(t *testing.T) {
	f := newFixture(t)
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(t.TempDir(), "a.db")+"?_journal_mode=WAL&_busy_timeout=5000&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	store, err := approval.OpenSQLStore(context.Background(), db, f.clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(t, f, func(o *reviewweb.Options) { o.Store = store })
	a := f.start(t, "a", defaultCall())
	b := f.start(t, "b", defaultCall())
	c := s.client(t, "rita")
	if resp, body := c.decide(a, `{"outcome":"approved"}`); resp.StatusCode != 200 {
		t.Fatalf("approve a: %d %s", resp.StatusCode, body)
	}
	if _, err := db.Exec(`INSERT INTO approval_decisions (id, thread, checkpoint, tool, owner, outcome, reviewer, note, args, args_hash, decided_at, request,
		resumed_at, resume_note, resume_attempts, resume_error, resume_not_before, crc, resume_crc)
		SELECT ?, 'b', checkpoint, tool, owner, outcome, reviewer, note, args, args_hash, decided_at, request,
		resumed_at, resume_note, resume_attempts, resume_error, resume_not_before, crc, resume_crc FROM approval_decisions WHERE id = ?`, b, a); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		do   func() (int, string)
	}{
		{"list", func() (int, string) { r, body := c.do("GET", "/api/v1/approvals", "", nil); return r.StatusCode, body }},
		{"get", func() (int, string) {
			r, body := c.do("GET", "/api/v1/approvals/"+b, "", nil)
			return r.StatusCode, body
		}},
		{"decide", func() (int, string) { r, body := c.decide(b, `{"outcome":"rejected"}`); return r.StatusCode, body }},
		{"page", func() (int, string) { r, body := c.do("GET", "/approvals/"+b, "", nil); return r.StatusCode, body }},
	} {
		code, body := tc.do()
		if code != 500 || !strings.Contains(body, b) || !strings.Contains(body, "does not verify") {
			t.Errorf("%s: %d %s; want 500 naming approval %s", tc.name, code, body, b)
		}
		if tc.name == "page" {
			continue
		}
		var doc struct {
			Error struct{ Code string } `json:"error"`
		}
		if err := jsonUnmarshal(body, &doc); err != nil || doc.Error.Code != "corrupt" {
			t.Errorf("%s: %s (%v); want code corrupt", tc.name, body, err)
		}
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM approval_decisions`).Scan(&n); err != nil || n != 2 {
		t.Errorf("%d decisions (%v), want the two rows as they were", n, err)
	}
}
