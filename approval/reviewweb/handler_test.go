package reviewweb_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/approval/reviewweb"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
)

// errorBody is the JSON of a refusal.
type errorBody struct {
	Error struct {
		Code     string             `json:"code"`
		Message  string             `json:"message"`
		Winner   *approval.Decision `json:"winner"`
		Problems []reviewweb.Problem
	} `json:"error"`
}

func decodeError(t *testing.T, body string) errorBody {
	t.Helper()
	var e errorBody
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("not an error body: %v\n%s", err, body)
	}
	return e
}

func wantStatus(t *testing.T, what string, resp *http.Response, body string, status int, code string) {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("%s: status %d, want %d\n%.600s", what, resp.StatusCode, status, body)
	}
	if code != "" && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if got := decodeError(t, body).Error.Code; got != code {
			t.Fatalf("%s: error code %q, want %q\n%.600s", what, got, code, body)
		}
	}
}

// decided returns the decision the store holds for id, or nil.
func (f *fixture) decided(t *testing.T, id string) *approval.Decision {
	t.Helper()
	rec, err := f.store.Get(context.Background(), id)
	if err != nil {
		return nil
	}
	return &rec.Decision
}

// TestListPage: the pending list, soonest expiry first, with every filter
// and paging, in the page and the API alike.
func TestList(t *testing.T) {
	f := newFixture(t)
	long := defaultCall()
	long.TTL = 5 * time.Hour
	idLong := f.start(t, "t-long", long)
	soon := defaultCall()
	soon.TTL = 10 * time.Minute
	soon.Tool = "refund"
	soon.Risk = approval.RiskHigh
	soon.Owner = "payments"
	idSoon := f.start(t, "t-soon", soon)
	mid := defaultCall()
	mid.TTL = time.Hour
	idMid := f.start(t, "t-mid", mid)
	s := newServer(t, f, nil)
	c := s.client(t, "priya@example.com")

	ids := func(q string) ([]string, string) {
		t.Helper()
		resp, body := c.do("GET", "/api/v1/approvals"+q, "", nil)
		wantStatus(t, "list "+q, resp, body, 200, "")
		var out struct {
			Approvals []struct{ ID string }
			Next      string `json:"next_cursor"`
		}
		json.Unmarshal([]byte(body), &out)
		var got []string
		for _, a := range out.Approvals {
			got = append(got, a.ID)
		}
		return got, out.Next
	}
	for _, tc := range []struct {
		q    string
		want []string
	}{
		{"", []string{idSoon, idMid, idLong}},
		{"?tool=book_hotel", []string{idMid, idLong}},
		{"?owner=payments", []string{idSoon}},
		{"?thread=t-mid", []string{idMid}},
		{"?risk=high", []string{idSoon}},
		{"?risk=medium", []string{idMid, idLong}},
		{"?expiring_within=2h", []string{idSoon, idMid}},
		{"?expiring_within=1d", []string{idSoon, idMid, idLong}},
	} {
		got, _ := ids(tc.q)
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("list%s = %v, want %v", tc.q, got, tc.want)
		}
	}
	// Paging: two pages of two and one.
	p1, next := ids("?limit=2")
	p2, last := ids("?limit=2&cursor=" + url.QueryEscape(next))
	if strings.Join(append(p1, p2...), ",") != strings.Join([]string{idSoon, idMid, idLong}, ",") || next == "" || last != "" {
		t.Errorf("pages %v (next %q) then %v (next %q)", p1, next, p2, last)
	}
	for _, q := range []string{"?risk=extreme", "?limit=0", "?limit=501", "?expiring_within=soon", "?expiring_within=-1h", "?cursor=nope", "?tool=" + strings.Repeat("x", approval.MaxFilterBytes+1)} {
		resp, body := c.do("GET", "/api/v1/approvals"+q, "", nil)
		wantStatus(t, "list "+q, resp, body, 400, "invalid_filter")
		resp, body = c.do("GET", "/"+q, "", nil)
		wantStatus(t, "page "+q, resp, body, 400, "")
	}
	// The page shows the same rows, in the same order, with the tool, the
	// tier, the summary, the thread, the age and the time left.
	resp, body := c.do("GET", "/", "", nil)
	wantStatus(t, "list page", resp, body, 200, "")
	iSoon, iMid, iLong := strings.Index(body, `data-id="`+idSoon), strings.Index(body, `data-id="`+idMid), strings.Index(body, `data-id="`+idLong)
	if iSoon < 0 || iSoon > iMid || iMid > iLong {
		t.Errorf("the page does not list soonest expiry first (%d %d %d)", iSoon, iMid, iLong)
	}
	for _, want := range []string{"refund", "risk-high", `{&#34;hotel&#34;:&#34;Palácio Suites&#34;,&#34;nights&#34;:4,&#34;total_eur&#34;:1520}`, "t-soon", "10m left", "5h00m left"} {
		if !strings.Contains(body, want) {
			t.Errorf("the list page lacks %q", want)
		}
	}
	// The fragment the live page asks for is the rows alone.
	resp, body = c.do("GET", "/?fragment=rows&tool=refund", "", nil)
	if resp.StatusCode != 200 || strings.Contains(body, "<html") || !strings.Contains(body, idSoon) || strings.Contains(body, idMid) {
		t.Errorf("rows fragment: %d\n%s", resp.StatusCode, body)
	}
}

// TestApprovalPage: an approval's page and its API read: pending,
// decided (with its audit trail), expired, and unknown.
func TestApprovalPage(t *testing.T) {
	f := newFixture(t)
	id := f.start(t, "hotel-porto-ana", defaultCall())
	s := newServer(t, f, nil)
	c := s.client(t, "priya@example.com")

	resp, body := c.do("GET", "/approvals/"+id, "", nil)
	wantStatus(t, "pending page", resp, body, 200, "")
	for _, want := range []string{
		"book_hotel", "Palácio Suites quotes 1520 EUR for 4 nights, above the 1000 EUR limit.",
		"&#34;total_eur&#34;: 1520", // formatted JSON
		"&#34;guest&#34;: &#34;Ana Lima&#34;", "price_over_1000_eur", "travel-desk", "1h00m left",
		`class="node waiting"`, "gate</bdi>: waiting", "prepare</bdi>: done", // graph and history
		`name="csrf" value="`, `value="approve"`, `value="reject"`, `value="edit"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the pending page lacks %q", want)
		}
	}
	resp, body = c.do("GET", "/api/v1/approvals/"+id, "", nil)
	wantStatus(t, "pending api", resp, body, 200, "")
	var got struct {
		State      string
		Node       string
		MayDecide  bool `json:"may_decide"`
		ThreadView struct {
			History []struct{ Status string }
			Waiting string `json:"waiting_node"`
		} `json:"thread_view"`
	}
	json.Unmarshal([]byte(body), &got)
	if got.State != "pending" || got.Node != "gate" || !got.MayDecide || got.ThreadView.Waiting != "gate" || len(got.ThreadView.History) != 3 || got.ThreadView.History[0].Status != "waiting" {
		t.Errorf("pending api = %+v", got)
	}

	resp, body = c.decide(id, `{"outcome":"approved","note":"within policy"}`)
	wantStatus(t, "approve", resp, body, 200, "")
	resp, body = c.do("GET", "/approvals/"+id, "", nil)
	wantStatus(t, "decided page", resp, body, 200, "")
	for _, want := range []string{"Approved", "priya@example.com", "within policy", "Audit trail", "not yet: a process running the approval worker"} {
		if !strings.Contains(body, want) {
			t.Errorf("the decided page lacks %q", want)
		}
	}
	if strings.Contains(body, `value="approve"`) {
		t.Error("the decided page still offers to approve")
	}
	_, body = c.do("GET", "/api/v1/approvals/"+id, "", nil)
	if !strings.Contains(body, `"state": "approved"`) || !strings.Contains(body, `"audit"`) {
		t.Errorf("decided api:\n%s", body)
	}

	// Expired and undecided: readable, not approvable.
	id2 := f.start(t, "t-expiring", defaultCall())
	f.clock.Add(2 * time.Hour)
	resp, body = c.do("GET", "/approvals/"+id2, "", nil)
	wantStatus(t, "expired page", resp, body, 200, "")
	if !strings.Contains(body, "can no longer be approved") || strings.Contains(body, `value="approve"`) {
		t.Errorf("the expired page:\n%.2000s", body)
	}

	for _, p := range []string{"/approvals/nope", "/api/v1/approvals/nope"} {
		resp, body := c.do("GET", p, "", nil)
		wantStatus(t, p, resp, body, 404, "not_found")
	}
	resp, body = c.do("GET", "/no/such/page", "", nil)
	wantStatus(t, "unknown page", resp, body, 404, "")
}

// TestDecideStatuses: every status the decision API answers, and that a
// refusal records nothing.
func TestDecideStatuses(t *testing.T) {
	f := newFixture(t)
	s := newServer(t, f, func(o *reviewweb.Options) {
		o.Policy = reviewweb.Grants{{Groups: []string{"travel-desk"}, MaxRisk: approval.RiskMedium}, {Reviewers: []string{"ana@example.com"}}}
	})
	priya := s.client(t, "priya@example.com")
	priya.user = "priya@example.com"
	desk := func(name string) *client {
		c := s.client(t, "")
		c.user = name
		resp, body := c.doGroups("GET", "/api/v1/session")
		var sess struct {
			CSRF string `json:"csrf_token"`
		}
		json.Unmarshal([]byte(body), &sess)
		if resp.StatusCode != 200 {
			t.Fatalf("session: %d %s", resp.StatusCode, body)
		}
		c.csrf, c.groups = sess.CSRF, "travel-desk"
		return c
	}
	bob, carol := desk("bob@example.com"), desk("carol@example.com")
	ana := s.client(t, "ana@example.com") // the requester

	id := f.start(t, "t1", defaultCall())
	const approve = `{"outcome":"approved"}`

	// 401: nobody.
	anon := s.client(t, "")
	resp, body := anon.decide(id, approve)
	wantStatus(t, "anonymous", resp, body, 401, "unauthenticated")
	resp, body = anon.do("GET", "/api/v1/approvals", "", nil)
	wantStatus(t, "anonymous list", resp, body, 401, "unauthenticated")
	resp, body = anon.do("GET", "/", "", nil)
	wantStatus(t, "anonymous page", resp, body, 401, "")

	// 403: no grant; the requester approving; a missing, wrong or
	// cross-site token.
	resp, body = priya.decide(id, approve)
	wantStatus(t, "no grant", resp, body, 403, "forbidden")
	resp, body = ana.decide(id, approve)
	wantStatus(t, "self-approval", resp, body, 403, "self_approval")
	resp, body = ana.decide(id, `{"outcome":"edited","args":{"hotel":"x","nights":1,"total_eur":1}}`)
	wantStatus(t, "self-edit", resp, body, 403, "self_approval")
	saved := bob.csrf
	bob.csrf = ""
	resp, body = bob.decide(id, approve)
	wantStatus(t, "no token", resp, body, 403, "csrf")
	bob.csrf = carol.csrf
	resp, body = bob.decide(id, approve)
	wantStatus(t, "another reviewer's token", resp, body, 403, "csrf")
	bob.csrf = saved
	resp, body = bob.do("POST", "/api/v1/approvals/"+id+"/decision", approve, map[string]string{"Content-Type": "application/json",
		"X-CSRF-Token": bob.csrf, "Sec-Fetch-Site": "cross-site", "X-Test-Groups": "travel-desk"})
	wantStatus(t, "cross-site", resp, body, 403, "cross_origin")
	resp, body = bob.do("POST", "/api/v1/approvals/"+id+"/decision", approve, map[string]string{"Content-Type": "application/json",
		"X-CSRF-Token": bob.csrf, "Origin": "https://evil.example", "X-Test-Groups": "travel-desk"})
	wantStatus(t, "foreign origin", resp, body, 403, "cross_origin")

	// 400, 415, 422, 413: malformed, wrong type, invalid, too large.
	for _, tc := range []struct {
		body, ctype string
		status      int
		code        string
	}{
		{`{"outcome":"approved"`, "application/json", 400, "bad_request"},
		{`{"outcome":"approved","outcome":"rejected"}`, "application/json", 400, "bad_request"},
		{`{"outcome":"approved","reviewer":"system:expiry"}`, "application/json", 400, "bad_request"},
		{approve, "text/plain", 415, "unsupported_media_type"},
		{`{"outcome":"APPROVE"}`, "application/json", 422, "invalid_decision"},
		{`{"outcome":"approved","args":{"a":1}}`, "application/json", 422, "invalid_decision"},
		{`{"outcome":"approved","note":"` + strings.Repeat("n", approval.MaxNoteBytes+1) + `"}`, "application/json", 422, "invalid_decision"},
		{`{"outcome":"edited","args":{"hotel":"","nights":0,"extra":true}}`, "application/json", 422, "invalid_args"},
		{`{"outcome":"edited","args":{"hotel":"` + strings.Repeat("h", approval.MaxArgsBytes) + `","nights":1,"total_eur":1}}`, "application/json", 422, "invalid_args"},
		{`{"outcome":"approved","note":"` + strings.Repeat("n", 2<<20) + `"}`, "application/json", 413, "too_large"},
	} {
		resp, body := bob.do("POST", "/api/v1/approvals/"+id+"/decision", tc.body, map[string]string{"Content-Type": tc.ctype, "X-CSRF-Token": bob.csrf, "X-Test-Groups": "travel-desk"})
		wantStatus(t, tc.body[:min(len(tc.body), 60)], resp, body, tc.status, tc.code)
	}
	// The invalid edit names every problem at its path.
	_, body = bob.decideG(id, `{"outcome":"edited","args":{"hotel":"","nights":0,"extra":true}}`)
	e := decodeError(t, body)
	var paths []string
	for _, p := range e.Error.Problems {
		paths = append(paths, p.Path)
	}
	if strings.Join(paths, " ") != "$.extra $.hotel $.nights $.total_eur" {
		t.Errorf("invalid edit problems = %+v", e.Error.Problems)
	}
	if d := f.decided(t, id); d != nil {
		t.Fatalf("a refused decision was recorded: %+v", d)
	}

	// A dry run diffs an edit and records nothing.
	resp, body = bob.decideG(id, `{"outcome":"edited","args":{"hotel":"Casa do Rio","nights":4,"total_eur":380},"dry_run":true}`)
	wantStatus(t, "dry run", resp, body, 200, "")
	if !strings.Contains(body, `"recorded": false`) || !strings.Contains(body, `"path": "$.hotel"`) || f.decided(t, id) != nil {
		t.Errorf("dry run:\n%s", body)
	}

	// 200 then 409 with the winner.
	resp, body = bob.decideG(id, approve)
	wantStatus(t, "approve", resp, body, 200, "")
	resp, body = carol.decideG(id, `{"outcome":"rejected","note":"too late"}`)
	wantStatus(t, "loser", resp, body, 409, "already_decided")
	if w := decodeError(t, body).Error.Winner; w == nil || w.Reviewer != "bob@example.com" || w.Outcome != approval.Approved {
		t.Errorf("the loser was not told the winner: %s", body)
	}
	if d := f.decided(t, id); d == nil || d.Reviewer != "bob@example.com" {
		t.Errorf("recorded %+v, want bob's approval", d)
	}

	// The requester may reject (withdraw) their own call.
	id2 := f.start(t, "t2", defaultCall())
	resp, body = ana.decide(id2, `{"outcome":"rejected","note":"never mind"}`)
	wantStatus(t, "requester rejects", resp, body, 200, "")

	// 410: expired before anyone decided, and expired by the sweeper.
	id3 := f.start(t, "t3", defaultCall())
	id4 := f.start(t, "t4", defaultCall())
	f.clock.Add(2 * time.Hour)
	resp, body = bob.decideG(id3, approve)
	wantStatus(t, "expired", resp, body, 410, "expired")
	if _, err := approval.NewInbox(f.saver, f.store).Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	resp, body = bob.decideG(id4, approve)
	wantStatus(t, "swept", resp, body, 410, "expired")
	if w := decodeError(t, body).Error.Winner; w == nil || w.Outcome != approval.Expired {
		t.Errorf("swept: winner %+v", w)
	}

	// 422 invalid_request: a stored request that can never be decided
	// (here, a risk tier no lockstep writes); nothing is recorded.
	bad := defaultCall()
	bad.Risk = "catastrophic"
	id5 := f.start(t, "t5", bad)
	resp, body = ana.decide(id5, `{"outcome":"rejected"}`)
	wantStatus(t, "undecidable request", resp, body, 422, "invalid_request")
	if d := f.decided(t, id5); d != nil {
		t.Errorf("a decision was recorded on an undecidable request: %+v", d)
	}

	// 404.
	resp, body = bob.decideG("nope", approve)
	wantStatus(t, "unknown", resp, body, 404, "not_found")
}

// TestDecideForm: the decision form works without JavaScript: approve,
// the edit's check (a diff) and confirmation, an invalid edit that shows
// every problem and records nothing, and the loser shown the winner.
func TestDecideForm(t *testing.T) {
	f := newFixture(t)
	s := newServer(t, f, nil)
	bob := s.client(t, "bob@example.com")
	carol := s.client(t, "carol@example.com")

	id := f.start(t, "t1", defaultCall())
	resp, body := bob.form(id, url.Values{"action": {"approve"}, "note": {"ok"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/approvals/"+id {
		t.Fatalf("approve form: %d %s\n%s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	resp, body = carol.form(id, url.Values{"action": {"reject"}})
	wantStatus(t, "loser form", resp, body, 409, "")
	if !strings.Contains(body, "already approved by &#34;bob@example.com&#34;") || !strings.Contains(body, "Winner:") {
		t.Errorf("the loser's page does not name the winner:\n%.3000s", body)
	}
	if _, err := approval.NewInbox(f.saver, f.store).Get(context.Background(), id); err == nil {
		t.Error("the approval is still pending")
	}

	id2 := f.start(t, "t2", defaultCall())
	resp, body = bob.form(id2, url.Values{"action": {"edit"}, "args": {`{"hotel":"","nights":40}`}})
	wantStatus(t, "invalid edit form", resp, body, 422, "")
	for _, want := range []string{"$.hotel", "$.nights", "$.total_eur", "want at most 30, got 40", "required field is missing", `{&#34;hotel&#34;:&#34;&#34;,&#34;nights&#34;:40}`} {
		if !strings.Contains(body, want) {
			t.Errorf("the invalid edit page lacks %q", want)
		}
	}
	if f.decided(t, id2) != nil {
		t.Fatal("an invalid edit was recorded")
	}
	resp, body = bob.form(id2, url.Values{"action": {"edit"}, "args": {`{"hotel":"Casa do Rio","nights":4,"total_eur":380}`}, "note": {"cheaper"}})
	wantStatus(t, "edit check", resp, body, 200, "")
	for _, want := range []string{"Check the edit", "$.hotel", "&#34;Palácio Suites&#34;", "&#34;Casa do Rio&#34;", `value="confirm"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the edit check lacks %q", want)
		}
	}
	if f.decided(t, id2) != nil {
		t.Fatal("checking an edit recorded it")
	}
	resp, body = bob.form(id2, url.Values{"action": {"confirm"}, "args": {`{"hotel":"Casa do Rio","nights":4,"total_eur":380}`}, "note": {"cheaper"}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("confirm: %d\n%s", resp.StatusCode, body)
	}
	d := f.decided(t, id2)
	if d == nil || d.Outcome != approval.Edited || string(d.Args) != `{"hotel":"Casa do Rio","nights":4,"total_eur":380}` {
		t.Fatalf("recorded %+v", d)
	}
	// The run resumes with the edit, and runs the edited call.
	if _, err := f.run.Resume(context.Background(), "t2", graph.Command[tstate]{ResumeByID: map[string]any{id2: *d}}); err != nil {
		t.Fatal(err)
	}
	if snap, _ := f.run.GetState(context.Background(), "t2"); string(snap.Values.RanArgs) != string(d.Args) || f.ranCount("t2") != 1 {
		t.Errorf("ran %s %d times", snap.Values.RanArgs, f.ranCount("t2"))
	}
	_, body = bob.do("GET", "/approvals/"+id2, "", nil)
	if !strings.Contains(body, "Approved with edited arguments") || !strings.Contains(body, "&#34;Casa do Rio&#34;") {
		t.Errorf("the edited page:\n%.3000s", body)
	}

	// Without the token the form is refused and records nothing.
	id3 := f.start(t, "t3", defaultCall())
	resp, body = bob.form(id3, url.Values{"action": {"approve"}, "csrf": {"forged"}})
	wantStatus(t, "forged token", resp, body, 403, "")
	if f.decided(t, id3) != nil {
		t.Fatal("a forged form was recorded")
	}
	resp, body = bob.form(id3, url.Values{"action": {"launch"}})
	wantStatus(t, "unknown action", resp, body, 422, "")
	resp, body = bob.form(id3, url.Values{"action": {"approve"}, "note": {"a"}, "x": {"1", "2"}})
	wantStatus(t, "repeated field", resp, body, 400, "")
}

// TestSecurityHeaders: every response carries the strict CSP and its
// companions, and the embedded assets are served.
func TestSecurityHeaders(t *testing.T) {
	f := newFixture(t)
	id := f.start(t, "t1", defaultCall())
	s := newServer(t, f, nil)
	c := s.client(t, "bob@example.com")
	for _, p := range []string{"/", "/approvals/" + id, "/api/v1/approvals", "/static/app.css", "/static/app.js", "/nope", "/login"} {
		resp, body := c.do("GET", p, "", nil)
		h := resp.Header
		if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") ||
			!strings.Contains(csp, "frame-ancestors 'none'") || strings.Contains(csp, "unsafe") {
			t.Errorf("%s: CSP %q", p, csp)
		}
		if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s: headers %v", p, h)
		}
		if strings.HasPrefix(p, "/static/") && (resp.StatusCode != 200 || len(body) < 100) {
			t.Errorf("%s: %d, %d bytes", p, resp.StatusCode, len(body))
		}
		if strings.Contains(body, "<script>") || strings.Contains(body, " style=") || strings.Contains(body, "<style") || strings.Contains(body, "onclick") {
			t.Errorf("%s has inline script or style", p)
		}
	}
}

// listerOnly is a saver that lists interrupts but keeps no topologies.
type listerOnly struct {
	checkpoint.Saver
	checkpoint.InterruptLister
}

// TestGraphFromTheStore: by default the approval page draws the topology
// the thread's head was saved under, as the graph stored it in the saver
// (every node and edge, the one to END included, not just the steps
// that ran), with the waiting node marked; on a saver that keeps no
// topologies it draws the steps the checkpoints show and says so; an
// Options.Graph given by the application wins.
func TestGraphFromTheStore(t *testing.T) {
	f := newFixture(t)
	id := f.start(t, "t-graph", defaultCall())
	type view struct {
		ThreadView struct {
			Graph struct {
				Nodes []string
				Edges []struct {
					From, To    string
					Conditional bool
				}
			}
			FromRuns bool   `json:"graph_from_checkpoints"`
			Waiting  string `json:"waiting_node"`
		} `json:"thread_view"`
	}
	read := func(t *testing.T, mod func(o *reviewweb.Options)) (view, string) {
		t.Helper()
		c := newServer(t, f, mod).client(t, "priya@example.com")
		resp, body := c.do("GET", "/api/v1/approvals/"+id, "", nil)
		wantStatus(t, "api", resp, body, 200, "")
		var v view
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Fatal(err)
		}
		_, page := c.do("GET", "/approvals/"+id, "", nil)
		return v, page
	}
	type edge = struct {
		From, To    string
		Conditional bool
	}
	stored, page := read(t, nil)
	wantEdges := []edge{{From: graph.START, To: "prepare"}, {From: "gate", To: graph.END}, {From: "prepare", To: "gate"}}
	if d := cmp.Diff([]string{"gate", "prepare"}, stored.ThreadView.Graph.Nodes); d != "" || stored.ThreadView.FromRuns {
		t.Errorf("default drawing: nodes (-want +got):\n%s, from checkpoints %v", d, stored.ThreadView.FromRuns)
	}
	if d := cmp.Diff(wantEdges, stored.ThreadView.Graph.Edges); d != "" {
		t.Errorf("default drawing: edges (-want +got):\n%s", d)
	}
	if !strings.Contains(page, "The thread's graph.") || !strings.Contains(page, `<g class="node waiting"><title>gate</title>`) {
		t.Errorf("the page does not draw the stored graph with gate waiting")
	}

	runs, page := read(t, func(o *reviewweb.Options) { o.Saver = listerOnly{f.saver, f.saver} })
	if !runs.ThreadView.FromRuns || slices.Contains(runs.ThreadView.Graph.Edges, edge{From: "gate", To: graph.END}) {
		t.Errorf("on a saver without topologies: %+v, want the steps the checkpoints show", runs.ThreadView)
	}
	if !strings.Contains(page, "Drawn from the thread's stored checkpoints") {
		t.Error("the page does not say the drawing comes from the checkpoints")
	}

	other := graph.Topology{Name: "other", Nodes: []string{"gate", "solo"}, Edges: []graph.Edge{{From: graph.START, To: "solo"}, {From: "solo", To: "gate"}}}
	given, _ := read(t, func(o *reviewweb.Options) { o.Graph = reviewweb.StaticGraph(other) })
	if d := cmp.Diff([]string{"gate", "solo"}, given.ThreadView.Graph.Nodes); d != "" || given.ThreadView.FromRuns {
		t.Errorf("Options.Graph: nodes (-want +got):\n%s", d)
	}
}

// TestOptionsOutOfRangeRefused: a negative PollInterval, TokenTTL or
// SessionTTL is refused with an error matching approval.ErrInvalidConfig
// instead of being replaced by the default, as are the other invalid
// Options of New.
func TestOptionsOutOfRangeRefused(t *testing.T) {
	f := newFixture(t)
	valid := func() reviewweb.Options {
		return reviewweb.Options{Saver: f.saver, Store: f.store, Auth: newLocalToken(t, reviewweb.LocalTokenOptions{}), Policy: reviewweb.AnyReviewer()}
	}
	for _, tc := range []struct {
		name string
		edit func(o *reviewweb.Options)
	}{
		{"negative poll interval", func(o *reviewweb.Options) { o.PollInterval = -time.Second }},
		{"no store", func(o *reviewweb.Options) { o.Store = nil }},
		{"short secret", func(o *reviewweb.Options) { o.Secret = []byte("short") }},
		{"bad prefix", func(o *reviewweb.Options) { o.Prefix = "review/" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := valid()
			tc.edit(&o)
			if h, err := reviewweb.New(o); !errors.Is(err, approval.ErrInvalidConfig) {
				if h != nil {
					h.Close()
				}
				t.Errorf("New: %v, want ErrInvalidConfig", err)
			}
		})
	}
	for _, o := range []reviewweb.LocalTokenOptions{{TokenTTL: -time.Minute}, {SessionTTL: -time.Hour}} {
		if lt, err := reviewweb.NewLocalToken(o); lt != nil || !errors.Is(err, approval.ErrInvalidConfig) {
			t.Errorf("NewLocalToken(%+v) = %v, %v; want ErrInvalidConfig", o, lt, err)
		}
	}
}

// TestOutcomeUnknownPage: an approval of kind outcome_unknown (an earlier
// attempt of the call may already have taken effect) says so plainly on
// its page, above the model's rationale, which was written before that
// attempt; it offers no edit, an edit through the API is refused with 422
// and records nothing, and it can still be approved or rejected.
func TestOutcomeUnknownPage(t *testing.T) {
	f := newFixture(t)
	c := defaultCall()
	c.Kind = approval.KindOutcomeUnknown
	id := f.start(t, "unknown-outcome", c)
	s := newServer(t, f, nil)
	bob := s.client(t, "bob@example.com")

	resp, body := bob.do("GET", "/approvals/"+id, "", nil)
	wantStatus(t, "page", resp, body, 200, "")
	warn := strings.Index(body, "The write may already have happened.")
	why := strings.Index(body, "Palácio Suites quotes 1520 EUR")
	if warn < 0 || why >= 0 && why < warn {
		t.Errorf("the page does not say first that the write may already have happened (warning at %d, rationale at %d)", warn, why)
	}
	if strings.Contains(body, `value="edit"`) {
		t.Error("the page offers to edit an outcome-unknown request")
	}
	resp, body = bob.decide(id, `{"outcome":"edited","args":{"hotel":"Casa do Rio","nights":4,"total_eur":380}}`)
	wantStatus(t, "edit", resp, body, 422, "invalid_args")
	if d := f.decided(t, id); d != nil {
		t.Fatalf("a refused edit was recorded: %+v", d)
	}
	resp, body = bob.decide(id, `{"outcome":"approved","note":"checked: no booking downstream"}`)
	wantStatus(t, "approve", resp, body, 200, "")
	if d := f.decided(t, id); d == nil || d.Outcome != approval.Approved {
		t.Errorf("recorded %+v, want bob's approval", d)
	}
}
