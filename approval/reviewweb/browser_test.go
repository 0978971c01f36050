package reviewweb_test

// End-to-end tests in a real browser: headless Chromium (Debian's
// chromium package, which .ci/run installs when it is missing) driven with
// chromedp. Without chromium they skip, except under CI=true, where they
// fail. Screenshots go to $LOCKSTEP_SCREENSHOTS, or a temporary directory.

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/approval/reviewweb"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/examples/hotelbooking/booking"
	"github.com/lockstepgo/lockstep/graph"
)

// chromium returns the browser's path, skipping the test when there is
// none (failing it under CI=true), and under the race detector: there the
// instrumented server and Chromium share the machine's cores for minutes
// to drive pages whose handlers the handler tests already race, and
// .ci/run runs these tests without it.
func chromium(t testing.TB) string {
	t.Helper()
	if raceEnabled {
		t.Skip("the browser tests skip under the race detector: they run without it (.ci/run's tests step), and the handler tests race the same handlers")
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed, and CI=true: the browser tests must run (apt-get install -y chromium)")
	}
	t.Skip("chromium is not installed: the browser tests are skipped (apt-get install -y chromium)")
	return ""
}

// newBrowser starts a headless Chromium with a fresh profile, closed when
// the test ends, and returns its first tab.
func newBrowser(t testing.TB) context.Context {
	t.Helper()
	path := chromium(t)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
	}
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	tctx, tcancel := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() {
		tcancel()
		chromedp.Cancel(ctx)
		cancel()
		acancel()
	})
	if err := chromedp.Do(tctx, chromedp.EmulateViewport(1100, 900)); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return tctx
}

// shotDir is where the screenshots go.
func shotDir(t testing.TB) string {
	if d := os.Getenv("LOCKSTEP_SCREENSHOTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// shoot saves a screenshot of the whole page as name.png.
func shoot(t testing.TB, ctx context.Context, name string) {
	t.Helper()
	b, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	p := filepath.Join(shotDir(t), name+".png")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", p)
}

// signIn signs the browser in as name with a one-time token of lt.
func signIn(t testing.TB, ctx context.Context, base string, lt *reviewweb.LocalToken, name string) {
	t.Helper()
	tok, err := lt.Issue(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/login?token="+url.QueryEscape(tok)), chromedp.WaitVisible(chromedp.CSS("h1"))); err != nil {
		t.Fatalf("sign in as %s: %v", name, err)
	}
	who, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(".who")))
	if err != nil || !strings.Contains(who, name) {
		t.Fatalf("signed in as %q (%v), want %s", who, err, name)
	}
}

// withoutLiveUpdates makes the tab's pages run as in a browser without
// EventSource: app.js leaves each page as the server rendered it. A test
// that clicks a button on a page that is out of date on purpose (the
// request expired, or another reviewer decided it) needs this: with live
// updates the page replaces its decision section as soon as the server's
// poller sees the change, and the button the test means to click is gone
// (the click then waits for it until the test's deadline, or finds the
// node removed under it: "Could not find node with given id").
func withoutLiveUpdates(t testing.TB, ctx context.Context) {
	t.Helper()
	err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: "delete window.EventSource;"})
		return err
	}))
	if err != nil {
		t.Fatalf("turn off live updates: %v", err)
	}
}

// noLiveUpdates fails the test unless the page has no EventSource (so
// withoutLiveUpdates took).
func noLiveUpdates(t testing.TB, ctx context.Context) {
	t.Helper()
	if ty, err := chromedp.Run(ctx, chromedp.Evaluate[string](`typeof window.EventSource`)); err != nil || ty != "undefined" {
		t.Fatalf("the page still has live updates (EventSource is %q, %v)", ty, err)
	}
}

func text(t testing.TB, ctx context.Context, css string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(css)))
	if err != nil {
		t.Fatalf("text of %s: %v", css, err)
	}
	return s
}

// TestBrowserHotelBooking: a reviewer opens the inbox, sees the hotel
// booking above the limit with its rationale, and approves it; the
// approval worker resumes the thread, and the booking happens exactly
// once. The screenshot of the approval page is docs/inbox.png.
func TestBrowserHotelBooking(t *testing.T) {
	ctx := newBrowser(t)
	db := filepath.Join(t.TempDir(), "lockstep.db")
	bg := context.Background()
	c, err := booking.Run(bg, booking.Config{DB: db})
	if err != nil {
		t.Fatal(err)
	}
	if c.Bookings != 1 {
		t.Fatalf("before the approval: %d bookings, want 1 (the compliance story's)", c.Bookings)
	}
	saver, err := sqlite.Open(db, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer saver.Close()
	store, err := approval.OpenSQLStore(bg, saver.DB(), nil)
	if err != nil {
		t.Fatal(err)
	}
	// No Options.Graph: the page draws the whole graph from the topology
	// the example's run stored in the database.
	lt := newLocalToken(t, reviewweb.LocalTokenOptions{})
	h, err := reviewweb.New(reviewweb.Options{Saver: saver, Store: store, Auth: lt, Policy: reviewweb.AnyReviewer(),
		PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, h)
	signIn(t, ctx, srv, lt, "Tomás Ferreira (travel desk)")

	// The inbox lists the booking; its page shows why and what.
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`tr.approval a`))); err != nil {
		t.Fatal(err)
	}
	if row := text(t, ctx, "tr.approval"); !strings.Contains(row, "book_hotel") || !strings.Contains(row, "1520") || !strings.Contains(row, booking.ThreadApproval) {
		t.Fatalf("the inbox row reads %q", row)
	}
	shoot(t, ctx, "inbox-list")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`tr.approval a`)), chromedp.WaitVisible(chromedp.CSS("#approve"))); err != nil {
		t.Fatal(err)
	}
	if r := text(t, ctx, "blockquote.rationale"); !strings.Contains(r, "above the 1000 EUR limit") {
		t.Errorf("the rationale reads %q", r)
	}
	if a := text(t, ctx, "#args"); !strings.Contains(a, `"total_eur": 1520`) || !strings.Contains(a, `"guest": "Ana Lima"`) {
		t.Errorf("the arguments read %q", a)
	}
	if r := text(t, ctx, "p.rule"); !strings.Contains(r, booking.RulePriceLimit) {
		t.Errorf("the rule reads %q", r)
	}
	if n, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(".node.waiting text"))); err != nil || n != "tools" {
		t.Errorf("the waiting node is %q", n)
	}
	if h := text(t, ctx, "svg.graph ~ p.hint"); !strings.Contains(h, "The thread's graph.") {
		t.Errorf("the graph is not the stored one: the page says %q", h)
	}
	shoot(t, ctx, "inbox")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#approve")), chromedp.WaitVisible(chromedp.CSS("#outcome"))); err != nil {
		t.Fatal(err)
	}
	if o := text(t, ctx, "#outcome"); !strings.Contains(o, "Approved") || !strings.Contains(o, "Tomás Ferreira") {
		t.Errorf("after approving, the page reads %q", o)
	}
	h.Close()

	// The approval worker resumes the thread: the booking happens, once.
	c, err = booking.Run(bg, booking.Config{DB: db, Resume: true})
	if err != nil {
		t.Fatal(err)
	}
	if c.Resumed != 1 || c.Booked != 1 || c.Bookings != 2 {
		t.Errorf("resume: %+v, want 1 resumed, 1 booked, 2 bookings in all", c)
	}
	c, err = booking.Run(bg, booking.Config{DB: db, Resume: true})
	if err != nil {
		t.Fatal(err)
	}
	if c.Resumed != 0 || c.Booked != 0 || c.Bookings != 2 {
		t.Errorf("second resume: %+v, want nothing resumed or booked", c)
	}
	var ana int
	if err := saver.DB().QueryRow(`SELECT count(*) FROM hotel_bookings WHERE guest = 'Ana Lima'`).Scan(&ana); err != nil || ana != 1 {
		t.Errorf("hotel_bookings holds %d rows for Ana Lima (%v), want 1", ana, err)
	}
}

// startServer serves h on a loopback port until the test ends and
// returns its URL.
func startServer(t testing.TB, h *reviewweb.Handler) string {
	t.Helper()
	s := &server{h: h}
	s.srv = newTestServer(h)
	t.Cleanup(func() {
		h.Close()
		s.srv.Close()
	})
	return s.srv.URL
}

// browserFixture is the fixture with a LocalToken handler for browsers.
func browserFixture(t *testing.T) (*fixture, *server, *reviewweb.LocalToken) {
	chromium(t) // first: a skipped test builds no fixture
	f := newFixture(t)
	lt := newLocalToken(t, reviewweb.LocalTokenOptions{Now: f.clock.Now})
	s := newServer(t, f, func(o *reviewweb.Options) { o.Auth = lt })
	return f, s, lt
}

// TestBrowserRace: two browser sessions decide one approval at once: one
// wins, the other is shown the winner, and one decision is recorded. The
// two deciding pages run without live updates, so that both still offer
// their buttons when they click (with them, the loser's page could show
// the winner's decision before its click, and the click find no button).
// The list page of a third changes in place, without a reload.
func TestBrowserRace(t *testing.T) {
	f, s, lt := browserFixture(t)
	id := f.start(t, "race", defaultCall())
	bob, carol, watcher := newBrowser(t), newBrowser(t), newBrowser(t)
	withoutLiveUpdates(t, bob)
	withoutLiveUpdates(t, carol)
	signIn(t, bob, s.srv.URL, lt, "bob")
	signIn(t, carol, s.srv.URL, lt, "carol")
	signIn(t, watcher, s.srv.URL, lt, "dan")
	page := s.srv.URL + "/approvals/" + id
	for _, b := range []context.Context{bob, carol} {
		if err := chromedp.Do(b, chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS("#approve"))); err != nil {
			t.Fatal(err)
		}
		noLiveUpdates(t, b)
	}
	// A new approval appears in the watcher's list without a reload.
	id2 := f.start(t, "race-2", defaultCall())
	if err := chromedp.Do(watcher, chromedp.WaitVisible(chromedp.CSS(`tr[data-id="`+id2+`"]`))); err != nil {
		t.Fatalf("the new approval did not appear: %v", err)
	}

	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, b := range []context.Context{bob, carol} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sel := "#approve"
			if i == 1 {
				sel = "#reject"
			}
			errs[i] = chromedp.Do(b, chromedp.Click(chromedp.CSS(sel)), chromedp.WaitVisible(chromedp.CSS("#outcome, #decision-error")))
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	d := f.decided(t, id)
	if d == nil {
		t.Fatal("nothing was recorded")
	}
	winner, loser := bob, carol
	if d.Reviewer == "carol" {
		winner, loser = carol, bob
	}
	if o := text(t, winner, "#outcome"); !strings.Contains(o, d.Reviewer) {
		t.Errorf("the winner's page reads %q", o)
	}
	msg := text(t, loser, "#decision-error")
	if !strings.Contains(msg, "already "+string(d.Outcome)+` by "`+d.Reviewer+`"`) || !strings.Contains(msg, "Winner") {
		t.Errorf("the loser's page reads %q; want the winner %s", msg, d.Reviewer)
	}
	shoot(t, loser, "race-loser")
	// The watcher's row for the decided one changes in place.
	if err := chromedp.Do(watcher, chromedp.WaitVisible(chromedp.CSS(`tr.state-`+string(d.Outcome)+`[data-id="`+id+`"]`))); err != nil {
		t.Fatalf("the decided row did not change in place: %v", err)
	}
	if o := text(t, watcher, `tr[data-id="`+id+`"] .outcome`); !strings.Contains(o, d.Reviewer) {
		t.Errorf("the watcher's row reads %q", o)
	}
}

// TestBrowserLiveDecision: an approval page open in one browser changes in
// place when the approval is decided elsewhere (the CLI, another process).
func TestBrowserLiveDecision(t *testing.T) {
	f, s, lt := browserFixture(t)
	id := f.start(t, "live", defaultCall())
	b := newBrowser(t)
	signIn(t, b, s.srv.URL, lt, "bob")
	if err := chromedp.Do(b, chromedp.Navigate(s.srv.URL+"/approvals/"+id), chromedp.WaitVisible(chromedp.CSS("#approve"))); err != nil {
		t.Fatal(err)
	}
	if _, err := approval.NewInbox(f.saver, f.store).Reject(context.Background(), id, "carol (CLI)", "not now"); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(b, chromedp.WaitVisible(chromedp.CSS("#outcome"))); err != nil {
		t.Fatalf("the page did not change: %v", err)
	}
	if o := text(t, b, "#outcome"); !strings.Contains(o, "Rejected") || !strings.Contains(o, "carol (CLI)") {
		t.Errorf("the page reads %q", o)
	}
}

// TestBrowserCatchUp: what changes before a page's event stream opens
// (after the page was rendered, or while it reconnects) is shown as soon
// as it opens: here the stream is held back while an approval is decided
// elsewhere and another appears. Before, the pages only learned of
// changes after the stream's first read, and these were never shown.
func TestBrowserCatchUp(t *testing.T) {
	f, s, lt := browserFixture(t)
	decided := f.start(t, "catch-up-1", defaultCall())
	hold := make(chan struct{})
	srv := newTestServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/events" {
			select {
			case <-hold:
			case <-r.Context().Done():
				return
			}
		}
		s.h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	list, page := newBrowser(t), newBrowser(t)
	signIn(t, list, srv.URL, lt, "bob")
	signIn(t, page, srv.URL, lt, "carol")
	if err := chromedp.Do(page, chromedp.Navigate(srv.URL+"/approvals/"+decided), chromedp.WaitVisible(chromedp.CSS("#approve"))); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(list, chromedp.WaitVisible(chromedp.CSS(`tr.state-pending[data-id="`+decided+`"]`))); err != nil {
		t.Fatal(err)
	}
	// While both streams are held: decided elsewhere, and a new one.
	if _, err := approval.NewInbox(f.saver, f.store).Reject(context.Background(), decided, "dan (CLI)", "not now"); err != nil {
		t.Fatal(err)
	}
	added := f.start(t, "catch-up-2", defaultCall())
	close(hold)
	if err := chromedp.Do(page, chromedp.WaitVisible(chromedp.CSS("#outcome"))); err != nil {
		t.Fatalf("the approval page did not show the decision made before its stream opened: %v", err)
	}
	if o := text(t, page, "#outcome"); !strings.Contains(o, "Rejected") || !strings.Contains(o, "dan (CLI)") {
		t.Errorf("the approval page reads %q", o)
	}
	if err := chromedp.Do(list, chromedp.WaitVisible(chromedp.CSS(`tr[data-id="`+added+`"]`)),
		chromedp.WaitVisible(chromedp.CSS(`tr.state-rejected[data-id="`+decided+`"]`))); err != nil {
		t.Fatalf("the list did not show what changed before its stream opened: %v", err)
	}
}

// TestBrowserPhone: on a phone's screen (390 CSS pixels wide, touch) the
// inbox and an approval page need no sideways scrolling, the decision
// buttons are on screen, and the arguments stay whole (long lines scroll
// inside their own box, not the page).
func TestBrowserPhone(t *testing.T) {
	f, s, lt := browserFixture(t)
	long := defaultCall()
	long.Args = json.RawMessage(`{"hotel":"` + strings.Repeat("Palácio Suites Lisboa ", 12) + `","nights":4,"total_eur":1520}`)
	long.Rationale = strings.Repeat("a rationale long enough to wrap on a small screen ", 6)
	id := f.start(t, "phone", long)
	ctx := newBrowser(t)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile, chromedp.EmulateTouch)); err != nil {
		t.Fatal(err)
	}
	signIn(t, ctx, s.srv.URL, lt, "bob")
	fits := func(what string) {
		t.Helper()
		wide, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.documentElement.scrollWidth - window.innerWidth`))
		if err != nil {
			t.Fatal(err)
		}
		if wide > 0 {
			t.Errorf("%s: the page is %d px wider than the screen", what, wide)
		}
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`tr[data-id="`+id+`"]`))); err != nil {
		t.Fatal(err)
	}
	fits("the inbox")
	shoot(t, ctx, "inbox-phone-list")
	if err := chromedp.Do(ctx, chromedp.Navigate(s.srv.URL+"/approvals/"+id), chromedp.WaitVisible(chromedp.CSS("#approve"))); err != nil {
		t.Fatal(err)
	}
	fits("the approval page")
	for _, sel := range []string{"#approve", "#reject"} {
		right, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`document.querySelector("`+sel+`").getBoundingClientRect().right - window.innerWidth`))
		if err != nil {
			t.Fatal(err)
		}
		if right > 0 {
			t.Errorf("%s ends %.0f px right of the screen", sel, right)
		}
	}
	if a := text(t, ctx, "#args"); !strings.Contains(a, strings.Repeat("Palácio Suites Lisboa ", 12)) {
		t.Errorf("the arguments are not shown whole: %q", a)
	}
	shoot(t, ctx, "inbox-phone")
}

// TestBrowserInvalidEdit: an edit that fails the schema shows every
// problem at its field and changes nothing; a valid one is shown as a
// diff before it is confirmed.
func TestBrowserInvalidEdit(t *testing.T) {
	f, s, lt := browserFixture(t)
	id := f.start(t, "edit", defaultCall())
	b := newBrowser(t)
	signIn(t, b, s.srv.URL, lt, "bob")
	err := chromedp.Do(b, chromedp.Navigate(s.srv.URL+"/approvals/"+id),
		chromedp.Click(chromedp.CSS("details.edit summary")),
		chromedp.SetValue(chromedp.CSS("#edit-args"), `{"hotel":"","nights":45,"total_eur":1520,"upgrade":true}`),
		chromedp.Click(chromedp.CSS("#check-edit")),
		chromedp.WaitVisible(chromedp.CSS("#decision-error")))
	if err != nil {
		t.Fatal(err)
	}
	msg := text(t, b, "#decision-error")
	for _, want := range []string{"$.hotel", "$.nights", "want at most 30, got 45", "$.upgrade", "unknown field"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the error lacks %q: %q", want, msg)
		}
	}
	shoot(t, b, "invalid-edit")
	if d := f.decided(t, id); d != nil {
		t.Fatalf("an invalid edit was recorded: %+v", d)
	}
	err = chromedp.Do(b, chromedp.SetValue(chromedp.CSS("#edit-args"), `{"hotel":"Casa do Rio","nights":4,"total_eur":380}`),
		chromedp.Click(chromedp.CSS("#check-edit")), chromedp.WaitVisible(chromedp.CSS("#confirm-edit")))
	if err != nil {
		t.Fatal(err)
	}
	if diff := text(t, b, "table.diff"); !strings.Contains(diff, "$.hotel") || !strings.Contains(diff, `"Casa do Rio"`) || !strings.Contains(diff, "$.total_eur") {
		t.Errorf("the diff reads %q", diff)
	}
	if f.decided(t, id) != nil {
		t.Fatal("checking an edit recorded it")
	}
	if err := chromedp.Do(b, chromedp.Click(chromedp.CSS("#confirm-edit")), chromedp.WaitVisible(chromedp.CSS("#outcome"))); err != nil {
		t.Fatal(err)
	}
	if d := f.decided(t, id); d == nil || d.Outcome != approval.Edited {
		t.Fatalf("recorded %+v, want the edit", d)
	}
}

// TestBrowserHostile: a hostile payload renders as text: no script runs
// (no dialog opens, only the page's own script is loaded), markup and the
// direction override are shown as they are stored.
func TestBrowserHostile(t *testing.T) {
	f, s, lt := browserFixture(t)
	id := f.start(t, "hostile", hostileCall())
	b := newBrowser(t)
	var mu sync.Mutex
	var dialogs []string
	chromedp.Listen(b, func(ev any) {
		if d, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			mu.Lock()
			dialogs = append(dialogs, d.Message)
			mu.Unlock()
		}
	})
	signIn(t, b, s.srv.URL, lt, "bob")
	if err := chromedp.Do(b, chromedp.WaitVisible(chromedp.CSS(`tr[data-id="`+id+`"]`)), chromedp.Navigate(s.srv.URL+"/approvals/"+id),
		chromedp.WaitVisible(chromedp.CSS("#approve"))); err != nil {
		t.Fatal(err)
	}
	if r := text(t, b, "blockquote.rationale"); !strings.Contains(r, `<script>alert(1)</script><img src=x onerror=alert(2)>`) {
		t.Errorf("the rationale reads %q, want the markup as text", r)
	}
	if h1 := text(t, b, "h1 .tool"); h1 != "bookU+202Elatoh_" {
		t.Errorf("the tool name reads %q, want the override shown", h1)
	}
	n, err := chromedp.Run(b, chromedp.Evaluate[int](`document.querySelectorAll("script").length + document.querySelectorAll("img, iframe, object, embed, a[href^='javascript:']").length`))
	if err != nil || n != 1 {
		t.Errorf("the page holds %d scripts or active elements (%v), want only its own script", n, err)
	}
	shoot(t, b, "hostile")
	mu.Lock()
	defer mu.Unlock()
	if len(dialogs) > 0 {
		t.Errorf("script from the payload ran: dialogs %q", dialogs)
	}
}

// TestBrowserExpired: a request that expires while its page is open
// cannot be approved. With live updates the page says so by itself; a page
// without them (or one whose update has not arrived yet) still offers
// Approve, and the click is refused with the reason.
func TestBrowserExpired(t *testing.T) {
	f, s, lt := browserFixture(t)
	t.Run("live", func(t *testing.T) {
		id := f.start(t, "expiring-live", defaultCall())
		b := newBrowser(t)
		signIn(t, b, s.srv.URL, lt, "bob")
		if err := chromedp.Do(b, chromedp.Navigate(s.srv.URL+"/approvals/"+id), chromedp.WaitVisible(chromedp.CSS("#approve"))); err != nil {
			t.Fatal(err)
		}
		f.clock.Add(2 * time.Hour)
		if err := chromedp.Do(b, chromedp.WaitVisible(chromedp.CSS("#outcome.outcome-expired"))); err != nil {
			t.Fatalf("the page did not show the expiry: %v", err)
		}
		// Before the expiry sweeper records it, the page reads that it can
		// no longer be approved; after, that it was rejected as expired.
		if o := text(t, b, "#outcome"); !strings.HasPrefix(o, "Expired") {
			t.Errorf("the page reads %q", o)
		}
		if st := text(t, b, "#state"); st != "Expired: it can no longer be approved." {
			t.Errorf("the state line reads %q, want the expiry (not a decision)", st)
		}
		if n, err := chromedp.Run(b, chromedp.Evaluate[int](`document.querySelectorAll("#approve, #reject").length`)); err != nil || n != 0 {
			t.Errorf("the expired page still offers to decide (%d, %v)", n, err)
		}
		if d := f.decided(t, id); d != nil && d.Outcome != approval.Expired {
			t.Fatalf("an expired request was decided %s", d.Outcome)
		}
	})
	t.Run("stale page", func(t *testing.T) {
		id := f.start(t, "expiring-stale", defaultCall())
		b := newBrowser(t)
		withoutLiveUpdates(t, b)
		signIn(t, b, s.srv.URL, lt, "bob")
		if err := chromedp.Do(b, chromedp.Navigate(s.srv.URL+"/approvals/"+id), chromedp.WaitVisible(chromedp.CSS("#approve"))); err != nil {
			t.Fatal(err)
		}
		noLiveUpdates(t, b)
		f.clock.Add(2 * time.Hour)
		if err := chromedp.Do(b, chromedp.Click(chromedp.CSS("#approve")), chromedp.WaitVisible(chromedp.CSS("#decision-error"))); err != nil {
			t.Fatal(err)
		}
		if msg := text(t, b, "#decision-error"); !strings.Contains(msg, "expired") || !strings.Contains(msg, "can no longer be approved") {
			t.Errorf("the page reads %q", msg)
		}
		if n, err := chromedp.Run(b, chromedp.Evaluate[int](`document.querySelectorAll("#approve").length`)); err != nil || n != 0 {
			t.Errorf("the expired page still offers to approve (%d, %v)", n, err)
		}
		if d := f.decided(t, id); d != nil && d.Outcome != approval.Expired {
			t.Fatalf("an expired request was decided %s", d.Outcome)
		}
	})
}

// BenchmarkDecisionToResume measures the time from a click on Approve to
// the end of the resumed run (an approval.Worker in the same process,
// polling every 5 ms), and reports the median of b.N clicks (run it with
// -benchtime=20x for the median of 20).
func BenchmarkDecisionToResume(b *testing.B) {
	f := newFixture(b)
	lt := newLocalToken(b, reviewweb.LocalTokenOptions{Now: f.clock.Now})
	s := newServer(b, f, func(o *reviewweb.Options) { o.Auth = lt })
	br := newBrowser(b)
	signIn(b, br, s.srv.URL, lt, "bob")
	w, err := approval.NewWorker(f.store, approval.ResumeGraph(f.run), approval.WorkerOptions{})
	if err != nil {
		b.Fatal(err)
	}
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(wctx, 5*time.Millisecond) }()
	defer func() { stop(); <-done }()
	var ds []time.Duration
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		thread := "bench-" + strings.Repeat("x", i%3) + time.Now().Format("150405.000000")
		id := f.start(b, thread, defaultCall())
		if err := chromedp.Do(br, chromedp.Navigate(s.srv.URL+"/approvals/"+id), chromedp.WaitVisible(chromedp.CSS("#approve"))); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		if err := chromedp.Do(br, chromedp.Click(chromedp.CSS("#approve"))); err != nil {
			b.Fatal(err)
		}
		for {
			snap, err := f.run.GetState(context.Background(), thread)
			if err != nil && !errors.Is(err, graph.ErrThreadNotFound) {
				b.Fatal(err)
			}
			if snap.Status == graph.StatusDone {
				break
			}
			time.Sleep(time.Millisecond)
		}
		ds = append(ds, time.Since(start))
		b.StopTimer()
		if err := chromedp.Do(br, chromedp.WaitVisible(chromedp.CSS("#outcome"))); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, "median-ms")
	b.Logf("click to resumed run done: median %v of %d (min %v, max %v)", ds[len(ds)/2], len(ds), ds[0], ds[len(ds)-1])
}
